"""Review r56a of 7690fdb (``judge_api.dberrors``): the API's side. Since 7690fdb an ``OperationalError`` the
drivers raise for a deterministic bug is a 500 (``cannot_be_retried``); a genuine outage must still be a 503 with
Retry-After. The outages are caused for real on PostgreSQL (a lock timeout, a statement timeout, the backend
terminated) through real routes, and the drivers' real errors are classified.

Held: every real outage tried (PostgreSQL: lock_timeout 55P03, statement_timeout 57014, pg_terminate_backend 57P01
before and during a statement, idle_in_transaction_session_timeout 25P03, deadlock 40P01, connection refused;
SQLite: database is locked) is a 503 with Retry-After, nothing stored; the deterministic errors the change names are
500s on both drivers.

Finding (low): SQLite raises other deterministic errors as ``OperationalError`` with words ``cannot_be_retried``
does not know ("integer overflow" of a SUM, "no such function", "malformed JSON", "Expression tree is too large",
"too many terms in compound SELECT", "attempt to write a readonly database" for a read-only file): they are still
answered 503 "retry shortly", a client retrying for ever. None was found reachable through a route with valid input.
Fixed in session 56 (the words added to ``dberrors._PERMANENT_WORDS``).
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy import create_engine, event, func, select, text
from sqlalchemy import exc as sa_exc

from judge_api.db import get_engine, session_scope
from judge_api.dberrors import cannot_be_retried
from judge_api.errors import is_database_outage
from judge_api.models import Run
from judge_api.repository import runs as runs_module
from tests.api.conftest import ApiFactory, run_body


def _admin(pg_url: str) -> str:
    return pg_url.replace("postgresql+psycopg://", "postgresql://")


def _lock_timeout(session: Any, pg_url: str) -> Generator[None]:
    """Another session holds the judgments table: the run's rows wait 50 ms for it (``SET LOCAL lock_timeout``)."""
    with psycopg.connect(_admin(pg_url)) as holder:
        holder.execute("LOCK TABLE judgments IN ACCESS EXCLUSIVE MODE")
        session.execute(text("SET LOCAL lock_timeout = '50ms'"))
        yield
        holder.rollback()


def _statement_timeout(session: Any, _pg_url: str) -> Generator[None]:
    session.execute(text("SET LOCAL statement_timeout = '50ms'"))
    session.execute(text("SELECT pg_sleep(1)"))
    yield


def _terminated(session: Any, _pg_url: str) -> Generator[None]:
    session.execute(text("SELECT pg_terminate_backend(pg_backend_pid())"))
    yield


def _terminated_between_statements(session: Any, pg_url: str) -> Generator[None]:
    pid = session.execute(text("SELECT pg_backend_pid()")).scalar_one()
    with psycopg.connect(_admin(pg_url), autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
    time.sleep(0.2)
    yield


OUTAGES: dict[str, Callable[[Any, str], Generator[None]]] = {
    "lock_timeout": _lock_timeout,
    "statement_timeout": _statement_timeout,
    "pg_terminate_backend(own)": _terminated,
    "pg_terminate_backend(admin)": _terminated_between_statements,
}


@pytest.mark.parametrize("outage", sorted(OUTAGES))
def test_a_real_outage_while_a_run_is_stored_is_a_503(
    api_factory: ApiFactory, pg_url: str, monkeypatch: pytest.MonkeyPatch, outage: str
) -> None:
    """HOLDS. POST /v1/runs meets a real outage before its judgments are stored: 503, Retry-After, no run stored;
    the next request succeeds."""
    api = api_factory(database_url=pg_url)
    real = runs_module.insert_judgment_rows

    def outage_then_store(session: Any, rows: Any) -> None:
        steps = OUTAGES[outage](session, pg_url)
        next(steps)
        try:
            real(session, rows)
        finally:
            steps.close()

    with session_scope() as session:
        before = session.scalar(select(func.count()).select_from(Run))
    monkeypatch.setattr(runs_module, "insert_judgment_rows", outage_then_store)
    response = api.client.post("/v1/runs", json=run_body(3))
    assert response.status_code == 503, (outage, response.status_code, response.text)
    assert response.headers["Retry-After"] and "retry" in response.json()["detail"]
    monkeypatch.undo()
    with session_scope() as session:
        assert session.scalar(select(func.count()).select_from(Run)) == before
    assert api.client.post("/v1/runs", json=run_body(3)).status_code == 202


def test_the_backend_terminated_while_a_report_is_read_is_a_503(api_factory: ApiFactory, pg_url: str) -> None:
    """HOLDS. GET /v1/runs/{id}/report: the server terminates the route's backend just before its first read of the
    judgments (an administrator, a failover): 503 with Retry-After, and the report is served on the next try."""
    api = api_factory(database_url=pg_url)
    run_id = api.submit(body=run_body(3))["id"]
    engine = get_engine()
    fired: list[int] = []

    def terminate_first(conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if not fired and "judgments" in statement:
            pid = conn.connection.dbapi_connection.info.backend_pid
            fired.append(pid)
            with psycopg.connect(_admin(pg_url), autocommit=True) as admin:
                admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
            time.sleep(0.2)

    event.listen(engine, "before_cursor_execute", terminate_first)
    try:
        response = api.client.get(f"/v1/runs/{run_id}/report")
    finally:
        event.remove(engine, "before_cursor_execute", terminate_first)
    assert fired, "the report read no judgments"
    assert response.status_code == 503, (response.status_code, response.text)
    assert response.headers["Retry-After"]
    assert api.client.get(f"/v1/runs/{run_id}/report").status_code == 200


def _real_pg_errors(pg_url: str) -> dict[str, BaseException]:
    """The errors psycopg 3 raises for real outages and a real driver bug, through SQLAlchemy."""
    engine = create_engine(pg_url)
    errors: dict[str, BaseException] = {}

    def catch(name: str, step: Callable[[], Any]) -> None:
        try:
            step()
        except Exception as exc:
            errors[name] = exc

    def idle() -> None:
        with engine.begin() as connection:
            connection.execute(text("SET LOCAL idle_in_transaction_session_timeout = '100ms'"))
            time.sleep(0.5)
            connection.execute(text("SELECT 1"))

    def deadlock() -> None:
        with engine.begin() as connection:
            connection.execute(text("CREATE TABLE dl (id int primary key)"))
            connection.execute(text("INSERT INTO dl VALUES (1), (2)"))
        a, b = engine.connect(), engine.connect()
        other: list[BaseException] = []
        try:
            a.execute(text("UPDATE dl SET id = id WHERE id = 1"))
            b.execute(text("UPDATE dl SET id = id WHERE id = 2"))

            def cross() -> None:
                try:
                    b.execute(text("UPDATE dl SET id = id WHERE id = 1"))
                except Exception as exc:
                    other.append(exc)

            thread = threading.Thread(target=cross)
            thread.start()
            time.sleep(0.1)
            try:
                a.execute(text("UPDATE dl SET id = id WHERE id = 2"))
            finally:
                thread.join()
        finally:
            a.close()
            b.close()
        if other:
            raise other[0]

    def refused() -> None:
        away = create_engine("postgresql+psycopg://postgres@127.0.0.1:1/test")
        try:
            with away.connect():
                pass
        finally:
            away.dispose()

    def parameters() -> None:
        with engine.connect() as connection:
            names = [f"p{i}" for i in range(70_000)]
            statement = text(f"SELECT 1 WHERE 1 IN ({', '.join(':' + n for n in names)})")
            connection.execute(statement, {n: i for i, n in enumerate(names)})

    def too_many_arguments() -> None:
        with engine.connect() as connection:
            connection.execute(text(f"SELECT concat({', '.join(str(i) for i in range(101))})"))

    def statement_timeout() -> None:
        with engine.begin() as connection:
            connection.execute(text("SET LOCAL statement_timeout = '50ms'"))
            connection.execute(text("SELECT pg_sleep(1)"))

    try:
        catch("idle_in_transaction_session_timeout", idle)
        catch("statement_timeout", statement_timeout)
        catch("more than 100 arguments", too_many_arguments)
        catch("deadlock", deadlock)
        catch("connection refused", refused)
        catch("over 65,535 parameters", parameters)
    finally:
        engine.dispose()
    return errors


def test_the_real_postgresql_errors_are_classified_as_promised(pg_url: str) -> None:
    """HOLDS. The real errors: the outages are outages (a 503), the driver's parameter limit a bug (a 500)."""
    errors = _real_pg_errors(pg_url)
    assert set(errors) == {
        "idle_in_transaction_session_timeout",
        "statement_timeout",
        "deadlock",
        "connection refused",
        "over 65,535 parameters",
        "more than 100 arguments",
    }, errors
    for name in ("idle_in_transaction_session_timeout", "statement_timeout", "deadlock", "connection refused"):
        assert is_database_outage(errors[name]), (name, errors[name])
    for name in ("over 65,535 parameters", "more than 100 arguments"):
        assert isinstance(errors[name], sa_exc.OperationalError), (name, errors[name])
        assert not is_database_outage(errors[name]), (name, errors[name])


@pytest.fixture
def sqlite_file(tmp_path: Path) -> Iterator[Any]:
    engine = create_engine(f"sqlite:///{tmp_path / 'r56a.db'}", connect_args={"timeout": 0.05})
    with engine.begin() as connection:
        connection.execute(text("CREATE TABLE t (id INTEGER PRIMARY KEY, v INTEGER)"))
        connection.execute(text("INSERT INTO t VALUES (1, 9223372036854775807), (2, 1)"))
    yield engine
    engine.dispose()


def _sqlite_error(engine: Any, sql: str) -> sa_exc.DBAPIError:
    with pytest.raises(sa_exc.DBAPIError) as caught, engine.connect() as connection:
        connection.execute(text(sql)).all()
    return caught.value


def test_a_locked_sqlite_file_is_a_503(sqlite_file: Any, tmp_path: Path) -> None:
    """HOLDS. SQLite's "database is locked" (another writer holds the file past the busy timeout) is an outage."""
    holder = sqlite3.connect(tmp_path / "r56a.db")
    try:
        holder.execute("BEGIN EXCLUSIVE")
        error = _sqlite_error(sqlite_file, "INSERT INTO t VALUES (3, 3)")
    finally:
        holder.rollback()
        holder.close()
    assert "database is locked" in str(error.orig) and is_database_outage(error)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT sum(v) FROM t",  # integer overflow
        "SELECT json_extract('{', '$.a')",  # malformed JSON
        "SELECT no_such_function(v) FROM t",  # no such function
        "SELECT 1 FROM t WHERE " + " OR ".join(["v = 1"] * 1100),  # Expression tree is too large (maximum depth 1000)
        " UNION ALL ".join(["SELECT 1"] * 600),  # too many terms in compound SELECT
    ],
    ids=["integer overflow", "malformed JSON", "no such function", "expression tree too large", "compound select"],
)
def test_a_deterministic_sqlite_operational_error_is_a_500(sqlite_file: Any, sql: str) -> None:
    """FIXED (7690fdb, low). The same statement fails the same way on every try, yet it is answered 503 "retry
    shortly": ``cannot_be_retried`` knows five SQLite messages only."""
    error = _sqlite_error(sqlite_file, sql)
    assert isinstance(error, sa_exc.OperationalError)
    assert cannot_be_retried(error), str(error.orig)
    assert not is_database_outage(error), str(error.orig)


def test_the_named_deterministic_sqlite_errors_are_a_500(sqlite_file: Any) -> None:
    """HOLDS. The real "no such table", "no such column" and syntax errors are bugs (a 500)."""
    for sql in ("SELECT * FROM nope", "SELECT nope FROM t", "SELEC 1"):
        error = _sqlite_error(sqlite_file, sql)
        assert cannot_be_retried(error) and not is_database_outage(error), str(error.orig)
