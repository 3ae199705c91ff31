"""Review r53a: hostile tests of the frame read in parts (62d9391, 99f796d).

Findings (each failed before its fix; the parts now take connections of their own, not the pool's, wait at
most 1 s for a lock, and are not read inside a savepoint):
- test_pg_parts_fall_back_when_the_pool_is_exhausted: a part's ``engine.raw_connection()`` is outside the part's
  ``try``; a busy pool raises ``sqlalchemy.exc.TimeoutError`` out of ``judgments_frame`` (a 500) after
  ``pool_timeout`` (30 s) instead of the session reading the run itself.
- test_pg_concurrent_reports_on_a_busy_pool_do_not_stall_and_fail: two reports whose sessions hold the pool's last
  connections wait for each other's parts: both stall for ``pool_timeout`` then raise.
- test_pg_parts_do_not_hang_behind_a_queued_exclusive_lock: the session holds ACCESS SHARE on judgments (its
  count(*) and cuts) while it waits, in Python, for the parts; a queued ACCESS EXCLUSIVE (migration, TRUNCATE,
  ALTER) waits for the session and the parts' ACCESS SHARE queues behind it: a deadlock PostgreSQL cannot see. The
  read hangs until the locker is cancelled, and every other query on judgments queues behind the locker meanwhile.
- test_pg_a_frame_read_inside_a_savepoint_falls_back: inside ``session.begin_nested()`` the unwritten check passes
  and ``pg_export_snapshot()`` raises "cannot export a snapshot from a subtransaction" (low: no route does so today).

Held from the start: the rest.
"""

from __future__ import annotations

import contextlib
import glob
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import pandas as pd
import psycopg
import pyarrow as pa
import pytest
from sqlalchemy import exc, text

from judge_api.config import get_settings, reset_settings_cache
from judge_api.db import get_engine, session_scope
from judge_api.repository import frame_columns, frames

from .conftest import StoreRun
from .test_frame_parts import _finish, _frame, _store
from .test_frame_span import _append_copies, _ids

SQLITE = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
POSTGRESQL = pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)


def _set_readers(env: pytest.MonkeyPatch, count: int) -> None:
    env.setattr(frames, "available_cpus", lambda: 64)  # the readers asked, whatever this machine's CPUs
    env.setenv("DJ_FRAME_READERS", str(count))
    reset_settings_cache()


# ---------------------------------------------------------------------------------------------------- PostgreSQL


@POSTGRESQL
def test_pg_parts_fall_back_when_the_pool_is_exhausted(
    store_run: StoreRun, pg_parts: list[int], settings_env: pytest.MonkeyPatch
) -> None:
    """Fixed (r53a). Severity: high. Every other connection of the pool (10 + 20 overflow) is held by other requests:
    the
    parts cannot get one. Promised: a part failing -> the session's own COPY. Got: TimeoutError out of
    judgments_frame (the route answers 500) after pool_timeout."""
    run_id = _store(store_run, 5, "a")
    _set_readers(settings_env, 1)
    expected = _frame(run_id)
    _set_readers(settings_env, 2)
    engine = get_engine()
    engine.pool._timeout = 1  # type: ignore[attr-defined]  # the default 30 s, shortened for the test
    held = []
    try:
        while True:
            try:
                held.append(engine.raw_connection())
            except exc.TimeoutError:
                break
        held.pop().close()  # one left: the session's
        with session_scope() as session:
            frame = frames.judgments_frame(session, run_id, readers=get_settings().frame_readers)
    finally:
        for connection in held:
            connection.close()
    pd.testing.assert_frame_equal(frame, expected)


@POSTGRESQL
def test_pg_concurrent_reports_on_a_busy_pool_do_not_stall_and_fail(
    store_run: StoreRun, pg_parts: list[int], settings_env: pytest.MonkeyPatch
) -> None:
    """Fixed (r53a). Severity: high. Two reports at once, the pool's other connections busy: each session holds one
    connection and waits for two more for its parts, which only the other's end would free."""
    run_id = _store(store_run, 5, "a")
    _set_readers(settings_env, 1)
    expected = _frame(run_id)
    _set_readers(settings_env, 2)
    engine = get_engine()
    engine.pool._timeout = 2  # type: ignore[attr-defined]
    held = []
    while True:
        try:
            held.append(engine.raw_connection())
        except exc.TimeoutError:
            break
    held.pop().close()
    held.pop().close()  # two left: the two sessions'
    barrier = threading.Barrier(2, timeout=10)
    real = frame_columns.read_postgresql_parts

    def both_sessions_connected(connection: Any, table: Any, run_id_: str, readers_: int) -> Any:
        barrier.wait()
        return real(connection, table, run_id_, readers_)

    settings_env.setattr(frame_columns, "read_postgresql_parts", both_sessions_connected)
    results: list[Any] = [None, None]

    def report(slot: int) -> None:
        try:
            results[slot] = _frame(run_id)
        except Exception as error:
            results[slot] = error

    try:
        threads = [threading.Thread(target=report, args=(slot,)) for slot in range(2)]
        started = time.monotonic()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        elapsed = time.monotonic() - started
    finally:
        for connection in held:
            connection.close()
    errors = [r for r in results if isinstance(r, BaseException)]
    assert not errors, f"reports failed after {elapsed:.1f} s: {errors!r}"
    for frame in results:
        pd.testing.assert_frame_equal(frame, expected)


@POSTGRESQL
def test_pg_parts_do_not_hang_behind_a_queued_exclusive_lock(
    store_run: StoreRun, pg_parts: list[int], settings_env: pytest.MonkeyPatch, store_db: str
) -> None:
    """Fixed (r53a). Severity: high (an API thread hangs for good, and all queries on judgments queue behind the
    locker)."""
    run_id = _store(store_run, 5, "a")
    _set_readers(settings_env, 2)
    dsn = store_db.replace("postgresql+psycopg://", "postgresql://")
    real_copy = frame_columns._copy_csv
    locker_pid: list[int] = []
    gate = threading.Lock()

    def locker() -> None:
        with psycopg.connect(dsn) as conn:
            locker_pid.append(conn.info.backend_pid)
            with contextlib.suppress(psycopg.errors.QueryCanceled):
                conn.execute("LOCK TABLE judgments IN ACCESS EXCLUSIVE MODE")
            conn.rollback()

    def waiting(pid: int) -> bool:
        with psycopg.connect(dsn, autocommit=True) as conn:
            row = conn.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()
            return row is not None and row[0] == "Lock"

    def copy_once_the_lock_is_queued(raw: Any, select: Any) -> pa.Table:
        with gate:
            if not locker_pid:
                threading.Thread(target=locker, daemon=True).start()
                deadline = time.monotonic() + 10
                while time.monotonic() < deadline and not (locker_pid and waiting(locker_pid[0])):
                    time.sleep(0.05)
        return real_copy(raw, select)

    settings_env.setattr(frame_columns, "_copy_csv", copy_once_the_lock_is_queued)
    done: list[Any] = []
    reader = threading.Thread(target=lambda: done.append(_frame(run_id)), daemon=True)
    reader.start()
    reader.join(15)
    hung = reader.is_alive()
    if locker_pid:  # unblock whatever waits, so the test cleans up
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("SELECT pg_cancel_backend(%s)", (locker_pid[0],))
    reader.join(30)
    assert locker_pid, "the locker never started"
    assert not hung, "the frame read hung behind a queued ACCESS EXCLUSIVE lock (undetectable deadlock)"
    assert done and done[0]["judgment_id"].tolist() == _ids(run_id)


@POSTGRESQL
def test_pg_a_part_failing_mid_copy_leaves_no_connection_in_a_transaction(
    store_run: StoreRun, pg_parts: list[int], settings_env: pytest.MonkeyPatch
) -> None:
    """PASSES (held). A part whose CSV parse fails after its COPY started: the session reads the run, the part's
    connection goes back to the pool usable and not idle in transaction."""
    run_id = _store(store_run, 40, "a")
    _set_readers(settings_env, 1)
    expected = _frame(run_id)
    _set_readers(settings_env, 3)
    real_readinto = frame_columns._CopyReader.readinto
    failed: list[str] = []

    def readinto(self: Any, buffer: Any) -> int:
        if not failed:  # the first read after arming is a part's (the parts come before any fallback)
            failed.append(threading.current_thread().name)
            real_readinto(self, buffer)
            raise OSError("the part's connection broke mid-COPY")
        return real_readinto(self, buffer)

    settings_env.setattr(frame_columns._CopyReader, "readinto", readinto)
    frame = _frame(run_id)
    assert failed and pg_parts == [-1]
    pd.testing.assert_frame_equal(frame, expected)
    settings_env.setattr(frame_columns._CopyReader, "readinto", real_readinto)
    for _ in range(5):  # the pool's connections still serve parts
        pd.testing.assert_frame_equal(_frame(run_id), expected)
    with session_scope() as session:
        idle = "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND state LIKE 'idle in%'"
        assert session.execute(text(idle)).scalar() == 0
    assert pg_parts[-5:] == [3] * 5


@POSTGRESQL
def test_pg_parts_in_a_repeatable_read_session_see_its_snapshot(
    store_run: StoreRun, pg_parts: list[int], settings_env: pytest.MonkeyPatch
) -> None:
    """Held. A repeatable-read session that read before a commit sees its snapshot. Since review r53b the parts export
    their own snapshot, which is a read-committed session's; a repeatable-read session reads with its own COPY."""
    run_id = _store(store_run, 6, "a")
    ids = _ids(run_id)
    _set_readers(settings_env, 3)
    with session_scope() as session:
        session.connection(execution_options={"isolation_level": "REPEATABLE READ"})
        session.execute(text("SELECT count(*) FROM judgments")).scalar()
        with session_scope() as other:
            other.execute(text("DELETE FROM judgments WHERE id = :id"), {"id": ids[2]})
        frame = frames.judgments_frame(session, run_id, readers=get_settings().frame_readers)
    assert pg_parts == [-1]
    assert frame["judgment_id"].tolist() == ids


# ---------------------------------------------------------------------------------------------------- SQLite


def _nasty(run_id: str) -> None:
    """Every frame column NULL on some rows, strings with unicode, commas, quotes, newlines, numbers as text."""
    ids = _ids(run_id)
    values = [
        {"item_key": 'a,"b"\nc', "judge": "ünï,cødé\r\n'x'", "aspect": "", "outcome": None, "score": None},
        {"item_key": "42", "judge": "042", "aspect": "NULL", "outcome": "\\N", "score": -0.0},
        {"item_key": "\u0000x", "judge": "😀", "aspect": "a\tb", "outcome": "", "score": 1e308},
    ]
    nullable = [
        "mode", "system_a", "system_b", "rubric_version", "order", "sample_index", "status", "score", "preference",
        "outcome", "len_a", "len_b", "input_tokens", "output_tokens", "latency_ms", "cost_usd", "source",
        "cached_input_tokens", "cache_write_tokens", "list_cost_usd", "cache_saved_usd", "provider_calls",
        "scale_min", "scale_max",
    ]  # fmt: skip
    with session_scope() as session:
        notnull = {row[1] for row in session.execute(text("PRAGMA table_info(judgments)")).all() if row[3]}
        for index, judgment_id in enumerate(ids):
            row: dict[str, Any] = dict(cast(dict[str, Any], values[index % len(values)]))
            if index % 4 == 1:
                row.update({c: None for c in nullable if c not in notnull})
            sets = ", ".join(f'"{c}" = :{c}' for c in row if c not in notnull or row[c] is not None)
            session.execute(text(f"UPDATE judgments SET {sets} WHERE id = :id"), {**row, "id": judgment_id})


@SQLITE
@pytest.mark.parametrize("count", [2, 5, 16])
def test_sqlite_parts_equal_one_child_and_the_tuples_on_nasty_values(
    store_run: StoreRun,
    readers: Callable[[int], None],
    parts_read: list[list[str]],
    settings_env: pytest.MonkeyPatch,
    count: int,
) -> None:
    """PASSES (held). Interleaved runs, gaps, NULLs, unicode/commas/newlines/quotes, numeric-looking strings,
    readers larger than the rows."""
    run_id = _store(store_run, 4, "a")
    _store(store_run, 2, "b")
    _append_copies(run_id, 3, "+late")
    with session_scope() as session:  # gaps
        session.execute(text("DELETE FROM judgments WHERE id = :id"), {"id": _ids(run_id)[3]})
    _nasty(run_id)
    _finish(run_id)
    readers(1)
    one_child = _frame(run_id)
    readers(count)
    in_parts = _frame(run_id)
    assert parts_read and len(parts_read[-1]) == min(count, len(_ids(run_id)))
    settings_env.setattr(frame_columns, "ARROW_CHILD_MIN_ROWS", 10**9)
    tuples = _frame(run_id)
    pd.testing.assert_frame_equal(in_parts, one_child)
    pd.testing.assert_frame_equal(in_parts, tuples)
    assert in_parts["judgment_id"].tolist() == _ids(run_id)


def _fds() -> set[str]:
    return {os.readlink(f) for f in glob.glob("/proc/self/fd/*") if os.path.exists(f)}


def _fd_count() -> int:
    return len(os.listdir("/proc/self/fd"))


def _zombies() -> list[str]:
    me = str(os.getpid())
    found = []
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            fields = Path(stat).read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] == "Z" and fields[1] == me:
            found.append(stat)
    return found


def _maps() -> int:
    return sum("dj-frame" in line for line in Path("/proc/self/maps").read_text().splitlines())


@SQLITE
@pytest.mark.parametrize(
    "child",
    ["ok", "exit0-nothing", "exit0-truncated", "killed", "exit0-wrong-count"],
)
def test_sqlite_parts_leak_no_fd_mmap_or_zombie(
    store_run: StoreRun,
    readers: Callable[[int], None],
    settings_env: pytest.MonkeyPatch,
    tmp_path: Path,
    child: str,
) -> None:
    """PASSES (held). Many reads, children that serve or fail in each way: no fd, memfd mapping or zombie left."""
    run_id = _store(store_run, 5, "a")
    _finish(run_id)
    readers(1)
    expected = _frame(run_id)
    readers(3)
    real = frame_columns._CHILD
    if child != "ok":
        script = tmp_path / "child.py"
        body = {
            "exit0-nothing": "import sys\nprint('rows sent: 0', file=sys.stderr)\n",
            "exit0-truncated": (
                "import subprocess, sys\n"
                f"p = subprocess.run([sys.executable, '-I', {str(real)!r}, *sys.argv[1:]], capture_output=True)\n"
                "sys.stdout.buffer.write(p.stdout[: len(p.stdout) // 2])\n"
                "sys.stderr.write(p.stderr.decode())\n"
            ),
            "killed": "import os, signal, sys\nsys.stdout.buffer.write(b'x' * 100)\nos.kill(os.getpid(), 9)\n",
            "exit0-wrong-count": (
                "import subprocess, sys\n"
                f"p = subprocess.run([sys.executable, '-I', {str(real)!r}, *sys.argv[1:]], capture_output=True)\n"
                "sys.stdout.buffer.write(p.stdout)\n"
                "print('rows sent: 99999', file=sys.stderr)\n"
            ),
        }[child]
        script.write_text(body)
        settings_env.setattr(frame_columns, "_CHILD", script)
    _frame(run_id)  # warm (imports, engine)
    import gc

    gc.collect()
    fds, count, maps = _fds(), _fd_count(), _maps()
    for _ in range(8):
        frame = _frame(run_id)
        pd.testing.assert_frame_equal(frame, expected)
    del frame
    gc.collect()
    assert _fd_count() <= count, sorted(_fds() - fds)
    assert _maps() <= maps
    assert not _zombies()


@SQLITE
def test_sqlite_a_running_run_made_finished_meanwhile_is_not_read_in_parts(
    store_run: StoreRun, readers: Callable[[int], None], parts_read: list[list[str]], settings_env: pytest.MonkeyPatch
) -> None:
    """PASSES (held). The run is finished between the state read and the plan: the state before is None, no parts."""
    run_id = _store(store_run, 4, "a")
    readers(2)
    real = frame_columns._id_range

    def finished_meanwhile(connection: Any, table: Any, run_id_: str) -> Any:
        _finish(run_id)
        return real(connection, table, run_id_)

    settings_env.setattr(frame_columns, "_id_range", finished_meanwhile)
    frame = _frame(run_id)
    assert parts_read == []
    assert frame["judgment_id"].tolist() == _ids(run_id)


@SQLITE
@pytest.mark.parametrize("write", ["retry", "delete-run-row-judgments", "reinsert-same-ids"])
def test_sqlite_writes_between_plan_and_parts_are_seen(
    store_run: StoreRun,
    readers: Callable[[int], None],
    settings_env: pytest.MonkeyPatch,
    write: str,
) -> None:
    """PASSES (held). Writes committed after the cuts were found, before the children read: the frame is never a
    mix (compared with the run read after)."""
    run_id = _store(store_run, 6, "a")
    _finish(run_id)
    readers(3)
    ids = _ids(run_id)
    real = frame_columns.read_sqlite_parts

    def written(database: str, table: Any, run_id_: str, chunk: int, wheres: list[str]) -> Any:
        first = real(database, table, run_id_, chunk, wheres[:1])
        with session_scope() as session:
            if write == "retry":
                from judge_api.repository.runs import retry_failed

                session.execute(
                    text("UPDATE judgments SET status = 'failed', source = NULL WHERE id = :id"), {"id": ids[-1]}
                )
                session.commit()
                retry_failed(session, run_id)
            elif write == "delete-run-row-judgments":
                session.execute(text("DELETE FROM judgments WHERE id IN (:a, :b)"), {"a": ids[0], "b": ids[-1]})
            else:  # the same ids, other values, same updated_at
                names = [c.name for c in table.columns]
                quoted = ", ".join(f'"{n}"' for n in names)
                rows = session.execute(text(f"SELECT {quoted} FROM judgments WHERE id = :id"), {"id": ids[-1]}).all()
                session.execute(text("DELETE FROM judgments WHERE id = :id"), {"id": ids[-1]})
                row = dict(zip(names, rows[0], strict=True))
                row["score"] = 77.0
                marks = ", ".join(f":{n}" for n in names)
                session.execute(text(f"INSERT INTO judgments ({quoted}) VALUES ({marks})"), row)
        rest = real(database, table, run_id_, chunk, wheres[1:])
        return None if first is None or rest is None else pa.concat_tables([first, rest])

    settings_env.setattr(frame_columns, "read_sqlite_parts", written)
    frame = _frame(run_id)
    readers(1)
    after = _frame(run_id)
    pd.testing.assert_frame_equal(frame, after)


@POSTGRESQL
def test_pg_a_frame_read_inside_a_savepoint_falls_back(
    store_run: StoreRun, pg_parts: list[int], settings_env: pytest.MonkeyPatch
) -> None:
    """Fixed (r53a). Severity: low (no route reads the frame inside ``begin_nested`` today; report_cache and webhooks
    use
    savepoints). A subtransaction that has not written passes the ``pg_current_xact_id_if_assigned() IS NULL``
    check, then ``pg_export_snapshot()`` raises "cannot export a snapshot from a subtransaction" on the session's
    own connection: the read raises (and the savepoint is left aborted) instead of the session's COPY."""
    run_id = _store(store_run, 5, "a")
    _set_readers(settings_env, 1)
    expected = _frame(run_id)
    _set_readers(settings_env, 2)
    with session_scope() as session, session.begin_nested():
        frame = frames.judgments_frame(session, run_id, readers=get_settings().frame_readers)
    pd.testing.assert_frame_equal(frame, expected)
