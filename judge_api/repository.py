"""Storage operations: every read and write of runs, items, judgments and human ratings goes through here.

Writes that belong together happen in one transaction (a run, its items and its judgments are stored together or
not at all). Judgment completion is a compare-and-set on the claim token, so a redelivered or duplicated task can
never write a second verdict.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, cast

import pandas as pd
from sqlalchemy import Connection, Engine, Table, and_, bindparam, case, func, insert, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session, sessionmaker

from judge_api.models import (
    TERMINAL_STATUSES,
    CacheEntry,
    HumanRating,
    Judgment,
    Project,
    RubricSnapshot,
    Run,
    RunItem,
    utcnow,
)
from judge_api.planning import PlannedJudgment, run_config
from judge_api.rubrics import Rubric
from judge_api.schemas import HumanRatingIn, JudgmentOut, RunCounts, RunCreate, RunSummary

DEFAULT_PROJECT = "default"


def ensure_project(session: Session, project_id: str = DEFAULT_PROJECT, name: str | None = None) -> Project:
    project = session.get(Project, project_id)
    if project is None:
        project = Project(id=project_id, name=name or project_id)
        session.add(project)
        session.flush()
    return project


def new_run_id() -> str:
    return "run_" + uuid.uuid4().hex[:16]


def create_run(
    session: Session,
    request: RunCreate,
    planned: Sequence[PlannedJudgment],
    project_id: str = DEFAULT_PROJECT,
    rubrics: Sequence[Rubric] = (),
) -> Run:
    """Store the run, its items, its pending judgments and a snapshot of every rubric version it was planned with
    (``rubrics``: the very objects the plan came from) in the caller's transaction."""
    versions = {(r.id, r.version) for r in rubrics}
    unsnapshotted = sorted({(p.rubric_id, p.rubric_version) for p in planned} - versions)
    if unsnapshotted:
        raise ValueError(f"create_run: no rubric given for the planned {unsnapshotted}")
    ensure_project(session, project_id)
    store_rubric_snapshots(session, rubrics)
    run = Run(
        id=new_run_id(),
        project_id=project_id,
        name=request.name,
        config=run_config(request),
        n_items=len(request.items),
        n_judgments=len(planned),
        budget_usd=request.budget_usd,
    )
    session.add(run)
    session.flush()
    item_rows = [
        {"run_id": run.id, "item_key": item.id, "payload": item.model_dump(mode="json")} for item in request.items
    ]
    session.execute(insert(RunItem), item_rows)
    item_pks = item_pks_for(session, run.id)
    candidates = {item.id: item.candidates for item in request.items}
    judge_params = request.options.model_dump(mode="json")
    if request.outcome_map:
        judge_params["outcome_map"] = dict(request.outcome_map)
    now = utcnow()
    rows: list[dict[str, Any]] = []
    for p in planned:
        texts = candidates[p.item_id]
        row: dict[str, Any] = {
            "dedup_key": p.dedup_key(run.id),
            "run_id": run.id,
            "item_pk": item_pks[p.item_id],
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
            "injection_flags": [],
            "created_at": now,
            "updated_at": now,
            "input_tokens": 0,
            "output_tokens": 0,
            "cost_usd": 0.0,
            "attempts": 0,
            "provider_calls": 0,
            "cached": False,
        }
        if p.identical:
            row.update(
                status="done",
                verdict="identical",
                preference=0.0,
                outcome="tie",
                explanation="The two responses are identical: a tie without a judge call.",
            )
        rows.append(row)
    for start in range(0, len(rows), 5000):
        session.execute(insert(Judgment), rows[start : start + 5000])
    return run


def store_rubric_snapshots(session: Session, rubrics: Iterable[Rubric]) -> None:
    """Keep each rubric version (config and template text) in the caller's transaction; a version stored already is
    kept (the version is the hash of the rubric's files)."""
    rows = {
        (r.id, r.version): {
            "rubric_id": r.id,
            "version": r.version,
            "content": rubric_content(r),
            "created_at": utcnow(),
        }
        for r in rubrics
    }
    if rows:
        session.execute(
            _insert_ignoring(session.get_bind(), _SNAPSHOT_TABLE, ["rubric_id", "version"]), list(rows.values())
        )


def rubric_content(rubric: Rubric) -> dict[str, Any]:
    return rubric.model_dump(mode="json", exclude={"folder"})


def rubric_snapshot(session: Session, rubric_id: str, version: str) -> Rubric | None:
    """The rubric version a run was planned with, as stored when the run was created (None: not stored)."""
    content = session.scalar(
        select(RubricSnapshot.content).where(RubricSnapshot.rubric_id == rubric_id, RubricSnapshot.version == version)
    )
    return Rubric.model_validate(content) if content is not None else None


def rubric_versions(session: Session, rubric_id: str) -> list[RubricSnapshot]:
    """The stored versions of a rubric, oldest first."""
    query = select(RubricSnapshot).where(RubricSnapshot.rubric_id == rubric_id)
    return list(session.scalars(query.order_by(RubricSnapshot.created_at, RubricSnapshot.version)))


def item_pks_for(session: Session, run_id: str) -> dict[str, int]:
    rows = session.execute(select(RunItem.item_key, RunItem.id).where(RunItem.run_id == run_id))
    return {key: pk for key, pk in rows}


def pending_judgment_ids(session: Session, run_id: str | None = None) -> list[int]:
    query = select(Judgment.id).where(Judgment.status == "pending")
    if run_id is not None:
        query = query.where(Judgment.run_id == run_id)
    return list(session.scalars(query.order_by(Judgment.id)))


def mark_enqueued(session: Session, ids: Iterable[int]) -> None:
    ids = list(ids)
    now = utcnow()
    for start in range(0, len(ids), 5000):
        session.execute(update(Judgment).where(Judgment.id.in_(ids[start : start + 5000])).values(enqueued_at=now))


def stale_judgment_ids(
    session: Session,
    requeue_after_s: float,
    lease_s: float,
    limit: int = 50_000,
    *,
    include_pending: bool = True,
) -> list[int]:
    """Running judgments whose worker's lease ran out and, with ``include_pending``, pending ones that were never
    enqueued or not recently."""
    now = utcnow()
    stale_enqueue = now - timedelta(seconds=requeue_after_s)
    stale_claim = now - timedelta(seconds=lease_s)
    lost_claims = and_(
        Judgment.status == "running",
        Judgment.claimed_at < stale_claim,
        # not re-sent since the claim (or long ago): one message per lost claim, not one per sweep
        or_(
            Judgment.enqueued_at.is_(None),
            Judgment.enqueued_at <= Judgment.claimed_at,
            Judgment.enqueued_at < stale_enqueue,
        ),
    )
    never_sent = and_(Judgment.status == "pending", Judgment.enqueued_at.is_(None))
    not_recently_sent = and_(Judgment.status == "pending", Judgment.enqueued_at < stale_enqueue)
    condition = or_(lost_claims, never_sent, not_recently_sent) if include_pending else or_(lost_claims, never_sent)
    query = select(Judgment.id).where(condition).order_by(Judgment.id).limit(limit)
    return list(session.scalars(query))


def claim_judgment(session: Session, judgment_id: int, lease_s: float) -> str | None:
    """Take a judgment for this worker; None if it is finished or another live worker holds it."""
    token = uuid.uuid4().hex
    now = utcnow()
    result = session.execute(
        update(Judgment)
        .where(
            Judgment.id == judgment_id,
            or_(
                Judgment.status == "pending",
                and_(Judgment.status == "running", Judgment.claimed_at < now - timedelta(seconds=lease_s)),
            ),
        )
        .values(status="running", claim_token=token, claimed_at=now, updated_at=now)
    )
    session.commit()
    return token if result.rowcount == 1 else None  # type: ignore[attr-defined]


@dataclass(frozen=True, slots=True)
class JudgmentTask:
    """What a worker needs of a stored judgment to ask its judge: the row's plan, its item, its run's budget."""

    id: int
    run_id: str
    status: str
    rubric_id: str
    rubric_version: str
    aspect: str
    judge: str
    judge_params: dict[str, Any]
    system_a: str
    system_b: str | None
    order: str | None
    sample_index: int
    item: dict[str, Any]
    budget_usd: float | None


def _task_query() -> Any:
    judgments, items, runs = _judgments(), cast(Table, RunItem.__table__), cast(Table, Run.__table__)
    columns = [judgments.c[name] for name in JudgmentTask.__slots__ if name in judgments.c]
    return (
        select(*columns, items.c.payload.label("item"), runs.c.budget_usd)
        .join_from(judgments, items, items.c.id == judgments.c.item_pk)
        .join(runs, runs.c.id == judgments.c.run_id)
        .where(judgments.c.id.in_(bindparam("ids", expanding=True)))
    )


def load_tasks(engine: Engine, judgment_ids: Sequence[int]) -> list[JudgmentTask]:
    """The judgments of ``judgment_ids`` that exist, with their items and run budgets, in one query."""
    if not judgment_ids:
        return []
    with engine.connect() as connection:
        rows = connection.execute(_TASK_QUERY, {"ids": list(judgment_ids)}).mappings().all()
    return [JudgmentTask(**row) for row in rows]


def claim_many(engine: Engine, judgment_ids: Sequence[int], lease_s: float) -> tuple[str, set[int]]:
    """Take every judgment of ``judgment_ids`` that is pending (or whose claim has lapsed) in one statement.

    Returns the claim token (one per call) and the ids taken; the others are finished or held by a live worker."""
    token = uuid.uuid4().hex
    if not judgment_ids:
        return token, set()
    now = utcnow()
    params = {"ids": list(judgment_ids), "token": token, "now": now, "cutoff": now - timedelta(seconds=lease_s)}
    with engine.begin() as connection:
        return token, {int(row[0]) for row in connection.execute(_CLAIM, params)}


def renew_claims(engine: Engine, held: dict[int, str]) -> int:
    """Move the claim time of judgments this worker still holds (id -> claim token) to now; returns how many."""
    table = _judgments()
    now = utcnow()
    by_token: dict[str, list[int]] = {}
    for judgment_id, token in held.items():
        by_token.setdefault(token, []).append(judgment_id)
    renewed = 0
    with engine.begin() as connection:
        for token, ids in by_token.items():
            renewed += connection.execute(
                update(table)
                .where(table.c.id.in_(ids), table.c.claim_token == token, table.c.status == "running")
                .values(claimed_at=now)
            ).rowcount
    return renewed


def write_verdicts(
    engine: Engine, verdicts: Sequence[tuple[int, str, dict[str, Any]]], cache_rows: Sequence[dict[str, Any]] = ()
) -> list[bool]:
    """Store claimed judgments' verdicts, and the cache entries of the replies they paid for, in one transaction.

    ``verdicts`` are (judgment id, claim token, column values). Each verdict is a compare-and-set on its claim
    token: False for a claim that was lost (nothing written for that row). The cache entries are written either
    way (content-addressed: an entry that exists is kept)."""
    now = utcnow()
    params = [
        {**{f"v_{k}": v for k, v in values.items()}, "jid": judgment_id, "token": token, "v_updated_at": now}
        for judgment_id, token, values in verdicts
    ]
    by_columns: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for (_, _, values), row in zip(verdicts, params, strict=True):
        by_columns.setdefault(tuple(sorted(values)), []).append(row)
    with engine.connect() as connection:  # closing without a commit rolls back
        _insert_cache(connection, engine, cache_rows)
        # the common case: every claim still holds, and one executemany per column set writes the group
        if engine.dialect.supports_sane_multi_rowcount:
            written = sum(connection.execute(_verdict_update(cols), rows).rowcount for cols, rows in by_columns.items())
            if written == len(params):
                connection.commit()
                return [True] * len(params)
            connection.rollback()  # a claim was lost: write row by row to learn which
            _insert_cache(connection, engine, cache_rows)
        results = [
            connection.execute(_verdict_update(tuple(sorted(values))), row).rowcount == 1
            for (_, _, values), row in zip(verdicts, params, strict=True)
        ]
        connection.commit()
        return results


def _insert_cache(connection: Connection, engine: Engine, cache_rows: Sequence[dict[str, Any]]) -> None:
    if cache_rows:
        unique = {row["key"]: row for row in cache_rows}
        connection.execute(_insert_cache_rows(engine), list(unique.values()))


@functools.lru_cache(maxsize=64)
def _verdict_update(columns: tuple[str, ...]) -> Any:
    """The compare-and-set UPDATE of a verdict writing ``columns`` (built once per column set)."""
    table = _judgments()
    # bind names differ from the column names: SQLAlchemy reserves those for its own SET parameters
    values: dict[str, Any] = {c: bindparam(f"v_{c}", type_=table.c[c].type) for c in (*columns, "updated_at")}
    values["claim_token"] = None
    return (
        update(table)
        .where(table.c.id == bindparam("jid"), table.c.claim_token == bindparam("token"), table.c.status == "running")
        .values(values)
    )


def cache_entries(engine: Engine, keys: Sequence[str]) -> dict[str, Any]:
    """The judge-cache rows of ``keys`` that exist, by key (rows with the CacheEntry column names)."""
    if not keys:
        return {}
    with engine.connect() as connection:
        return {row.key: row for row in connection.execute(_CACHE_QUERY, {"keys": list(set(keys))})}


def store_cache_rows(engine: Engine, cache_rows: Sequence[dict[str, Any]]) -> None:
    """Write judge-cache entries; an entry that exists already is kept (the same key is the same request)."""
    with engine.begin() as connection:
        _insert_cache(connection, engine, cache_rows)


def _judgments() -> Table:
    return cast(Table, Judgment.__table__)


def _insert_cache_rows(engine: Engine) -> Any:
    try:
        return _INSERT_CACHE[engine.dialect.name]
    except KeyError:
        raise _unsupported(engine) from None


def _insert_ignoring(bind: Any, table: Table, keys: list[str]) -> Any:
    """INSERT that keeps the existing row on a key conflict."""
    index = [table.c[k] for k in keys]
    if bind.dialect.name == "postgresql":
        return postgresql.insert(table).on_conflict_do_nothing(index_elements=index)
    if bind.dialect.name == "sqlite":
        return sqlite.insert(table).on_conflict_do_nothing(index_elements=index)
    raise _unsupported(bind)


def _unsupported(bind: Any) -> RuntimeError:
    return RuntimeError(
        f"DATABASE_URL names a {bind.dialect.name} database; dialogue-judge runs on SQLite or PostgreSQL"
    )


def _claim_statement() -> Any:
    table = _judgments()
    return (
        update(table)
        .where(
            table.c.id.in_(bindparam("ids", expanding=True)),
            or_(
                table.c.status == "pending",
                and_(table.c.status == "running", table.c.claimed_at < bindparam("cutoff")),
            ),
        )
        .values(
            status="running", claim_token=bindparam("token"), claimed_at=bindparam("now"), updated_at=bindparam("now")
        )
        .returning(table.c.id)
    )


# the hot path's statements, built once (building a statement costs more CPU than executing a cached one)
_CACHE_TABLE = cast(Table, CacheEntry.__table__)
_CACHE_QUERY = select(_CACHE_TABLE).where(_CACHE_TABLE.c.key.in_(bindparam("keys", expanding=True)))
_SNAPSHOT_TABLE = cast(Table, RubricSnapshot.__table__)
_INSERT_CACHE = {
    "postgresql": postgresql.insert(_CACHE_TABLE).on_conflict_do_nothing(index_elements=[_CACHE_TABLE.c.key]),
    "sqlite": sqlite.insert(_CACHE_TABLE).on_conflict_do_nothing(index_elements=[_CACHE_TABLE.c.key]),
}
_CLAIM = _claim_statement()
_TASK_QUERY = _task_query()


def complete_judgment(session: Session, judgment_id: int, token: str, values: dict[str, Any]) -> bool:
    """Write the verdict if this worker still holds the claim. Exactly one writer ever succeeds."""
    values = {**values, "updated_at": utcnow(), "claim_token": None}
    result = session.execute(
        update(Judgment)
        .where(Judgment.id == judgment_id, Judgment.claim_token == token, Judgment.status == "running")
        .values(**values)
    )
    session.commit()
    return result.rowcount == 1  # type: ignore[attr-defined]


VERDICT_COLUMNS = (
    "status",
    "error",
    "explanation",
    "details",
    "score",
    "verdict",
    "preference",
    "outcome",
    "raw_output",
    "prompt_hash",
    "injection_flags",
    "attempts",
    "provider_calls",
    "input_tokens",
    "output_tokens",
    "latency_ms",
    "cost_usd",
    "cached",
)


def complete_pending_many(sessions: sessionmaker[Session], writes: Sequence[dict[str, Any]]) -> int:
    """Write verdicts that needed no provider call (cache hits) straight onto pending rows, in one statement.

    The ``status = 'pending'`` condition is the compare-and-set: a row another worker claimed or finished is left
    alone, so each judgment is still written once. Returns how many rows were written."""
    if not writes:
        return 0
    now = utcnow()
    defaults: dict[str, Any] = {
        "attempts": 0,
        "provider_calls": 0,
        "input_tokens": 0,
        "output_tokens": 0,
        "cost_usd": 0.0,
        "cached": False,
        "injection_flags": [],
    }
    params = []
    for write in writes:
        row = {f"v_{c}": write.get(c) if write.get(c) is not None else defaults.get(c) for c in VERDICT_COLUMNS}
        params.append({"jid": write["jid"], "v_updated_at": now, **row})
    table = cast(Table, Judgment.__table__)
    # bind names differ from the column names: SQLAlchemy reserves those for its own SET parameters
    values = {c: bindparam(f"v_{c}", type_=table.c[c].type) for c in (*VERDICT_COLUMNS, "updated_at")}
    statement = update(table).where(table.c.id == bindparam("jid"), table.c.status == "pending").values(values)
    with sessions() as session:
        result = session.execute(statement, params)
        session.commit()
    return int(result.rowcount) if result.rowcount is not None and result.rowcount >= 0 else len(params)  # type: ignore[attr-defined]


def release_judgment(session: Session, judgment_id: int, token: str, values: dict[str, Any]) -> bool:
    """Hand a claimed judgment back as pending (e.g. the worker is shutting down)."""
    return complete_judgment(session, judgment_id, token, {**values, "status": "pending", "claimed_at": None})


def retry_failed(session: Session, run_id: str) -> int:
    result = session.execute(
        update(Judgment)
        .where(Judgment.run_id == run_id, Judgment.status.in_(("failed", "cancelled")))
        .values(status="pending", error=None, attempts=0, enqueued_at=None, updated_at=utcnow())
    )
    run = session.get(Run, run_id)
    if run is not None:
        run.finished_at = None
        run.budget_exhausted_at = None
    return int(result.rowcount)  # type: ignore[attr-defined]


def run_spend(session: Session, run_id: str) -> float:
    return float(
        session.scalar(select(func.coalesce(func.sum(Judgment.cost_usd), 0.0)).where(Judgment.run_id == run_id)) or 0.0
    )


def cancel_pending(session: Session, run_id: str, reason: str) -> int:
    result = session.execute(
        update(Judgment)
        .where(Judgment.run_id == run_id, Judgment.status == "pending")
        .values(status="cancelled", error=reason, updated_at=utcnow())
    )
    return int(result.rowcount)  # type: ignore[attr-defined]


def get_run(session: Session, run_id: str, project_id: str | None = None) -> Run | None:
    run = session.get(Run, run_id)
    if run is None or (project_id is not None and run.project_id != project_id):
        return None
    return run


def list_runs(session: Session, project_id: str | None, offset: int, limit: int) -> tuple[int, list[Run]]:
    query = select(Run)
    count = select(func.count(Run.id))
    if project_id is not None:
        query = query.where(Run.project_id == project_id)
        count = count.where(Run.project_id == project_id)
    total = int(session.scalar(count) or 0)
    runs = list(session.scalars(query.order_by(Run.created_at.desc(), Run.id).offset(offset).limit(limit)))
    return total, runs


def run_counts(session: Session, run_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Per run: judgments by status, token/cost totals, provider calls and cache hits (one query)."""
    if not run_ids:
        return {}
    rows = session.execute(
        select(
            Judgment.run_id,
            Judgment.status,
            func.count(Judgment.id),
            func.coalesce(func.sum(Judgment.cost_usd), 0.0),
            func.coalesce(func.sum(Judgment.input_tokens), 0),
            func.coalesce(func.sum(Judgment.output_tokens), 0),
            func.coalesce(func.sum(Judgment.provider_calls), 0),
            func.coalesce(func.sum(case((Judgment.cached.is_(True), 1), else_=0)), 0),
        )
        .where(Judgment.run_id.in_(list(run_ids)))
        .group_by(Judgment.run_id, Judgment.status)
    ).all()
    out: dict[str, dict[str, Any]] = {
        rid: {"counts": {}, "cost": 0.0, "in": 0, "out": 0, "calls": 0, "cached": 0} for rid in run_ids
    }
    for run_id, status, n, cost, tin, tout, calls, cached in rows:
        entry = out[run_id]
        entry["counts"][status] = int(n)
        entry["cost"] += float(cost)
        entry["in"] += int(tin)
        entry["out"] += int(tout)
        entry["calls"] += int(calls)
        entry["cached"] += int(cached)
    return out


def summarize_runs(session: Session, runs: Sequence[Run]) -> list[RunSummary]:
    stats = run_counts(session, [r.id for r in runs])
    summaries = []
    for run in runs:
        entry = stats[run.id]
        counts = RunCounts(**entry["counts"])
        total = run.n_judgments or 1
        terminal = sum(entry["counts"].get(s, 0) for s in TERMINAL_STATUSES)
        if terminal >= run.n_judgments:
            status = "budget_exhausted" if run.budget_exhausted_at else "done"
        elif counts.running or terminal:
            status = "running"
        else:
            status = "queued"
        message = None
        if run.budget_exhausted_at:
            message = f"budget of ${run.budget_usd:.4f} reached: {counts.cancelled} judgments were not scheduled"
        if terminal >= run.n_judgments and run.finished_at is None:
            run.finished_at = utcnow()
        config = run.config
        summaries.append(
            RunSummary(
                id=run.id,
                name=run.name,
                status=status,
                created_at=run.created_at,
                finished_at=run.finished_at,
                rubrics=config["rubrics"],
                judges=config["judges"],
                mode=config["mode"],
                n_items=run.n_items,
                n_judgments=run.n_judgments,
                counts=counts,
                progress=round(terminal / total, 4),
                cost_usd=round(entry["cost"], 6),
                input_tokens=entry["in"],
                output_tokens=entry["out"],
                provider_calls=entry["calls"],
                cached=entry["cached"],
                budget_usd=run.budget_usd,
                budget_exhausted=run.budget_exhausted_at is not None,
                message=message,
            )
        )
    return summaries


JUDGMENT_FILTERS = ("status", "system", "aspect", "item_id", "rubric_id", "judge", "mode")


def list_judgments(
    session: Session,
    run_id: str,
    offset: int,
    limit: int,
    filters: dict[str, str | None] | None = None,
    score_min: float | None = None,
    score_max: float | None = None,
) -> tuple[int, list[JudgmentOut]]:
    conditions = [Judgment.run_id == run_id]
    for key, value in (filters or {}).items():
        if value is None:
            continue
        if key == "system":
            conditions.append(or_(Judgment.system_a == value, Judgment.system_b == value))
        elif key == "item_id":
            conditions.append(Judgment.item_key == value)
        else:
            conditions.append(getattr(Judgment, key) == value)
    if score_min is not None:
        conditions.append(Judgment.score >= score_min)
    if score_max is not None:
        conditions.append(Judgment.score <= score_max)
    total = int(session.scalar(select(func.count(Judgment.id)).where(*conditions)) or 0)
    rows = session.scalars(select(Judgment).where(*conditions).order_by(Judgment.id).offset(offset).limit(limit))
    return total, [judgment_out(j) for j in rows]


def judgment_out(j: Judgment) -> JudgmentOut:
    return JudgmentOut(
        id=j.id,
        run_id=j.run_id,
        item_id=j.item_key,
        mode=j.mode,
        system_a=j.system_a,
        system_b=j.system_b,
        order=j.order,
        rubric_id=j.rubric_id,
        rubric_version=j.rubric_version,
        aspect=j.aspect,
        judge=j.judge,
        judge_params=j.judge_params,
        sample_index=j.sample_index,
        prompt_hash=j.prompt_hash,
        raw_output=j.raw_output,
        score=j.score,
        verdict=j.verdict,
        preference=j.preference,
        outcome=j.outcome,
        explanation=j.explanation,
        input_tokens=j.input_tokens,
        output_tokens=j.output_tokens,
        latency_ms=j.latency_ms,
        cost_usd=j.cost_usd,
        attempts=j.attempts,
        status=j.status,
        error=j.error,
        cached=j.cached,
        injection_flags=list(j.injection_flags or []),
        updated_at=j.updated_at,
    )


def get_items(session: Session, run_id: str, item_keys: Sequence[str] | None = None) -> list[dict[str, Any]]:
    query = select(RunItem.payload).where(RunItem.run_id == run_id)
    if item_keys:
        query = query.where(RunItem.item_key.in_(list(item_keys)))
    return list(session.scalars(query.order_by(RunItem.id)))


JUDGMENT_FRAME_COLUMNS = [
    "judgment_id",
    "run_id",
    "item_id",
    "mode",
    "system_a",
    "system_b",
    "aspect",
    "judge",
    "rubric_id",
    "rubric_version",
    "order",
    "sample_index",
    "status",
    "score",
    "preference",
    "outcome",
    "len_a",
    "len_b",
    "input_tokens",
    "output_tokens",
    "latency_ms",
    "cost_usd",
    "cached",
]


def judgments_frame(session: Session, run_id: str) -> pd.DataFrame:
    """The run's judgments as the statistics library's frame (docs/data-contract.md)."""
    cols = [
        Judgment.id,
        Judgment.run_id,
        Judgment.item_key,
        Judgment.mode,
        Judgment.system_a,
        Judgment.system_b,
        Judgment.aspect,
        Judgment.judge,
        Judgment.rubric_id,
        Judgment.rubric_version,
        Judgment.order,
        Judgment.sample_index,
        Judgment.status,
        Judgment.score,
        Judgment.preference,
        Judgment.outcome,
        Judgment.len_a,
        Judgment.len_b,
        Judgment.input_tokens,
        Judgment.output_tokens,
        Judgment.latency_ms,
        Judgment.cost_usd,
        Judgment.cached,
    ]
    rows = session.execute(select(*cols).where(Judgment.run_id == run_id).order_by(Judgment.id)).all()
    frame = pd.DataFrame(rows, columns=JUDGMENT_FRAME_COLUMNS)
    scales = {}
    from judge_api.rubrics import get_registry

    registry = get_registry()
    for rubric_id in frame["rubric_id"].unique():
        scale = registry.get(rubric_id).scale if rubric_id in registry else None
        scales[rubric_id] = scale or (float("nan"), float("nan"))
    frame["scale_min"] = frame["rubric_id"].map(lambda r: scales[r][0]).astype(float)
    frame["scale_max"] = frame["rubric_id"].map(lambda r: scales[r][1]).astype(float)
    frame["score"] = frame["score"].astype(float)
    frame["preference"] = frame["preference"].astype(float)
    return frame


RATING_FRAME_COLUMNS = [
    "item_id",
    "system",
    "system_b",
    "aspect",
    "rater",
    "kind",
    "value",
    "scale_min",
    "scale_max",
    "turn",
    "tie_inconsistent",
]


def ratings_frame(session: Session, run_id: str) -> pd.DataFrame:
    rows = session.scalars(select(HumanRating).where(HumanRating.run_id == run_id).order_by(HumanRating.id))
    records = [
        {
            "item_id": r.item_key,
            "system": r.system,
            "system_b": r.system_b or None,
            "aspect": r.aspect,
            "rater": r.rater,
            "kind": r.kind,
            "value": r.value,
            "scale_min": r.scale_min,
            "scale_max": r.scale_max,
            "turn": (r.meta or {}).get("turn"),
            "tie_inconsistent": bool((r.meta or {}).get("tie_inconsistent", False)),
        }
        for r in rows
    ]
    return pd.DataFrame(records, columns=RATING_FRAME_COLUMNS)


def upsert_ratings(session: Session, run_id: str, ratings: Sequence[HumanRatingIn]) -> tuple[int, int]:
    """Insert ratings; a rating for the same (item, system(s), aspect, rater) replaces the old value."""
    existing = {
        (r.item_key, r.system, r.system_b, r.aspect, r.rater): r
        for r in session.scalars(select(HumanRating).where(HumanRating.run_id == run_id))
    }
    created = updated = 0
    for rating in ratings:
        key = (rating.item_id, rating.system, rating.system_b or "", rating.aspect, rating.rater)
        row = existing.get(key)
        if row is None:
            row = HumanRating(
                run_id=run_id,
                item_key=rating.item_id,
                system=rating.system,
                system_b=rating.system_b or "",
                aspect=rating.aspect,
                rater=rating.rater,
                kind=rating.kind,
                value=rating.value,
                scale_min=rating.scale_min,
                scale_max=rating.scale_max,
                meta=rating.meta,
            )
            session.add(row)
            existing[key] = row
            created += 1
        else:
            row.value, row.kind = rating.value, rating.kind
            row.scale_min, row.scale_max, row.meta = rating.scale_min, rating.scale_max, rating.meta
            updated += 1
    session.flush()
    return created, updated


def run_item_keys(session: Session, run_id: str) -> set[str]:
    return set(session.scalars(select(RunItem.item_key).where(RunItem.run_id == run_id)))
