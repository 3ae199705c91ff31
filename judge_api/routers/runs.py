"""Runs: submit (``POST /v1/runs``, ``POST /v1/runs/jsonl``), list, read one and retry its failed judgments.

request -> validated model (schemas) -> limits and storability checks -> plan (planning) -> stored rows in one
transaction (repository) -> tasks, published after the response (sweeper.enqueue_run). Nothing is stored half-way.

A submission with an ``Idempotency-Key`` header is answered from the key's record when the key was seen before (the
run it created, or 409 for another request); otherwise the key is stored in the run's transaction, and a concurrent
request that stored the same key first turns this one into a replay of its run (``judge_api/idempotency.py``).
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal

from fastapi import APIRouter, BackgroundTasks, Depends, Header, HTTPException, Query, Request, Response
from pydantic import ValidationError
from sqlalchemy import exc as sa_exc
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from judge_api import idempotency, repository, sweeper, tracing
from judge_api.admission import (
    admit_run,
    check_budget,
    check_run_limits,
    check_systems,
    plan_error,
    submission_slot,
)
from judge_api.auth import Principal
from judge_api.config import Settings
from judge_api.db import get_engine, session_factory, session_scope
from judge_api.deps import (
    MAX_OFFSET,
    app_settings,
    authorize,
    get_session,
    require,
    run_not_found,
    run_or_404,
    submit_limit,
)
from judge_api.errors import field_error
from judge_api.gcpause import call_paused, collector_paused
from judge_api.guards import JsonTooDeep, loads_json
from judge_api.models import utcnow
from judge_api.planning import PlanError, run_rubrics, with_placeholders
from judge_api.repository import batches, generations, retention
from judge_api.rubrics import get_registry
from judge_api.schemas import Page, RetryRequest, RunCreate, RunCreated, RunEstimate, RunSummary
from judge_api.submit_limit import SubmitRateLimit

router = APIRouter(tags=["runs"])

_known_projects: set[tuple[str, str]] = set()  # (database, project) known to exist


def ensure_project_row(project_id: str) -> None:
    """Create the project row in a transaction of its own, tolerating a concurrent creator.

    Two first submissions racing to insert the same project would otherwise make one of them fail on the primary
    key (a 500) - the submission transaction then finds the row and never inserts it.
    """
    known = (str(get_engine().url), project_id)
    if known in _known_projects:
        return
    try:
        with session_scope() as session:
            repository.ensure_project(session, project_id)
    except sa_exc.IntegrityError:
        pass  # created by a concurrent request: exactly what we wanted
    _known_projects.add(known)


IDEMPOTENCY_KEY = Header(
    None,
    alias=idempotency.HEADER,
    description=(
        "makes the submission safe to retry: the same key and body return the run the first request created "
        "(202, header Idempotent-Replayed: true), the same key with another body is 409. 1-255 letters, digits and "
        "- _ . : ~ + / = (a UUID); per project; remembered DJ_IDEMPOTENCY_TTL (24 h)."
    ),
)
REPLAYED_HEADER = "Idempotent-Replayed"


def parse_idempotency_key(raw: str | None) -> str | None:
    """The request's key (None: no header), or 422 naming the header and what is wrong with it."""
    try:
        return idempotency.parse_key(raw)
    except idempotency.KeyFormatError as exc:
        detail = [{"loc": ["header", idempotency.HEADER], "msg": f"{idempotency.HEADER} {exc}", "type": "value_error"}]
        raise HTTPException(422, detail=detail) from None


class Submission:
    """One submission's idempotency: its key (or None), the endpoint and the request's fingerprint."""

    def __init__(self, key: str | None, endpoint: str, request: RunCreate, project_id: str, ttl_s: float) -> None:
        self.key = key
        self.endpoint = endpoint
        self.fingerprint = idempotency.request_hash(request) if key else ""
        self.legacy_fingerprint = idempotency.legacy_request_hash(request) if key else ""
        self.project_id = project_id
        self.ttl_s = ttl_s

    def replay(self, session: Session, response: Response) -> RunCreated | None:
        """The answer of the request this key was first used for (None: a new key); 409 for another request."""
        if self.key is None:
            return None
        stored = repository.find_idempotency_key(session, self.project_id, self.key, self.ttl_s)
        if stored is None:
            return None
        try:
            run_id = idempotency.check_match(stored, self.key, self.endpoint, self.fingerprint, self.legacy_fingerprint)
        except idempotency.KeyConflict as exc:
            raise HTTPException(409, str(exc)) from None
        run = repository.get_run(session, run_id, self.project_id)
        if run is None:  # the key's row goes with its run (ON DELETE CASCADE); this is a moment's race at most
            return None
        response.headers[REPLAYED_HEADER] = "true"
        return created_of(run.id, run.n_items, run.n_judgments, run.config)

    def record(self, session: Session, run_id: str) -> None:
        if self.key is not None:
            repository.record_idempotency_key(
                session, self.project_id, self.key, self.endpoint, self.fingerprint, run_id, self.ttl_s
            )


_last_prune = 0.0
_prune_lock = threading.Lock()
PRUNE_EVERY_S = 600.0


def prune_expired_keys(ttl_s: float) -> None:
    """Forget expired idempotency keys, at most every PRUNE_EVERY_S per process (after a response, never in one)."""
    global _last_prune
    with _prune_lock:
        if time.monotonic() - _last_prune < PRUNE_EVERY_S:
            return
        _last_prune = time.monotonic()
    try:
        with session_scope() as session:
            repository.prune_idempotency_keys(session, ttl_s)
    except sa_exc.SQLAlchemyError:
        pass  # the next submission tries again; expired keys are ignored by lookups anyway


def _create(
    request: RunCreate,
    principal: Principal,
    background: BackgroundTasks,
    session: Session,
    settings: Settings,
    rate_limit: SubmitRateLimit,
    submission: Submission,
    response: Response,
) -> RunCreated:
    replayed = submission.replay(session, response)  # a repeat is answered before the rate limit: it costs nothing
    if replayed is not None:
        return replayed
    # a refused or failed submission gives its slot back
    with (
        submission_slot(rate_limit, principal, settings) as slot,
        collector_paused(),
        tracing.span("run.submit", project_id=principal.project_id) as current,
    ):
        created, stored = _create_reserved(request, principal, background, session, settings, submission, response)
        tracing.set_attribute(current, "run_id", created.id)
    if not stored:
        slot.give_back()  # another request with this key stored the run
    return created


def _create_reserved(
    request: RunCreate,
    principal: Principal,
    background: BackgroundTasks,
    session: Session,
    settings: Settings,
    submission: Submission,
    response: Response,
) -> tuple[RunCreated, bool]:
    """The created run and True, or (with an Idempotency-Key another request stored first) its run and False."""
    registry = get_registry()
    planned = admit_run(request, settings, registry)
    # a run with systems is validated and counted with a placeholder response of every system; its judgments are
    # planned item by item once the responses are generated (repository.generations.release_item)
    to_plan = with_placeholders(request) if request.systems else request
    ensure_project_row(principal.project_id)
    try:
        rubrics = run_rubrics(to_plan, registry)
        if request.systems:
            run = repository.create_run(session, request, [], principal.project_id, rubrics)
            generations.create_generations(session, run.id, request.systems, repository.item_pks_for(session, run.id))
        else:
            run = repository.create_run(session, request, planned, principal.project_id, rubrics)
        sweeper.mark_run_enqueued(session, run.id)
        submission.record(session, run.id)
        session.commit()
    except sa_exc.IntegrityError:
        session.rollback()  # nothing of this request is kept
        replayed = submission.replay(session, response)
        if replayed is None:
            raise
        return replayed, False
    except Exception:
        session.rollback()
        raise
    background.add_task(sweeper.enqueue_run, settings, run.id)
    if submission.key is not None:
        background.add_task(prune_expired_keys, settings.idempotency_ttl_s)
    return created_of(run.id, run.n_items, run.n_judgments, run.config), True


def created_of(run_id: str, n_items: int, n_judgments: int, config: dict[str, Any]) -> RunCreated:
    n_generations = n_items * len(config.get("systems") or {})
    return RunCreated(
        id=run_id,
        status="queued",
        n_items=n_items,
        n_judgments=n_judgments,
        url=f"/v1/runs/{run_id}",
        n_generations=n_generations,
    )


@router.post("/v1/runs", status_code=202, response_model=RunCreated)
def create_run(
    request: RunCreate,
    background: BackgroundTasks,
    response: Response,
    idempotency_key: str | None = IDEMPOTENCY_KEY,
    principal: Principal = Depends(require("submit")),
    session: Session = Depends(get_session),
    settings: Settings = Depends(app_settings),
    rate_limit: SubmitRateLimit = Depends(submit_limit),
) -> RunCreated:
    key = parse_idempotency_key(idempotency_key)
    submission = Submission(key, "/v1/runs", request, principal.project_id, settings.idempotency_ttl_s)
    return _create(request, principal, background, session, settings, rate_limit, submission, response)


@router.post("/v1/runs/estimate", response_model=RunEstimate)
def estimate_run(
    request: RunCreate,
    principal: Principal = Depends(require("submit")),
    settings: Settings = Depends(app_settings),
) -> RunEstimate:
    """What POST /v1/runs with this body would cost and take: planned the same way, nothing stored, nothing called
    (judge_api.estimate)."""
    from judge_api.estimate import estimate_run as estimate

    check_run_limits(request, settings)
    check_systems(request, settings)
    check_budget(request, settings)
    try:
        figures = estimate(request, get_registry(), settings, get_engine(), principal.project_id)
    except PlanError as exc:
        raise plan_error(exc) from None
    return RunEstimate.model_validate(figures)


@router.post("/v1/runs/jsonl", status_code=202, response_model=RunCreated)
async def create_run_jsonl(
    request: Request,
    background: BackgroundTasks,
    response: Response,
    rubric: list[str] = Query(...),
    judge: list[str] = Query(...),
    mode: list[Literal["single", "pairwise"]] = Query(default=["single"]),
    name: str | None = None,
    baseline: str | None = None,
    orders: Literal["both", "random"] = "both",
    system: list[str] = Query(
        default=[], description="systems under test to generate responses with: NAME=RESPONDER (docs/generation.md)"
    ),
    idempotency_key: str | None = IDEMPOTENCY_KEY,
    principal: Principal = Depends(require("submit")),
    session: Session = Depends(get_session),
    settings: Settings = Depends(app_settings),
    rate_limit: SubmitRateLimit = Depends(submit_limit),
) -> RunCreated:
    """Items as JSON Lines in the body (one item per line); the run's settings as query parameters."""
    body = await request.body()
    # parsing, planning and storing a large submission takes seconds of CPU: in the thread pool, so the event loop
    # keeps answering every other project's requests meanwhile (issue 42, finding 7)
    return await run_in_threadpool(
        call_paused,
        _create_from_jsonl,
        body,
        JsonlRunQuery(
            rubric=rubric,
            judge=judge,
            mode=mode,
            name=name,
            baseline=baseline,
            orders=orders,
            system=system,
            idempotency_key=idempotency_key,
        ),
        principal,
        background,
        response,
        session,
        settings,
        rate_limit,
    )


@dataclass(frozen=True)
class JsonlRunQuery:
    """The run's settings of ``POST /v1/runs/jsonl``, given as query parameters."""

    rubric: list[str]
    judge: list[str]
    mode: list[Literal["single", "pairwise"]]
    name: str | None
    baseline: str | None
    orders: Literal["both", "random"]
    system: list[str]
    idempotency_key: str | None


def _create_from_jsonl(
    raw_body: bytes,
    query: JsonlRunQuery,
    principal: Principal,
    background: BackgroundTasks,
    response: Response,
    session: Session,
    settings: Settings,
    rate_limit: SubmitRateLimit,
) -> RunCreated:
    systems: dict[str, str] = {}
    for index, entry in enumerate(query.system):
        system_name, sep, responder = entry.partition("=")
        if not sep or not system_name.strip() or not responder.strip() or system_name.strip() in systems:
            message = f"{entry!r}: write NAME=RESPONDER, each name once (docs/generation.md)"
            raise HTTPException(
                422, detail=[{"loc": ["query", "system", index], "msg": message, "type": "value_error"}]
            )
        systems[system_name.strip()] = responder.strip()
    body = raw_body.decode("utf-8", errors="replace")
    items: list[Any] = []
    for number, line in enumerate(body.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            items.append(loads_json(line))
        except json.JSONDecodeError as exc:
            raise field_error(["items", f"line {number}"], f"not valid JSON: {exc.msg}") from None
        except JsonTooDeep as exc:
            raise field_error(["items", f"line {number}"], str(exc)) from None
    try:
        run_request = RunCreate(
            name=query.name,
            items=items,
            rubrics=query.rubric,
            judges=query.judge,
            mode=query.mode,
            pairing="baseline" if query.baseline else "all",
            baseline=query.baseline,
            orders=query.orders,
            systems=systems or None,
        )
    except ValidationError as exc:
        raise HTTPException(
            422, detail=[{"loc": ["body", *e["loc"]], "msg": e["msg"], "type": e["type"]} for e in exc.errors()]
        ) from None
    key = parse_idempotency_key(query.idempotency_key)
    submission = Submission(key, "/v1/runs/jsonl", run_request, principal.project_id, settings.idempotency_ttl_s)
    return _create(run_request, principal, background, session, settings, rate_limit, submission, response)


@router.get("/v1/runs", response_model=Page[RunSummary])
def list_runs(
    offset: int = Query(0, ge=0, le=MAX_OFFSET),
    limit: int = Query(50, ge=1, le=500),
    principal: Principal = Depends(require("read")),
    session: Session = Depends(get_session),
    settings: Settings = Depends(app_settings),
) -> Page[RunSummary]:
    total, runs = repository.list_runs(session, principal.project_id, offset, limit)
    summaries = repository.summarize_runs(session, runs, keep_counts=settings.report_cache)
    session.commit()
    return Page[RunSummary](total=total, offset=offset, limit=limit, items=summaries)


@router.get("/v1/runs/{run_id}", response_model=RunSummary)
async def get_run(run_id: str, request: Request) -> Response:
    # the status poll, called over and over by waiting clients: one hop to the thread pool for the session, the key
    # check and the summary (declared as sync dependencies and a sync route they were five hops, about a third of
    # the request's CPU); what it answers, and when (401 / 403 / 404), is what require("read") and run_or_404 give.
    # The summary is serialized once here: returned as a model, FastAPI would dump it, validate the dump against
    # the response model and encode it again, for the very model it was built as (the schema stays RunSummary's).
    body = await run_in_threadpool(_poll_run, request, run_id)
    return Response(body, media_type="application/json")


def _poll_run(request: Request, run_id: str) -> str:
    with session_factory()() as session:
        # reads in autocommit: no BEGIN and COMMIT round trips around the poll's two statements; the finished_at
        # a settled run gets is one UPDATE, committed as it runs
        session.connection(execution_options={"isolation_level": "AUTOCOMMIT"})
        principal = authorize(request, session, "read")
        keep = app_settings(request).report_cache
        summary = repository.poll_run(session, run_id, principal.project_id, keep_counts=keep)
        if summary is None:
            raise run_not_found(run_id)
        return summary.model_dump_json()


@router.post("/v1/runs/{run_id}/retry")
def retry_run(
    run_id: str,
    background: BackgroundTasks,
    body: RetryRequest | None = None,
    principal: Principal = Depends(require("submit")),
    session: Session = Depends(get_session),
    settings: Settings = Depends(app_settings),
) -> dict[str, Any]:
    """Send the run's failed and cancelled judgments again (a batch run: in new provider batches); with
    ``{"unparseable": true}`` also those whose reply could not be parsed, past the judge cache (their new replies
    replace the cached ones). A cancelled run is no longer cancelled: the requests its open provider batches cancel
    come back to be judged, and those batches are polled at the next sweep."""
    run = run_or_404(session, run_id, principal)
    count = repository.retry_failed(session, run_id, unparseable=body is not None and body.unparseable)
    run.cancelled_at = None
    batches.poll_now(session, run_id)
    sweeper.mark_run_enqueued(session, run_id)
    session.commit()
    background.add_task(sweeper.enqueue_run, settings, run_id)
    return {"run_id": run_id, "requeued": count}


@router.post("/v1/runs/{run_id}/cancel")
def cancel_run(
    run_id: str, principal: Principal = Depends(require("submit")), session: Session = Depends(get_session)
) -> dict[str, Any]:
    """Stop a run: its pending judgments are cancelled and its open provider batches are cancelled at the provider
    (the next poll sends it). Requests a batch had already answered are kept (they are paid for); the rest of its
    judgments end ``cancelled``. Judgments in a real-time call finish. ``POST /v1/runs/{id}/retry`` resumes."""
    run = run_or_404(session, run_id, principal)
    run.cancelled_at = utcnow()
    cancelled = repository.cancel_pending(session, run_id, "run cancelled")
    asked = batches.open_batches(session, run_id)
    session.commit()
    return {"run_id": run_id, "cancelled": cancelled, "batches_cancelling": asked}


@router.delete("/v1/runs/{run_id}")
def delete_run(
    run_id: str, principal: Principal = Depends(require("submit")), session: Session = Depends(get_session)
) -> dict[str, Any]:
    """Delete the run with its items, judgments, ratings and what only it used (rubric snapshots, cache entries),
    all or nothing. The run's work stops at once: queued messages are skipped, claimed judgments not yet sent start
    no call, and a call in flight stores its reply nowhere (docs/operations.md). Scope: submit (the owning project's
    keys) or admin. A batch run with open provider batches is refused (409): cancel it first, so the provider
    stops what would otherwise still be billed."""
    run = run_or_404(session, run_id, principal)
    if run.monitor_id is not None:
        raise HTTPException(
            409, f"run {run_id!r} holds monitor {run.monitor_id!r}'s responses: delete the monitor instead"
        )
    retention.lock_run(session, run_id)  # a batch being opened now is waited for, then counted
    if batches.open_batches(session, run_id):
        session.rollback()
        raise HTTPException(
            409, f"run {run_id} has open provider batches: POST /v1/runs/{run_id}/cancel and wait until they end"
        )
    try:
        removed = retention.delete_run(session, run_id)
        session.commit()
    except Exception:
        session.rollback()
        raise
    return {"run_id": run_id, "deleted": removed}


@router.post("/v1/runs/prune")
def prune_runs(
    older_than: str = Query(..., description="age, e.g. 30d, 12h, 90m"),
    dry_run: bool = False,
    principal: Principal = Depends(require("submit")),
    session: Session = Depends(get_session),
) -> dict[str, Any]:
    """Delete the caller's project's runs created more than ``older_than`` ago (each run all or nothing). A run with
    open provider batches is skipped (``skipped`` says why), as a delete refuses it: its rows gone, nothing would
    poll or cancel a batch the provider keeps running and billing."""
    try:
        age = parse_age(older_than)
    except ValueError as exc:
        raise HTTPException(
            422, detail=[{"loc": ["query", "older_than"], "msg": str(exc), "type": "value_error"}]
        ) from None
    run_ids = retention.runs_older_than(session, utcnow() - age, principal.project_id)
    session.rollback()
    deleted: list[str] = []
    skipped: dict[str, str] = {}
    if not dry_run:
        for run_id in run_ids:
            retention.lock_run(session, run_id)
            if batches.open_batches(session, run_id):
                skipped[run_id] = f"open provider batches: POST /v1/runs/{run_id}/cancel and wait until they end"
                session.rollback()
                continue
            try:
                retention.delete_run(session, run_id)
                session.commit()
            except Exception:
                session.rollback()
                raise
            deleted.append(run_id)
    return {"older_than": older_than, "matched": run_ids, "deleted": deleted, "skipped": skipped, "dry_run": dry_run}


MAX_AGE_S = 36_500 * 86_400  # older_than: 100 years, far inside what a date can go back from today


def parse_age(text: str) -> timedelta:
    """``30d``, ``12h``, ``90m``, ``45s`` or ``2w`` as a duration."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
    value = text.strip().lower()
    if len(value) < 2 or value[-1] not in units or not value[:-1].isascii() or not value[:-1].isdigit():
        raise ValueError(f"{text!r} is not an age like 30d, 12h, 90m, 45s or 2w")
    digits = value[:-1].lstrip("0") or "0"
    # compared as text first: int() of thousands of digits is refused by Python, and a huge age overflows datetime
    if len(digits) > len(str(MAX_AGE_S)) or int(digits) * units[value[-1]] > MAX_AGE_S:
        raise ValueError(f"{text!r} is longer ago than the limit of {MAX_AGE_S // 86400}d (100 years)")
    return timedelta(seconds=int(digits) * units[value[-1]])
