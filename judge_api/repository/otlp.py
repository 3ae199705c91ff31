"""LLM spans received over OTLP (issue 38; docs/monitoring.md#opentelemetry-traces): stored once per monitor and
response id by the request (``received``; an exporter's retry inserts nothing), claimed once by a processor
(``received`` -> ``waiting`` in the processor's transaction: SELECT ... FOR UPDATE SKIP LOCKED on PostgreSQL, a
compare-and-set under SQLite's single writer), read back by conversation as history, released once (a
compare-and-set from ``waiting``), purged after the history window; a project's default monitor; a monitor's OTLP
counts of the day."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Table, delete, func, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from judge_api.models import Monitor, OtlpSpan, Project
from judge_api.repository.sql import unsupported_database

CHUNK = 500
INSERT_CHUNK = 2000  # rows of one INSERT (8 columns: 16,000 parameters, under SQLite's 32,766)
RECEIVED = "received"
WAITING = "waiting"
RELEASED = "released"
STAT_KEYS = ("spans", "responses", "duplicates", "waited", "not_llm", "tool_call", "no_content", "rejected")


@dataclass(frozen=True)
class SpanRow:
    """A stored span as the intake reads it (no ORM object: a batch reads hundreds)."""

    id: int
    response_id: str
    conversation_id: str
    status: str
    started_at: datetime
    received_at: datetime
    release_after: datetime
    call: dict[str, Any]


_ROW_COLUMNS = (
    OtlpSpan.id,
    OtlpSpan.response_id,
    OtlpSpan.conversation_id,
    OtlpSpan.status,
    OtlpSpan.started_at,
    OtlpSpan.received_at,
    OtlpSpan.release_after,
    OtlpSpan.call,
)


def _rows(session: Session, query: Any) -> list[SpanRow]:
    return [SpanRow(*row) for row in session.execute(query)]


def conversation_rows(session: Session, monitor_id: str, conversation_ids: Iterable[str]) -> list[SpanRow]:
    """Every stored span of these conversations of the monitor."""
    ids = sorted({c for c in conversation_ids if c})
    found: list[SpanRow] = []
    for start in range(0, len(ids), CHUNK):
        chunk = ids[start : start + CHUNK]
        found += _rows(
            session,
            select(*_ROW_COLUMNS).where(OtlpSpan.monitor_id == monitor_id, OtlpSpan.conversation_id.in_(chunk)),
        )
    return found


def rows_by_response(session: Session, monitor_id: str, response_ids: Iterable[str]) -> list[SpanRow]:
    ids = sorted(set(response_ids))
    found: list[SpanRow] = []
    for start in range(0, len(ids), CHUNK):
        chunk = ids[start : start + CHUNK]
        found += _rows(
            session, select(*_ROW_COLUMNS).where(OtlpSpan.monitor_id == monitor_id, OtlpSpan.response_id.in_(chunk))
        )
    return found


def due_rows(session: Session, monitor_id: str, now: datetime, limit: int) -> list[SpanRow]:
    """The monitor's spans waiting past their ``release_after``, the longest waiting first."""
    return _rows(
        session,
        select(*_ROW_COLUMNS)
        .where(OtlpSpan.monitor_id == monitor_id, OtlpSpan.status == WAITING, OtlpSpan.release_after <= now)
        .order_by(OtlpSpan.release_after)
        .limit(limit),
    )


def rows_by_id(session: Session, span_ids: Sequence[int]) -> list[SpanRow]:
    found: list[SpanRow] = []
    for start in range(0, len(span_ids), CHUNK):
        found += _rows(session, select(*_ROW_COLUMNS).where(OtlpSpan.id.in_(list(span_ids[start : start + CHUNK]))))
    return sorted(found, key=lambda r: r.id)


def insert_spans(session: Session, rows: Sequence[dict[str, Any]]) -> set[tuple[str, str]]:
    """Insert the spans whose (monitor, response id) is new, in one statement per INSERT_CHUNK rows (an export is
    at most DJ_MAX_ITEMS spans); the (monitor id, response id) inserted."""
    if not rows:
        return set()
    bind = session.get_bind()
    table = cast(Table, OtlpSpan.__table__)
    if bind.dialect.name == "postgresql":
        statement: Any = postgresql.insert(table)
    elif bind.dialect.name == "sqlite":
        statement = sqlite.insert(table)
    else:
        raise unsupported_database(bind)
    statement = statement.on_conflict_do_nothing(index_elements=[table.c.monitor_id, table.c.response_id]).returning(
        table.c.monitor_id, table.c.response_id
    )
    inserted: set[tuple[str, str]] = set()
    for start in range(0, len(rows), INSERT_CHUNK):
        statement_rows = session.execute(statement, list(rows[start : start + INSERT_CHUNK]))
        inserted |= {(str(m), str(r)) for m, r in statement_rows}
    return inserted


def received_monitors(session: Session, limit: int = 100, exclude: Sequence[str] = ()) -> list[str]:
    """Monitors with spans received and not processed yet, but those excluded (left aside by this processor: were
    they counted in the limit, a hundred monitors whose config no longer plans would starve every other one)."""
    query = select(OtlpSpan.monitor_id).where(OtlpSpan.status == RECEIVED)
    if exclude:
        query = query.where(OtlpSpan.monitor_id.notin_(list(exclude)))
    query = query.distinct().limit(limit)
    return sorted(str(m) for m in session.scalars(query))


def any_received(session: Session) -> bool:
    return session.scalar(select(OtlpSpan.id).where(OtlpSpan.status == RECEIVED).limit(1)) is not None


def lock_monitor(session: Session, monitor_id: str) -> bool:
    """Take the monitor's processing lock for this transaction, without waiting (PostgreSQL: an advisory lock; SQLite:
    its one writer serializes anyway). False: another processor holds it, its spans are being processed in order."""
    if session.get_bind().dialect.name != "postgresql":
        return True
    key = int.from_bytes(hashlib.sha256(f"otlp:{monitor_id}".encode()).digest()[:8], "big", signed=True)
    return bool(session.scalar(select(func.pg_try_advisory_xact_lock(key))))


def claim_received(session: Session, monitor_id: str, limit: int) -> list[int]:
    """Claim the monitor's oldest received spans for this transaction (``received`` -> ``waiting``); the ids
    claimed, in the order received. Exactly once: on PostgreSQL the rows are locked FOR UPDATE SKIP LOCKED (a
    concurrent processor takes others) and the compare-and-set cannot lose; on SQLite the compare-and-set is the
    transaction's first write, so a second processor waits for the first's commit and finds them claimed. Until
    the commit nothing is visible to others: a processor that dies before it leaves them ``received``."""
    query = (
        select(OtlpSpan.id)
        .where(OtlpSpan.monitor_id == monitor_id, OtlpSpan.status == RECEIVED)
        .order_by(OtlpSpan.id)
        .limit(limit)
    )
    if session.get_bind().dialect.name == "postgresql":
        query = query.with_for_update(skip_locked=True)
    for _ in range(2):  # SQLite: a claim lost to another processor's commit holds the writer now; the second cannot
        candidates = [int(i) for i in session.scalars(query)]
        if not candidates:
            return []
        result = session.execute(
            update(OtlpSpan)
            .where(OtlpSpan.id.in_(candidates), OtlpSpan.status == RECEIVED)
            .values(status=WAITING)
            .returning(OtlpSpan.id)
            .execution_options(synchronize_session=False)
        )
        claimed = sorted(int(i) for i in result.scalars())
        if claimed:
            return claimed
    return []


def due_waiting(session: Session, now: datetime, limit: int, monitor_id: str | None = None) -> list[tuple[str, str]]:
    """(monitor id, conversation id) of spans waiting past their ``release_after``."""
    query = select(OtlpSpan.monitor_id, OtlpSpan.conversation_id).where(
        OtlpSpan.status == WAITING, OtlpSpan.release_after <= now
    )
    if monitor_id is not None:
        query = query.where(OtlpSpan.monitor_id == monitor_id)
    return sorted({(str(m), str(c)) for m, c in session.execute(query.order_by(OtlpSpan.release_after).limit(limit))})


def due_monitors(session: Session, now: datetime) -> list[str]:
    """The monitors with a span waiting past its ``release_after``: every one of them (a monitor whose responses
    cannot be released, its config no longer planning, must not crowd the others out of a round)."""
    query = (
        select(OtlpSpan.monitor_id)
        .where(OtlpSpan.status == WAITING, OtlpSpan.release_after <= now)
        .group_by(OtlpSpan.monitor_id)
        .order_by(func.min(OtlpSpan.release_after))
    )
    return [str(m) for m in session.scalars(query)]


def release(session: Session, span_ids: Sequence[int]) -> set[int]:
    """Mark waiting spans released; the ids this call released (another process may have released some first)."""
    released: set[int] = set()
    for start in range(0, len(span_ids), CHUNK):
        chunk = list(span_ids[start : start + CHUNK])
        result = session.execute(
            update(OtlpSpan)
            .where(OtlpSpan.id.in_(chunk), OtlpSpan.status == WAITING)
            .values(status=RELEASED)
            .returning(OtlpSpan.id)
            .execution_options(synchronize_session=False)
        )
        released |= {int(r) for r in result.scalars()}
    return released


def purge_history(session: Session, before: datetime, limit: int = 10_000) -> int:
    """Delete released spans received before ``before`` (kept that long as their conversations' history). By when
    they were received, not their own time: a span whose clock is off, or a replayed export, is history for as
    long as any other."""
    old = list(
        session.scalars(
            select(OtlpSpan.id).where(OtlpSpan.status == RELEASED, OtlpSpan.received_at < before).limit(limit)
        )
    )
    if old:
        session.execute(delete(OtlpSpan).where(OtlpSpan.id.in_(old)))
    return len(old)


def status_count(session: Session, monitor_id: str, status: str = WAITING) -> int:
    return int(
        session.scalar(
            select(func.count(OtlpSpan.id)).where(OtlpSpan.monitor_id == monitor_id, OtlpSpan.status == status)
        )
        or 0
    )


def waiting_count(session: Session, monitor_id: str) -> int:
    return status_count(session, monitor_id, WAITING)


# -- monitors by name or id, the project's default ---------------------------------------------------------------


def find_monitor(session: Session, project_id: str, ref: str) -> Monitor | None:
    """The project's monitor whose id is ``ref``, else the one monitor named ``ref`` (None: none, or several)."""
    monitor = session.get(Monitor, ref)
    if monitor is not None and monitor.project_id == project_id:
        return monitor
    named = list(session.scalars(select(Monitor).where(Monitor.project_id == project_id, Monitor.name == ref).limit(2)))
    return named[0] if len(named) == 1 else None


def default_monitor_id(session: Session, project_id: str) -> str | None:
    return session.scalar(select(Project.default_monitor_id).where(Project.id == project_id))


def set_default_monitor(session: Session, project_id: str, monitor_id: str | None) -> None:
    session.execute(update(Project).where(Project.id == project_id).values(default_monitor_id=monitor_id))


def clear_default_if(session: Session, monitor_id: str) -> None:
    """The monitor is deleted: no project keeps it as its default."""
    session.execute(update(Project).where(Project.default_monitor_id == monitor_id).values(default_monitor_id=None))


# -- the day's counts --------------------------------------------------------------------------------------------


def monitor_configs(session: Session, monitor_ids: Sequence[str]) -> dict[str, Any]:
    """Each existing monitor's config, by id."""
    query = select(Monitor.id, Monitor.config).where(Monitor.id.in_(list(monitor_ids)))
    return {str(monitor_id): config for monitor_id, config in session.execute(query)}


def add_stats(
    session: Session,
    monitor_ids: Sequence[str],
    day: str,
    counts: dict[str, dict[str, int]],
    notes: dict[str, str],
    rejections: dict[str, str] | None = None,
) -> None:
    """Add the counts to each monitor's OTLP counts of the UTC day ``day`` (a new day starts from zero); the
    monitor rows are locked first (PostgreSQL: FOR NO KEY UPDATE, in id order), so concurrent exports add up. Not
    FOR UPDATE: the caller's inserts of spans or responses hold a KEY SHARE lock on the row (their foreign key),
    which FOR UPDATE waits for: two such transactions locking it deadlocked."""
    ordered = sorted(set(monitor_ids))
    if not ordered:
        return
    rows = session.execute(
        select(Monitor.id, Monitor.otlp_stats)
        .where(Monitor.id.in_(ordered))
        .order_by(Monitor.id)
        .with_for_update(key_share=True)
    ).all()
    for monitor_id, stats in rows:
        current = dict(stats or {})
        if current.get("day") != day:
            current = {"day": day, **{k: 0 for k in STAT_KEYS}}
        for key, value in counts.get(monitor_id, {}).items():
            current[key] = int(current.get(key, 0)) + value
        if monitor_id in notes:
            current["last_skip"] = notes[monitor_id]
        if rejections and monitor_id in rejections:  # why the day's last span was rejected
            current["last_rejected"] = rejections[monitor_id]
        session.execute(update(Monitor).where(Monitor.id == monitor_id).values(otlp_stats=current))
