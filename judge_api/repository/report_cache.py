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
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import and_, bindparam, delete, func, select, true
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from judge_api.models import Judgment, ReportCacheEntry, Run, utcnow

KEEP_PER_RUN = 8
"""Reports kept per run (different queries: n_boot, ci, seed, panel); the oldest go first. A run's kept counts
(:data:`COUNTS_KEY`) are one entry more, not one of these."""

COUNTS_KEY = "run-counts/v1"
"""The ``params_key`` of a finished run's judgment counts (``repository.runs.run_counts``: by status, cost, tokens,
provider calls, cache hits), kept per state of the run beside its reports. The runs list, the status poll and the
report's run summary read them instead of counting every judgment of the run again (issue 39: 0.3-0.9 s for each
1M-judgment run, on every draw of a dashboard page, whose sidebar lists the runs). A report's key is a sha256 hex
digest, so this key is never one."""


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
    row = _state_row(session, run_id)
    state = _state_of(*row) if row is not None else _state_of(0, None)
    if settle_s <= 0 or row is None:
        return state
    settles = _settles_at(row[1], row[2], settle_s)
    return f"{state}|{'settled' if settles is None or settles <= utcnow() else 'unsettled'}"


def finished_state(session: Session, run_id: str) -> str | None:
    """:func:`run_state` of a finished run, None while it runs (or when there is no such run). A finished run has no
    verdict in flight whose stamp could commit out of order (the settle window), so two equal states read around
    some reads mean that no write to the run committed between them (``frame_columns.read_sqlite``'s parts)."""
    row = _state_row(session, run_id)
    return _state_of(*row) if row is not None and row[2] is not None else None


def _state_row(session: Session, run_id: str) -> Any:
    """The run's ``data_version``, last judgment write and ``finished_at`` (None when there is no such run)."""
    return session.execute(
        select(Run.data_version, _last_write(Run.id), Run.finished_at).where(Run.id == run_id)
    ).one_or_none()


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
        .where(ReportCacheEntry.run_id == run_id, ReportCacheEntry.params_key != COUNTS_KEY)
        .order_by(ReportCacheEntry.computed_at.desc(), ReportCacheEntry.id.desc())
        .offset(KEEP_PER_RUN)
    ).all()
    if old:
        session.execute(delete(ReportCacheEntry).where(ReportCacheEntry.id.in_(old)))


def kept_counts_select(*columns: Any) -> Any:
    """A select of ``columns`` of the runs, then what :func:`counts_on_state` reads of each: its ``data_version``,
    last judgment write and ``finished_at``, and its kept counts entry (body and state; None without one). One row
    per run: the entry is unique per run and key."""
    return (
        select(
            *columns,
            Run.data_version.label("kept_version"),
            _last_write(Run.id).label("kept_last_write"),
            Run.finished_at.label("kept_finished_at"),
            ReportCacheEntry.body.label("kept_body"),
            ReportCacheEntry.state.label("kept_state"),
        )
        .select_from(Run)
        .outerjoin(ReportCacheEntry, and_(ReportCacheEntry.run_id == Run.id, ReportCacheEntry.params_key == COUNTS_KEY))
    )


def counts_on_state(row: Any) -> tuple[dict[str, Any] | None, str | None]:
    """A row of :func:`kept_counts_select`: the counts kept on the run's current state (None on a miss) and that
    state (None when the run is not finished: its counts change while it runs, and are neither served nor kept)."""
    if row.kept_finished_at is None:
        return None, None
    state = _state_of(row.kept_version, row.kept_last_write, row.kept_finished_at)
    if row.kept_body is None or row.kept_state != state:
        return None, state
    return _counts_of(row.kept_body), state


_KEPT = kept_counts_select(Run.id).where(Run.id.in_(bindparam("run_ids", expanding=True)), Run.finished_at.is_not(None))


def kept_counts(session: Session, run_ids: Sequence[str]) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """For the finished runs among ``run_ids``: the counts kept on their current state (the hits), and each finished
    run's state, under which a miss's counts, counted *after* this read, are stored (:func:`store_counts`): a write
    in between leaves a state the next read does not match, so an entry is never served for data it did not see. A
    run not finished is in neither. One query, whatever the runs' sizes."""
    if not run_ids:
        return {}, {}
    hits: dict[str, dict[str, Any]] = {}
    states: dict[str, str] = {}
    for row in session.execute(_KEPT, {"run_ids": list(run_ids)}):
        counts, state = counts_on_state(row)
        if state is not None:
            states[row.id] = state
        if counts is not None:
            hits[row.id] = counts
    return hits, states


_COUNT_FIELDS = ("cost", "in", "out", "calls", "cached")


def _counts_of(body: str) -> dict[str, Any] | None:
    """A kept counts entry as ``run_counts`` gives one, or None when it is not one (then it is counted again)."""
    try:
        value = json.loads(body)
    except ValueError:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("counts"), dict):
        return None
    counts = value["counts"]
    fields = [value.get(name) for name in _COUNT_FIELDS]
    numbers = [type(n) is int for n in [*counts.values(), *fields[1:]]]
    cost = fields[0]
    if not all(numbers) or not all(isinstance(k, str) for k in counts) or not isinstance(cost, int | float):
        return None
    return {"counts": dict(counts), "cost": float(cost), **dict(zip(_COUNT_FIELDS[1:], fields[1:], strict=True))}


def store_counts(session: Session, run_id: str, project_id: str, state: str, counts: dict[str, Any]) -> None:
    """Keep a finished run's counts (``run_counts``' entry) for ``state``, read before they were counted. One
    statement that inserts or replaces the run's entry (an upsert: the status poll reads in autocommit, and two API
    processes may store the same run at once; the later one wins, and an entry on a state no longer current is
    simply counted again)."""
    body = json.dumps(
        {"counts": counts["counts"], **{name: counts[name] for name in _COUNT_FIELDS}}, separators=(",", ":")
    )
    values = {
        "run_id": run_id,
        "project_id": project_id,
        "params_key": COUNTS_KEY,
        "state": state,
        "computed_at": utcnow(),
        "body": body,
    }
    # the service's two databases (SQLite embedded, PostgreSQL in production) both know ON CONFLICT DO UPDATE
    make = pg_insert if session.get_bind().dialect.name == "postgresql" else sqlite_insert
    statement = make(ReportCacheEntry).values(**values)
    upsert = statement.on_conflict_do_update(
        index_elements=["run_id", "params_key"],
        set_={k: statement.excluded[k] for k in ("project_id", "state", "computed_at", "body")},
    )
    # the run deleted since its counts were read: its entry's foreign key fails, and there is nothing to keep (review
    # r51a: a 500 before). Inside a transaction the failed statement is rolled back to a savepoint, so the caller's
    # transaction (the finished_at it stamped) goes on; in autocommit (the poll) the statement was its own.
    autocommit = session.connection().get_execution_options().get("isolation_level") == "AUTOCOMMIT"
    try:
        if autocommit:
            session.execute(upsert)
        else:
            with session.begin_nested():
                session.execute(upsert)
    except IntegrityError:
        return


def drop_reports(session: Session, run_id: str) -> int:
    """Delete the run's cached reports (the run is being deleted)."""
    result = session.execute(delete(ReportCacheEntry).where(ReportCacheEntry.run_id == run_id))
    return int(getattr(result, "rowcount", 0) or 0)
