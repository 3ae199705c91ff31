"""The HTTP API. OpenAPI docs at /docs.

request -> validated model (schemas) -> plan (planning) -> stored rows in one transaction (repository) -> tasks
(queue) -> ... -> report (stats). Every 4xx names the field at fault; nothing is stored half-way.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import math
import threading
import time
import uuid
from collections import defaultdict, deque
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, suppress
from typing import Any, Literal
from urllib.parse import parse_qsl

from fastapi import BackgroundTasks, Depends, FastAPI, HTTPException, Path, Query, Request, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ValidationError
from sqlalchemy import exc as sa_exc
from sqlalchemy import text, update
from sqlalchemy.orm import Session
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from judge_api import __version__, queue, repository
from judge_api.auth import AUTH_OFF_NOTICE, Principal, require
from judge_api.config import Settings, get_settings
from judge_api.db import get_engine, session_scope
from judge_api.deps import get_session
from judge_api.migrate import upgrade
from judge_api.models import Judgment, utcnow
from judge_api.planning import PlanError, plan_run
from judge_api.queue import redis_client
from judge_api.rubrics import get_registry
from judge_api.schemas import (
    HumanRatingsIn,
    JudgmentOut,
    Page,
    RubricOut,
    RubricVersionOut,
    RunCreate,
    RunCreated,
    RunSummary,
)
from judge_api.secrets import install_log_scrubber, known_secrets, scrub
from judge_api.sweeper import Sweeper

log = logging.getLogger(__name__)


def field_error(loc: list[str | int], message: str, status_code: int = 422) -> HTTPException:
    return HTTPException(status_code, detail=[{"loc": ["body", *loc], "msg": message, "type": "value_error"}])


RUBRIC_ID_PATH = Path(pattern=r"^[a-z0-9][a-z0-9_.-]{0,63}$", description="a rubric id, as GET /v1/rubrics lists")
RUBRIC_VERSION_PATH = Path(
    pattern=r"^[A-Za-z0-9_.-]{1,32}$", description="a rubric version (the rubric_version of a judgment)"
)
HUMAN_PREFIX = Query(
    None, max_length=100, description="only human raters whose id starts with this (MT-Bench: 'expert_')"
)
MAX_OFFSET = 1_000_000_000  # beyond any real table; larger values overflow SQLite's integers
MAX_SEED = 2**32 - 1


async def _send_json(
    send: Send, status_code: int, body: dict[str, Any], headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    payload = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status_code,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode()),
                *(headers or []),
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})


class BodySizeLimit:
    """413 for bodies over DJ_MAX_BODY_BYTES: by Content-Length up front, and by counting the bytes actually
    received (a chunked body has no Content-Length), so no route ever reads more than the limit."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = get_settings().max_body_bytes
        message = f"request body exceeds the limit of {limit} bytes (DJ_MAX_BODY_BYTES)"
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                if not value.isdigit():
                    await _send_json(send, 400, {"detail": "the Content-Length header is not a number"})
                    return
                if int(value) > limit:
                    await _send_json(
                        send,
                        413,
                        {
                            "detail": f"request body of {int(value)} bytes exceeds the "
                            f"limit of {limit} bytes (DJ_MAX_BODY_BYTES)"
                        },
                    )
                    return
        received = 0

        async def limited_receive() -> Message:
            nonlocal received
            event = await receive()
            if event["type"] == "http.request":
                received += len(event.get("body", b""))
                if received > limit:
                    raise HTTPException(413, message)
            return event

        await self.app(scope, limited_receive, send)


class InputGuard:
    """422 for a NUL character in the path or a query parameter (databases cannot store or compare it)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            problem: list[str | int] | None = None
            if "\x00" in scope.get("path", ""):
                problem = ["path"]
            else:
                raw = scope.get("query_string", b"").decode("latin-1")
                if "%00" in raw or "\x00" in raw:
                    pairs = parse_qsl(raw, keep_blank_values=True, encoding="utf-8", errors="replace")
                    for name, value in pairs:
                        if "\x00" in name or "\x00" in value:
                            problem = ["query", name.replace("\x00", "\\u0000")]
                            break
            if problem is not None:
                error = {
                    "loc": problem,
                    "msg": "contains a NUL character (\\u0000), which is not allowed",
                    "type": "value_error",
                }
                await _send_json(send, 422, {"detail": [error]})
                return
        await self.app(scope, receive, send)


def _value_problem(value: Any) -> str | None:
    if isinstance(value, str):
        if "\x00" in value:
            return "contains a NUL character (\\u0000), which cannot be stored"
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return "contains an unpaired surrogate (not valid Unicode text)"
    elif isinstance(value, float) and not math.isfinite(value):
        return "must be a finite number (NaN and Infinity cannot be stored)"
    return None


def _find_unstorable(value: Any, loc: list[str | int]) -> tuple[list[str | int], str] | None:
    problem = _value_problem(value)
    if problem:
        return loc, problem
    if isinstance(value, dict):
        for key, child in value.items():
            key_problem = _value_problem(key)
            if key_problem:
                return [*loc, str(key).replace("\x00", "\\u0000")], f"key {key_problem}"
            found = _find_unstorable(child, [*loc, key])
            if found:
                return found
    elif isinstance(value, (list, tuple)):
        for index, child in enumerate(value):
            found = _find_unstorable(child, [*loc, index])
            if found:
                return found
    return None


def check_storable(model: BaseModel) -> None:
    """422 naming the field when a value cannot be stored as sent (NUL, lone surrogate, NaN / Infinity).

    One JSON encoding of the whole body is the fast path; only a body that fails it is walked field by field.
    """
    data = model.model_dump(mode="python")
    try:
        encoded = json.dumps(data, ensure_ascii=False, allow_nan=False, default=str)
        encoded.encode("utf-8")
        if "\\u0000" not in encoded:
            return
    except (ValueError, UnicodeEncodeError):
        pass
    found = _find_unstorable(data, [])
    if found:
        raise field_error(found[0], found[1])


class SubmitRateLimit:
    """Runs per API key (or client address) per minute, sliding window.

    Shared by every API process through Redis when REDIS_URL is set (compose runs several), else per
    process. A slot is reserved when a submission starts and given back if the submission is rejected, so only
    stored runs count.
    """

    _SCRIPT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local window = tonumber(ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then
  local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  return tostring(tonumber(oldest[2]) + window - now)
end
redis.call('ZADD', KEYS[1], now, ARGV[3])
redis.call('EXPIRE', KEYS[1], math.ceil(window) + 1)
return '0'
"""
    WINDOW_S = 60.0

    def __init__(self, redis_url: str | None = None) -> None:
        self._events: dict[str, deque[tuple[float, str]]] = defaultdict(deque)
        self._lock = threading.Lock()
        self._redis: Any = None
        self._script: Any = None
        if redis_url:
            try:
                import redis

                self._redis = redis.Redis.from_url(redis_url, socket_timeout=2, socket_connect_timeout=2)
                self._script = self._redis.register_script(self._SCRIPT)
            except Exception as exc:  # the redis package is optional for the API
                log.warning("submit rate limit is per process: %s", exc)
                self._redis = None

    @staticmethod
    def _too_many(per_minute: int, retry_s: float) -> HTTPException:
        retry = max(1, math.ceil(retry_s))
        return HTTPException(
            status.HTTP_429_TOO_MANY_REQUESTS,
            f"more than {per_minute} runs per minute for this key (DJ_RUNS_PER_MINUTE); retry in {retry}s",
            headers={"Retry-After": str(retry)},
        )

    def reserve(self, who: str, per_minute: int) -> str | None:
        """Take one slot for ``who`` or raise 429 with Retry-After; returns a token for :meth:`release`."""
        if per_minute <= 0:
            return None
        token = uuid.uuid4().hex
        if self._redis is not None:
            try:
                wait = float(self._script(keys=[f"dj:submit:{who}"], args=[self.WINDOW_S, per_minute, token]))
            except Exception as exc:  # Redis down: fall back to this process's window
                log.warning("submit rate limit falls back to this process (%s)", type(exc).__name__)
            else:
                if wait > 0:
                    raise self._too_many(per_minute, wait)
                return "r:" + token
        now = time.monotonic()
        with self._lock:
            events = self._events[who]
            while events and events[0][0] <= now - self.WINDOW_S:
                events.popleft()
            if len(events) >= per_minute:
                raise self._too_many(per_minute, self.WINDOW_S - (now - events[0][0]))
            events.append((now, token))
        return "l:" + token

    def release(self, who: str, reservation: str | None) -> None:
        if reservation is None:
            return
        kind, token = reservation[:2], reservation[2:]
        if kind == "r:":
            with suppress(Exception):
                self._redis.zrem(f"dj:submit:{who}", token)
            return
        with self._lock:
            events = self._events.get(who)
            if events:
                for entry in list(events):
                    if entry[1] == token:
                        events.remove(entry)
                        break

    def check(self, who: str, per_minute: int) -> None:
        """Reserve without giving back (kept for callers of the old interface)."""
        self.reserve(who, per_minute)


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


def scrub_judgment(judgment: JudgmentOut) -> JudgmentOut:
    """No provider key leaves through a judgment, whatever a judge echoed (workers already scrub on write)."""
    if not known_secrets():
        return judgment
    return judgment.model_copy(
        update={
            "error": scrub(judgment.error),
            "raw_output": scrub(judgment.raw_output),
            "explanation": scrub(judgment.explanation),
        }
    )


def _start_sweeper(settings: Settings) -> Sweeper | None:
    """The API's own sweeper re-sends judgments whose publishing failed, also when no worker is up yet."""
    if settings.resolved_redis_url() is None:
        return None
    sweeper = Sweeper(settings, redis_client(settings))
    sweeper.start()
    return sweeper


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()
    install_log_scrubber()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if not settings.auth_enabled:
            log.warning("%s; set DJ_AUTH=true to require API keys", AUTH_OFF_NOTICE)
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
    app.add_middleware(InputGuard)
    app.add_middleware(BodySizeLimit)
    submit_limit = SubmitRateLimit(settings.resolved_redis_url())

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [
            {"loc": list(e.get("loc", [])), "msg": e.get("msg", ""), "type": e.get("type", "")} for e in exc.errors()
        ]
        return JSONResponse({"detail": errors}, status_code=422)

    @app.exception_handler(sa_exc.OperationalError)
    @app.exception_handler(sa_exc.InterfaceError)
    @app.exception_handler(sa_exc.TimeoutError)
    async def _database_unavailable(request: Request, exc: Exception) -> JSONResponse:
        # the connection dropped or the server is away: nothing was committed; the client may simply retry
        log.warning("database unavailable during %s %s: %s", request.method, request.url.path, type(exc).__name__)
        return JSONResponse(
            {"detail": "the database is unavailable right now; nothing was stored, retry shortly"},
            status_code=503,
            headers={"Retry-After": "2"},
        )

    # -- health ---------------------------------------------------------------------------------------------

    @app.get("/healthz", tags=["health"])
    def healthz() -> dict[str, str]:
        return {
            "status": "ok",
            "version": __version__,
            "auth": "on" if settings.auth_enabled else "off (DJ_AUTH=false): loopback clients only",
        }

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
                id=r.id,
                version=r.version,
                kind=r.kind,
                description=r.description,
                origin=r.origin,
                aspects=r.aspect_names,
                scale=r.scale,
                parser=r.parser,
                structured_output=r.structured_output is not None,
            )
            for r in get_registry().all()
        ]

    @app.get("/v1/rubrics/{rubric_id}/versions", response_model=list[RubricVersionOut], tags=["rubrics"])
    def rubric_versions(
        rubric_id: str = RUBRIC_ID_PATH,
        _: Principal = Depends(require("read")),
        session: Session = Depends(get_session),
    ) -> list[RubricVersionOut]:
        """Every version of a rubric: the stored ones (runs were planned with them, oldest first) and the folders'
        current one."""
        registry = get_registry()
        current = registry.get(rubric_id) if rubric_id in registry else None
        versions = [
            RubricVersionOut(
                id=rubric_id,
                version=snapshot.version,
                current=current is not None and current.version == snapshot.version,
                stored_at=snapshot.created_at,
                content=snapshot.content,
            )
            for snapshot in repository.rubric_versions(session, rubric_id)
        ]
        if current is not None and not any(v.current for v in versions):
            versions.append(
                RubricVersionOut(
                    id=rubric_id,
                    version=current.version,
                    current=True,
                    stored_at=None,
                    content=repository.rubric_content(current),
                )
            )
        if not versions:
            raise HTTPException(404, f"rubric {rubric_id!r} not found (GET /v1/rubrics lists them)")
        return versions

    @app.get("/v1/rubrics/{rubric_id}/versions/{version}", response_model=RubricVersionOut, tags=["rubrics"])
    def rubric_version(
        rubric_id: str = RUBRIC_ID_PATH,
        version: str = RUBRIC_VERSION_PATH,
        principal: Principal = Depends(require("read")),
        session: Session = Depends(get_session),
    ) -> RubricVersionOut:
        """One version of a rubric, e.g. the ``rubric_version`` of a judgment: the prompt it was asked with."""
        for found in rubric_versions(rubric_id, principal, session):
            if found.version == version:
                return found
        raise HTTPException(404, f"rubric {rubric_id!r} has no version {version!r}")

    # -- runs -----------------------------------------------------------------------------------------------

    def _create(request: RunCreate, principal: Principal, background: BackgroundTasks, session: Session) -> RunCreated:
        who = principal.key_id or "anonymous"
        reservation = submit_limit.reserve(who, settings.runs_per_minute)
        try:
            return _create_reserved(request, principal, background, session)
        except BaseException:
            submit_limit.release(who, reservation)  # a rejected or failed submission does not count
            raise

    def _create_reserved(
        request: RunCreate, principal: Principal, background: BackgroundTasks, session: Session
    ) -> RunCreated:
        if len(request.items) > settings.max_items_per_run:
            raise field_error(
                ["items"],
                f"{len(request.items)} items exceed the limit of {settings.max_items_per_run} per run (DJ_MAX_ITEMS)",
            )
        for index, item in enumerate(request.items):
            if len(item.dialogue) > settings.max_turns_per_item:
                raise field_error(
                    ["items", index, "dialogue"],
                    f"{len(item.dialogue)} turns exceed the limit of {settings.max_turns_per_item}",
                )
            for turn_index, turn in enumerate(item.dialogue):
                if len(turn.text) > settings.max_chars_per_turn:
                    raise field_error(
                        ["items", index, "dialogue", turn_index, "text"],
                        f"turn of {len(turn.text)} characters exceeds the limit of "
                        f"{settings.max_chars_per_turn} (DJ_MAX_CHARS_PER_TURN)",
                    )
            for system, response in item.candidates.items():
                if len(response) > settings.max_chars_per_turn:
                    raise field_error(
                        ["items", index, "candidates", system],
                        f"response of {len(response)} characters exceeds the limit of "
                        f"{settings.max_chars_per_turn} (DJ_MAX_CHARS_PER_TURN)",
                    )
            if item.persona is not None:
                for side in ("user", "bot"):
                    for line_index, line in enumerate(getattr(item.persona, side)):
                        if len(line) > settings.max_chars_per_turn:
                            raise field_error(
                                ["items", index, "persona", side, line_index],
                                f"persona line of {len(line)} characters exceeds the limit of "
                                f"{settings.max_chars_per_turn} (DJ_MAX_CHARS_PER_TURN)",
                            )
        check_storable(request)
        registry = get_registry()
        try:
            planned = plan_run(request, registry, settings.max_judgments_per_run)
        except PlanError as exc:
            parts = exc.field.replace("]", "").split("[")
            loc: list[str | int] = [int(p) if p.isdigit() else p for p in parts]
            raise field_error(loc, exc.message) from None
        ensure_project_row(principal.project_id)
        try:
            run = repository.create_run(
                session, request, planned, principal.project_id, [registry.get(r) for r in sorted(set(request.rubrics))]
            )
            mark_run_enqueued(session, run.id)
            session.commit()
        except Exception:
            session.rollback()
            raise
        background.add_task(_enqueue_run, settings, run.id)
        return RunCreated(
            id=run.id, status="queued", n_items=run.n_items, n_judgments=run.n_judgments, url=f"/v1/runs/{run.id}"
        )

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
                name=name,
                items=items,
                rubrics=rubric,
                judges=judge,
                mode=mode,
                pairing="baseline" if baseline else "all",
                baseline=baseline,
                orders=orders,
            )
        except ValidationError as exc:
            raise HTTPException(
                422, detail=[{"loc": ["body", *e["loc"]], "msg": e["msg"], "type": e["type"]} for e in exc.errors()]
            ) from None
        return _create(run_request, principal, background, session)

    def _run_or_404(session: Session, run_id: str, principal: Principal) -> Any:
        run = repository.get_run(session, run_id, principal.project_id)
        if run is None:
            raise HTTPException(404, f"run {run_id!r} not found")
        return run

    @app.get("/v1/runs", response_model=Page[RunSummary], tags=["runs"])
    def list_runs(
        offset: int = Query(0, ge=0, le=MAX_OFFSET),
        limit: int = Query(50, ge=1, le=500),
        principal: Principal = Depends(require("read")),
        session: Session = Depends(get_session),
    ) -> Page[RunSummary]:
        total, runs = repository.list_runs(session, principal.project_id, offset, limit)
        summaries = repository.summarize_runs(session, runs)
        session.commit()
        return Page[RunSummary](total=total, offset=offset, limit=limit, items=summaries)

    @app.get("/v1/runs/{run_id}", response_model=RunSummary, tags=["runs"])
    def get_run(
        run_id: str, principal: Principal = Depends(require("read")), session: Session = Depends(get_session)
    ) -> RunSummary:
        run = _run_or_404(session, run_id, principal)
        summary = repository.summarize_runs(session, [run])[0]
        session.commit()
        return summary

    @app.post("/v1/runs/{run_id}/retry", tags=["runs"])
    def retry_run(
        run_id: str,
        background: BackgroundTasks,
        principal: Principal = Depends(require("submit")),
        session: Session = Depends(get_session),
    ) -> dict[str, Any]:
        _run_or_404(session, run_id, principal)
        count = repository.retry_failed(session, run_id)
        mark_run_enqueued(session, run_id)
        session.commit()
        background.add_task(_enqueue_run, settings, run_id)
        return {"run_id": run_id, "requeued": count}

    @app.get("/v1/runs/{run_id}/judgments", response_model=Page[JudgmentOut], tags=["runs"])
    def list_judgments(
        run_id: str,
        offset: int = Query(0, ge=0, le=MAX_OFFSET),
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
        for name, bound in (("score_min", score_min), ("score_max", score_max)):
            if bound is not None and not math.isfinite(bound):
                raise HTTPException(
                    422, detail=[{"loc": ["query", name], "msg": "must be a finite number", "type": "value_error"}]
                )
        filters = {
            "status": status_,
            "system": system,
            "aspect": aspect,
            "item_id": item_id,
            "rubric_id": rubric_id,
            "judge": judge,
            "mode": mode,
        }
        total, rows = repository.list_judgments(session, run_id, offset, limit, filters, score_min, score_max)
        items = [scrub_judgment(j) for j in rows]
        return Page[JudgmentOut](total=total, offset=offset, limit=limit, items=items)

    @app.get("/v1/runs/{run_id}/judgments.csv", tags=["runs"])
    def judgments_csv(
        run_id: str, principal: Principal = Depends(require("read")), session: Session = Depends(get_session)
    ) -> StreamingResponse:
        _run_or_404(session, run_id, principal)
        frame = repository.judgments_frame(session, run_id)

        def rows() -> Iterator[str]:
            buffer = io.StringIO()
            frame.to_csv(buffer, index=False, quoting=csv.QUOTE_MINIMAL)
            yield buffer.getvalue()

        return StreamingResponse(
            rows(),
            media_type="text/csv",
            headers={"Content-Disposition": f'attachment; filename="{run_id}-judgments.csv"'},
        )

    @app.get("/v1/runs/{run_id}/items", tags=["runs"])
    def list_items(
        run_id: str,
        item_id: list[str] | None = Query(None),
        offset: int = Query(0, ge=0, le=MAX_OFFSET),
        limit: int = Query(100, ge=1, le=1000),
        principal: Principal = Depends(require("read")),
        session: Session = Depends(get_session),
    ) -> dict[str, Any]:
        run = _run_or_404(session, run_id, principal)
        items = repository.get_items(session, run_id, item_id)
        return {
            "total": len(items) if item_id else run.n_items,
            "offset": offset,
            "limit": limit,
            "items": items[offset : offset + limit],
        }

    @app.get("/v1/runs/{run_id}/report", tags=["reports"])
    def report(
        run_id: str,
        n_boot: int = Query(1000, ge=0, le=20000),
        seed: int = Query(0, ge=0, le=MAX_SEED),
        human_prefix: str | None = HUMAN_PREFIX,
        principal: Principal = Depends(require("read")),
        session: Session = Depends(get_session),
    ) -> dict[str, Any]:
        run = _run_or_404(session, run_id, principal)
        from judge_api.stats.report import build_report

        judgments = repository.judgments_frame(session, run_id)
        ratings = repository.ratings_frame(session, run_id)
        result = build_report(
            judgments, ratings if len(ratings) else None, n_boot=n_boot, seed=seed, human_prefix=human_prefix
        )
        summary = repository.summarize_runs(session, [run])[0]
        return {"run": json.loads(summary.model_dump_json()), **result}

    @app.get("/v1/runs/{run_id}/agreement", tags=["reports"])
    def agreement(
        run_id: str,
        human_prefix: str | None = HUMAN_PREFIX,
        principal: Principal = Depends(require("read")),
        session: Session = Depends(get_session),
    ) -> dict[str, Any]:
        _run_or_404(session, run_id, principal)
        from judge_api.stats.report import build_report

        ratings = repository.ratings_frame(session, run_id)
        if not len(ratings):
            raise HTTPException(409, "this run has no human ratings yet: POST /v1/runs/{id}/human-ratings first")
        result = build_report(
            repository.judgments_frame(session, run_id), ratings, n_boot=200, human_prefix=human_prefix
        )
        return {"run_id": run_id, "n_ratings": len(ratings), "agreement": result.get("agreement")}

    @app.post("/v1/runs/{run_id}/human-ratings", status_code=201, tags=["reports"])
    def add_ratings(
        run_id: str,
        body: HumanRatingsIn,
        principal: Principal = Depends(require("submit")),
        session: Session = Depends(get_session),
    ) -> dict[str, Any]:
        _run_or_404(session, run_id, principal)
        known = repository.run_item_keys(session, run_id)
        for index, rating in enumerate(body.ratings):
            if rating.item_id not in known:
                raise field_error(["ratings", index, "item_id"], f"item {rating.item_id!r} is not in run {run_id}")
        check_storable(body)
        try:
            created, updated = repository.upsert_ratings(session, run_id, body.ratings)
            session.commit()
        except sa_exc.IntegrityError:
            session.rollback()  # a concurrent request stored the same ratings first: nothing of ours was kept
            raise HTTPException(
                409, "these ratings were written concurrently by another request; nothing was stored, send them again"
            ) from None
        return {"run_id": run_id, "created": created, "updated": updated}

    @app.get("/v1/runs/{run_id}/human-ratings", tags=["reports"])
    def get_ratings(
        run_id: str, principal: Principal = Depends(require("read")), session: Session = Depends(get_session)
    ) -> dict[str, Any]:
        _run_or_404(session, run_id, principal)
        frame = repository.ratings_frame(session, run_id)
        records = json.loads(frame.to_json(orient="records"))
        return {"run_id": run_id, "total": len(records), "items": records}

    return app


def mark_run_enqueued(session: Session, run_id: str) -> None:
    """Stamp the run's pending judgments as enqueued, in the transaction that stores (or retries) them.

    A pending judgment with no ``enqueued_at`` is stale to the sweepers at once, so without the stamp a sweep that
    lands while :func:`_enqueue_run` is still publishing re-sends the whole run (10,000 duplicate tasks for a
    10,000-judgment run in the benchmark). If the API dies before publishing, the sweepers send the run after
    DJ_REQUEUE_AFTER; if publishing fails, :func:`_enqueue_run` clears the stamp so they send it at their next round.
    """
    session.execute(
        update(Judgment).where(Judgment.run_id == run_id, Judgment.status == "pending").values(enqueued_at=utcnow())
    )


def _enqueue_run(settings: Settings, run_id: str) -> None:
    ids: list[int] = []
    try:
        with session_scope() as session:
            ids = repository.pending_judgment_ids(session, run_id)
        queue.enqueue(settings, ids)
    except Exception as exc:  # Redis down: the judgments stay pending and the sweeper sends them later
        log.warning("could not enqueue run %s now (%s); the sweeper will retry", run_id, exc)
        with suppress(Exception), session_scope() as session:
            session.execute(
                update(Judgment).where(Judgment.run_id == run_id, Judgment.status == "pending").values(enqueued_at=None)
            )


app = create_app()
