"""Dialect helpers shared by the storage modules (SQLite and PostgreSQL only)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Table
from sqlalchemy.dialects import postgresql, sqlite


def insert_ignoring(bind: Any, table: Table, keys: list[str]) -> Any:
    """INSERT that keeps the existing row on a key conflict."""
    index = [table.c[k] for k in keys]
    if bind.dialect.name == "postgresql":
        return postgresql.insert(table).on_conflict_do_nothing(index_elements=index)
    if bind.dialect.name == "sqlite":
        return sqlite.insert(table).on_conflict_do_nothing(index_elements=index)
    raise unsupported_database(bind)


def unsupported_database(bind: Any) -> RuntimeError:
    return RuntimeError(
        f"DATABASE_URL names a {bind.dialect.name} database; dialogue-judge runs on SQLite or PostgreSQL"
    )
