"""The stored row of a planned judgment, shared by every path that plans judgments: a run's creation (``runs``),
an item released once its responses are generated (``generations``) and an adaptive run's planning step
(``plans``)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, cast

from sqlalchemy import JSON, Connection, Table, insert
from sqlalchemy import exc as sa_exc
from sqlalchemy.orm import Session

from judge_api.models import Judgment, fresh_judgment_fields
from judge_api.planning import PlannedJudgment

INSERT_JUDGMENTS = insert(cast(Table, Judgment.__table__))
"""The bulk INSERT of judgment rows (``session.execute(INSERT_JUDGMENTS, rows)``): a Core INSERT of the table, so
every row sends every key and a None is NULL, and rows of different shapes (single and pairwise: no ``system_b``,
``order``) are one executemany, not a statement per run of same-shaped rows. (It was the ORM's bulk INSERT with
``render_nulls``, which did the same with 20-40 % more CPU: storing 100k judgments on SQLite took 8.5-11.7 s
against 6.8-7.1 s, session 54.) On PostgreSQL each statement fires the
``data_version`` trigger, which updates the run's row, and a transaction that updates one row n times walks its n
versions each time: a run of 20k judgments took 105 s to store, two statements per item (every column these rows
leave None has no default, so NULL is what leaving it out gave). :func:`insert_judgment_rows` sends them."""
INSERT_CHUNK = 5000
"""Judgment rows per insert when planned judgments are stored: the rows of one insert are built at a time (issue 39:
a million row dicts at once held about 0.9 GB in the API)."""
_JSON_COLUMNS = frozenset(c.name for c in cast(Table, Judgment.__table__).columns if isinstance(c.type, JSON))


def insert_judgment_rows(session: Session, rows: Sequence[Mapping[str, Any]]) -> None:
    """Insert judgment rows (dicts with the same keys, a None for NULL), in the caller's transaction.

    On PostgreSQL they go through one ``COPY ... FROM STDIN`` (issue 39): the multi-row INSERT's text, 36
    placeholders a row, was parsed by the driver for every statement, three quarters of storing a run there (a run of
    500,000 judgments took 160-195 s to store). ``COPY`` fires the same triggers (the ``data_version`` statement trigger
    once per ``COPY``), and the JSON columns get the text SQLAlchemy's JSON type would have sent. Elsewhere:
    ``INSERT_JUDGMENTS``."""
    if not rows:
        return
    if session.get_bind().dialect.name != "postgresql":
        session.execute(INSERT_JUDGMENTS, list(rows))
        return
    columns = list(rows[0])
    if any(len(row) != len(columns) or row.keys() != rows[0].keys() for row in rows):
        raise ValueError("insert_judgment_rows: every row must have the same columns")
    if session.autoflush:  # as session.execute would (not inside no_autoflush): the rows may refer to added objects
        session.flush()
    connection = session.connection()
    dialect = connection.dialect
    dumps = getattr(dialect, "_json_serializer", None) or json.dumps
    statement = f"COPY judgments ({', '.join(dialect.identifier_preparer.quote(c) for c in columns)}) FROM STDIN"
    json_at = [k for k, c in enumerate(columns) if c in _JSON_COLUMNS]
    raw = connection.connection.driver_connection
    assert raw is not None
    try:
        with raw.cursor() as cursor, cursor.copy(statement) as copy:
            for row in rows:
                values = list(row.values())
                for k in json_at:
                    if values[k] is not None:
                        values[k] = dumps(values[k])
                copy.write_row(values)
    except dialect.loaded_dbapi.Error as error:
        # SQLAlchemy's exception classes, as its INSERT raised them: the callers answer an IntegrityError (a
        # concurrent import: 409), an OperationalError (a lock timeout, a deadlock: 503), a lost connection
        raise _as_sqlalchemy_error(connection, statement, error) from error


def _as_sqlalchemy_error(connection: Connection, statement: str, error: Exception) -> BaseException:
    dialect = connection.dialect
    lost = dialect.is_disconnect(cast(Any, error), connection.connection.dbapi_connection, None)
    if lost:  # as SQLAlchemy's own handler does: every older pooled connection is replaced at its next checkout
        connection.engine.pool._invalidate(connection.connection, error)
        connection.invalidate(error)
    return sa_exc.DBAPIError.instance(
        statement, None, error, dialect.loaded_dbapi.Error, connection_invalidated=lost, dialect=dialect
    )


def judgment_row(
    run_id: str,
    p: PlannedJudgment,
    item_pk: int,
    texts: Mapping[str, str],
    judge_params: dict[str, Any],
    now: datetime,
    enqueued_at: datetime | None = None,
    estimated_cost_usd: float | None = None,
) -> dict[str, Any]:
    """The stored row of a planned judgment: pending, or a finished tie without a judge call when the two responses
    are identical. ``estimated_cost_usd``: what a monitor's daily budget counts while the judgment waits."""
    row: dict[str, Any] = {
        "dedup_key": p.dedup_key(run_id),
        "run_id": run_id,
        "item_pk": item_pk,
        "item_key": p.item_id,
        "mode": p.mode,
        "system_a": p.system_a,
        "system_b": p.system_b,
        "order": p.order,
        "rubric_id": p.rubric_id,
        "rubric_version": p.rubric_version,
        "aspect": p.aspect,
        "judge": p.judge,
        "judge_params": judge_params,
        "sample_index": p.sample_index,
        "status": "pending",
        "len_a": len(texts[p.system_a]),
        "len_b": len(texts[p.system_b]) if p.system_b else None,
        "enqueued_at": enqueued_at,
        "estimated_cost_usd": estimated_cost_usd,
        # every row has the same keys: a bulk insert of pending rows mixed with identical-response ties otherwise
        # fails ("A value is required for bind parameter 'verdict'")
        "verdict": None,
        "preference": None,
        "outcome": None,
        "explanation": None,
        **fresh_judgment_fields(now),
    }
    if p.identical:
        row.update(
            status="done",
            verdict="identical",
            preference=0.0,
            outcome="tie",
            explanation="The two responses are identical: a tie without a judge call.",
        )
    return row
