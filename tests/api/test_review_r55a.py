"""Review r55a of 8937d34 (errors.py): a ``DBAPIError`` whose connection was invalidated or whose SQLSTATE says the
server ended the transaction (25P03, 25P04, 57P01-57P03) is a 503 "the database is unavailable right now; nothing was
stored, retry shortly"; any other database error is re-raised (a 500). The idle timeout is reproduced on PostgreSQL
as tests/api/test_database_aborts.py does (``SET LOCAL idle_in_transaction_session_timeout`` and a sleep before the
next statement).

Findings:

Fixed since (errors.py): a request that committed a transaction before the outage is told that a step of it may have
been stored, not "nothing was stored" (the ``DatabaseOutages`` middleware notes each request's commits); only an
``InternalError`` of 25P03 / 25P04 / a lost connection joins the outages, and an error raised after a streamed
response started goes on as itself. Tests 1-3 pin the fixes.

1. BROKEN (medium) -- ``test_prune_answers_nothing_was_stored_after_deleting_a_run``: ``POST /v1/runs/prune`` deletes
   each run in a transaction of its own (routers/runs.py ``prune_runs``: ``session.commit()`` per run). When the
   server ends the transaction of the second run, the answer is a 503 "nothing was stored, retry shortly", yet the
   first run is already deleted for good. Reproduction: two runs older than 1d, ``retention.delete_run`` idles past
   a 200 ms ``idle_in_transaction_session_timeout`` on its second call; the answer is 503 and run 1 is gone. (The
   deletion the client is told did not happen did; a client that trusts "nothing was stored" has no way to learn
   which runs were deleted: the 200 body listing ``deleted`` is never sent.) On eb702f6 the same was a 500, which
   promised nothing: the false promise is new in 8937d34.
2. BROKEN (medium) -- ``test_monitor_update_answers_nothing_was_stored_after_committing_it``: ``PATCH
   /v1/monitors/{id}`` commits the update, then reads ``default_monitor_id`` and ``monitor_status`` in a new
   transaction. A server-ended transaction there answers 503 "nothing was stored" although the update was committed.
   Reproduction: ``spans_store.default_monitor_id`` idles past the timeout; the answer is 503 and the monitor's
   ``sample_rate`` is the new one. (A 500 on eb702f6.) Same shape, not tested: POST /v1/runs commits the project row
   (``ensure_project_row``, a transaction of its own) before the run's, and GET .../report commits the
   ``finished_at`` stamp before storing the cached report: a 503 after either leaves that first commit (low).
3. BROKEN (low) -- ``test_a_database_error_in_a_streaming_export_is_still_that_error``: a ``DBAPIError`` raised by an
   export's body after the response started (GET /v1/runs/{id}/judgments?format=jsonl) now has a handler, so Starlette
   raises ``RuntimeError("Caught handled exception, but response already started.")`` instead of letting the database
   error itself through: every database failure of a streaming export (a ProgrammingError as much as an outage) is
   logged and reported as that RuntimeError (the real error only as its ``__cause__``). Before 8937d34 a
   ProgrammingError there propagated as itself. Reproduction: ``exports.export_rows`` yields one row, then runs
   ``SELECT nope`` on the reader session. (Passes on eb702f6.)
4. HELD -- ``test_genuine_database_errors_stay_500_on_postgresql``: real psycopg errors on PostgreSQL (undefined
   column: ProgrammingError 42703, division by zero: DataError 22012, duplicate key: IntegrityError 23505, a
   statement_timeout: OperationalError 57014 -- already a 503 before, by its class) keep their answer; the real
   ``IdleInTransactionSessionTimeout`` is a 503 with Retry-After.
5. HELD -- ``test_the_pool_recovers_after_server_ended_transactions``: after 503s from server-ended transactions, with
   a pool of one connection, the next requests succeed.
6. HELD -- ``test_a_non_outage_database_error_is_a_logged_500``: the handler's re-raise of a ProgrammingError yields a
   500, and the exception ServerErrorMiddleware re-raises for the server to log is the ProgrammingError itself.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text
from sqlalchemy import exc as sa_exc

from judge_api.db import session_scope
from judge_api.errors import install_exception_handlers
from judge_api.models import Monitor, Run, utcnow
from judge_api.repository import exports, retention
from judge_api.repository import otlp as spans_store
from tests.api.conftest import ApiFactory, run_body
from tests.api.test_monitors import monitor_body


def _idle_first(real: Callable[..., Any], on_call: int = 1) -> Callable[..., Any]:
    """``real``, whose ``on_call``-th call first sits idle in its transaction past a 200 ms server timeout."""
    calls = {"n": 0}

    def idle_then_real(session: Any, *args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == on_call:
            session.execute(text("SET LOCAL idle_in_transaction_session_timeout = '200ms'"))
            time.sleep(0.8)
        return real(session, *args, **kwargs)

    return idle_then_real


def _run_ids() -> set[str]:
    with session_scope() as session:
        return set(session.scalars(text("SELECT id FROM runs")))


def test_prune_answers_nothing_was_stored_after_deleting_a_run(
    api_factory: ApiFactory, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FIXED. A 503 after the first run's deletion was committed says that part of the request was stored."""
    api = api_factory(database_url=pg_url)
    first, second = api.submit(body=run_body(2))["id"], api.submit(body=run_body(2))["id"]
    with session_scope() as session:  # both runs two days old, the first the older (prune goes by created_at)
        for run_id, days in ((first, 3), (second, 2)):
            run = session.get(Run, run_id)
            assert run is not None
            run.created_at = utcnow() - timedelta(days=days)
    monkeypatch.setattr(retention, "delete_run", _idle_first(retention.delete_run, on_call=2))
    response = api.client.post("/v1/runs/prune", params={"older_than": "1d"})
    left = _run_ids()
    assert response.status_code == 503, response.text  # the server ended the second run's transaction
    assert response.headers["Retry-After"]
    assert first not in left and second in left  # the first deletion was committed, the second was not
    detail = response.json()["detail"]
    assert "nothing was stored" not in detail and "may have been stored" in detail
    again = api.client.post("/v1/runs/prune", params={"older_than": "1d"})  # a retry finishes the prune
    assert again.status_code == 200, again.text
    assert {first, second}.isdisjoint(_run_ids())


def test_monitor_update_answers_nothing_was_stored_after_committing_it(
    api_factory: ApiFactory, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FIXED. PATCH /v1/monitors/{id} commits, then reads in a new transaction: its 503 says the update may be kept."""
    api = api_factory(database_url=pg_url, DJ_CALLBACK_URL_ALLOWLIST="https://hooks.example.org")
    created = api.client.post("/v1/monitors", json=monitor_body())
    assert created.status_code == 201, created.text
    monitor_id = created.json()["id"]
    monkeypatch.setattr(spans_store, "default_monitor_id", _idle_first(spans_store.default_monitor_id))
    response = api.client.patch(f"/v1/monitors/{monitor_id}", json={"sample_rate": 0.1})
    with session_scope() as session:
        monitor = session.get(Monitor, monitor_id)
        assert monitor is not None
        stored_rate = monitor.sample_rate
    assert response.status_code == 503, response.text
    assert stored_rate == 0.1  # committed before the read the server cut short
    detail = response.json()["detail"]
    assert "nothing was stored" not in detail and "may have been stored" in detail


def test_a_database_error_in_a_streaming_export_is_still_that_error(
    api_factory: ApiFactory, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FIXED. A ProgrammingError after the export started came out as Starlette's RuntimeError("Caught handled
    exception, but response already started.") while DBAPIError had a handler; now, as before, as itself."""
    api = api_factory(database_url=pg_url)
    run_id = api.submit(body=run_body(3))["id"]
    real = exports.export_rows

    def one_row_then_a_bug(session: Any, *args: Any, **kwargs: Any) -> Iterator[Any]:
        for row in real(session, *args, **kwargs):
            yield row
            session.execute(text("SELECT nope"))  # a query's bug, mid-stream

    monkeypatch.setattr(exports, "export_rows", one_row_then_a_bug)
    client = TestClient(api.client.app, raise_server_exceptions=True)
    with pytest.raises(Exception) as raised:
        client.get(f"/v1/runs/{run_id}/judgments", params={"format": "jsonl"})
    assert isinstance(raised.value, sa_exc.ProgrammingError), repr(raised.value)


@pytest.fixture
def pg_app(pg_url: str) -> Iterator[TestClient]:
    engine = create_engine(pg_url, pool_size=1, max_overflow=0, pool_pre_ping=False)
    app = FastAPI()
    install_exception_handlers(app)

    @app.get("/sql/{case}")
    def run_sql(case: str) -> dict[str, Any]:
        with engine.begin() as conn:
            conn.execute(text("CREATE TABLE IF NOT EXISTS t (k int PRIMARY KEY)"))
        with engine.begin() as conn:
            if case == "undefined_column":
                conn.execute(text("SELECT nope"))
            elif case == "division_by_zero":
                conn.execute(text("SELECT 1 / 0"))
            elif case == "duplicate_key":
                conn.execute(text("INSERT INTO t VALUES (1) ON CONFLICT DO NOTHING"))
                conn.execute(text("INSERT INTO t VALUES (1)"))
            elif case == "statement_timeout":
                conn.execute(text("SET LOCAL statement_timeout = '50ms'"))
                conn.execute(text("SELECT pg_sleep(1)"))
            elif case == "idle_timeout":
                conn.execute(text("SET LOCAL idle_in_transaction_session_timeout = '200ms'"))
                time.sleep(0.8)
                conn.execute(text("SELECT 1"))
            return {"ok": conn.execute(text("SELECT 1")).scalar()}

    yield TestClient(app, raise_server_exceptions=False)
    engine.dispose()


@pytest.mark.parametrize(
    ("case", "status"),
    [
        ("undefined_column", 500),
        ("division_by_zero", 500),
        ("duplicate_key", 500),
        ("statement_timeout", 503),  # an OperationalError (QueryCanceled): a 503 before 8937d34 as well
        ("idle_timeout", 503),
        ("fine", 200),
    ],
)
def test_genuine_database_errors_stay_500_on_postgresql(pg_app: TestClient, case: str, status: int) -> None:
    """HELD. Only the server's ending of the transaction is newly a 503."""
    response = pg_app.get(f"/sql/{case}")
    assert response.status_code == status, response.text
    if status == 503:
        assert response.headers["Retry-After"]


def test_the_pool_recovers_after_server_ended_transactions(pg_app: TestClient) -> None:
    """HELD. A pool of one connection: after each 503 the next request works."""
    for _ in range(2):
        assert pg_app.get("/sql/idle_timeout").status_code == 503
        assert pg_app.get("/sql/fine").json() == {"ok": 1}


def test_a_non_outage_database_error_is_a_logged_500(pg_app: TestClient) -> None:
    """HELD. The handler's re-raise: a 500, and what ServerErrorMiddleware re-raises for the server to log (uvicorn
    logs the exception it gets) is the ProgrammingError itself, not an error of the handler."""
    assert pg_app.get("/sql/undefined_column").status_code == 500
    raising = TestClient(pg_app.app, raise_server_exceptions=True)
    with pytest.raises(sa_exc.ProgrammingError):
        raising.get("/sql/undefined_column")
    assert pg_app.get("/sql/fine").json() == {"ok": 1}
