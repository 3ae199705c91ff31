"""Review r53b: hostile tests of the frame read in parts after the r53a fixes (166f19a, bb072b6).

Findings (FAIL at bb072b6):
- test_sqlite_an_error_receiving_one_part_leaves_no_child_running_or_file_open: ``read_sqlite_parts`` receives the
  children one by one in a list comprehension; anything ``_received`` raises for one part (an OSError reading its
  messages file, MemoryError, KeyboardInterrupt in ``wait``) leaves the later children running / unreaped and their
  memfd and messages files open until garbage collection.
- test_pg_parts_keep_the_process_within_its_pool_connection_budget: the parts' direct connections are outside the
  pool, so the process's connections to the server are no longer bounded by pool_size + max_overflow: each report
  in progress adds up to ``readers`` more (16 per report on a 32-CPU host with DJ_FRAME_READERS=16).
- test_pg_the_session_survives_idle_in_transaction_timeout_while_parts_read: while the parts read, the session's
  connection sits "idle in transaction" (it waits in Python); a server with idle_in_transaction_session_timeout
  shorter than a part's read terminates the session: the report's next statement fails (a 500), where one COPY
  kept the session busy.

- test_pg_a_frame_read_after_an_sql_savepoint_falls_back (low): the savepoint check is SQLAlchemy's
  ``in_nested_transaction()``; a SAVEPOINT issued as SQL passes it and ``pg_export_snapshot()`` raises
  "cannot export a snapshot from a subtransaction", aborting the transaction.

Held (PASS): DJ_FRAME_READERS bounds (0, 17, -1, abc, 2.5, "" are ValidationErrors naming it); parts connect with
exactly the engine's arguments (password with special characters, host list, application_name, options); parts
refused by a connection limit fall back, log no password and leave no connection; parts timing out on a lock after
another part was read fall back to the whole run (never a partial frame); parts equal one COPY on nasty values.
Checked by hand, no test (it locks pg_authid cluster-wide): a part's connect blocked at authentication gives up
after connect_timeout (psycopg ConnectionTimeout), so lock waits before ``SET LOCAL lock_timeout`` are bounded.
"""

from __future__ import annotations

import contextlib
import logging
import subprocess
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable
from typing import Any

import pandas as pd
import psycopg
import pyarrow as pa
import pytest
from pydantic import ValidationError
from sqlalchemy import text

import judge_api.db as db
from judge_api.config import get_settings, reset_settings_cache
from judge_api.db import reset_engines, session_scope
from judge_api.repository import frame_columns, frames

from .conftest import StoreRun
from .test_frame_parts import _finish, _frame, _store
from .test_frame_span import _ids

SQLITE = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
POSTGRESQL = pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)


def _set_readers(env: pytest.MonkeyPatch, count: int) -> None:
    env.setattr(frames, "available_cpus", lambda: 64)
    env.setenv("DJ_FRAME_READERS", str(count))
    reset_settings_cache()


def _admin(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://")


COUNT = (
    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
    "AND application_name <> 'r53b-count' AND backend_type = 'client backend'"
)


def _in_part() -> bool:
    return threading.current_thread().name.startswith("frame-part")


# ---------------------------------------------------------------------------------------------------- SQLite


@SQLITE
def test_sqlite_an_error_receiving_one_part_leaves_no_child_running_or_file_open(
    store_run: StoreRun, readers: Callable[[int], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    """FAILS. Severity: low-medium (processes reading the database and open memfds after the request failed; a
    KeyboardInterrupt in a dev server or a MemoryError in production). Promise: the children are received after they
    exit, their files closed (``_received``'s ``with``). Reproduction: the first part's ``_received`` raises."""
    run_id = _store(store_run, 20, "a")
    _finish(run_id)
    readers(3)
    started: list[Any] = []
    real_start = frame_columns._start_child

    def start(*args: Any) -> Any:
        child: Any = real_start(*args)
        if not started:  # the first child's wait is interrupted (KeyboardInterrupt, or any error in _received)
            real_wait = child.process.wait

            def interrupted(*a: Any, **k: Any) -> int:
                real_wait(*a, **k)
                raise KeyboardInterrupt

            child.process.wait = interrupted
        started.append(child)
        return child

    monkeypatch.setattr(frame_columns, "_start_child", start)
    try:
        with pytest.raises(KeyboardInterrupt):
            _frame(run_id)
        assert len(started) == 3
        assert started[0].stream.closed and started[0].messages.closed
        left = [
            (i, c.process.pid)
            for i, c in enumerate(started[1:], 1)
            if c.process.returncode is None or not c.stream.closed or not c.messages.closed
        ]
        assert not left, f"children not waited for or with files open after the parent raised: {left}"
    finally:
        for child in started:
            subprocess.Popen.wait(child.process)
            child.stream.close()
            child.messages.close()


@pytest.mark.parametrize("value", ["0", "17", "-1", "abc", "2.5", ""])
def test_frame_readers_out_of_bounds_is_a_config_error(settings_env: pytest.MonkeyPatch, value: str) -> None:
    """PASSES (held): DJ_FRAME_READERS outside 1..16 or not a whole number is a ValidationError naming it."""
    settings_env.setenv("DJ_FRAME_READERS", value)
    reset_settings_cache()
    with pytest.raises(ValidationError, match="DJ_FRAME_READERS"):
        get_settings()


# ---------------------------------------------------------------------------------------------------- PostgreSQL


@POSTGRESQL
def test_pg_parts_keep_the_process_within_its_pool_connection_budget(
    store_db: str, store_run: StoreRun, pg_parts: list[int], settings_env: pytest.MonkeyPatch
) -> None:
    """FAILS. Severity: medium. The pool (pool_size 10 + max_overflow 20) is what bounds a process's connections to
    the server, and max_connections is sized by it (processes x 30 + workers). The parts' ``dialect.connect`` is
    outside it: here a pool of 1 and one report make 4 connections at once; in production R reports at once take
    R x (1 + parts), and the server's "too many clients" then hits the pool's own connections elsewhere (the
    parts fall back, other requests get 500s). Reproduction: pool_size=1, max_overflow=0, DJ_FRAME_READERS=3."""
    real_create = db.create_engine

    def small_pool(url: Any, **kwargs: Any) -> Any:
        if "pool_size" in kwargs:
            kwargs.update(pool_size=1, max_overflow=0)
        return real_create(url, **kwargs)

    settings_env.setattr(db, "create_engine", small_pool)
    reset_engines()
    run_id = _store(store_run, 5, "a")
    _set_readers(settings_env, 3)
    barrier = threading.Barrier(3, timeout=10)
    peak: list[int] = []
    real_copy = frame_columns._copy_csv

    def counted(raw: Any, select: Any) -> pa.Table:
        if _in_part():
            barrier.wait()
            with psycopg.connect(_admin(store_db), autocommit=True, application_name="r53b-count") as conn:
                peak.append(conn.execute(COUNT).fetchone()[0])  # type: ignore[index]
            barrier.wait()
        return real_copy(raw, select)

    settings_env.setattr(frame_columns, "_copy_csv", counted)
    ids = _ids(run_id)  # the pool's one connection is open from here on
    with psycopg.connect(_admin(store_db), autocommit=True, application_name="r53b-count") as conn:
        before = conn.execute(COUNT).fetchone()[0]  # type: ignore[index]
    frame = _frame(run_id)
    assert pg_parts == [3]
    assert frame["judgment_id"].tolist() == ids
    # fixed as a bound: the parts' connections are outside the pool (a part waiting for a busy pool deadlocked,
    # r53a), and one read in parts at a time per process opens them: at most DJ_FRAME_READERS beyond the pool
    assert max(peak) - before <= 3, f"the read opened {max(peak) - before} connections beyond the pool's (of 1)"


@POSTGRESQL
def test_pg_the_session_survives_idle_in_transaction_timeout_while_parts_read(
    store_db: str, store_run: StoreRun, pg_parts: list[int], settings_env: pytest.MonkeyPatch
) -> None:
    """FAILS. Severity: medium (servers commonly set idle_in_transaction_session_timeout; a part of a large run
    reads for seconds). The session waits in Python, "idle in transaction", for the whole of the parts' read; past
    the timeout the server ends its connection and the report's next statement (or commit) fails: a 500 where one
    COPY kept the session busy. Reproduction: idle_in_transaction_session_timeout = 1 s, each part reads for 2 s
    (the sleep stands in for a large part's COPY)."""
    run_id = _store(store_run, 5, "a")
    _set_readers(settings_env, 2)
    expected_ids = _ids(run_id)
    with psycopg.connect(_admin(store_db), autocommit=True) as conn:
        name = conn.execute("SELECT current_database()").fetchone()[0]  # type: ignore[index]
        conn.execute(f'ALTER DATABASE "{name}" SET idle_in_transaction_session_timeout = 1000')
    reset_engines()  # new connections take the setting
    real_copy = frame_columns._copy_csv

    def slow_part(raw: Any, select: Any) -> pa.Table:
        if _in_part():  # busy on the server (not idle in its own transaction), as a long COPY is
            raw.execute("SELECT pg_sleep(2)")
        return real_copy(raw, select)

    settings_env.setattr(frame_columns, "_copy_csv", slow_part)
    error: BaseException | None = None
    try:
        with session_scope() as session:
            frame = frames.judgments_frame(session, run_id, readers=get_settings().frame_readers)
            session.execute(text("SELECT 1"))  # what the report does next with its session
    except Exception as caught:
        error = caught
    assert pg_parts == [2]
    assert error is None, f"the session was ended while it waited for the parts: {error!r}"
    assert frame["judgment_id"].tolist() == expected_ids


@POSTGRESQL
def test_pg_parts_connect_as_the_engine_does(
    store_db: str, store_run: StoreRun, pg_parts: list[int], settings_env: pytest.MonkeyPatch
) -> None:
    """PASSES (held). A DATABASE_URL with a password of special characters, a host list, application_name and
    options: each part's connect gets exactly the engine's arguments (plus connect_timeout 5 when the URL has
    none), and the server sees the parts under the URL's application_name and options."""
    run_id = _store(store_run, 5, "a")
    _set_readers(settings_env, 1)
    expected = _frame(run_id)
    parsed = urllib.parse.urlsplit(store_db)
    secret = "S3cr:t/p@ss#w%rd?&= x"
    query = urllib.parse.urlencode(
        [
            ("host", "127.0.0.1:5432"),
            ("host", "localhost:5432"),
            ("application_name", "dj-r53b"),
            ("options", "-c work_mem=7MB -c search_path=public"),
        ]
    )
    url = f"postgresql+psycopg://postgres:{urllib.parse.quote(secret, safe='')}@{parsed.path}?{query}"
    settings_env.setenv("DATABASE_URL", url)
    reset_settings_cache()
    reset_engines()
    _set_readers(settings_env, 3)
    calls: list[tuple[str, dict[str, Any]]] = []
    seen: list[tuple[str, str]] = []
    real_connect = psycopg.connect
    real_copy = frame_columns._copy_csv

    def spy(*args: Any, **kwargs: Any) -> Any:
        part = kwargs.get("connect_timeout") == frame_columns.PART_CONNECT_TIMEOUT_S  # opened before the threads
        calls.append(("part" if part else "engine", dict(kwargs)))
        return real_connect(*args, **kwargs)

    def observed(raw: Any, select: Any) -> pa.Table:
        if _in_part():
            row = raw.execute("SELECT current_setting('application_name'), current_setting('work_mem')").fetchone()
            seen.append(tuple(row))
        return real_copy(raw, select)

    settings_env.setattr(psycopg, "connect", spy)
    settings_env.setattr(frame_columns, "_copy_csv", observed)
    frame = _frame(run_id)
    assert pg_parts == [3]
    pd.testing.assert_frame_equal(frame, expected)
    engine_args = [kw for who, kw in calls if who == "engine"]
    part_args = [kw for who, kw in calls if who == "part"]
    assert engine_args and len(part_args) == 3
    for kw in part_args:
        assert kw.pop("connect_timeout") == frame_columns.PART_CONNECT_TIMEOUT_S
        assert kw == engine_args[0]
    assert engine_args[0]["password"] == secret
    assert seen == [("dj-r53b", "7MB")] * 3


@POSTGRESQL
def test_pg_parts_refused_by_a_connection_limit_fall_back_log_no_secret_and_leak_nothing(
    store_db: str,
    store_run: StoreRun,
    pg_parts: list[int],
    settings_env: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """PASSES (held). The service's role may open one connection (as when max_connections is reached): every part's
    connect is refused, the session reads the run itself, the frame equals one COPY's, the log says why without the
    URL's password, and no connection is left behind (only the pool's one)."""
    run_id = _store(store_run, 5, "a")
    _set_readers(settings_env, 1)
    expected = _frame(run_id)
    role = f"dj_r53b_{uuid.uuid4().hex[:8]}"
    secret = "Pa55:w/o@rd#%&?=secret"
    admin = _admin(store_db)
    with psycopg.connect(admin, autocommit=True) as conn:
        name = conn.execute("SELECT current_database()").fetchone()[0]  # type: ignore[index]
        conn.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{secret}' CONNECTION LIMIT 1")
        conn.execute(f"GRANT ALL ON ALL TABLES IN SCHEMA public TO {role}")
        conn.execute(f"GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO {role}")
    try:
        host = urllib.parse.urlsplit(store_db).netloc.split("@")[-1]
        settings_env.setenv(
            "DATABASE_URL", f"postgresql+psycopg://{role}:{urllib.parse.quote(secret, safe='')}@{host}/{name}"
        )
        _set_readers(settings_env, 3)
        reset_engines()
        with caplog.at_level(logging.DEBUG):
            frame = _frame(run_id)
        pd.testing.assert_frame_equal(frame, expected)
        assert pg_parts == [-1]
        assert "could not be opened" in caplog.text
        for shown in (secret, urllib.parse.quote(secret, safe=""), "Pa55"):
            assert shown not in caplog.text
        with psycopg.connect(admin, autocommit=True) as conn:
            count = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE usename = %s AND state <> 'idle'", (role,)
            ).fetchone()[0]  # type: ignore[index]
        assert count == 0
    finally:
        reset_engines()
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f"DROP OWNED BY {role}")
            conn.execute(f"DROP ROLE {role}")


@POSTGRESQL
def test_pg_parts_that_time_out_after_another_part_was_read_fall_back_to_the_whole_run(
    store_db: str, store_run: StoreRun, pg_parts: list[int], settings_env: pytest.MonkeyPatch
) -> None:
    """PASSES (held). The first part is read whole; then an ACCESS EXCLUSIVE lock is queued behind the session and
    the other parts' COPYs wait: each gives up after lock_timeout (1 s), the session reads the run itself, and the
    frame is exactly one COPY's (not the first part's rows, nor the first part twice)."""
    run_id = _store(store_run, 8, "a")
    _set_readers(settings_env, 1)
    expected = _frame(run_id)
    _set_readers(settings_env, 3)
    admin = _admin(store_db)
    real_copy = frame_columns._copy_csv
    first_done = threading.Event()
    locker_pid: list[int] = []

    def locker() -> None:
        with psycopg.connect(admin) as conn:
            locker_pid.append(conn.info.backend_pid)
            with contextlib.suppress(psycopg.errors.QueryCanceled):
                conn.execute("LOCK TABLE judgments IN ACCESS EXCLUSIVE MODE")
            conn.rollback()

    def queued(pid: int) -> bool:
        with psycopg.connect(admin, autocommit=True) as conn:
            row = conn.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()
            return row is not None and row[0] == "Lock"

    def ordered(raw: Any, select: Any) -> pa.Table:
        if not _in_part():
            return real_copy(raw, select)
        rendered = select.as_string(raw)
        if '"id" >=' not in rendered:  # the first part: read whole, then the lock is queued
            table = real_copy(raw, select)
            threading.Thread(target=locker, daemon=True).start()
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and not (locker_pid and queued(locker_pid[0])):
                time.sleep(0.05)
            first_done.set()
            return table
        first_done.wait(15)
        return real_copy(raw, select)

    settings_env.setattr(frame_columns, "_copy_csv", ordered)
    done: list[Any] = []
    started = time.monotonic()
    reader = threading.Thread(target=lambda: done.append(_frame(run_id)), daemon=True)
    reader.start()
    reader.join(20)
    elapsed = time.monotonic() - started
    if locker_pid:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute("SELECT pg_cancel_backend(%s)", (locker_pid[0],))
    reader.join(20)
    assert locker_pid, "the locker never started"
    assert elapsed < 20, "the read hung"
    assert pg_parts == [-1]
    pd.testing.assert_frame_equal(done[0], expected)


@POSTGRESQL
def test_pg_a_frame_read_after_an_sql_savepoint_falls_back(
    store_run: StoreRun, pg_parts: list[int], settings_env: pytest.MonkeyPatch
) -> None:
    """FAILS. Severity: low (no route issues SAVEPOINT as SQL today). The r53a fix checks
    ``connection.in_nested_transaction()``, SQLAlchemy's own savepoints only; a savepoint opened by SQL (or by
    another layer on the raw connection) passes the check, ``pg_export_snapshot()`` raises "cannot export a snapshot
    from a subtransaction" and the transaction is aborted: the read raises instead of falling back."""
    run_id = _store(store_run, 5, "a")
    _set_readers(settings_env, 1)
    expected = _frame(run_id)
    _set_readers(settings_env, 2)
    with session_scope() as session:
        session.execute(text("SAVEPOINT by_sql"))
        frame = frames.judgments_frame(session, run_id, readers=get_settings().frame_readers)
        session.execute(text("RELEASE SAVEPOINT by_sql"))
    pd.testing.assert_frame_equal(frame, expected)


def _pg_nasty(run_id: str) -> None:
    """Every nullable frame column NULL on some rows; strings with unicode, commas, quotes, newlines, backslashes,
    numbers as text and empty strings; floats NaN, infinities, -0.0, 1e308 and 5e-324."""
    ids = _ids(run_id)
    values: list[dict[str, Any]] = [
        {"item_key": 'a,"b"\nc', "judge": "ünï,cødé\r\n'x'", "aspect": "", "outcome": None, "score": float("nan")},
        {"item_key": "42", "judge": "042", "aspect": "NULL", "outcome": "\\N", "score": -0.0},
        {"item_key": "\\.", "judge": "😀", "aspect": "a\tb", "outcome": "", "score": float("inf")},
        {"item_key": " x ", "judge": '""', "aspect": "t", "outcome": "f", "latency_ms": 5e-324, "score": 1e308},
    ]
    with session_scope() as session:
        nullable = set(
            session.scalars(
                text(
                    "SELECT column_name FROM information_schema.columns WHERE table_name = 'judgments' "
                    "AND is_nullable = 'YES'"
                )
            )
        )
        frame_columns_ = {column for _, column, _ in frame_columns.COLUMNS}
        for index, judgment_id in enumerate(ids):
            row = dict(values[index % len(values)])
            if index % 5 == 1:
                row.update({c: None for c in nullable & frame_columns_})
            row = {c: v for c, v in row.items() if c in nullable or v is not None}
            sets = ", ".join(f'"{c}" = :{c}' for c in row)
            session.execute(text(f"UPDATE judgments SET {sets} WHERE id = :id"), {**row, "id": judgment_id})


@POSTGRESQL
@pytest.mark.parametrize("count", [2, 5, 16])
def test_pg_parts_equal_one_copy_on_nasty_values(
    store_run: StoreRun, pg_parts: list[int], settings_env: pytest.MonkeyPatch, count: int
) -> None:
    """PASSES (held). Interleaved runs, NULLs in every nullable column of some rows, CSV-hostile strings, special
    floats; readers more than the rows: the parts' frame is exactly one COPY's."""
    run_id = _store(store_run, 3, "a")
    _store(store_run, 2, "b")
    _pg_nasty(run_id)
    _set_readers(settings_env, 1)
    one_copy = _frame(run_id)
    _set_readers(settings_env, count)
    in_parts = _frame(run_id)
    assert pg_parts == [count]
    pd.testing.assert_frame_equal(in_parts, one_copy)
    assert in_parts["judgment_id"].tolist() == _ids(run_id)
