"""Monitors (docs/monitoring.md): the monitor rows, their internal run, the responses posted to them (stored once
per id, the sampled ones as items with pending judgments, in one transaction), their spend today, the verdicts the
series is computed from and the retention that folds old verdicts into hourly sums before deleting them."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

import pandas as pd
from sqlalchemy import (
    ColumnElement,
    DateTime,
    Select,
    Table,
    case,
    delete,
    func,
    insert,
    or_,
    select,
    type_coerce,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from judge_api.models import (
    Judgment,
    Monitor,
    MonitorAlert,
    MonitorHourly,
    MonitorResponse,
    MonitorRuleState,
    OtlpSpan,
    Run,
    RunItem,
    utcnow,
)
from judge_api.planning import PlannedJudgment
from judge_api.repository.projects import ensure_project
from judge_api.repository.retention import delete_run
from judge_api.repository.rows import judgment_row
from judge_api.repository.rubric_snapshots import store_rubric_snapshots
from judge_api.repository.runs import new_run_id
from judge_api.repository.sql import unsupported_database
from judge_api.rubrics import Rubric

CHUNK = 2000
HOURLY_KEY = ("system", "version", "segment", "rubric_id", "aspect", "judge")


def new_monitor_id() -> str:
    return "mon_" + uuid.uuid4().hex[:16]


def create_monitor(
    session: Session,
    project_id: str,
    fields: dict[str, Any],
    run_config: dict[str, Any],
) -> Monitor:
    """The monitor and its internal run (no items yet), in the caller's transaction."""
    ensure_project(session, project_id)
    monitor_id = new_monitor_id()
    run = Run(
        id=new_run_id(),
        project_id=project_id,
        name=f"monitor {fields['name']}",
        config=run_config,
        n_items=0,
        n_judgments=0,
        monitor_id=monitor_id,
    )
    session.add(run)
    monitor = Monitor(id=monitor_id, project_id=project_id, run_id=run.id, **fields)
    session.add(monitor)
    session.flush()
    return monitor


def get_monitor(session: Session, monitor_id: str, project_id: str | None = None) -> Monitor | None:
    monitor = session.get(Monitor, monitor_id)
    if monitor is None or (project_id is not None and monitor.project_id != project_id):
        return None
    return monitor


def list_monitors(session: Session, project_id: str | None, offset: int, limit: int) -> tuple[int, list[Monitor]]:
    query = select(Monitor)
    count = select(func.count(Monitor.id))
    if project_id is not None:
        query = query.where(Monitor.project_id == project_id)
        count = count.where(Monitor.project_id == project_id)
    total = int(session.scalar(count) or 0)
    rows = list(session.scalars(query.order_by(Monitor.created_at.desc(), Monitor.id).offset(offset).limit(limit)))
    return total, rows


def count_monitors(session: Session, project_id: str) -> int:
    return int(session.scalar(select(func.count(Monitor.id)).where(Monitor.project_id == project_id)) or 0)


def update_run_config(session: Session, monitor: Monitor, run_config: dict[str, Any]) -> None:
    session.execute(
        update(Run).where(Run.id == monitor.run_id).values(config=run_config, name=f"monitor {monitor.name}")
    )


def delete_monitor(session: Session, monitor: Monitor) -> dict[str, int]:
    """The monitor, its responses, hourly sums and internal run (with what only it used), all or nothing."""
    removed = delete_run(session, monitor.run_id)
    removed["monitor_responses"] = _rowcount(
        session.execute(delete(MonitorResponse).where(MonitorResponse.monitor_id == monitor.id))
    )
    removed["monitor_rule_states"] = _rowcount(
        session.execute(delete(MonitorRuleState).where(MonitorRuleState.monitor_id == monitor.id))
    )
    removed["otlp_spans"] = _rowcount(session.execute(delete(OtlpSpan).where(OtlpSpan.monitor_id == monitor.id)))
    removed["monitor_hourly"] = _rowcount(
        session.execute(delete(MonitorHourly).where(MonitorHourly.monitor_id == monitor.id))
    )
    from judge_api.repository.webhooks import delete_for_monitor

    removed["webhook_deliveries"] += delete_for_monitor(session, [monitor.id])
    removed["monitor_alerts"] = _rowcount(
        session.execute(delete(MonitorAlert).where(MonitorAlert.monitor_id == monitor.id))
    )
    removed["monitors"] = _rowcount(session.execute(delete(Monitor).where(Monitor.id == monitor.id)))
    return removed


# -- ingestion ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Incoming:
    """One validated response as stored: its slice keys, its time and whether it is sampled."""

    response_id: str
    system: str
    version: str
    segment: str
    ts: datetime
    sampled: bool
    payload: dict[str, Any]
    """sampled ones: the run item (the response as the one candidate ``system``)."""


def _insert_returning_new(session: Session, rows: list[dict[str, Any]]) -> set[str]:
    """Insert the responses whose id is new for the monitor; the ids inserted (a concurrent or earlier request's ids
    are skipped by the unique key, not an error)."""
    bind = session.get_bind()
    table = cast(Table, MonitorResponse.__table__)
    if bind.dialect.name == "postgresql":
        statement: Any = postgresql.insert(table)
    elif bind.dialect.name == "sqlite":
        statement = sqlite.insert(table)
    else:
        raise unsupported_database(bind)
    statement = statement.on_conflict_do_nothing(index_elements=[table.c.monitor_id, table.c.response_id]).returning(
        table.c.response_id
    )
    return {str(r) for r in session.scalars(statement, rows)}


@dataclass(frozen=True)
class PlannedBatch:
    """The sampled responses' judgments, the rubrics they were planned with and the judge options."""

    planned: list[PlannedJudgment]
    rubrics: list[Rubric]
    judge_params: dict[str, Any]
    costs: list[float] | None = None  # each planned judgment's expected cost (a monitor with a daily budget)


@dataclass(frozen=True)
class Stored:
    accepted: int
    sampled: int
    judgment_ids: list[int]
    estimated_cost_usd: float = 0.0  # of the judgments stored now


def store_responses(
    session: Session,
    monitor: Monitor,
    incoming: Sequence[Incoming],
    plan: Callable[[list[dict[str, Any]]], PlannedBatch],
) -> Stored:
    """Store the responses whose id is new (duplicates, in the batch or from before, are skipped) and, for the
    sampled ones, the item and its pending judgments (``plan(items)``, called only if one is sampled), stamped
    enqueued (the caller publishes them after commit), in the caller's transaction."""
    now = utcnow()
    unique: dict[str, Incoming] = {}
    for response in incoming:
        unique.setdefault(response.response_id, response)
    if not unique:
        return Stored(0, 0, [])
    new_ids: set[str] = set()
    rows = [
        {
            "monitor_id": monitor.id,
            "response_id": r.response_id,
            "system": r.system,
            "version": r.version,
            "segment": r.segment,
            "ts": r.ts,
            "received_at": now,
            "sampled": r.sampled,
        }
        for r in unique.values()
    ]
    for start in range(0, len(rows), CHUNK):
        new_ids |= _insert_returning_new(session, rows[start : start + CHUNK])
    sampled = [r for r in unique.values() if r.sampled and r.response_id in new_ids]
    if not sampled:
        return Stored(len(new_ids), 0, [])
    batch = plan([r.payload for r in sampled])
    planned, judge_params = batch.planned, batch.judge_params
    store_rubric_snapshots(session, monitor.project_id, batch.rubrics)
    item_rows = [{"run_id": monitor.run_id, "item_key": r.response_id, "payload": r.payload} for r in sampled]
    pks = {
        str(key): int(pk)
        for pk, key in session.execute(insert(RunItem).returning(RunItem.id, RunItem.item_key), item_rows)
    }
    texts = {r.response_id: r.payload["candidates"] for r in sampled}
    costs = batch.costs if batch.costs is not None else [None] * len(planned)
    if len(costs) != len(planned):
        raise ValueError(f"store_responses: {len(costs)} expected costs for {len(planned)} planned judgments")
    ids: list[int] = []
    # the rows of one insert at a time, not the request's all at once (issue 39)
    for start in range(0, len(planned), CHUNK):
        judgment_rows = [
            judgment_row(
                monitor.run_id,
                p,
                pks[p.item_id],
                texts[p.item_id],
                judge_params,
                now,
                enqueued_at=now,
                estimated_cost_usd=c,
            )
            for p, c in zip(planned[start : start + CHUNK], costs[start : start + CHUNK], strict=True)
        ]
        ids += [int(i) for i in session.scalars(insert(Judgment).returning(Judgment.id), judgment_rows)]
    session.execute(
        update(Run)
        .where(Run.id == monitor.run_id)
        .values(n_items=Run.n_items + len(item_rows), n_judgments=Run.n_judgments + len(ids), finished_at=None)
        # the run is not loaded in this session: nothing to synchronise (the ORM's evaluation of the WHERE against
        # the identity map cost about a millisecond of CPU per sampled request)
        .execution_options(synchronize_session=False)
    )
    return Stored(len(new_ids), len(sampled), ids, sum(c for c in costs if c is not None))


def clear_enqueued(session: Session, judgment_ids: Sequence[int]) -> None:
    """Publishing failed: the sweepers send these at their next round."""
    for start in range(0, len(judgment_ids), CHUNK):
        chunk = list(judgment_ids[start : start + CHUNK])
        session.execute(
            update(Judgment).where(Judgment.id.in_(chunk), Judgment.status == "pending").values(enqueued_at=None)
        )


# -- status ------------------------------------------------------------------------------------------------------


def day_start(now: datetime) -> datetime:
    return now.replace(hour=0, minute=0, second=0, microsecond=0)


@dataclass(frozen=True)
class Spend:
    """A monitor's spend of the day: what the workers recorded, and the expected cost of the judgments still
    waiting or running (``estimated_cost_usd``; the daily budget counts both)."""

    recorded: float
    queued: float

    @property
    def committed(self) -> float:
        return self.recorded + self.queued


def spent_since(session: Session, run_id: str, since: datetime) -> Spend:
    """The spend of the run's judgments created since ``since`` (its judgments of the day)."""
    waiting = Judgment.status.in_(("pending", "running"))
    recorded, queued = session.execute(
        select(
            func.coalesce(func.sum(Judgment.cost_usd), 0.0),
            func.coalesce(func.sum(case((waiting, Judgment.estimated_cost_usd), else_=0.0)), 0.0),
        ).where(Judgment.run_id == run_id, Judgment.created_at >= since)
    ).one()
    return Spend(float(recorded or 0.0), float(queued or 0.0))


def day_counts(session: Session, monitor: Monitor, since: datetime) -> dict[str, int]:
    responses, sampled = session.execute(
        select(
            func.count(MonitorResponse.id),
            func.coalesce(func.sum(case((MonitorResponse.sampled.is_(True), 1), else_=0)), 0),
        ).where(MonitorResponse.monitor_id == monitor.id, MonitorResponse.received_at >= since)
    ).one()
    pending = session.scalar(
        select(func.count(Judgment.id)).where(
            Judgment.run_id == monitor.run_id, Judgment.status.in_(("pending", "running"))
        )
    )
    return {"responses_today": int(responses or 0), "sampled_today": int(sampled or 0), "pending": int(pending or 0)}


# -- series ------------------------------------------------------------------------------------------------------

VERDICT_COLUMNS = ["ts", *HOURLY_KEY, "score", "contradiction_rate"]


def verdicts_frame(
    session: Session, monitor: Monitor, since: datetime | None = None, until: datetime | None = None
) -> pd.DataFrame:
    """The monitor's finished verdicts still stored, with their response's time and slice keys: ``ts, system,
    version, segment, rubric_id, aspect, judge, score, contradiction_rate`` (fact-check judgments: their
    contradicted share, else None; a fact-check response that addresses no fact has score None and rate 0)."""
    query = _verdicts_select(monitor).where(Judgment.run_id == monitor.run_id, Judgment.status == "done")
    if since is not None:
        query = query.where(MonitorResponse.ts >= since)
    if until is not None:
        query = query.where(MonitorResponse.ts < until)
    return _verdicts_frame(session, query)


def _contradiction_rate(details: object) -> float | None:
    if isinstance(details, dict) and isinstance(details.get("facts"), list):
        rate = details.get("contradiction_rate")
        if isinstance(rate, int | float):
            return float(rate)
    return None


HOURLY_SUMS = ("n", "total", "total_sq", "fact_n", "fact_total")


def _day_start(session: Session, hour_start: ColumnElement[Any]) -> ColumnElement[Any]:
    """The UTC day of an hour, as a time."""
    bind = session.get_bind()
    if bind.dialect.name == "postgresql":
        return type_coerce(func.date_trunc("day", hour_start), DateTime)
    if bind.dialect.name == "sqlite":  # SQLAlchemy's storage format of a DateTime, read back as one
        return type_coerce(func.strftime("%Y-%m-%d 00:00:00.000000", hour_start), DateTime)
    raise unsupported_database(bind)


def series_sums(
    session: Session,
    monitor: Monitor,
    bucket: str,
    by: Sequence[str],
    filters: dict[str, str | None],
    since: datetime | None = None,
    until: datetime | None = None,
) -> pd.DataFrame:
    """The sums of the monitor's verdicts per bucket, ``by`` slice, rubric, aspect and judge: one query over the
    hourly sums (``monitor_hourly``, kept by the database as verdicts are written), a range of its primary key
    (monitor, hour, version, rubric, aspect, judge, ...): by version, the GROUP BY follows the key (no sort); a
    ``1d`` bucket groups the hours' groups again by day. Columns ``hour_start`` (the bucket's start), the ``by``
    slices, ``rubric_id, aspect, judge`` and the sums (``judge_api.stats.series.series`` turns them into the series).
    ``filters`` are equalities on ``system, version, segment, rubric_id, aspect, judge``; ``since``/``until`` select
    whole hours: those from the hour of ``since`` on, and those that start before ``until``."""
    if bucket not in ("1h", "1d"):
        raise ValueError(f"bucket must be 1h or 1d, not {bucket!r}")
    names = [s for s in ("version", "system", "segment") if s in by] + ["rubric_id", "aspect", "judge"]
    keys = [getattr(MonitorHourly, k) for k in names]
    hourly = select(
        MonitorHourly.hour_start, *keys, *(func.sum(getattr(MonitorHourly, c)).label(c) for c in HOURLY_SUMS)
    ).where(MonitorHourly.monitor_id == monitor.id, MonitorHourly.verdicts > 0)
    if since is not None:
        hourly = hourly.where(MonitorHourly.hour_start >= since.replace(minute=0, second=0, microsecond=0))
    if until is not None:
        hourly = hourly.where(MonitorHourly.hour_start < until)
    for column, value in filters.items():
        if value is not None:
            hourly = hourly.where(getattr(MonitorHourly, column) == value)
    hourly = hourly.group_by(MonitorHourly.hour_start, *keys)
    if bucket == "1h":
        query = hourly
    else:
        hours = hourly.subquery()
        day = _day_start(session, hours.c.hour_start).label("hour_start")
        day_keys = [hours.c[k] for k in names]
        query = select(day, *day_keys, *(func.sum(hours.c[c]).label(c) for c in HOURLY_SUMS)).group_by(day, *day_keys)
    rows = session.execute(query).all()
    return pd.DataFrame([tuple(r) for r in rows], columns=["hour_start", *names, *HOURLY_SUMS])


def sampled_responses(
    session: Session, monitor: Monitor, start: datetime, end: datetime, filters: dict[str, str | None], limit: int
) -> list[dict[str, Any]]:
    """The sampled responses of ``[start, end)`` (a series bucket) with their verdicts, for the dashboard (those
    whose content retention deleted are left out: only their id is kept, against replays)."""
    has_item = (
        select(RunItem.id)
        .where(RunItem.run_id == monitor.run_id, RunItem.item_key == MonitorResponse.response_id)
        .exists()
    )
    query = select(MonitorResponse).where(
        MonitorResponse.monitor_id == monitor.id,
        MonitorResponse.sampled.is_(True),
        MonitorResponse.ts >= start,
        MonitorResponse.ts < end,
        has_item,
    )
    for key, value in filters.items():
        if value is not None:
            query = query.where(getattr(MonitorResponse, key) == value)
    responses = list(session.scalars(query.order_by(MonitorResponse.ts, MonitorResponse.id).limit(limit)))
    keys = [r.response_id for r in responses]
    verdicts: dict[str, list[dict[str, Any]]] = {k: [] for k in keys}
    if keys:
        rows = session.execute(
            select(
                Judgment.item_key, Judgment.rubric_id, Judgment.aspect, Judgment.judge, Judgment.status, Judgment.score
            ).where(Judgment.run_id == monitor.run_id, Judgment.item_key.in_(keys))
        )
        for r in rows:
            verdicts[r.item_key].append(
                {"rubric_id": r.rubric_id, "aspect": r.aspect, "judge": r.judge, "status": r.status, "score": r.score}
            )
    return [
        {
            "response_id": r.response_id,
            "ts": r.ts,
            "system": r.system,
            "version": r.version,
            "segment": r.segment or None,
            "run_id": monitor.run_id,
            "verdicts": verdicts[r.response_id],
        }
        for r in responses
    ]


# -- retention ---------------------------------------------------------------------------------------------------


FINAL = ("done", "failed", "unparseable", "cancelled")
"""A judgment in one of these states is finished: retention may fold and delete it (never one still pending or
running)."""


def retention_cutoff(now: datetime, retention_days: int) -> datetime:
    """Responses received before this are deleted (a whole hour: the cutoff is on an hour)."""
    return (now - timedelta(days=retention_days)).replace(minute=0, second=0, microsecond=0)


def apply_retention(
    session: Session,
    monitor: Monitor,
    now: datetime | None = None,
    limit: int = CHUNK,
    replay_days: int = 7,
    counted: Sequence[tuple[str, str, str, int]] = (),
) -> int:
    """Retention of one monitor, up to ``limit`` responses of each step, in the caller's transaction:

    1. the content: the sampled responses received before the cutoff whose judgments are all finished (and already
       counted by the alert rules: ``counted`` holds each rule stream's (rubric, aspect, judge) and the smallest
       high-water mark of its rules; a judgment of the stream above it is not counted yet) have their items and
       judgments deleted. Their verdicts stay in ``monitor_hourly``, where the database added each when it was
       written (migration 0023: deleting a judgment takes nothing out), so the series counts a verdict exactly once
       whether its judgment is stored or not. A response with a judgment still pending or running keeps everything.
    2. the ids: a response's row (its id, slice keys and time, no text) is kept until it was received more than
       ``max(retention_days, replay_days)`` days ago and its content is gone, so a batch replayed within that window
       is still a duplicate and never judged twice.

    Returns the rows handled by the two steps (``limit`` or more: call again)."""
    if monitor.retention_days is None:
        return 0
    now = now or utcnow()
    cutoff = retention_cutoff(now, monitor.retention_days)
    has_item = (
        select(RunItem.id)
        .where(RunItem.run_id == monitor.run_id, RunItem.item_key == MonitorResponse.response_id)
        .exists()
    )
    keep: ColumnElement[bool] = Judgment.status.not_in(FINAL)
    for rubric_id, aspect, judge, mark in counted:
        uncounted = (Judgment.rubric_id == rubric_id) & (Judgment.aspect == aspect) & (Judgment.judge == judge)
        keep = or_(keep, uncounted & (Judgment.id > mark))
    unfinished = select(Judgment.id).where(
        Judgment.run_id == monitor.run_id, Judgment.item_key == MonitorResponse.response_id, keep
    )
    old = list(
        session.scalars(
            select(MonitorResponse.response_id)
            .where(
                MonitorResponse.monitor_id == monitor.id,
                MonitorResponse.received_at < cutoff,
                MonitorResponse.sampled.is_(True),
                has_item,
                ~unfinished.exists(),
            )
            .order_by(MonitorResponse.id)
            .limit(limit)
        )
    )
    if old:
        item_pks = list(
            session.scalars(select(RunItem.id).where(RunItem.run_id == monitor.run_id, RunItem.item_key.in_(old)))
        )
        removed = _rowcount(session.execute(delete(Judgment).where(Judgment.item_pk.in_(item_pks))))
        session.execute(delete(RunItem).where(RunItem.id.in_(item_pks)))
        session.execute(
            update(Run)
            .where(Run.id == monitor.run_id)
            .values(n_items=Run.n_items - len(item_pks), n_judgments=Run.n_judgments - removed)
        )
    forget_before = retention_cutoff(now, max(monitor.retention_days, replay_days))
    forgotten = list(
        session.scalars(
            select(MonitorResponse.id)
            .where(MonitorResponse.monitor_id == monitor.id, MonitorResponse.received_at < forget_before, ~has_item)
            .order_by(MonitorResponse.id)
            .limit(limit)
        )
    )
    if forgotten:
        session.execute(delete(MonitorResponse).where(MonitorResponse.id.in_(forgotten)))
    return len(old) + len(forgotten)


def _verdicts_select(monitor: Monitor) -> Select[Any]:
    """The monitor's judgments with their response's time and slice keys (the columns of ``verdicts_frame``)."""
    return select(
        MonitorResponse.ts,
        MonitorResponse.system,
        MonitorResponse.version,
        MonitorResponse.segment,
        Judgment.rubric_id,
        Judgment.aspect,
        Judgment.judge,
        Judgment.score,
        Judgment.details,
    ).join(
        MonitorResponse,
        (MonitorResponse.monitor_id == monitor.id) & (MonitorResponse.response_id == Judgment.item_key),
    )


def _verdicts_frame(session: Session, query: Select[Any]) -> pd.DataFrame:
    """The rows of a ``_verdicts_select`` query as the frame of ``VERDICT_COLUMNS``."""
    records = [
        {
            "ts": r.ts,
            "system": r.system,
            "version": r.version,
            "segment": r.segment,
            "rubric_id": r.rubric_id,
            "aspect": r.aspect,
            "judge": r.judge,
            "score": None if r.score is None else float(r.score),
            "contradiction_rate": _contradiction_rate(r.details),
        }
        for r in session.execute(query)
    ]
    return pd.DataFrame(records, columns=VERDICT_COLUMNS)


def monitors_with_retention(session: Session) -> list[Monitor]:
    return list(session.scalars(select(Monitor).where(Monitor.retention_days.is_not(None))))


def _rowcount(result: Any) -> int:
    count = getattr(result, "rowcount", 0)
    return int(count) if count is not None and count >= 0 else 0
