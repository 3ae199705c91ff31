"""Review r54b of 5b97da6: ``insert_judgment_rows``'s COPY losing its connection or failing in Python, in a session
transaction and in a savepoint, as the callers (session_scope, the workers' retries) see it.

Fail on 5b97da6 (PostgreSQL): ``test_the_flush_before_the_copy_respects_a_session_without_autoflush`` and
``test_a_disconnect_mid_copy_invalidates_the_pool_as_sqlalchemy_does[copy]``; the rest pass (promises that held)."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any, cast

import psycopg
import pytest
from sqlalchemy import exc as sa_exc
from sqlalchemy import func, select

from judge_api.db import get_engine, session_scope
from judge_api.dberrors import database_unreachable
from judge_api.models import Judgment, Run
from judge_api.planning import PlannedJudgment
from judge_api.repository import rows, runs

from .conftest import StoreRun, item


def _rows(run_id: str, item_pk: int, n: int, prefix: str = "x") -> list[dict[str, Any]]:
    out = []
    for k in range(n):
        p = PlannedJudgment("i1", "single", "a", None, None, "rsum-single", "1", f"{prefix}{k}", "ext", 0)
        out.append(rows.judgment_row(run_id, p, item_pk, {"a": "text"}, {"t": 1}, datetime(2026, 11, 30)))
    return out


def _pg(store_db: str) -> str:
    if not store_db.startswith("postgresql"):
        pytest.skip("the COPY is PostgreSQL's")
    return store_db.replace("postgresql+psycopg://", "postgresql://")


def _terminate(admin: str, pid: int) -> None:
    with psycopg.connect(admin, autocommit=True) as other:
        other.execute("SELECT pg_terminate_backend(%s)", [pid])
        for _ in range(100):
            if not other.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", [pid]).fetchone():
                return
            time.sleep(0.05)


def _fail_mid_copy(monkeypatch: pytest.MonkeyPatch, action: Any, at: int = 20) -> dict[str, Any]:
    """The JSON serializer (called for the rows' JSON columns mid-COPY) calls ``action()`` at its ``at``-th call."""
    state = {"calls": 0, "armed": False}
    dialect = get_engine().dialect
    serializer = getattr(dialect, "_json_serializer", None) or json.dumps

    def hook(value: Any) -> str:
        if state["armed"]:
            state["calls"] += 1
            if state["calls"] == at:
                action()
        return serializer(value)

    monkeypatch.setattr(dialect, "_json_serializer", hook)
    return state


def _healthy() -> None:
    for _ in range(15):
        with session_scope() as session:
            session.scalar(select(func.count()).select_from(Run))
    assert cast(Any, get_engine().pool).checkedout() == 0


def test_a_connection_lost_mid_copy_is_an_invalidated_operational_error(
    store_run: StoreRun, store_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    admin = _pg(store_db)
    run_id = store_run(items=[item("i1", {"a": "x"})])
    pid: list[int] = []
    state = _fail_mid_copy(monkeypatch, lambda: _terminate(admin, pid[0]))
    with pytest.raises(sa_exc.OperationalError) as raised, session_scope() as session:
        pk = runs.item_pks_for(session, run_id)["i1"]
        pid.append(cast(Any, session.connection().connection.driver_connection).info.backend_pid)
        state["armed"] = True
        rows.insert_judgment_rows(session, _rows(run_id, pk, 500))
    assert raised.value.connection_invalidated
    assert database_unreachable(raised.value)  # workers/writer: retried for as long as it takes
    state["armed"] = False
    _healthy()
    with session_scope() as session:
        assert session.scalar(select(func.count()).where(Judgment.judge == "ext")) == 0


def test_a_connection_lost_mid_copy_in_a_savepoint(
    store_run: StoreRun, store_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    admin = _pg(store_db)
    run_id = store_run(items=[item("i1", {"a": "x"})])
    pid: list[int] = []
    state = _fail_mid_copy(monkeypatch, lambda: _terminate(admin, pid[0]))
    with pytest.raises(sa_exc.OperationalError) as raised, session_scope() as session:
        pk = runs.item_pks_for(session, run_id)["i1"]
        rows.insert_judgment_rows(session, _rows(run_id, pk, 3, "kept"))
        pid.append(cast(Any, session.connection().connection.driver_connection).info.backend_pid)
        state["armed"] = True
        try:
            with session.begin_nested():
                rows.insert_judgment_rows(session, _rows(run_id, pk, 500))
        except sa_exc.IntegrityError:
            pass
    assert raised.value.connection_invalidated, repr(raised.value)
    state["armed"] = False
    _healthy()
    with session_scope() as session:
        assert session.scalar(select(func.count()).where(Judgment.judge == "ext")) == 0


@pytest.mark.parametrize("error", [TypeError, KeyboardInterrupt])
def test_a_python_error_mid_copy_in_a_savepoint_lets_the_transaction_carry_on(
    store_run: StoreRun, store_db: str, monkeypatch: pytest.MonkeyPatch, error: type[BaseException]
) -> None:
    run_id, state = _python_error_mid_copy(store_run, store_db, monkeypatch, error)
    with session_scope() as session:
        pk = runs.item_pks_for(session, run_id)["i1"]
        rows.insert_judgment_rows(session, _rows(run_id, pk, 3, "kept"))
        state["armed"] = True
        try:
            with session.begin_nested():
                rows.insert_judgment_rows(session, _rows(run_id, pk, 500))
        except error:
            pass
        state["armed"] = False
        rows.insert_judgment_rows(session, _rows(run_id, pk, 2, "after"))
    with session_scope() as session:
        assert session.scalar(select(func.count()).where(Judgment.judge == "ext")) == 5
    _healthy()


@pytest.mark.parametrize("error", [TypeError, KeyboardInterrupt])
def test_a_python_error_mid_copy_then_the_pooled_connection_works(
    store_run: StoreRun, store_db: str, monkeypatch: pytest.MonkeyPatch, error: type[BaseException]
) -> None:
    run_id, state = _python_error_mid_copy(store_run, store_db, monkeypatch, error)
    with pytest.raises(error), session_scope() as session:
        pk = runs.item_pks_for(session, run_id)["i1"]
        state["armed"] = True
        rows.insert_judgment_rows(session, _rows(run_id, pk, 500))
    state["armed"] = False
    _healthy()
    with session_scope() as session:
        rows.insert_judgment_rows(session, _rows(run_id, pk, 2, "after"))
    with session_scope() as session:
        assert session.scalar(select(func.count()).where(Judgment.judge == "ext")) == 2


def test_a_connection_lost_while_the_copy_waits_for_a_lock(store_run: StoreRun, store_db: str) -> None:
    """The backend is killed while the COPY's end waits (the run's row locked by another transaction): the driver
    reads the server's FATAL, not a broken socket mid-write."""
    import threading

    admin = _pg(store_db)
    run_id = store_run(items=[item("i1", {"a": "x"})])
    with session_scope() as session:
        pk = runs.item_pks_for(session, run_id)["i1"]
    pid: list[int] = []

    def killer() -> None:
        with psycopg.connect(admin, autocommit=True) as watcher:
            for _ in range(200):
                if (
                    pid
                    and watcher.execute(
                        "SELECT 1 FROM pg_stat_activity WHERE pid = %s AND wait_event_type = 'Lock'", [pid[0]]
                    ).fetchone()
                ):
                    _terminate(admin, pid[0])
                    return
                time.sleep(0.05)

    with psycopg.connect(admin) as holder:
        holder.execute("SELECT id FROM runs WHERE id = %s FOR UPDATE", [run_id])
        thread = threading.Thread(target=killer)
        thread.start()
        with pytest.raises(sa_exc.OperationalError) as raised, session_scope() as session:
            pid.append(cast(Any, session.connection().connection.driver_connection).info.backend_pid)
            rows.insert_judgment_rows(session, _rows(run_id, pk, 50))
        thread.join()
        holder.rollback()
    assert raised.value.connection_invalidated, repr(raised.value)
    assert database_unreachable(raised.value)
    _healthy()


def test_every_pooled_connection_lost_mid_copy(
    store_run: StoreRun, store_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server restart: every backend of the pool ends while one of them streams a COPY."""
    admin = _pg(store_db)
    run_id = store_run(items=[item("i1", {"a": "x"})])
    kill_all = _pool_of(8, admin)

    state = _fail_mid_copy(monkeypatch, kill_all)
    with pytest.raises(sa_exc.OperationalError), session_scope() as session:
        pk = runs.item_pks_for(session, run_id)["i1"]
        state["armed"] = True
        rows.insert_judgment_rows(session, _rows(run_id, pk, 500))
    state["armed"] = False
    _healthy()


@pytest.mark.parametrize("how", ["no_autoflush", "autoflush_false"])
def test_the_flush_before_the_copy_respects_a_session_without_autoflush(store_run: StoreRun, how: str) -> None:
    """``session.execute(INSERT_JUDGMENTS, rows)`` autoflushed only when the session autoflushes
    (``Session._autoflush``: not inside ``with session.no_autoflush``, not with ``autoflush=False``); the unconditional
    ``session.flush()`` before the COPY flushes an object the caller is still building there (SQLite: the INSERT,
    fine; PostgreSQL: a NOT NULL violation the caller never asked for)."""
    run_id = store_run(items=[item("i1", {"a": "x"})])
    with session_scope() as session:
        source = session.get(Run, run_id)
        assert source is not None
        pk = runs.item_pks_for(session, run_id)["i1"]
        config, project = source.config, source.project_id
    with session_scope() as session:
        if how == "autoflush_false":
            session.autoflush = False
        with session.no_autoflush if how == "no_autoflush" else contextlib.nullcontext():
            draft = Run(id="run_stillbuilding01", project_id=project, config=config)  # counts set below
            session.add(draft)
            rows.insert_judgment_rows(session, _rows(run_id, pk, 2, "built"))
            draft.n_items, draft.n_judgments = 0, 0
    with session_scope() as session:
        assert session.get(Run, "run_stillbuilding01") is not None
        assert session.scalar(select(func.count()).where(Judgment.judge == "ext")) == 2


@pytest.mark.parametrize("path", ["copy", "insert"])
def test_a_disconnect_mid_copy_invalidates_the_pool_as_sqlalchemy_does(
    store_run: StoreRun, store_db: str, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    """SQLAlchemy answers a disconnect of a statement by invalidating the whole pool (``pool._invalidate``: every
    connection older than the error is replaced at its next checkout), since the others are most likely dead too
    (a failover, a restart). The COPY's handler invalidates only its own connection: when the pooled ones are dead
    without their sockets saying so (a failover behind a VIP, a dropped route: ``socket_quiet`` sees nothing, no
    ping), the next request gets one of them and fails too (a second 503), where the INSERT's next request worked."""
    import judge_api.db as db

    admin = _pg(store_db)
    run_id = store_run(items=[item("i1", {"a": "x"})])
    kill_all = _pool_of(4, admin)

    monkeypatch.setattr(db, "socket_quiet", lambda _c: True)  # the dead sockets say nothing
    with pytest.raises(sa_exc.OperationalError) as raised, session_scope() as session:
        pk = runs.item_pks_for(session, run_id)["i1"]
        kill_all()  # the server goes away with the transaction open
        if path == "copy":
            rows.insert_judgment_rows(session, _rows(run_id, pk, 50))
        else:
            session.execute(rows.INSERT_JUDGMENTS, _rows(run_id, pk, 50))
    assert raised.value.connection_invalidated
    with session_scope() as session:  # the next request
        assert session.scalar(select(func.count()).where(Judgment.judge == "ext")) == 0


def _pool_of(count: int, admin: str) -> Callable[[], None]:
    """Open ``count`` connections and give them back to the pool; returns what ends every other backend of the
    database (a server restart, a failover)."""
    engine = get_engine()
    held = [engine.connect() for _ in range(count)]
    for c in held:
        c.exec_driver_sql("SELECT 1")
    for c in held:
        c.close()
    dbname = engine.url.database

    def kill_all() -> None:
        with psycopg.connect(admin, autocommit=True) as other:
            other.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
                [dbname],
            )
            time.sleep(0.5)

    return kill_all


def _python_error_mid_copy(
    store_run: StoreRun, store_db: str, monkeypatch: pytest.MonkeyPatch, error: type[BaseException]
) -> tuple[str, dict[str, Any]]:
    """A stored run, and the switch that makes the next COPY raise ``error`` from Python code midway."""
    _pg(store_db)
    run_id = store_run(items=[item("i1", {"a": "x"})])

    def fail() -> None:
        raise error("mid-COPY")

    return run_id, _fail_mid_copy(monkeypatch, fail)
