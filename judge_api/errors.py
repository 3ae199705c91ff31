"""Error bodies and exception handlers: every 4xx names the field at fault (``loc``), and a database outage is a 503
the client may retry, never a 500."""

from __future__ import annotations

import logging
from contextvars import ContextVar
from typing import Any, cast

from fastapi import FastAPI, HTTPException, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from sqlalchemy import Engine, event
from sqlalchemy import exc as sa_exc
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

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


_request_commits: ContextVar[list[bool] | None] = ContextVar("dj_request_commits", default=None)
"""Per request: whether any of its transactions committed (a route may commit in several, e.g. a prune run by run)."""


def _note_commit(_connection: Any) -> None:
    commits = _request_commits.get()
    if commits is not None and not commits:
        commits.append(True)


class CommitTracker:
    """Gives each HTTP request the list its commits are noted in (``_note_commit``, a listener on every engine's
    commits), so that a 503 says "nothing was stored" only when nothing of the request was (review r55a)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        token = _request_commits.set([])  # a list: a route run on a thread mutates the same one
        try:
            await self.app(scope, receive, send)
        finally:
            _request_commits.reset(token)


async def database_unavailable(request: Request, exc: Exception) -> JSONResponse:
    # the connection dropped or the server is away: the request's open transaction was not committed; the client may
    # simply retry. A transaction of the request committed before (a prune, run by run) is kept: the answer says so
    log.warning("database unavailable during %s %s: %s", request.method, request.url.path, type(exc).__name__)
    if _request_commits.get():
        detail = (
            "the database became unavailable part-way through this request: what it had stored before is kept, "
            "the rest was not stored; check the resource and retry shortly"
        )
    else:
        detail = "the database is unavailable right now; nothing was stored, retry shortly"
    return JSONResponse({"detail": detail}, status_code=503, headers={"Retry-After": "2"})


SERVER_ENDED_TRANSACTION = frozenset({"25P03", "25P04"})
"""SQLSTATEs of a transaction the server ended (``idle_in_transaction_session_timeout``, ``transaction_timeout``):
nothing of it was committed. psycopg raises them as an ``InternalError``, which is no ``OperationalError`` (a
shutdown, 57P01-57P03, is one already)."""


async def server_ended_transaction(request: Request, exc: Exception) -> JSONResponse:
    # an InternalError is an outage when the server ended the transaction or the connection was lost with it (a 503
    # the client may retry); anything else is a bug, answered as before (a logged 500). Only InternalError has this
    # handler: a ProgrammingError raised after a streamed response started stays itself (review r55a)
    error = cast(sa_exc.DBAPIError, exc)
    if error.connection_invalidated or getattr(error.orig, "sqlstate", None) in SERVER_ENDED_TRANSACTION:
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
    app.add_exception_handler(sa_exc.InternalError, server_ended_transaction)
    if not event.contains(Engine, "commit", _note_commit):
        event.listen(Engine, "commit", _note_commit)
