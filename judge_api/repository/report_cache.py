"""The report cache (issue 39): ``GET /v1/runs/{id}/report`` computed once per state of the run and query.

An entry holds the report's JSON, the query it answered (``params_key``: the hash of the statistics' arguments and
of the run's panel setting) and the state of the run it was computed on (:func:`run_state`): the number of the run's
judgments and the last time one was written (``updated_at``, which every claim, verdict, retry and cancel stamps;
one seek in ``ix_judgments_run_updated``), the count / last id / sums of its human ratings (an import that changes a
rating in place changes the sums) and of its label queue. A write of any of them changes the state, so the next
read sees a different state and computes the report again: the entry is never served for data it did not see.
Deleting judgments changes their count; deleting the run deletes its entries.

The entries live in the database, so every API process shares them, and they belong to the run (and through it to
its project: the route checks the caller may read the run before it looks here, and the project is part of the key
as well, so one project's entry is never another's). A run still running may be served an entry up to
``fresh_s`` seconds old without reading its state (the caller passes ``DJ_REPORT_FRESH_SECONDS``); the answer says
when it was computed.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import delete, func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from judge_api.models import HumanRating, Judgment, LabelQueueItem, ReportCacheEntry, utcnow

KEEP_PER_RUN = 8
"""Entries kept per run (different queries: n_boot, ci, seed, panel); the oldest go first."""


@dataclass(frozen=True)
class CachedReport:
    body: str
    """The report's JSON object (without the ``run`` summary, which is read fresh)."""
    computed_at: datetime
    state: str


def params_key(project_id: str, params: dict[str, Any]) -> str:
    """The hash of a report query (its statistics' arguments, the run's panel setting) within a project."""
    text = json.dumps({"project": project_id, **params}, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def run_state(session: Session, run_id: str) -> str:
    """What the run's report depends on, as a short string: judgments (count, last write), ratings, label queue."""
    n_judgments = session.scalar(select(func.count()).select_from(Judgment).where(Judgment.run_id == run_id))
    last_write = session.scalar(select(func.max(Judgment.updated_at)).where(Judgment.run_id == run_id))
    ratings = session.execute(
        select(
            func.count(),
            func.max(HumanRating.id),
            func.sum(HumanRating.value),
            func.sum(HumanRating.value * HumanRating.id),
            func.sum(HumanRating.scale_max - HumanRating.scale_min),
        ).where(HumanRating.run_id == run_id)
    ).one()
    queue = session.execute(
        select(func.count(), func.max(LabelQueueItem.id), func.count(LabelQueueItem.position)).where(
            LabelQueueItem.run_id == run_id
        )
    ).one()
    stamp = last_write.isoformat() if isinstance(last_write, datetime) else str(last_write)
    return json.dumps([n_judgments, stamp, [_plain(v) for v in ratings], [_plain(v) for v in queue]])


def _plain(value: Any) -> Any:
    return (
        float(value) if isinstance(value, float) else value if value is None or isinstance(value, int) else str(value)
    )


def cached_report(
    session: Session, run_id: str, key: str, *, fresh_s: float = 0.0
) -> tuple[CachedReport | None, str | None]:
    """The entry for this run and query when it was computed on the run's current state (or, ``fresh_s`` > 0, is
    younger than that: the run's state is then not read), and the state read (None when not read)."""
    entry = session.execute(
        select(ReportCacheEntry.body, ReportCacheEntry.computed_at, ReportCacheEntry.state).where(
            ReportCacheEntry.run_id == run_id, ReportCacheEntry.params_key == key
        )
    ).one_or_none()
    if entry is not None and fresh_s > 0 and utcnow() - _naive(entry.computed_at) <= timedelta(seconds=fresh_s):
        return CachedReport(entry.body, _naive(entry.computed_at), entry.state), None
    state = run_state(session, run_id)
    if entry is not None and entry.state == state:
        return CachedReport(entry.body, _naive(entry.computed_at), entry.state), state
    return None, state


def _naive(moment: datetime) -> datetime:
    """UTC without a zone, as ``models.utcnow`` stores it (PostgreSQL may give it back with one)."""
    return moment.replace(tzinfo=None) if moment.tzinfo is None else moment.astimezone(UTC).replace(tzinfo=None)


def store_report(
    session: Session, run_id: str, project_id: str, key: str, state: str, body: str, computed_at: datetime
) -> None:
    """Keep the report computed on ``state`` (the state read *before* the frames were read: a write during the
    computation leaves a state the next read does not match). Replaces the query's entry; at most
    :data:`KEEP_PER_RUN` per run."""
    try:
        with session.begin_nested():  # another API process storing the same query at once: one of them wins
            session.execute(
                delete(ReportCacheEntry).where(ReportCacheEntry.run_id == run_id, ReportCacheEntry.params_key == key)
            )
            session.add(
                ReportCacheEntry(
                    run_id=run_id,
                    project_id=project_id,
                    params_key=key,
                    state=state,
                    computed_at=computed_at,
                    body=body,
                )
            )
            session.flush()
    except IntegrityError:
        return
    old = session.scalars(
        select(ReportCacheEntry.id)
        .where(ReportCacheEntry.run_id == run_id)
        .order_by(ReportCacheEntry.computed_at.desc(), ReportCacheEntry.id.desc())
        .offset(KEEP_PER_RUN)
    ).all()
    if old:
        session.execute(delete(ReportCacheEntry).where(ReportCacheEntry.id.in_(old)))


def drop_reports(session: Session, run_id: str) -> int:
    """Delete the run's cached reports (the run is being deleted)."""
    result = session.execute(delete(ReportCacheEntry).where(ReportCacheEntry.run_id == run_id))
    return int(getattr(result, "rowcount", 0) or 0)
