"""Liveness and readiness: ``GET /healthz`` (the process answers) and ``GET /readyz`` (its database and Redis do),
which also tells what an operator wants to know next: workers alive (heartbeats), queue depth and how old the oldest
unfinished judgment is."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse
from sqlalchemy import text

from judge_api import __version__, operations
from judge_api.config import Settings
from judge_api.db import get_engine
from judge_api.deps import app_settings

router = APIRouter(tags=["health"])


@router.get("/healthz")
def healthz(settings: Settings = Depends(app_settings)) -> dict[str, str]:
    return {
        "status": "ok",
        "version": __version__,
        "auth": "on" if settings.auth_enabled else "off (DJ_AUTH=false): loopback clients only",
    }


@router.get("/readyz")
def readyz(settings: Settings = Depends(app_settings)) -> JSONResponse:
    checks: dict[str, str] = {}
    try:
        with get_engine().connect() as connection:
            connection.execute(text("SELECT 1"))
        checks["database"] = "ok"
    except Exception as exc:
        checks["database"] = f"unreachable: {type(exc).__name__}"
    body: dict[str, Any] = {}
    try:
        import redis

        url = settings.resolved_redis_url()
        if url is None:
            checks["redis"] = "not configured (REDIS_URL unset)"
        else:
            redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2).ping()
            checks["redis"] = "ok"
            broker = operations.broker_state(settings)
            body["queue_depth"] = broker["queue_depth"]
            body["workers"] = {"alive": len(broker["workers"]), "list": broker["workers"]}
    except Exception as exc:
        checks["redis"] = f"unreachable: {type(exc).__name__}"
    if checks["database"] == "ok":
        try:
            body.update(operations.backlog())
        except Exception as exc:
            checks["database"] = f"unreachable: {type(exc).__name__}"
    ready = all(v == "ok" for v in checks.values())
    if ready and body.get("pending") and not body.get("workers", {}).get("alive"):
        body["warning"] = "judgments are waiting and no worker is alive (no heartbeat in the last 30 s)"
    stalled = operations.otlp_warning(body)
    if stalled is not None:
        body["otlp_warning"] = stalled
    return JSONResponse({"ready": ready, "checks": checks, **body}, status_code=200 if ready else 503)
