"""Error bodies and exception handlers: every 4xx names the field at fault (``loc``), and a database outage is a 503
the client may retry, never a 500."""

from __future__ import annotations

import logging
from typing import cast

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy import exc as sa_exc

log = logging.getLogger(__name__)

# the driver lost the connection or the server is away: nothing was committed
DATABASE_OUTAGES: tuple[type[Exception], ...] = (sa_exc.OperationalError, sa_exc.InterfaceError, sa_exc.TimeoutError)


def field_error(loc: list[str | int], message: str, status_code: int = 422) -> HTTPException:
    """An error in the request body at ``loc``, in the shape of FastAPI's own validation errors."""
    return HTTPException(status_code, detail=[{"loc": ["body", *loc], "msg": message, "type": "value_error"}])


async def validation_error(request: Request, exc: Exception) -> JSONResponse:
    """422 listing ``loc``/``msg``/``type`` of every problem (FastAPI's default also echoes the input back)."""
    problems = cast(RequestValidationError, exc).errors()  # registered for RequestValidationError only
    errors = [{"loc": list(e.get("loc", [])), "msg": e.get("msg", ""), "type": e.get("type", "")} for e in problems]
    return JSONResponse({"detail": errors}, status_code=422)


async def database_unavailable(request: Request, exc: Exception) -> JSONResponse:
    # the connection dropped or the server is away: nothing was committed; the client may simply retry
    log.warning("database unavailable during %s %s: %s", request.method, request.url.path, type(exc).__name__)
    return JSONResponse(
        {"detail": "the database is unavailable right now; nothing was stored, retry shortly"},
        status_code=503,
        headers={"Retry-After": "2"},
    )


def install_exception_handlers(app: FastAPI) -> None:
    app.add_exception_handler(RequestValidationError, validation_error)
    for outage in DATABASE_OUTAGES:
        app.add_exception_handler(outage, database_unavailable)
