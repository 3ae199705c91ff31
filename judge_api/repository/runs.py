"""The API's reads and writes of runs: creation (run, items, pending judgments and rubric snapshots in one
transaction), listing and summaries, judgments and items as the API returns them, retry and cancel."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Float, Integer, String, bindparam, column, exists, func, insert, select, text, update
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value

from judge_api.adaptive import economy as adaptive_economy
from judge_api.models import (
    TERMINAL_STATUSES,
    Generation,
    Judgment,
    Run,
    RunItem,
    utcnow,
)
from judge_api.planning import PlannedJudgment, is_adaptive, run_config
from judge_api.reference_metrics import REFERENCE_RUBRIC, reference_rubric
from judge_api.repository import report_cache
from judge_api.repository.batches import batch_counts
from judge_api.repository.exports import count_judgments, judgment_conditions
from judge_api.repository.generations import generation_counts
from judge_api.repository.projects import DEFAULT_PROJECT, ensure_project
from judge_api.repository.rows import INSERT_CHUNK, insert_judgment_rows, judgment_row
from judge_api.repository.rubric_snapshots import store_rubric_snapshots
from judge_api.rubrics import Rubric
from judge_api.schemas import (
    BatchCounts,
    GenerationCounts,
    JudgmentOut,
    RunCounts,
    RunCreate,
    RunOutcome,
    RunSummary,
)


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
    given = {(r.id, r.version) for r in rubrics}
    # the reference metrics' definitions (a version per tokenisation) are stored with the run like a rubric
    reference = sorted(
        {
            p.rubric_version
            for p in planned
            if p.rubric_id == REFERENCE_RUBRIC and (p.rubric_id, p.rubric_version) not in given
        }
    )
    rubrics = [*rubrics, *(reference_rubric(v) for v in reference)]
    versions = given | {(REFERENCE_RUBRIC, v) for v in reference}
    unsnapshotted = sorted({(p.rubric_id, p.rubric_version) for p in planned} - versions)
    if unsnapshotted:
        raise ValueError(f"create_run: no rubric given for the planned {unsnapshotted}")
    ensure_project(session, project_id)
    store_rubric_snapshots(session, project_id, rubrics)
    run = Run(
        id=new_run_id(),
        project_id=project_id,
        name=request.name,
        config=run_config(request),
        n_items=len(request.items),
        n_judgments=len(planned),
        budget_usd=request.budget_usd,
        plan_open=is_adaptive(run_config(request)),
        callback_url=request.callback_url,
        callback_secret=request.callback_secret.get_secret_value() if request.callback_secret else None,
        execution=request.execution,
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
    for start in range(0, len(planned), INSERT_CHUNK):
        rows = [
            judgment_row(run.id, p, item_pks[p.item_id], candidates[p.item_id], judge_params, now)
            for p in planned[start : start + INSERT_CHUNK]
        ]
        insert_judgment_rows(session, rows)
    return run


def item_pks_for(session: Session, run_id: str) -> dict[str, int]:
    rows = session.execute(select(RunItem.item_key, RunItem.id).where(RunItem.run_id == run_id))
    return {key: pk for key, pk in rows}


def _retry_failed_generations(session: Session, run_id: str) -> int:
    """A run with systems: its failed generations go back to pending and their items are released again once they
    settle (``generations.release_item`` then adds only the judgments the item lacks)."""
    failed = list(
        session.execute(
            select(Generation.id, Generation.item_pk).where(Generation.run_id == run_id, Generation.status == "failed")
        ).tuples()
    )
    if not failed:
        return 0
    session.execute(
        update(Generation)
        .where(Generation.id.in_([g for g, _ in failed]), Generation.status == "failed")
        .values(status="pending", error=None, claim_token=None, claimed_at=None, enqueued_at=None, updated_at=utcnow())
    )
    session.execute(update(RunItem).where(RunItem.id.in_({pk for _, pk in failed})).values(released_at=None))
    return len(failed)


def retry_failed(session: Session, run_id: str, unparseable: bool = False) -> int:
    """Send the run's failed and cancelled judgments, and its failed generations, again; with ``unparseable`` also
    the judgments whose reply could not be parsed, asked past the judge cache (``options.cache`` 'refresh' on those
    judgments, unless the run has it 'off'): the cached reply is the unparseable one, and the new reply replaces it."""
    # the run's row locked before any judgment is reopened: a poll or a list stamping the run finished meanwhile waits
    # for this transaction, then finds the data_version it counted on bumped below and stamps nothing (review r51b)
    session.execute(select(Run.id).where(Run.id == run_id).with_for_update())
    result = session.execute(
        update(Judgment)
        .where(Judgment.run_id == run_id, Judgment.status.in_(("failed", "cancelled")), Judgment.source.is_(None))
        .values(status="pending", error=None, attempts=0, enqueued_at=None, updated_at=utcnow())
    )
    count = int(result.rowcount)  # type: ignore[attr-defined]
    count += _retry_failed_generations(session, run_id)
    if unparseable:
        rows = session.execute(
            select(Judgment.id, Judgment.judge_params).where(
                # an imported verdict (its file's SHA-256 in source) is never sent to a judge, retried or not
                Judgment.run_id == run_id,
                Judgment.status == "unparseable",
                Judgment.source.is_(None),
            )
        ).all()
        now = utcnow()
        for judgment_id, params in rows:
            refreshed = {**(params or {}), "cache": "off" if (params or {}).get("cache") == "off" else "refresh"}
            session.execute(
                update(Judgment)
                .where(Judgment.id == judgment_id, Judgment.status == "unparseable")
                .values(
                    status="pending", error=None, attempts=0, enqueued_at=None, updated_at=now, judge_params=refreshed
                )
            )
        count += len(rows)
    if count:
        session.execute(
            update(Run)
            .where(Run.id == run_id)
            .values(data_version=Run.data_version + 1)
            .execution_options(synchronize_session=False)
        )
    run = session.get(Run, run_id)
    if run is not None:
        run.finished_at = None
        run.budget_exhausted_at = None
        if is_adaptive(run.config) and count:
            # the retried comparisons may change the ranking: planning resumes once they are judged
            state = dict(run.plan_state or {})
            if state.get("pairing"):
                state["pairing"] = {**state["pairing"], "stop": None, "stop_message": None}
            run.plan_state = {**state, "finished": False}
            run.plan_open = True
    return count


def cancel_pending(session: Session, run_id: str, reason: str) -> int:
    """Cancel the run's pending judgments and ask its open provider batches to be cancelled at the provider."""
    from judge_api.repository.batches import request_cancel  # it imports the models this module does

    result = session.execute(
        update(Judgment)
        .where(Judgment.run_id == run_id, Judgment.status == "pending")
        .values(status="cancelled", error=reason, updated_at=utcnow())
    )
    request_cancel(session, run_id)
    return int(result.rowcount)  # type: ignore[attr-defined]


def get_run(session: Session, run_id: str, project_id: str | None = None) -> Run | None:
    run = session.get(Run, run_id)
    if run is None or (project_id is not None and run.project_id != project_id):
        return None
    return run


def list_runs(session: Session, project_id: str | None, offset: int, limit: int) -> tuple[int, list[Run]]:
    # a monitor's internal run is reached through its monitor (docs/monitoring.md), not listed with the runs
    query = select(Run).where(Run.monitor_id.is_(None))
    count = select(func.count(Run.id)).where(Run.monitor_id.is_(None))
    if project_id is not None:
        query = query.where(Run.project_id == project_id)
        count = count.where(Run.project_id == project_id)
    total = int(session.scalar(count) or 0)
    runs = list(session.scalars(query.order_by(Run.created_at.desc(), Run.id).offset(offset).limit(limit)))
    return total, runs


# what a summary of runs reads (the runs list, a report; the status poll folds the same into _POLL_RUN), as plain SQL:
# built with the ORM's expressions, SQLAlchemy spent ~0.35 ms CPU a call constructing the ten aggregates and their
# cache key again (of a poll's ~5 ms then, API side; docs/scaling.md)
_RUN_COUNTS = text(
    "SELECT run_id, status, COUNT(id), COALESCE(SUM(cost_usd), 0.0), COALESCE(SUM(input_tokens), 0), "
    "COALESCE(SUM(output_tokens), 0), COALESCE(SUM(provider_calls), 0), "
    "COALESCE(SUM(CASE WHEN cached THEN 1 ELSE 0 END), 0) "
    "FROM judgments WHERE run_id IN :run_ids GROUP BY run_id, status"
).bindparams(bindparam("run_ids", expanding=True))


def run_counts(session: Session, run_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Per run: judgments by status, token/cost totals, provider calls and cache hits (one query)."""
    if not run_ids:
        return {}
    rows = session.execute(_RUN_COUNTS, {"run_ids": list(run_ids)}).all()
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


def run_outcome(counts: RunCounts) -> RunOutcome:
    """A finished run's outcome (``RunSummary.outcome``): 'failed' when no judgment is usable (none done, while
    something was planned), 'partial' when some are and some failed or could not be parsed, else 'ok'."""
    bad = counts.failed + counts.unparseable
    if counts.done == 0 and (bad or counts.cancelled):
        return "failed"
    return "partial" if bad else "ok"


def counted_runs(session: Session, runs: Sequence[Any], *, keep: bool = False) -> dict[str, dict[str, Any]]:
    """``run_counts`` of ``runs``. With ``keep`` (``DJ_REPORT_CACHE``), a finished run's counts are the ones kept on
    its current state (``report_cache.COUNTS_KEY``), and a finished run without them is counted and they are kept:
    only runs still running are counted over their judgments every time (the caller commits)."""
    ids = [r.id for r in runs]
    if not keep:
        return run_counts(session, ids)
    hits, states = report_cache.kept_counts(session, [r.id for r in runs if r.finished_at is not None])
    missing = [run_id for run_id in ids if run_id not in hits]
    out = {**run_counts(session, missing), **hits}
    for run in runs:
        if run.id in states and run.id not in hits:
            report_cache.store_counts(session, run.id, run.project_id, states[run.id], out[run.id])
    return out


def summarize_runs(session: Session, runs: Sequence[Run], *, keep_counts: bool = False) -> list[RunSummary]:
    """The runs' summaries; a run found settled gets its ``finished_at`` (the caller commits it). ``keep_counts``:
    finished runs' counts are kept per state of the run (:func:`counted_runs`)."""
    stats = counted_runs(session, runs, keep=keep_counts)
    generating = generation_counts(session, runs)
    in_batches = batch_counts(session, [r.id for r in runs if r.execution == "batch"])
    summaries = []
    for run in runs:
        summary = run_summary(run, stats[run.id], generating.get(run.id), in_batches.get(run.id))
        finishes = run.finished_at is None and summary.finished_at is not None
        if finishes and stamp_finished(session, run.id, summary.finished_at, run.data_version):
            set_committed_value(run, "finished_at", summary.finished_at)
        summaries.append(summary)
    return summaries


# GET /v1/runs/{id}, the status poll clients repeat: the run's columns a summary reads and its judgment counts in one
# round trip (a row per judgment status; one with a NULL status when the run has no judgment yet), without loading
# the ORM object - a third of the poll's database CPU went to Session.get's load and a second query
_RUN = Run.__table__.c
_POLL_COLUMNS = (
    _RUN.id,
    _RUN.data_version,
    _RUN.project_id,
    _RUN.name,
    _RUN.config,
    _RUN.n_items,
    _RUN.n_judgments,
    _RUN.budget_usd,
    _RUN.budget_exhausted_at,
    _RUN.created_at,
    _RUN.finished_at,
    _RUN.plan_open,
    _RUN.plan_state,
    _RUN.callback_url,
    _RUN.execution,
    _RUN.cancelled_at,
)
_POLL_COUNTS = (
    column("status", String),
    column("n", Integer),
    column("cost", Float),
    column("tokens_in", Integer),
    column("tokens_out", Integer),
    column("calls", Integer),
    column("n_cached", Integer),
)
_POLL_RUN = text(
    f"SELECT {', '.join('r.' + c.name for c in _POLL_COLUMNS)}, "
    "c.status, c.n, c.cost, c.tokens_in, c.tokens_out, c.calls, c.n_cached "
    "FROM runs r LEFT JOIN ("
    "SELECT status, COUNT(id) AS n, COALESCE(SUM(cost_usd), 0.0) AS cost, COALESCE(SUM(input_tokens), 0) AS tokens_in, "
    "COALESCE(SUM(output_tokens), 0) AS tokens_out, COALESCE(SUM(provider_calls), 0) AS calls, "
    "COALESCE(SUM(CASE WHEN cached THEN 1 ELSE 0 END), 0) AS n_cached "
    "FROM judgments WHERE run_id = :run_id GROUP BY status"
    ") c ON 1 = 1 WHERE r.id = :run_id"
).columns(*_POLL_COLUMNS, *_POLL_COUNTS)
# stamped only while no judgment of the run is pending or running at the UPDATE: a retry (or a monitor's new sample)
# committed after the summary counted must not leave a running run marked finished, since a finished run's report
# and counts are kept on the promise that every judgment is settled (review r51a); one seek in ix_judgments_run_status
_FINISH_RUN = (
    update(Run)
    .where(
        Run.id == bindparam("run_id"),
        Run.finished_at.is_(None),
        Run.data_version == bindparam("seen_version"),
        ~exists().where(Judgment.run_id == bindparam("run_id"), Judgment.status.in_(("pending", "running"))),
    )
    .values(finished_at=bindparam("finished_at"))
    .execution_options(synchronize_session=False)
)


def stamp_finished(session: Session, run_id: str, finished_at: Any, seen_version: Any) -> bool:
    """Stamp a run found settled as finished (:data:`_FINISH_RUN`) if its ``data_version`` is still the one read
    with the counts that found it settled (a retry bumps it, under the run's row lock); False when it was not
    stamped (then it is not finished)."""
    params = {"run_id": run_id, "finished_at": finished_at, "seen_version": seen_version}
    result = session.execute(_FINISH_RUN, params)
    return bool(getattr(result, "rowcount", 0))


_POLL_KEPT = report_cache.kept_counts_select(*_POLL_COLUMNS).where(_RUN.id == bindparam("run_id"))


class _RecentRuns:
    """At most ``limit`` run ids, the oldest forgotten first: what this process's polls have seen of runs."""

    def __init__(self, limit: int = 4096) -> None:
        self._ids: dict[str, None] = {}
        self._limit = limit
        self._lock = threading.Lock()

    def __contains__(self, run_id: object) -> bool:
        return run_id in self._ids

    def add(self, run_id: str) -> None:
        with self._lock:
            self._ids.pop(run_id, None)
            self._ids[run_id] = None
            while len(self._ids) > self._limit:
                del self._ids[next(iter(self._ids))]

    def discard(self, run_id: str) -> None:
        with self._lock:
            self._ids.pop(run_id, None)


# The runs this process has polled finished: only their poll reads the kept counts first. A run still running keeps
# its one-statement poll (issue 26's poll CPU), and a run named here that is running again is only a second, cheap
# read (the state decides what is served, never this).
FINISHED_POLLED = _RecentRuns()
# The runs this process has polled at all: a run's first poll here reads the kept counts first too, so a finished
# run is not counted over its judgments again after the API restarts (0.6 s at 1M judgments on SQLite, issue 39);
# a running run pays that one cheap read once per process.
POLLED = _RecentRuns()


def poll_run(
    session: Session, run_id: str, project_id: str | None = None, *, keep_counts: bool = False
) -> RunSummary | None:
    """The summary of one run, as ``summarize_runs`` gives it (and stamping ``finished_at`` the same way, the caller
    commits), or None when there is no such run or it belongs to another project than ``project_id``.
    ``keep_counts`` (``DJ_REPORT_CACHE``): a finished run's counts are read from what is kept on its state
    (``counted_runs``), the first time after it was seen finished counted and kept."""
    entry: dict[str, Any] | None = None
    state: str | None = None
    run: Any = None
    first_poll = run_id not in POLLED
    if keep_counts:
        POLLED.add(run_id)
    if keep_counts and (first_poll or run_id in FINISHED_POLLED):
        kept = session.execute(_POLL_KEPT, {"run_id": run_id}).one_or_none()
        if kept is None or (project_id is not None and kept.project_id != project_id):
            return None
        entry, state = report_cache.counts_on_state(kept)
        if state is None:  # running again
            FINISHED_POLLED.discard(run_id)
        if entry is not None:
            run = kept
            FINISHED_POLLED.add(run_id)  # a first poll that found it finished: the next polls read them first too
    if entry is None:
        run, entry = _poll_counted(session, run_id)
        if run is None or (project_id is not None and run.project_id != project_id):
            return None
        if keep_counts and run.finished_at is not None:
            if state is not None:  # read before these counts: a write in between is a state not matched again
                report_cache.store_counts(session, run_id, run.project_id, state, entry)
            FINISHED_POLLED.add(run_id)
    generation = generation_counts(session, [run]).get(run_id)  # only a run with systems asks
    in_batch = batch_counts(session, [run_id]).get(run_id) if run.execution == "batch" else None
    summary = run_summary(run, entry, generation, in_batch)
    if run.finished_at is None and summary.finished_at is not None:
        stamp_finished(session, run_id, summary.finished_at, run.data_version)
    return summary


def _poll_counted(session: Session, run_id: str) -> tuple[Any, dict[str, Any]]:
    """The run's poll columns and its counts, counted over its judgments (one statement); (None, {}) without it."""
    rows = session.execute(_POLL_RUN, {"run_id": run_id}).all()
    if not rows:
        return None, {}
    entry: dict[str, Any] = {"counts": {}, "cost": 0.0, "in": 0, "out": 0, "calls": 0, "cached": 0}
    for row in rows:
        if row.status is None:  # no judgment yet
            continue
        entry["counts"][row.status] = int(row.n)
        entry["cost"] += float(row.cost)
        entry["in"] += int(row.tokens_in)
        entry["out"] += int(row.tokens_out)
        entry["calls"] += int(row.calls)
        entry["cached"] += int(row.n_cached)
    return rows[0], entry


def run_summary(
    run: Any, entry: dict[str, Any], generation: GenerationCounts | None, in_batch: dict[str, int] | None
) -> RunSummary:
    """One run's summary from its row (a ``Run`` or a row with the same names), its ``run_counts`` entry, its
    generation progress (runs with systems) and its provider batch counts (batch runs). ``finished_at`` is the
    run's, or now when the run is settled and had none yet: the caller stores it."""
    counts = RunCounts(**entry["counts"])
    total = run.n_judgments or 1
    terminal = sum(entry["counts"].get(s, 0) for s in TERMINAL_STATUSES)
    # a run with systems is finished once every item's responses are settled and its judgments judged
    generated = generation is None or (generation.pending == 0 and generation.items_released >= run.n_items)
    generating_now = generation is not None and (generation.running or generation.total > generation.pending)
    # an adaptive run is finished when its planning is, not when its latest batch is
    settled = terminal >= run.n_judgments and not run.plan_open and generated
    if settled:
        status = "budget_exhausted" if run.budget_exhausted_at else "done"
    elif counts.running or terminal or generating_now:
        status = "running"
    else:
        status = "queued"
    config = run.config
    economy = adaptive_economy.economy(config, run.plan_state)
    message = adaptive_economy.message(economy)
    if run.budget_exhausted_at:
        spent = f"budget of ${run.budget_usd:.4f} reached: {counts.cancelled} judgments were not scheduled"
        message = spent if message is None else f"{spent}; {message}"
    if run.cancelled_at:
        stopped = f"cancelled: {counts.cancelled} judgments were not judged"
        message = stopped if message is None else f"{stopped}; {message}"
    finished_at = run.finished_at
    if settled and finished_at is None:
        finished_at = utcnow()
    progress = terminal / total
    if generation is not None and generation.total:
        # half for generating, half for judging what is planned so far
        progress = 0.5 * (generation.total - generation.pending) / generation.total + 0.5 * progress
    if run.plan_open or not generated:  # more judgments may come
        progress = min(progress, 0.99)
    return RunSummary(
        id=run.id,
        name=run.name,
        status=status,
        outcome=run_outcome(counts) if settled else None,
        created_at=run.created_at,
        finished_at=finished_at,
        rubrics=config["rubrics"],
        judges=config["judges"],
        mode=config["mode"],
        n_items=run.n_items,
        n_judgments=run.n_judgments,
        counts=counts,
        progress=round(progress, 4),
        cost_usd=round(entry["cost"], 6),
        input_tokens=entry["in"],
        output_tokens=entry["out"],
        provider_calls=entry["calls"],
        cached=entry["cached"],
        budget_usd=run.budget_usd,
        budget_exhausted=run.budget_exhausted_at is not None,
        message=message,
        economy=economy,
        generation=generation,
        callback_url=run.callback_url,
        execution=run.execution,
        batches=BatchCounts(**(in_batch or {"open": 0, "done": 0, "requests": 0}))
        if run.execution == "batch"
        else None,
    )


JUDGMENT_FILTERS = ("status", "system", "aspect", "item_id", "rubric_id", "judge", "mode")


def list_judgments(
    session: Session,
    run_id: str,
    offset: int,
    limit: int,
    filters: dict[str, str | None] | None = None,
    score_min: float | None = None,
    score_max: float | None = None,
    after: int | None = None,
) -> tuple[int, list[JudgmentOut], int | None]:
    """One page of the run's matching judgments in id order: the total that match, the page, and the cursor of the
    next page (the page's last id; None on the last page). With ``after`` (a cursor) the page is the rows with a
    larger id, a keyset page whose rows do not shift when others are written or deleted; else ``offset``."""
    conditions = judgment_conditions(run_id, filters, score_min, score_max)
    total = count_judgments(session, conditions)
    query = select(Judgment).where(*conditions).order_by(Judgment.id)
    query = query.where(Judgment.id > after) if after is not None else query.offset(offset)
    rows = list(session.scalars(query.limit(limit + 1)))
    more = len(rows) > limit
    rows = rows[:limit]
    return total, [judgment_out(j) for j in rows], (rows[-1].id if more and rows else None)


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
        details=j.details,
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


def get_items(
    session: Session,
    run_id: str,
    item_keys: Sequence[str] | None = None,
    *,
    offset: int = 0,
    limit: int | None = None,
) -> list[dict[str, Any]]:
    """The run's items (those of ``item_keys`` when given) in the order they were stored; ``offset`` / ``limit``: one
    page of them, read as such (a monitor's run holds every sampled response: review r56c)."""
    query = select(RunItem.payload).where(RunItem.run_id == run_id)
    if item_keys:
        query = query.where(RunItem.item_key.in_(list(item_keys)))
    query = query.order_by(RunItem.id).offset(offset)
    return list(session.scalars(query if limit is None else query.limit(limit)))


def item_references(session: Session, run_id: str) -> dict[str, str]:
    """The run's items' references (item key -> reference; items without one are left out), read out of the stored
    payloads by the database rather than loading every dialogue."""
    reference = RunItem.payload["reference"].as_string()
    rows = session.execute(select(RunItem.item_key, reference).where(RunItem.run_id == run_id, reference.is_not(None)))
    return {key: text for key, text in rows if text}


def run_item_keys(session: Session, run_id: str) -> set[str]:
    return set(session.scalars(select(RunItem.item_key).where(RunItem.run_id == run_id)))
