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
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from judge_api.dberrors import is_outage

log = logging.getLogger(__name__)

MAX_JSON_DEPTH = 100  # levels of arrays and objects a request's JSON may nest (judge_api.guards.loads_json)


def field_error(loc: list[str | int], message: str, status_code: int = 422) -> HTTPException:
    """An error in the request body at ``loc``, in the shape of FastAPI's own validation errors."""
    return HTTPException(status_code, detail=[{"loc": ["body", *loc], "msg": message, "type": "value_error"}])


async def validation_error(request: Request, exc: Exception) -> JSONResponse:
    """422 listing ``loc``/``msg``/``type`` of every problem (FastAPI's default also echoes the input back)."""
    problems = cast(RequestValidationError, exc).errors()  # registered for RequestValidationError only
    errors = [{"loc": list(e.get("loc", [])), "msg": e.get("msg", ""), "type": e.get("type", "")} for e in problems]
    return JSONResponse({"detail": errors}, status_code=422)


_request_commits: ContextVar[list[bool] | None] = ContextVar("dj_request_commits", default=None)
"""Per request: whether any of its transactions may have committed (a route may commit in several, e.g. a prune run
by run); None outside a request."""

_READS = ("SELECT", "SHOW", "SET", "VALUES")
"""The first words of a statement that stores nothing (``SET`` changes a setting of the session only); any other
statement run in autocommit is taken as a write (a MERGE, a COPY, ``WITH ... INSERT``, a statement after a comment:
review r55c)."""


def is_database_outage(exc: BaseException) -> bool:
    """The database is away or ended the transaction (``dberrors.is_outage``): nothing of that transaction was
    committed, and the client may retry. Any other database error is a bug (a 500)."""
    if isinstance(exc, BaseExceptionGroup):  # raised in a task group: an outage when every error in it is one
        return bool(exc.exceptions) and all(is_database_outage(inner) for inner in exc.exceptions)
    return is_outage(exc)


def _note(commits: list[bool] | None) -> None:
    if commits is not None and not commits:
        commits.append(True)


def _note_commit(_connection: Any) -> None:
    # fired before the COMMIT is sent: a COMMIT the server refuses is noted too, so the answer says "may have been"
    _note(_request_commits.get())


def _in_autocommit(connection: Any) -> bool:
    if connection.get_execution_options().get("isolation_level") == "AUTOCOMMIT":
        return True
    # an engine made with isolation_level="AUTOCOMMIT" says so on the driver's connection only (psycopg's attribute)
    return getattr(connection.connection.dbapi_connection, "autocommit", False) is True


def _note_autocommit_write(connection: Any, _cursor: Any, statement: str, *_args: Any) -> None:
    # a write in autocommit is stored as it runs: no COMMIT to note (review r55b: the status poll's upsert)
    commits = _request_commits.get()
    if commits is None or commits:
        return
    if not statement.lstrip()[:6].upper().startswith(_READS) and _in_autocommit(connection):
        commits.append(True)


def outage_detail() -> str:
    """What a 503 for a database outage says: "nothing was stored" only when no transaction of the request may have
    committed before."""
    if _request_commits.get():
        return (
            "the database became unavailable part-way through this request: a step of it may have been stored "
            "before (what was is kept), the rest was not stored; check the resource and retry shortly"
        )
    return "the database is unavailable right now; nothing was stored, retry shortly"


class _StartNoted:
    """``send``, noting whether the response started. An object, not a closure over the middleware's frame: a closure
    kept the frames of a failed request (and a session's connection in them) alive until the garbage collector ran
    (review r54b's mid-COPY Python error left a connection checked out)."""

    __slots__ = ("send", "started")

    def __init__(self, send: Send) -> None:
        self.send = send
        self.started = False

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.started = True
        await self.send(message)


class DatabaseOutages:
    """A database outage (``is_database_outage``) raised before the response started is a 503 with Retry-After and
    ``outage_detail()``; raised after it started (a streamed export), the error goes on as itself, as any other
    error does (an exception handler could only turn it into Starlette's "response already started", review r55a /
    r55b). Each HTTP request gets the list its commits are noted in (listeners on every engine)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        sender = _StartNoted(send)
        token = _request_commits.set([])  # a list: a route run on a thread mutates the same one
        try:
            try:
                await self.app(scope, receive, sender)
            except Exception as exc:
                if sender.started or not is_database_outage(exc):
                    raise
                # the request's open transaction was not committed; the client may simply retry
                log.warning(
                    "database unavailable during %s %s: %s", scope.get("method"), scope.get("path"), type(exc).__name__
                )
                response = JSONResponse({"detail": outage_detail()}, status_code=503, headers={"Retry-After": "2"})
                await response(scope, receive, send)
        finally:
            _request_commits.reset(token)


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
    """The error handlers, and ``DatabaseOutages`` (add it before the other middleware: it must be the innermost)."""
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(RecursionError, nested_too_deeply)
    app.add_middleware(DatabaseOutages)
    if not event.contains(Engine, "commit", _note_commit):
        event.listen(Engine, "commit", _note_commit)
    if not event.contains(Engine, "after_cursor_execute", _note_autocommit_write):
        event.listen(Engine, "after_cursor_execute", _note_autocommit_write)
