"""Run bundles: ``GET /v1/runs/{id}/export`` streams a whole run as JSON Lines (run, items, judgments, ratings, the
rubric snapshots and judge-cache entries it used); ``POST /v1/runs/import`` stores such a bundle as a run of the
caller's project (a new run id; the rows checked as a submitted run's are: judge_api/admission.py), so a run moves
between deployments. The format: ``judge_api/repository/retention.py``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from fastapi import APIRouter, BackgroundTasks, Depends, HTTPException, Request
from fastapi.responses import StreamingResponse
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from judge_api import sweeper
from judge_api.admission import admit_bundle, submission_slot
from judge_api.auth import Principal
from judge_api.config import Settings
from judge_api.db import session_scope
from judge_api.deps import app_settings, get_session, require, run_or_404, submit_limit
from judge_api.gcpause import call_paused
from judge_api.repository import retention
from judge_api.repository.projects import DEFAULT_PROJECT
from judge_api.rubrics import get_registry
from judge_api.submit_limit import SubmitRateLimit

router = APIRouter(tags=["runs"])


@router.get("/v1/runs/{run_id}/export")
def export_run(
    run_id: str,
    principal: Principal = Depends(require("read")),
    session: Session = Depends(get_session),
    settings: Settings = Depends(app_settings),
) -> StreamingResponse:
    run_or_404(session, run_id, principal)

    def lines() -> Iterator[bytes]:
        with session_scope() as reader:
            for line in retention.export_run(reader, run_id, shared_cache=settings.cache_shared):
                yield line.encode()

    return StreamingResponse(
        lines(),
        media_type="application/x-ndjson",
        headers={"Content-Disposition": f'attachment; filename="{run_id}.jsonl"'},
    )


@router.post("/v1/runs/import", status_code=201)
async def import_run(
    request: Request,
    background: BackgroundTasks,
    principal: Principal = Depends(require("submit")),
    settings: Settings = Depends(app_settings),
    rate_limit: SubmitRateLimit = Depends(submit_limit),
) -> dict[str, Any]:
    """The body: a bundle as exported (JSON Lines). It passes the checks a submitted run passes (the one gate of
    judge_api/admission.py: limits, rubrics, judges, responders, callback) and takes a slot of DJ_RUNS_PER_MINUTE
    (429 when none is left); 422 names the line and field at fault, and nothing is stored unless all of it is. The
    run gets a new id in the caller's project (``run_id``; the bundle's is ``source_run_id``). Unfinished judgments
    are queued here."""
    body = (await request.body()).decode("utf-8", errors="replace")
    try:
        # reading a large bundle takes seconds of CPU: in the thread pool, off the event loop (issue 42, finding 7)
        bundle = await run_in_threadpool(call_paused, retention.parse_bundle, body.splitlines())
    except retention.BundleError as exc:
        raise _bundle_error(exc) from None

    def admit_and_store() -> dict[str, Any]:
        with submission_slot(rate_limit, principal, settings):  # a refused import gives its slot back
            admit_bundle(bundle, settings, get_registry())
            with session_scope() as session:
                result = retention.import_run(
                    session,
                    bundle,
                    principal.project_id,
                    cache_scope_of(principal.project_id, settings),
                    cache_entries=settings.cache_shared,
                )
                sweeper.mark_run_enqueued(session, result["run_id"])
                return result

    try:
        result = await run_in_threadpool(call_paused, admit_and_store)
    except retention.BundleError as exc:
        raise _bundle_error(exc) from None
    if result["pending"]:
        background.add_task(sweeper.enqueue_run, settings, result["run_id"])
    return result


def cache_scope_of(project_id: str, settings: Settings) -> str | None:
    """Whose judge-cache keys the project's judgments carry (workers/judgecache.cache_scope: None for the shared
    cache and the default project's unscoped keys)."""
    return None if settings.cache_shared or project_id == DEFAULT_PROJECT else project_id


def _bundle_error(exc: retention.BundleError) -> HTTPException:
    return HTTPException(422, detail=[{"loc": ["body", exc.field], "msg": exc.message, "type": "value_error"}])
