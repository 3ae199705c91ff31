"""The report cache (issue 39): ``GET /v1/runs/{id}/report`` computed once per state of the run and query.

An entry holds the report's JSON, the query it answered (``params_key``: the hash of the statistics' arguments and
of the run's panel setting) and the state of the run it was computed on (:func:`run_state`): the run's
``data_version``, which database triggers bump in the same transaction as every insert or deletion of its judgments
and every write of its human ratings and label queue (migration 0023), and the last time one of its judgments was
written (``updated_at``, which every claim, verdict, retry and cancel stamps; one seek in
``ix_judgments_run_updated``). A write of any of them changes the state, so the next read sees a different state and
computes the report again: the entry is never served for data it did not see. Deleting the run deletes its entries.
The state, the run's row and the entry are read in one round trip (a warm report on a run of any size: issue 39).

The entries live in the database, so every API process shares them, and they belong to the run (and through it to
its project: the route checks the caller may read the run before it looks here, and the project is part of the key
as well, so one project's entry is never another's). A run still running may be served an entry up to
``fresh_s`` seconds old without reading its state (the caller passes ``DJ_REPORT_FRESH_SECONDS``); the answer says
when it was computed.

Commits out of stamp order (review r39): on PostgreSQL a verdict stamped at ``t1`` may commit after one stamped at
``t2 > t1``. A report computed between the two commits matches the state after both (the last ``updated_at`` is
``t2`` either way) and would miss the first verdict until the run's next write. So while a run is running, an entry
computed less than ``settle_s`` (``DJ_REPORT_SETTLE_SECONDS``, 30 s) after the run's last judgment write is
provisional: it is served until ``settle_s`` has passed since that write, then computed once more (in each API
process one request computes it while the others are served the provisional entry); that entry is
computed after every transaction stamped before the write has committed (a verdict's transaction commits within
milliseconds of its stamp; a transaction held open longer than ``settle_s``, or clocks of workers and API more than
``settle_s`` apart, would still be missed). A finished run needs none of this: ``finished_at`` is part of its state,
and a run is found finished only when every judgment is settled.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import delete, func, select, true
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from judge_api.models import Judgment, ReportCacheEntry, Run, utcnow

KEEP_PER_RUN = 8
"""Entries kept per run (different queries: n_boot, ci, seed, panel); the oldest go first."""


@dataclass(frozen=True)
class CachedReport:
    body: str
    """The report's JSON object (without the ``run`` summary, which is read fresh)."""
    computed_at: datetime
    state: str
    provisional: bool = False
    """Computed less than ``settle_s`` after the running run's last write, and ``settle_s`` has passed since: to be
    computed again (the caller may serve it while that computation is under way elsewhere)."""


def params_key(project_id: str, params: dict[str, Any]) -> str:
    """The hash of a report query (its statistics' arguments, the run's panel setting) within a project."""
    text = json.dumps({"project": project_id, **params}, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def _state_of(data_version: Any, last_write: Any, finished_at: Any = None) -> str:
    """The state's string. ``finished_at`` is in it because the last ``updated_at`` alone can miss a verdict whose
    transaction committed after a later-stamped one (commits land out of stamp order): a report computed in between
    would match the state for good. A run is found finished only once every judgment is settled, so the first report
    after that is computed on every verdict."""
    stamps = [m.isoformat() if isinstance(m, datetime) else str(m) for m in (last_write, finished_at)]
    return json.dumps([int(data_version or 0), *stamps])


def _last_write(run_id: Any) -> Any:
    """The last ``updated_at`` of the run's judgments: one seek in ``ix_judgments_run_updated``."""
    return select(func.max(Judgment.updated_at)).where(Judgment.run_id == run_id).scalar_subquery()


def run_state(session: Session, run_id: str, *, settle_s: float = 0.0) -> str:
    """What the run's report depends on, as a short string: the run's ``data_version`` (bumped in the same
    transaction as every insert or deletion of its judgments and every write of its ratings and label queue:
    migration 0023's triggers) and the last ``updated_at`` of its judgments (stamped by every claim, verdict, retry
    and cancel). One primary-key read and one index seek, whatever the run's size.

    With ``settle_s`` > 0 the string also says whether the state is settled (the run finished, or ``settle_s`` has
    passed since its last write): an answer kept on an unsettled state is not the settled state's, so a cache keyed
    by this string computes it once more after the window (the module docstring: commits out of stamp order)."""
    query = select(Run.data_version, _last_write(Run.id), Run.finished_at).where(Run.id == run_id)
    row = session.execute(query).one_or_none()
    state = _state_of(*row) if row is not None else _state_of(0, None)
    if settle_s <= 0 or row is None:
        return state
    settles = _settles_at(row[1], row[2], settle_s)
    return f"{state}|{'settled' if settles is None or settles <= utcnow() else 'unsettled'}"


def _settles_at(last_write: Any, finished_at: Any, settle_s: float) -> datetime | None:
    """When a running run's state is settled (``settle_s`` after its last judgment write); None when it is now
    (finished, or no judgment written)."""
    if settle_s <= 0 or finished_at is not None or last_write is None:
        return None
    if isinstance(last_write, str):  # SQLite's max() of a datetime column may come back as its text
        last_write = datetime.fromisoformat(last_write)
    return _naive(last_write) + timedelta(seconds=settle_s)


def cached_report(
    session: Session, run_id: str, key: str, *, fresh_s: float = 0.0, settle_s: float = 0.0
) -> tuple[CachedReport | None, str | None]:
    """The entry for this run and query when it was computed on the run's current state (or, ``fresh_s`` > 0, is
    younger than that), and the run's state. One round trip: the run's row, its last write and the entry. With
    ``settle_s`` > 0, a running run's entry computed less than ``settle_s`` after the run's last judgment write comes
    back ``provisional`` once ``settle_s`` has passed since that write, whatever ``fresh_s`` allows (the module
    docstring: commits out of stamp order)."""
    entry = (
        select(ReportCacheEntry.body, ReportCacheEntry.computed_at, ReportCacheEntry.state)
        .where(ReportCacheEntry.run_id == run_id, ReportCacheEntry.params_key == key)
        .subquery()
    )
    row = session.execute(
        select(Run.data_version, _last_write(Run.id), Run.finished_at, entry.c.body, entry.c.computed_at, entry.c.state)
        .select_from(Run)
        .outerjoin(entry, true())
        .where(Run.id == run_id)
    ).one_or_none()
    if row is None:
        return None, _state_of(0, None)
    state = _state_of(row[0], row[1], row[2])
    body, computed_at, entry_state = row[3], row[4], row[5]
    if body is None:
        return None, state
    hit = CachedReport(body, _naive(computed_at), entry_state)
    now = utcnow()
    settles = _settles_at(row[1], row[2], settle_s)
    if settles is not None and hit.computed_at < settles <= now:
        # computed while an earlier-stamped verdict may still have been committing: computed once more
        return (replace(hit, provisional=True), state) if entry_state == state else (None, state)
    if fresh_s > 0 and now - hit.computed_at <= timedelta(seconds=fresh_s):
        return hit, state
    return (hit, state) if entry_state == state else (None, state)


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
