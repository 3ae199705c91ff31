"""Error bodies and exception handlers: every 4xx names the field at fault (``loc``), and a database outage is a 503
the client may retry, never a 500."""

from __future__ import annotations

import logging
from typing import cast

from fastapi import FastAPI, HTTPException, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from sqlalchemy import exc as sa_exc
from starlette.exceptions import HTTPException as StarletteHTTPException

log = logging.getLogger(__name__)

# the driver lost the connection or the server is away: nothing was committed
MAX_JSON_DEPTH = 100  # levels of arrays and objects a request's JSON may nest (judge_api.guards.loads_json)
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


SERVER_ENDED_TRANSACTION = frozenset({"25P03", "25P04", "57P01", "57P02", "57P03"})
"""SQLSTATEs of a transaction the server ended or refused (``idle_in_transaction_session_timeout``,
``transaction_timeout``, an administrator's or a crash's shutdown, a server starting): nothing was committed. psycopg
raises the first two as an ``InternalError``, which is no ``OperationalError``."""


def _server_ended_transaction(exc: sa_exc.DBAPIError) -> bool:
    return bool(exc.connection_invalidated) or getattr(exc.orig, "sqlstate", None) in SERVER_ENDED_TRANSACTION


async def database_error(request: Request, exc: Exception) -> JSONResponse:
    # a database error of no outage class: an outage still when the server ended the transaction or the connection
    # was lost with it (a 503 the client may retry); anything else is a bug, answered as before (a logged 500)
    if isinstance(exc, sa_exc.DBAPIError) and _server_ended_transaction(exc):
        return await database_unavailable(request, exc)
    raise exc


async def nested_too_deeply(request: Request, exc: Exception) -> JSONResponse:
    # a body nested thousands of levels deep (e.g. 100,000 "[") exhausts the parser's recursion: whichever reader hit
    # it (a JSON Lines line, a bundle, a verdict file), nothing was stored and it is the request's fault, not a 500
    log.info("request nested too deeply: %s %s", request.method, request.url.path)
    message = f"the body is nested too deeply (more than {MAX_JSON_DEPTH} levels of JSON arrays and objects)"
    return JSONResponse({"detail": [{"loc": ["body"], "msg": message, "type": "value_error"}]}, status_code=400)


async def http_error(request: Request, exc: Exception) -> Response:
    # FastAPI answers a JSON body it could not parse with a bare 400 "There was an error parsing the body"; when the
    # parser gave up on the nesting, say so
    if isinstance(exc.__cause__, RecursionError):
        return await nested_too_deeply(request, exc.__cause__)
    return await http_exception_handler(request, cast(StarletteHTTPException, exc))


def install_exception_handlers(app: FastAPI) -> None:
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(RecursionError, nested_too_deeply)
    for outage in DATABASE_OUTAGES:
        app.add_exception_handler(outage, database_unavailable)
    app.add_exception_handler(sa_exc.DBAPIError, database_error)
