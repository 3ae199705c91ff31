"""Rows sent to PostgreSQL as one JSON document and read back with ``jsonb_to_recordset``: the hot write path's
groups (verdicts, judge-cache entries) go as one parameter instead of an ``executemany`` of a parameter per column
and row, whose per-parameter work was most of the verdict writer's CPU (issue 26). What is stored is what the
``executemany`` path stores: JSON columns as the text ``json.dumps`` gives (a JSON ``null`` for None, not an SQL
NULL), timestamps to the microsecond."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import JSON, String, Table
from sqlalchemy.dialects import postgresql

_DIALECT = postgresql.dialect()
quote = _DIALECT.identifier_preparer.quote


def document(table: Table, columns: Sequence[str], rows: Sequence[dict[str, Any]]) -> str | None:
    """``rows`` (each with every name in ``columns``, plus any other keys, passed as they are) as the JSON text
    of one array; None when a value has no JSON form PostgreSQL takes (NaN or Infinity, a NUL character): the caller
    then takes the ``executemany`` path, which stores or refuses such a value as it always did."""
    json_columns = [c for c in columns if isinstance(table.c[c].type, JSON)]
    documents = []
    for row in rows:
        entry = dict(row)
        for column in columns:
            if isinstance(entry[column], datetime):
                entry[column] = entry[column].isoformat()
        for column in json_columns:
            entry[column] = json.dumps(entry[column])
        documents.append(entry)
    try:
        encoded = json.dumps(documents, allow_nan=False)
    except (TypeError, ValueError):
        return None
    return None if "\\u0000" in encoded else encoded


def record(table: Table, columns: Sequence[str], extra: Sequence[str] = ()) -> str:
    """The column definitions of ``jsonb_to_recordset(...) AS v(...)``: text for strings and JSON (cast where
    used: see :func:`value`), the column's own type otherwise; ``extra`` are definitions of keys that are not
    columns (``"jid INTEGER"``)."""
    definitions = list(extra)
    for column in columns:
        column_type = table.c[column].type
        kind = "TEXT" if isinstance(column_type, (JSON, String)) else column_type.compile(dialect=_DIALECT)
        definitions.append(f"{quote(column)} {kind}")
    return ", ".join(definitions)


def value(table: Table, column: str, alias: str = "v") -> str:
    """A record column as the table column's value."""
    expression = f"{alias}.{quote(column)}"
    return f"CAST({expression} AS JSON)" if isinstance(table.c[column].type, JSON) else expression
