"""Review r55b of eb702f6..7a3e390 (errors.py, app.py): ``CommitTracker`` notes each request's commits (a listener on
``Engine``'s "commit" event) so that a database outage's 503 says "nothing was stored" only when nothing of the
request was; only ``InternalError`` gets the new handler (25P03 / 25P04 / a lost connection: a 503, else a 500).

Fixed since (errors.py, routers/otlp.py): outages are answered by the ``DatabaseOutages`` middleware (no exception
handler: an error raised after a streamed response started goes on as itself); ``is_database_outage`` is shared with
the OTLP route; a write in autocommit is noted (``after_cursor_execute``); the "part-way" answer says a step *may* have
been stored. Tests 1-4 pin the fixes (the mechanism is no longer called ``CommitTracker``).

Findings:

1. BROKEN (medium) -- ``test_an_otlp_export_whose_transaction_the_server_ended_is_a_503``: the OTLP receiver
   (routers/otlp.py ``export_traces``) catches only ``DATABASE_OUTAGES`` itself; the ``InternalError`` of a transaction
   the server ended (25P03) falls into its ``except Exception`` and is answered **500** "the export could not be
   processed (a server error)". OTLP exporters retry 429/502/503/504 only, so the spans are dropped. Reproduction:
   PostgreSQL, ``routers.otlp.receive`` first idles past a 200 ms ``idle_in_transaction_session_timeout``; POST
   /v1/otlp/v1/traces answers 500 (the same outage on every other route is a 503 since this change; a 500 on
   eb702f6 too: not a regression, an outage the change's "never a 500" leaves out).
2. BROKEN (low) -- ``test_a_status_poll_that_stored_in_autocommit_then_met_an_outage_says_nothing_was_stored``: the
   status poll (GET /v1/runs/{id}, routers/runs.py ``_poll_run``) runs in ``AUTOCOMMIT``: its writes (the run_counts
   entry ``store_counts`` upserts, the ``finished_at`` stamp) are durable as they run, and no "commit" event is ever
   emitted (the session is closed, not committed). An outage after the upsert answers 503 "nothing was stored" while
   the entry is stored. Reproduction: a settled run polled twice; on the third poll ``generation_counts`` (the
   statement after ``store_counts``) meets a terminated backend (``pg_terminate_backend``): 503 "nothing was stored",
   and the report_cache row is there. (The stored thing is a cache entry: low; the mechanism misses every autocommit
   write, so any future autocommit writer inherits it.)
3. BROKEN (low) -- ``test_a_refused_commit_is_told_part_of_it_was_stored``: the "commit" event fires *before* the
   DBAPI commit, so a request whose only transaction's COMMIT fails (the server ended it: 25P03) is noted as having
   committed and is told "what it had stored before is kept, the rest was not stored; check the resource", although
   nothing was stored. Reproduction: one ``engine.begin()`` block idles past the server's timeout; its COMMIT raises
   and the 503 says "what it had stored before is kept". (Errs on the safe side, but it is the common single-
   transaction route; the tracker records commit attempts, not commits.)
4. BROKEN (low) -- ``test_an_internal_error_raised_mid_stream_is_still_that_error``: the new ``InternalError`` handler
   means an ``InternalError`` raised by a streaming export's body after the response started (any, a genuine bug
   such as XX000 included) comes out as Starlette's ``RuntimeError("Caught handled exception, but response already
   started.")``, not as itself (r55a finding 3 was fixed for ProgrammingError only). Reproduction:
   ``exports.export_rows`` yields one row, then raises ``InternalError`` (XX000); GET .../judgments?format=jsonl.
5. HELD -- ``test_concurrent_requests_do_not_share_their_commits``: with two requests in flight at once (sync routes
   on anyio threads), a commit of one is not seen by the other's 503, and a later request starts with a fresh list.
6. HELD -- ``test_genuine_internal_errors_stay_500_on_postgresql``: real psycopg ``InFailedSqlTransaction`` (25P02)
   and ``ReadOnlySqlTransaction`` (25006) are 500s (the handler re-raises them); the pool serves the next request.
7. HELD -- ``test_sqlite_database_is_locked_is_a_503``: a real SQLite "database is locked" (OperationalError) is a
   503 "nothing was stored", and the next request works.

Suspicions not reproduced: a PostgreSQL that went read-only in a failover (25006, ``InternalError``) is a 500, not a
503 (finding 6 pins today's answer; arguably an outage). The docs (operations.md) still say a 503 says "nothing was
stored" and do not mention the "part-way" answer. Commits made on a ``concurrent.futures`` thread (no context copy)
would not be noted, but the service's executors (frame_columns, bootstrap) only read.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, func, select, text
from sqlalchemy import exc as sa_exc

from judge_api.db import session_scope
from judge_api.errors import install_exception_handlers
from judge_api.models import ReportCacheEntry
from judge_api.repository import exports
from judge_api.repository import runs as runs_module
from judge_api.routers import otlp as otlp_router
from tests.api.conftest import ApiFactory, run_body
from tests.api.test_otlp import create_monitor, post, whole_history

NOTHING = "nothing was stored"
PART_WAY = "may have been stored"


def _tracked_app() -> FastAPI:
    app = FastAPI()
    install_exception_handlers(app)  # with its DatabaseOutages middleware
    return app


def test_an_otlp_export_whose_transaction_the_server_ended_is_a_503(
    api_factory: ApiFactory, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FIXED (was medium): POST /v1/otlp/v1/traces whose transaction the server ends (25P03) answered 500, not 503."""
    api = api_factory(database_url=pg_url, DJ_OTLP_PROCESS="workers")
    monitor = create_monitor(api, key=None)
    real = otlp_router.receive

    def idle_then_receive(session: Any, *args: Any, **kwargs: Any) -> Any:
        session.execute(text("SET LOCAL idle_in_transaction_session_timeout = '200ms'"))
        time.sleep(0.8)
        return real(session, *args, **kwargs)

    monkeypatch.setattr(otlp_router, "receive", idle_then_receive)
    answer = post(api, whole_history(), key=None, monitor=monitor)
    assert answer.status_code == 503, (answer.status_code, answer.text)
    assert answer.headers.get("Retry-After")


def test_a_status_poll_that_stored_in_autocommit_then_met_an_outage_says_nothing_was_stored(
    api_factory: ApiFactory, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FIXED (was low): GET /v1/runs/{id} upserts the counts entry in autocommit (no commit event), then meets an
    outage: the 503 said "nothing was stored" while the entry was stored (writes in autocommit are noted now)."""
    api = api_factory(database_url=pg_url, DJ_REPORT_CACHE="true")
    run_id = api.submit(body=run_body(2))["id"]
    with session_scope() as session:
        session.execute(text("UPDATE judgments SET status = 'failed' WHERE run_id = :r"), {"r": run_id})
    for _ in range(2):  # the first poll stamps finished_at, the second notes the run as polled finished
        polled = api.client.get(f"/v1/runs/{run_id}")
        assert polled.status_code == 200, polled.text
    assert polled.json()["finished_at"] is not None

    def entries() -> int:
        with session_scope() as session:
            count = select(func.count()).select_from(ReportCacheEntry).where(ReportCacheEntry.run_id == run_id)
            return int(session.scalar(count) or 0)

    assert entries() == 0
    real = runs_module.generation_counts

    def outage(session: Any, *args: Any, **kwargs: Any) -> Any:
        session.execute(text("SELECT pg_terminate_backend(pg_backend_pid())"))  # the server drops the connection
        return real(session, *args, **kwargs)

    monkeypatch.setattr(runs_module, "generation_counts", outage)
    response = api.client.get(f"/v1/runs/{run_id}")
    assert response.status_code == 503, response.text
    assert entries() == 1  # stored by the poll's upsert, in autocommit, before the outage
    assert NOTHING not in response.json()["detail"], response.json()
    monkeypatch.undo()
    assert api.client.get(f"/v1/runs/{run_id}").status_code == 200  # the pool recovers


def test_a_refused_commit_is_told_part_of_it_was_stored(pg_url: str) -> None:
    """FIXED by the wording (was low): the commit event fires before the COMMIT, so a COMMIT the server refused (25P03)
    was told 'what it had stored before is kept' although nothing was stored. The answer now says a step *may* have
    been stored: true either way (noting only commits that succeeded would miss Core commits, a worse error)."""
    engine = create_engine(pg_url, pool_size=1, max_overflow=0)
    app = _tracked_app()

    @app.post("/store")
    def store() -> dict[str, Any]:
        with engine.begin() as conn:
            conn.execute(text("CREATE TEMP TABLE IF NOT EXISTS r55b (k int)"))
            conn.execute(text("SET LOCAL idle_in_transaction_session_timeout = '200ms'"))
            time.sleep(0.8)  # the route's Python work; the COMMIT then meets the ended transaction
        return {"ok": True}

    @app.get("/fine")
    def fine() -> dict[str, Any]:
        with engine.connect() as conn:
            return {"ok": conn.execute(text("SELECT 1")).scalar()}

    try:
        client = TestClient(app, raise_server_exceptions=False)
        response = client.post("/store")
        assert response.status_code == 503, response.text
        assert client.get("/fine").json() == {"ok": 1}
        assert PART_WAY in response.json()["detail"] and NOTHING not in response.json()["detail"], response.json()
    finally:
        engine.dispose()


def test_an_internal_error_raised_mid_stream_is_still_that_error(
    api_factory: ApiFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FIXED (was low): an InternalError (XX000, a bug) raised by an export after it started came out as Starlette's
    RuntimeError, not as itself (as on eb702f6): outages are answered by a middleware that lets an error raised after
    the response started go on as itself."""
    api = api_factory()
    run_id = api.submit(body=run_body(3))["id"]
    real = exports.export_rows

    class _Driver(Exception):
        sqlstate = "XX000"

    def one_row_then_a_bug(session: Any, *args: Any, **kwargs: Any) -> Iterator[Any]:
        for row in real(session, *args, **kwargs):
            yield row
            raise sa_exc.InternalError("SELECT 1", None, _Driver("internal error"))

    monkeypatch.setattr(exports, "export_rows", one_row_then_a_bug)
    client = TestClient(api.client.app, raise_server_exceptions=True)
    with pytest.raises(Exception) as raised:
        client.get(f"/v1/runs/{run_id}/judgments", params={"format": "jsonl"})
    assert isinstance(raised.value, sa_exc.InternalError), repr(raised.value)


def test_concurrent_requests_do_not_share_their_commits(tmp_path: Path) -> None:
    """HELD. One request commits while another is in flight: the other's 503 still says nothing was stored."""
    engine = create_engine(f"sqlite:///{tmp_path / 'c.db'}")
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE t (k int)"))
    app = _tracked_app()

    @app.post("/commit")
    def commit() -> dict[str, Any]:
        with engine.begin() as conn:
            conn.execute(text("INSERT INTO t VALUES (1)"))
        time.sleep(0.4)
        return {"ok": True}

    @app.post("/outage")
    def outage() -> None:
        time.sleep(0.2)  # the other request has committed by now
        raise sa_exc.OperationalError("SELECT 1", None, Exception("server closed the connection unexpectedly"))

    @app.post("/commit-then-outage")
    def commit_then_outage() -> None:
        with engine.begin() as conn:
            conn.execute(text("INSERT INTO t VALUES (2)"))
        raise sa_exc.OperationalError("SELECT 1", None, Exception("server closed the connection unexpectedly"))

    async def both() -> tuple[httpx.Response, ...]:
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            return tuple(
                await asyncio.gather(
                    client.post("/commit"),
                    client.post("/outage"),
                    client.post("/commit-then-outage"),
                    client.post("/outage"),
                )
            )

    try:
        committed, failed, partly, failed_too = asyncio.run(both())
        assert committed.status_code == 200
        for response in (failed, failed_too):
            assert response.status_code == 503 and NOTHING in response.json()["detail"], response.text
        assert partly.status_code == 503 and PART_WAY in partly.json()["detail"], partly.text
        later = TestClient(app, raise_server_exceptions=False).post("/outage")  # a fresh list per request
        assert later.status_code == 503 and NOTHING in later.json()["detail"]
    finally:
        engine.dispose()


@pytest.fixture
def pg_errors_app(pg_url: str) -> Iterator[TestClient]:
    engine = create_engine(pg_url, pool_size=1, max_overflow=0)
    app = _tracked_app()

    @app.get("/sql/{case}")
    def run_sql(case: str) -> dict[str, Any]:
        with engine.begin() as conn:
            if case == "aborted":  # 25P02: a statement after a failed one, without a savepoint
                with contextlib.suppress(sa_exc.ProgrammingError):
                    conn.execute(text("SELECT nope"))
                conn.execute(text("SELECT 1"))
            elif case == "read_only":  # 25006
                conn.execute(text("SET TRANSACTION READ ONLY"))
                conn.execute(text("CREATE TEMP TABLE r55b_ro (k int)"))
            return {"ok": conn.execute(text("SELECT 1")).scalar()}

    yield TestClient(app, raise_server_exceptions=False)
    engine.dispose()


@pytest.mark.parametrize("case", ["aborted", "read_only"])
def test_genuine_internal_errors_stay_500_on_postgresql(pg_errors_app: TestClient, case: str) -> None:
    """HELD. Real psycopg InternalErrors that are no outage (25P02, 25006) are a 500; the pool then serves."""
    raising = TestClient(pg_errors_app.app, raise_server_exceptions=True)
    with pytest.raises(sa_exc.InternalError):
        raising.get(f"/sql/{case}")
    assert pg_errors_app.get(f"/sql/{case}").status_code == 500
    assert pg_errors_app.get("/sql/fine").json() == {"ok": 1}


def test_sqlite_database_is_locked_is_a_503(tmp_path: Path) -> None:
    """HELD. A real 'database is locked' is a 503 'nothing was stored'; once the lock is gone the write works."""
    path = tmp_path / "locked.db"
    engine = create_engine(f"sqlite:///{path}", connect_args={"timeout": 0.1})
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE t (k int)"))
    app = _tracked_app()

    @app.post("/write")
    def write() -> dict[str, Any]:
        with engine.begin() as conn:
            conn.execute(text("INSERT INTO t VALUES (1)"))
        return {"ok": True}

    holder = sqlite3.connect(path, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        client = TestClient(app, raise_server_exceptions=False)
        response = client.post("/write")
        assert response.status_code == 503 and NOTHING in response.json()["detail"], response.text
        assert response.headers["Retry-After"] == "2"
        holder.execute("ROLLBACK")
        assert client.post("/write").status_code == 200
    finally:
        holder.close()
        engine.dispose()
