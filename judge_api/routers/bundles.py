"""Run bundles: ``GET /v1/runs/{id}/export`` streams a whole run as JSON Lines (run, items, judgments, ratings, the
rubric snapshots and judge-cache entries it used); ``POST /v1/runs/import`` stores such a bundle as a run of the
caller's project, so a run moves between deployments. The format: ``judge_api/repository/retention.py``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from fastapi import APIRouter, BackgroundTasks, Depends, HTTPException, Request
from fastapi.responses import StreamingResponse
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from judge_api import sweeper
from judge_api.auth import Principal
from judge_api.config import Settings
from judge_api.db import session_scope
from judge_api.deps import app_settings, get_session, require, run_or_404
from judge_api.gcpause import call_paused
from judge_api.repository import retention

router = APIRouter(tags=["runs"])


@router.get("/v1/runs/{run_id}/export")
def export_run(
    run_id: str, principal: Principal = Depends(require("read")), session: Session = Depends(get_session)
) -> StreamingResponse:
    run_or_404(session, run_id, principal)

    def lines() -> Iterator[bytes]:
        with session_scope() as reader:
            for line in retention.export_run(reader, run_id):
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
) -> dict[str, Any]:
    """The body: a bundle as exported (JSON Lines). 422 names the line and field at fault, 409 when the run id
    exists here already; nothing is stored unless all of it is. Unfinished judgments are queued here."""
    body = (await request.body()).decode("utf-8", errors="replace")
    try:
        # reading a large bundle takes seconds of CPU: in the thread pool, off the event loop (issue 42, finding 7)
        bundle = await run_in_threadpool(call_paused, retention.parse_bundle, body.splitlines())
    except retention.BundleError as exc:
        raise HTTPException(
            422, detail=[{"loc": ["body", exc.field], "msg": exc.message, "type": "value_error"}]
        ) from None

    def store() -> dict[str, Any]:
        with session_scope() as session:
            result = retention.import_run(session, bundle, principal.project_id, cache_entries=settings.cache_shared)
            sweeper.mark_run_enqueued(session, result["run_id"])
            return result

    try:
        result = await run_in_threadpool(call_paused, store)
    except retention.RunExists as exc:
        raise HTTPException(
            409, detail=[{"loc": ["body", exc.field], "msg": exc.message, "type": "conflict"}]
        ) from None
    except retention.BundleError as exc:
        raise HTTPException(
            422, detail=[{"loc": ["body", exc.field], "msg": exc.message, "type": "value_error"}]
        ) from None
    if result["pending"]:
        background.add_task(sweeper.enqueue_run, settings, result["run_id"])
    return result
