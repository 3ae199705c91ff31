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


def insert_entries(connection: Connection, engine: Engine, cache_rows: Sequence[dict[str, Any]]) -> None:
    if cache_rows:
        unique = {row["key"]: row for row in cache_rows}
        connection.execute(_insert_cache_rows(engine), list(unique.values()))


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


# the hot path's statements, built once (building a statement costs more CPU than executing a cached one)
_CACHE_TABLE = cast(Table, CacheEntry.__table__)


_CACHE_QUERY = select(_CACHE_TABLE).where(_CACHE_TABLE.c.key.in_(bindparam("keys", expanding=True)))


_INSERT_CACHE = {
    "postgresql": postgresql.insert(_CACHE_TABLE).on_conflict_do_nothing(index_elements=[_CACHE_TABLE.c.key]),
    "sqlite": sqlite.insert(_CACHE_TABLE).on_conflict_do_nothing(index_elements=[_CACHE_TABLE.c.key]),
}
