"""Review r55c of 0a3935f (errors.py ``DatabaseOutages`` middleware, app.py, routers/otlp.py, docs/operations.md):
database outages are answered by an ASGI middleware (the innermost user middleware) instead of exception handlers;
each request's commits and autocommit writes are noted so the 503 says "nothing was stored" only when true.

Fixed since: any statement run in autocommit that is not a read (``_READS``) is noted, and an engine-wide
AUTOCOMMIT is seen on the driver's connection (findings 1-2); an exception group of outages is an outage (finding 4).
Finding 3 was left open (a strict xfail) and is fixed in session 56.

Findings:

1. BROKEN (low) -- ``test_an_autocommit_merge_is_noted_as_a_write``: ``_note_autocommit_write`` compares
   ``statement.lstrip()[:6].upper()`` with ``_WRITES``, which lists "MERGE" (5 letters) and "COPY" (4): a six-letter
   prefix ("MERGE ", "COPY j") never equals them, so MERGE and COPY are never noted. A MERGE run in autocommit, then
   an outage: 503 "nothing was stored" while the MERGE's row is stored. Reproduction: PostgreSQL 15, a route runs
   ``MERGE INTO ...`` on an ``isolation_level=AUTOCOMMIT`` connection, then raises OperationalError. (Latent: no
   route of the service runs MERGE/COPY in autocommit today; the COPY in rows.py is inside a transaction, noted by
   its commit. Were it fixed by prefix, "COPY (SELECT ...) TO STDOUT", a read, would be noted as a write.)
2. BROKEN (low) -- ``test_an_autocommit_write_in_a_cte_is_noted`` and
   ``test_an_engine_wide_autocommit_write_is_noted``: the write detection misses ``WITH ... INSERT`` (a data-modifying
   CTE; also a comment before the verb) and an engine created with ``create_engine(url, isolation_level="AUTOCOMMIT")``
   (a dialect setting: ``connection.get_execution_options()`` is empty). Both: 503 "nothing was stored", the row is
   stored. (Latent: the only autocommit user is the status poll, whose upsert starts with INSERT.)
3. PRE-EXISTING (low, not a regression: eb702f6 answered the same) -- ``test_a_genuine_bug_raised_as_operational_error
   _is_a_503``: everything psycopg/sqlite raise as OperationalError is an "outage" with "retry shortly", also
   deterministic bugs a retry can never fix: more than 65,535 bind parameters ("number of parameters must be between
   0 and 65535", psycopg), SQLite "no such table". Retrying clients loop on a 503 instead of a logged 500 bug.
4. PRE-EXISTING (low, latent) -- ``test_an_outage_inside_an_exception_group_is_a_500``: an outage raised in an anyio
   task group reaches the middleware as an ``ExceptionGroup``; ``is_database_outage`` does not look inside, so it is a
   500 (on eb702f6 too: Starlette's handler lookup walks the group's MRO). No route of the service uses a task group.

HELD:

5. ``test_an_outage_in_a_background_task_is_not_answered_twice``: the response (200) goes out whole; the outage
   raised afterwards is re-raised as itself (eb702f6: RuntimeError "response already started"), no second response.
6. ``test_yield_dependency_outages``: an outage before a ``yield`` dependency's yield is a 503; one at its exit with
   the default scope (after the response) leaves the 200 intact and propagates as itself; with ``scope="function"``
   (exit before the response) it is a 503.
7. ``test_an_outage_while_the_body_is_still_read_is_a_503``: a route reading a streamed body that meets an outage
   after the first chunk answers a 503 JSON.
8. ``test_the_503_of_a_real_route_is_whole_json`` (GET /v1/runs/{id}, ``repository.poll_run`` raising): content-type
   JSON, content-length equal to the body's, Retry-After 2, "nothing was stored", the warning logged with method and
   path.
9. ``test_guards_still_answer_before_the_app``: BodySizeLimit's 413 (Content-Length and chunked) and InputGuard's 422
   (NUL in the query) still answered; a genuine bug is still a 500.
10. ``test_the_commit_list_does_not_leak``: outside a request the ContextVar is None, also after a request; a plain
    thread started by a route sees None (its commits are not noted); a route on the threadpool shares the list.
11. ``test_websocket_and_lifespan_pass_through``: the middleware passes websocket and lifespan scopes through.

Performance (not a test; /tmp/r55c_perf.py, best of 5 x 10,000 ``SELECT 1`` through one ORM Session, 2 CPUs busy
with a CI run, so noisy): SQLite 65 us/statement without the listeners, 61-79 with; PostgreSQL 223 without, 248
with. The listener itself (``_note_autocommit_write`` in a request, a non-autocommit connection) costs 0.35 us a call;
the measured differences are within the noise of the busy machine: no measurable overhead on real statements.

Suspicions not reproduced: an autocommit write whose result is lost with the connection (the server stored it, the
client got an OperationalError) is answered "nothing was stored" (after_cursor_execute never fires); the same holds
for a COMMIT whose reply is lost, but there the "commit" event fired before, so the answer is "may have been".
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Iterator, MutableMapping
from pathlib import Path
from typing import Any

import anyio
import pytest
from fastapi import BackgroundTasks, Depends, FastAPI, Request, WebSocket
from fastapi.testclient import TestClient
from sqlalchemy import bindparam, create_engine, text
from sqlalchemy import exc as sa_exc

from judge_api import errors, repository
from judge_api.errors import _request_commits, install_exception_handlers
from tests.api.conftest import ApiFactory, run_body

NOTHING = "nothing was stored"
PART_WAY = "may have been stored"


def _outage() -> sa_exc.OperationalError:
    return sa_exc.OperationalError("SELECT 1", None, Exception("server closed the connection unexpectedly"))


def _app() -> FastAPI:
    app = FastAPI()
    install_exception_handlers(app)
    return app


@pytest.fixture
def pg_table(pg_url: str) -> Iterator[str]:
    engine = create_engine(pg_url)
    with engine.begin() as conn:
        conn.execute(text("DROP TABLE IF EXISTS r55c_t"))
        conn.execute(text("CREATE TABLE r55c_t (k int PRIMARY KEY)"))
    engine.dispose()
    yield pg_url
    engine = create_engine(pg_url)
    with engine.begin() as conn:
        conn.execute(text("DROP TABLE IF EXISTS r55c_t"))
    engine.dispose()


def _stored(url: str) -> int:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return int(conn.execute(text("SELECT count(*) FROM r55c_t")).scalar_one())
    finally:
        engine.dispose()


def _write_then_outage(url: str, statement: str, engine_autocommit: bool = False) -> Any:
    engine = create_engine(url, isolation_level="AUTOCOMMIT") if engine_autocommit else create_engine(url)
    app = _app()

    @app.post("/w")
    def write() -> None:
        with engine.connect() as conn:
            if not engine_autocommit:
                conn.execution_options(isolation_level="AUTOCOMMIT")
            conn.execute(text(statement))
        raise _outage()

    try:
        return TestClient(app, raise_server_exceptions=False).post("/w")
    finally:
        engine.dispose()


def test_an_autocommit_merge_is_noted_as_a_write(pg_table: str) -> None:
    """FAILS. A MERGE in autocommit is stored, yet the 503 says "nothing was stored" ("MERGE " != "MERGE")."""
    merge = "MERGE INTO r55c_t t USING (SELECT 1 AS k) s ON t.k = s.k WHEN NOT MATCHED THEN INSERT (k) VALUES (s.k)"
    response = _write_then_outage(pg_table, merge)
    assert _stored(pg_table) == 1  # the MERGE is durable
    assert response.status_code == 503
    assert NOTHING not in response.json()["detail"], response.text


def test_an_autocommit_write_in_a_cte_is_noted(pg_table: str) -> None:
    """FAILS. ``WITH ... INSERT`` in autocommit is stored, yet the 503 says "nothing was stored"."""
    response = _write_then_outage(pg_table, "WITH s AS (SELECT 1 AS k) INSERT INTO r55c_t SELECT k FROM s")
    assert _stored(pg_table) == 1
    assert response.status_code == 503
    assert NOTHING not in response.json()["detail"], response.text


def test_an_engine_wide_autocommit_write_is_noted(pg_table: str) -> None:
    """FAILS. An engine created with isolation_level="AUTOCOMMIT": its INSERT is stored, the 503 says "nothing"."""
    response = _write_then_outage(pg_table, "INSERT INTO r55c_t VALUES (1)", engine_autocommit=True)
    assert _stored(pg_table) == 1
    assert response.status_code == 503
    assert NOTHING not in response.json()["detail"], response.text


def test_a_plain_autocommit_insert_is_noted(pg_table: str) -> None:
    """HELD (control for 1-2). An INSERT on a connection switched to AUTOCOMMIT is noted: "may have been stored"."""
    response = _write_then_outage(pg_table, "INSERT INTO r55c_t VALUES (1)")
    assert response.status_code == 503 and PART_WAY in response.json()["detail"], response.text


def test_a_genuine_bug_raised_as_operational_error_is_a_500(pg_url: str, tmp_path: Path) -> None:
    """FIXED (session 56; pre-existing, eb702f6 the same). Deterministic bugs psycopg / sqlite3 raise as
    OperationalError (over 65,535 bind parameters; "no such table") were answered 503 "retry shortly"; they are a
    logged 500 now (``judge_api.dberrors.cannot_be_retried``)."""
    pg = create_engine(pg_url)
    lite = create_engine(f"sqlite:///{tmp_path / 'bug.db'}")
    app = _app()

    @app.get("/too-many-params")
    def too_many() -> None:
        with pg.connect() as conn:
            statement = text("SELECT 1 WHERE 1 IN :v").bindparams(bindparam("v", expanding=True))
            conn.execute(statement, {"v": list(range(70_000))})

    @app.get("/no-such-table")
    def no_table() -> None:
        with lite.connect() as conn:
            conn.execute(text("SELECT * FROM missing_table"))

    try:
        client = TestClient(app, raise_server_exceptions=False)
        answers = {path: client.get(path).status_code for path in ("/too-many-params", "/no-such-table")}
        assert answers == {"/too-many-params": 500, "/no-such-table": 500}, answers
    finally:
        pg.dispose()
        lite.dispose()


def test_an_outage_inside_an_exception_group_is_a_500() -> None:
    """FIXED (was pre-existing, latent). An outage raised in an anyio task group arrives as an ExceptionGroup: it was
    a 500; ``is_database_outage`` looks inside the group now."""
    app = _app()

    @app.get("/group")
    async def group() -> None:
        async def fail() -> None:
            raise _outage()

        async with anyio.create_task_group() as tg:
            tg.start_soon(fail)
            tg.start_soon(anyio.sleep, 0.05)

    response = TestClient(app, raise_server_exceptions=False).get("/group")
    assert response.status_code == 503, response.status_code


def test_an_outage_in_a_background_task_is_not_answered_twice() -> None:
    """HELD. The 200 goes out whole; the background task's outage propagates as itself, no second response."""
    app = _app()
    ran: list[bool] = []

    def later() -> None:
        ran.append(True)
        raise _outage()

    @app.post("/bg")
    def with_background(background: BackgroundTasks) -> dict[str, bool]:
        background.add_task(later)
        return {"ok": True}

    response = TestClient(app, raise_server_exceptions=False).post("/bg")
    assert response.status_code == 200 and response.json() == {"ok": True} and ran
    with pytest.raises(sa_exc.OperationalError):  # as itself: not Starlette's RuntimeError "already started"
        TestClient(app).post("/bg")

    sent: list[dict[str, Any]] = []

    async def one() -> None:
        scope = {
            "type": "http",
            "method": "POST",
            "path": "/bg",
            "headers": [],
            "query_string": b"",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "scheme": "http",
            "server": ("t", 80),
            "client": ("c", 1),
            "root_path": "",
        }

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: MutableMapping[str, Any]) -> None:
            sent.append(dict(message))

        with pytest.raises(sa_exc.OperationalError):
            await app(scope, receive, send)

    anyio.run(one)
    starts = [m for m in sent if m["type"] == "http.response.start"]
    assert [m["status"] for m in starts] == [200]


def test_yield_dependency_outages() -> None:
    """HELD. Outages in a yield dependency: before yield -> 503; at exit after the response (default scope) -> the
    200 stays and the error propagates as itself; at exit with scope="function" (before the response) -> 503."""
    app = _app()

    def fails_before() -> Iterator[None]:
        raise _outage()
        yield  # pragma: no cover

    def fails_at_exit() -> Iterator[None]:
        yield
        raise _outage()

    @app.get("/before")
    def before(_: None = Depends(fails_before)) -> dict[str, bool]:
        return {"ok": True}

    @app.get("/exit")
    def at_exit(_: None = Depends(fails_at_exit)) -> dict[str, bool]:
        return {"ok": True}

    @app.get("/exit-function")
    def at_exit_function(_: None = Depends(fails_at_exit, scope="function")) -> dict[str, bool]:
        return {"ok": True}

    client = TestClient(app, raise_server_exceptions=False)
    assert client.get("/before").status_code == 503
    response = client.get("/exit")
    assert response.status_code == 200 and response.json() == {"ok": True}
    with pytest.raises(sa_exc.OperationalError):
        TestClient(app).get("/exit")
    function_scoped = client.get("/exit-function")
    assert function_scoped.status_code == 503 and NOTHING in function_scoped.json()["detail"]


def test_an_outage_while_the_body_is_still_read_is_a_503() -> None:
    """HELD. A route streaming the request body meets an outage after the first chunk: a 503 JSON."""
    app = _app()

    @app.post("/upload")
    async def upload(request: Request) -> None:
        async for _chunk in request.stream():
            raise _outage()

    def body() -> Iterator[bytes]:
        for _ in range(50):
            yield b"x" * 1000

    response = TestClient(app, raise_server_exceptions=False).post("/upload", content=body())
    assert response.status_code == 503 and NOTHING in response.json()["detail"]
    assert response.headers["retry-after"] == "2"


def test_the_503_of_a_real_route_is_whole_json(
    api_factory: ApiFactory, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """HELD. GET /v1/runs/{id} meeting an outage: a whole JSON 503 with Retry-After, and the warning logged."""
    api = api_factory()
    run_id = api.client.post("/v1/runs", json=run_body()).json()["id"]

    def outage(*_args: Any, **_kwargs: Any) -> None:
        raise _outage()

    monkeypatch.setattr(repository, "poll_run", outage)
    client = TestClient(api.client.app, raise_server_exceptions=False)
    with caplog.at_level(logging.WARNING, logger="judge_api.errors"):
        response = client.get(f"/v1/runs/{run_id}")
    assert response.status_code == 503, response.text
    assert response.headers["content-type"] == "application/json"
    assert int(response.headers["content-length"]) == len(response.content)
    assert response.headers["retry-after"] == "2"
    assert NOTHING in response.json()["detail"]
    assert any(f"GET /v1/runs/{run_id}" in r.getMessage() for r in caplog.records), caplog.text


def test_guards_still_answer_before_the_app(api_factory: ApiFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """HELD. 413 by Content-Length and by chunked count, 422 for NUL in the query; a genuine bug is a 500."""
    api = api_factory(DJ_MAX_BODY_BYTES="1000")
    client = TestClient(api.client.app, raise_server_exceptions=False)
    assert client.post("/v1/runs", content=b"x" * 2000, headers={"content-type": "application/json"}).status_code == 413

    def chunks() -> Iterator[bytes]:
        for _ in range(5):
            yield b"x" * 500

    chunked = client.post("/v1/runs", content=chunks(), headers={"content-type": "application/json"})
    assert chunked.status_code == 413, chunked.text
    assert client.get("/v1/runs", params={"status": "a\x00b"}).status_code == 422

    def bug(*_args: Any, **_kwargs: Any) -> None:
        raise sa_exc.ProgrammingError("SELECT nope", None, Exception("column nope does not exist"))

    monkeypatch.setattr(repository, "poll_run", bug)
    assert client.get("/v1/runs/r-none").status_code == 500


def test_the_commit_list_does_not_leak(tmp_path: Path) -> None:
    """HELD. None outside requests (also after one); a plain thread sees None; the threadpool shares the list."""
    app = _app()
    seen: dict[str, Any] = {}

    @app.get("/probe")
    def probe() -> dict[str, bool]:
        seen["route"] = _request_commits.get()
        thread = threading.Thread(target=lambda: seen.__setitem__("thread", _request_commits.get()))
        thread.start()
        thread.join()
        return {"ok": True}

    @app.get("/commit-then-outage")
    def commit_then_outage() -> None:
        connection = sqlite3.connect(":memory:")
        connection.close()
        engine = create_engine(f"sqlite:///{tmp_path / 'l.db'}")
        with engine.begin() as conn:
            conn.execute(text("CREATE TABLE IF NOT EXISTS t (k int)"))
        engine.dispose()
        raise _outage()

    assert _request_commits.get() is None
    client = TestClient(app, raise_server_exceptions=False)
    assert client.get("/probe").status_code == 200
    assert seen["route"] == [] and seen["thread"] is None
    assert PART_WAY in client.get("/commit-then-outage").json()["detail"]
    assert client.get("/probe").status_code == 200 and seen["route"] == []
    assert _request_commits.get() is None


def test_websocket_and_lifespan_pass_through() -> None:
    """HELD. Websocket and lifespan scopes go through DatabaseOutages untouched (no commit list set)."""
    from contextlib import asynccontextmanager

    started: list[bool] = []

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> Any:
        started.append(True)
        yield

    app = FastAPI(lifespan=lifespan)
    install_exception_handlers(app)

    @app.websocket("/ws")
    async def ws(websocket: WebSocket) -> None:
        await websocket.accept()
        await websocket.send_json({"commits": _request_commits.get()})
        await websocket.close()

    with TestClient(app) as client, client.websocket_connect("/ws") as socket:
        assert socket.receive_json() == {"commits": None}
    assert started == [True]
    assert errors.DatabaseOutages in [m.cls for m in app.user_middleware]
