"""The HTTP API. OpenAPI docs at /docs.

request -> validated model (schemas) -> plan (planning) -> stored rows in one transaction (repository) -> tasks
(queue) -> ... -> report (stats). Every 4xx names the field at fault; nothing is stored half-way.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import threading
import time
from collections import defaultdict, deque
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any, Literal

from fastapi import BackgroundTasks, Depends, FastAPI, HTTPException, Query, Request, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import ValidationError
from sqlalchemy import text
from sqlalchemy.orm import Session
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.responses import Response

from judge_api import __version__, queue, repository
from judge_api.auth import Principal, require
from judge_api.config import Settings, get_settings
from judge_api.db import get_engine, session_scope
from judge_api.deps import get_session
from judge_api.migrate import upgrade
from judge_api.planning import PlanError, plan_run
from judge_api.rubrics import get_registry
from judge_api.schemas import (
    HumanRatingsIn,
    JudgmentOut,
    Page,
    RubricOut,
    RunCreate,
    RunCreated,
    RunSummary,
)

log = logging.getLogger(__name__)


def field_error(loc: list[str | int], message: str, status_code: int = 422) -> HTTPException:
    return HTTPException(status_code, detail=[{"loc": ["body", *loc], "msg": message, "type": "value_error"}])


class BodySizeLimit(BaseHTTPMiddleware):
    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        limit = get_settings().max_body_bytes
        length = request.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > limit:
            return JSONResponse(
                {"detail": f"request body of {length} bytes exceeds the limit of {limit} bytes (DJ_MAX_BODY_BYTES)"},
                status_code=413,
            )
        return await call_next(request)


class SubmitRateLimit:
    """Runs per API key (or client address) per minute, sliding window, per API process."""

    def __init__(self) -> None:
        self._events: dict[str, deque[float]] = defaultdict(deque)
        self._lock = threading.Lock()

    def check(self, who: str, per_minute: int) -> None:
        if per_minute <= 0:
            return
        now = time.monotonic()
        with self._lock:
            events = self._events[who]
            while events and events[0] <= now - 60:
                events.popleft()
            if len(events) >= per_minute:
                retry = max(1, int(60 - (now - events[0])) + 1)
                raise HTTPException(
                    status.HTTP_429_TOO_MANY_REQUESTS,
                    f"more than {per_minute} runs per minute for this key; retry in {retry}s",
                    headers={"Retry-After": str(retry)},
                )
            events.append(now)


def _start_sweeper(settings: Settings) -> Any:
    if settings.resolved_redis_url() is None:
        return None
    try:
        from workers.runtime import redis_client  # optional: the API can run without the workers package
        from workers.sweeper import Sweeper
    except ImportError:
        return None
    sweeper = Sweeper(settings, redis_client(settings))
    sweeper.start()
    return sweeper


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        upgrade(settings.resolved_database_url())
        get_registry(refresh=True)
        sweeper = None
        try:
            sweeper = _start_sweeper(settings)
        except Exception as exc:
            log.warning("sweeper not started: %s", exc)
        yield
        if sweeper is not None:
            sweeper.stop_event.set()

    app = FastAPI(
        title="dialogue-judge",
        version=__version__,
        description="Scores chatbot responses for dialogue consistency with LLM judges.",
        lifespan=lifespan,
    )
    app.add_middleware(BodySizeLimit)
    submit_limit = SubmitRateLimit()

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [
            {"loc": list(e.get("loc", [])), "msg": e.get("msg", ""), "type": e.get("type", "")}
            for e in exc.errors()
        ]
        return JSONResponse({"detail": errors}, status_code=422)

    # -- health ---------------------------------------------------------------------------------------------

    @app.get("/healthz", tags=["health"])
    def healthz() -> dict[str, str]:
        return {"status": "ok", "version": __version__}

    @app.get("/readyz", tags=["health"])
    def readyz() -> JSONResponse:
        checks: dict[str, str] = {}
        try:
            with get_engine().connect() as connection:
                connection.execute(text("SELECT 1"))
            checks["database"] = "ok"
        except Exception as exc:
            checks["database"] = f"unreachable: {type(exc).__name__}"
        try:
            import redis

            url = settings.resolved_redis_url()
            if url is None:
                checks["redis"] = "not configured (REDIS_URL unset)"
            else:
                redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2).ping()
                checks["redis"] = "ok"
        except Exception as exc:
            checks["redis"] = f"unreachable: {type(exc).__name__}"
        ready = all(v == "ok" for v in checks.values())
        return JSONResponse({"ready": ready, "checks": checks}, status_code=200 if ready else 503)

    # -- rubrics --------------------------------------------------------------------------------------------

    @app.get("/v1/rubrics", response_model=list[RubricOut], tags=["rubrics"])
    def list_rubrics(_: Principal = Depends(require("read"))) -> list[RubricOut]:
        return [
            RubricOut(
                id=r.id, version=r.version, kind=r.kind, description=r.description, origin=r.origin,
                aspects=r.aspect_names, scale=r.scale, parser=r.parser,
                structured_output=r.structured_output is not None,
            )
            for r in get_registry().all()
        ]

    # -- runs -----------------------------------------------------------------------------------------------

    def _create(request: RunCreate, principal: Principal, background: BackgroundTasks,
                session: Session) -> RunCreated:
        submit_limit.check(principal.key_id or "anonymous", settings.runs_per_minute)
        if len(request.items) > settings.max_items_per_run:
            raise field_error(["items"], f"{len(request.items)} items exceed the limit of "
                                         f"{settings.max_items_per_run} per run (DJ_MAX_ITEMS)")
        for index, item in enumerate(request.items):
            if len(item.dialogue) > settings.max_turns_per_item:
                raise field_error(["items", index, "dialogue"],
                                  f"{len(item.dialogue)} turns exceed the limit of {settings.max_turns_per_item}")
            for turn_index, turn in enumerate(item.dialogue):
                if len(turn.text) > settings.max_chars_per_turn:
                    raise field_error(["items", index, "dialogue", turn_index, "text"],
                                      f"turn of {len(turn.text)} characters exceeds the limit of "
                                      f"{settings.max_chars_per_turn} (DJ_MAX_CHARS_PER_TURN)")
            for system, response in item.candidates.items():
                if len(response) > settings.max_chars_per_turn:
                    raise field_error(["items", index, "candidates", system],
                                      f"response of {len(response)} characters exceeds the limit of "
                                      f"{settings.max_chars_per_turn}")
        try:
            planned = plan_run(request, get_registry(), settings.max_judgments_per_run)
        except PlanError as exc:
            raise field_error(exc.field.replace("]", "").split("["), exc.message) from None
        try:
            run = repository.create_run(session, request, planned, principal.project_id)
            session.commit()
        except Exception:
            session.rollback()
            raise
        background.add_task(_enqueue_run, settings, run.id)
        return RunCreated(id=run.id, status="queued", n_items=run.n_items, n_judgments=run.n_judgments,
                          url=f"/v1/runs/{run.id}")

    @app.post("/v1/runs", status_code=202, response_model=RunCreated, tags=["runs"])
    def create_run(
        request: RunCreate,
        background: BackgroundTasks,
        principal: Principal = Depends(require("submit")),
        session: Session = Depends(get_session),
    ) -> RunCreated:
        return _create(request, principal, background, session)

    @app.post("/v1/runs/jsonl", status_code=202, response_model=RunCreated, tags=["runs"])
    async def create_run_jsonl(
        request: Request,
        background: BackgroundTasks,
        rubric: list[str] = Query(...),
        judge: list[str] = Query(...),
        mode: list[Literal["single", "pairwise"]] = Query(default=["single"]),
        name: str | None = None,
        baseline: str | None = None,
        orders: Literal["both", "random"] = "both",
        principal: Principal = Depends(require("submit")),
        session: Session = Depends(get_session),
    ) -> RunCreated:
        """Items as JSON Lines in the body (one item per line); the run's settings as query parameters."""
        body = (await request.body()).decode("utf-8", errors="replace")
        items: list[Any] = []
        for number, line in enumerate(body.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                items.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise field_error(["items", f"line {number}"], f"not valid JSON: {exc.msg}") from None
        try:
            run_request = RunCreate(
                name=name, items=items, rubrics=rubric, judges=judge, mode=mode,
                pairing="baseline" if baseline else "all", baseline=baseline, orders=orders,
            )
        except ValidationError as exc:
            raise HTTPException(422, detail=[
                {"loc": ["body", *e["loc"]], "msg": e["msg"], "type": e["type"]} for e in exc.errors()
            ]) from None
        return _create(run_request, principal, background, session)

    def _run_or_404(session: Session, run_id: str, principal: Principal) -> Any:
        run = repository.get_run(session, run_id, principal.project_id)
        if run is None:
            raise HTTPException(404, f"run {run_id!r} not found")
        return run

    @app.get("/v1/runs", response_model=Page[RunSummary], tags=["runs"])
    def list_runs(
        offset: int = Query(0, ge=0),
        limit: int = Query(50, ge=1, le=500),
        principal: Principal = Depends(require("read")),
        session: Session = Depends(get_session),
    ) -> Page[RunSummary]:
        total, runs = repository.list_runs(session, principal.project_id, offset, limit)
        summaries = repository.summarize_runs(session, runs)
        session.commit()
        return Page[RunSummary](total=total, offset=offset, limit=limit, items=summaries)

    @app.get("/v1/runs/{run_id}", response_model=RunSummary, tags=["runs"])
    def get_run(run_id: str, principal: Principal = Depends(require("read")),
                session: Session = Depends(get_session)) -> RunSummary:
        run = _run_or_404(session, run_id, principal)
        summary = repository.summarize_runs(session, [run])[0]
        session.commit()
        return summary

    @app.post("/v1/runs/{run_id}/retry", tags=["runs"])
    def retry_run(run_id: str, background: BackgroundTasks, principal: Principal = Depends(require("submit")),
                  session: Session = Depends(get_session)) -> dict[str, Any]:
        _run_or_404(session, run_id, principal)
        count = repository.retry_failed(session, run_id)
        session.commit()
        background.add_task(_enqueue_run, settings, run_id)
        return {"run_id": run_id, "requeued": count}

    @app.get("/v1/runs/{run_id}/judgments", response_model=Page[JudgmentOut], tags=["runs"])
    def list_judgments(
        run_id: str,
        offset: int = Query(0, ge=0),
        limit: int = Query(100, ge=1, le=1000),
        status_: str | None = Query(None, alias="status"),
        system: str | None = None,
        aspect: str | None = None,
        item_id: str | None = None,
        rubric_id: str | None = None,
        judge: str | None = None,
        mode: Literal["single", "pairwise"] | None = None,
        score_min: float | None = None,
        score_max: float | None = None,
        principal: Principal = Depends(require("read")),
        session: Session = Depends(get_session),
    ) -> Page[JudgmentOut]:
        _run_or_404(session, run_id, principal)
        filters = {"status": status_, "system": system, "aspect": aspect, "item_id": item_id,
                   "rubric_id": rubric_id, "judge": judge, "mode": mode}
        total, rows = repository.list_judgments(session, run_id, offset, limit, filters, score_min, score_max)
        return Page[JudgmentOut](total=total, offset=offset, limit=limit, items=rows)

    @app.get("/v1/runs/{run_id}/judgments.csv", tags=["runs"])
    def judgments_csv(run_id: str, principal: Principal = Depends(require("read")),
                      session: Session = Depends(get_session)) -> StreamingResponse:
        _run_or_404(session, run_id, principal)
        frame = repository.judgments_frame(session, run_id)

        def rows() -> Iterator[str]:
            buffer = io.StringIO()
            frame.to_csv(buffer, index=False, quoting=csv.QUOTE_MINIMAL)
            yield buffer.getvalue()

        return StreamingResponse(rows(), media_type="text/csv",
                                 headers={"Content-Disposition": f'attachment; filename="{run_id}-judgments.csv"'})

    @app.get("/v1/runs/{run_id}/items", tags=["runs"])
    def list_items(run_id: str, item_id: list[str] | None = Query(None), offset: int = Query(0, ge=0),
                   limit: int = Query(100, ge=1, le=1000), principal: Principal = Depends(require("read")),
                   session: Session = Depends(get_session)) -> dict[str, Any]:
        run = _run_or_404(session, run_id, principal)
        items = repository.get_items(session, run_id, item_id)
        return {"total": len(items) if item_id else run.n_items, "offset": offset, "limit": limit,
                "items": items[offset : offset + limit]}

    @app.get("/v1/runs/{run_id}/report", tags=["reports"])
    def report(run_id: str, n_boot: int = Query(1000, ge=0, le=20000), seed: int = 0,
               principal: Principal = Depends(require("read")),
               session: Session = Depends(get_session)) -> dict[str, Any]:
        _run_or_404(session, run_id, principal)
        from judge_api.stats import build_report

        judgments = repository.judgments_frame(session, run_id)
        ratings = repository.ratings_frame(session, run_id)
        result = build_report(judgments, ratings if len(ratings) else None, n_boot=n_boot, seed=seed)
        summary = repository.summarize_runs(session, [repository.get_run(session, run_id)])[0]
        return {"run": json.loads(summary.model_dump_json()), **result}

    @app.get("/v1/runs/{run_id}/agreement", tags=["reports"])
    def agreement(run_id: str, principal: Principal = Depends(require("read")),
                  session: Session = Depends(get_session)) -> dict[str, Any]:
        _run_or_404(session, run_id, principal)
        from judge_api.stats import build_report

        ratings = repository.ratings_frame(session, run_id)
        if not len(ratings):
            raise HTTPException(409, "this run has no human ratings yet: POST /v1/runs/{id}/human-ratings first")
        result = build_report(repository.judgments_frame(session, run_id), ratings, n_boot=200)
        return {"run_id": run_id, "n_ratings": len(ratings), "agreement": result.get("agreement")}

    @app.post("/v1/runs/{run_id}/human-ratings", status_code=201, tags=["reports"])
    def add_ratings(run_id: str, body: HumanRatingsIn, principal: Principal = Depends(require("submit")),
                    session: Session = Depends(get_session)) -> dict[str, Any]:
        _run_or_404(session, run_id, principal)
        known = repository.run_item_keys(session, run_id)
        for index, rating in enumerate(body.ratings):
            if rating.item_id not in known:
                raise field_error(["ratings", index, "item_id"], f"item {rating.item_id!r} is not in run {run_id}")
        created, updated = repository.upsert_ratings(session, run_id, body.ratings)
        session.commit()
        return {"run_id": run_id, "created": created, "updated": updated}

    @app.get("/v1/runs/{run_id}/human-ratings", tags=["reports"])
    def get_ratings(run_id: str, principal: Principal = Depends(require("read")),
                    session: Session = Depends(get_session)) -> dict[str, Any]:
        _run_or_404(session, run_id, principal)
        frame = repository.ratings_frame(session, run_id)
        records = json.loads(frame.to_json(orient="records"))
        return {"run_id": run_id, "total": len(records), "items": records}

    return app


def _enqueue_run(settings: Settings, run_id: str) -> None:
    try:
        with session_scope() as session:
            ids = repository.pending_judgment_ids(session, run_id)
            queue.enqueue(settings, ids)
            repository.mark_enqueued(session, ids)
    except Exception as exc:  # Redis down: the judgments stay pending and the sweeper sends them later
        log.warning("could not enqueue run %s now (%s); the sweeper will retry", run_id, exc)


app = create_app()
