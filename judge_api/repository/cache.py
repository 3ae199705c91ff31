"""The judge cache: entries keyed by the hash of everything that determines a judge call's reply."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from sqlalchemy import Connection, Engine, Table, bindparam, select
from sqlalchemy.dialects import postgresql, sqlite

from judge_api.models import (
    CacheEntry,
)
from judge_api.repository.sql import unsupported_database

REPLACE = "replace"  # a cache row carrying this (true) replaces the key's entry (options.cache 'refresh')


def insert_entries(connection: Connection, engine: Engine, cache_rows: Sequence[dict[str, Any]]) -> None:
    """Insert judge-cache rows; an entry that exists is kept, unless the row is marked :data:`REPLACE` (then its
    reply is written over the entry's)."""
    if cache_rows:
        unique = {row["key"]: row for row in cache_rows}
        kept = [row for row in unique.values() if not row.get(REPLACE)]
        replacing = [{k: v for k, v in row.items() if k != REPLACE} for row in unique.values() if row.get(REPLACE)]
        if kept:
            connection.execute(_insert_cache_rows(engine), kept)
        if replacing:
            connection.execute(_replace_cache_rows(engine), replacing)


def cache_entries(engine: Engine, keys: Sequence[str]) -> dict[str, Any]:
    """The judge-cache rows of ``keys`` that exist, by key (rows with the CacheEntry column names)."""
    if not keys:
        return {}
    with engine.connect() as connection:
        return {row.key: row for row in connection.execute(_CACHE_QUERY, {"keys": list(set(keys))})}


def store_cache_rows(engine: Engine, cache_rows: Sequence[dict[str, Any]]) -> None:
    """Write judge-cache entries; an entry that exists already is kept (the same key is the same request)."""
    with engine.begin() as connection:
        insert_entries(connection, engine, cache_rows)


def _insert_cache_rows(engine: Engine) -> Any:
    try:
        return _INSERT_CACHE[engine.dialect.name]
    except KeyError:
        raise unsupported_database(engine) from None


def _replace_cache_rows(engine: Engine) -> Any:
    try:
        return _REPLACE_CACHE[engine.dialect.name]
    except KeyError:
        raise unsupported_database(engine) from None


# the hot path's statements, built once (building a statement costs more CPU than executing a cached one)
_CACHE_TABLE = cast(Table, CacheEntry.__table__)


_CACHE_QUERY = select(_CACHE_TABLE).where(_CACHE_TABLE.c.key.in_(bindparam("keys", expanding=True)))


_INSERT_CACHE = {
    "postgresql": postgresql.insert(_CACHE_TABLE).on_conflict_do_nothing(index_elements=[_CACHE_TABLE.c.key]),
    "sqlite": sqlite.insert(_CACHE_TABLE).on_conflict_do_nothing(index_elements=[_CACHE_TABLE.c.key]),
}


def _upsert(insert: Any) -> Any:
    excluded = insert.excluded
    columns = [c.name for c in _CACHE_TABLE.columns if c.name != "key"]
    return insert.on_conflict_do_update(
        index_elements=[_CACHE_TABLE.c.key], set_={name: excluded[name] for name in columns}
    )


_REPLACE_CACHE = {
    "postgresql": _upsert(postgresql.insert(_CACHE_TABLE)),
    "sqlite": _upsert(sqlite.insert(_CACHE_TABLE)),
}
