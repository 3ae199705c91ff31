"""Issue 39: on SQLite a finished run's frame is read by ``DJ_FRAME_READERS`` children at once, each a consecutive
part of the run's ids (``frame_columns.read_sqlite``). The parts give exactly the frame one child gives; they are
kept only when no write to the run committed while they were read; a running run, a failed part or one reader read
the run as before."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, cast

import pandas as pd
import pyarrow as pa
import pytest
from sqlalchemy import Table, text, update

from judge_api.config import get_settings, reset_settings_cache
from judge_api.db import session_scope
from judge_api.models import Judgment, Run, utcnow
from judge_api.repository import frame_columns, frames

from .conftest import StoreRun, item
from .test_frame_span import _append_copies, _ids

SQLITE = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
TABLE = cast(Table, Judgment.__table__)


def _store(store_run: StoreRun, n: int, prefix: str) -> str:
    items = [item(f"{prefix}{i}", {"a": f"Rex {i}.", "b": "No pets.", "c": "Max?"}) for i in range(n)]
    return store_run(items, rubrics=["rsum-single", "rsum-pairwise"], mode=["single", "pairwise"])


def _finish(run_id: str) -> None:
    with session_scope() as session:
        session.execute(update(Run).where(Run.id == run_id).values(finished_at=utcnow()))


def _frame(run_id: str) -> pd.DataFrame:
    with session_scope() as session:
        return frames.judgments_frame(session, run_id, readers=get_settings().frame_readers)


@SQLITE
@pytest.mark.parametrize("count", [2, 3, 7])
@pytest.mark.parametrize("interleaved", [False, True], ids=["contiguous", "among-another-run"])
@pytest.mark.parametrize("by_index", [False, True], ids=["span", "index"])
def test_a_finished_run_read_in_parts_equals_one_childs_read(
    store_run: StoreRun,
    readers: Callable[[int], None],
    parts_read: list[list[str]],
    monkeypatch: pytest.MonkeyPatch,
    count: int,
    interleaved: bool,
    by_index: bool,
) -> None:
    run_id = _store(store_run, 5, "a")
    if interleaved:
        _store(store_run, 3, "b")
        _append_copies(run_id, 4, "+late")  # the run's ids now span the other run's
    if by_index:
        monkeypatch.setattr(frame_columns, "SPAN_FACTOR", 0)
    _finish(run_id)
    readers(1)
    one_child = _frame(run_id)
    assert parts_read == []
    readers(count)
    in_parts = _frame(run_id)

    assert len(parts_read) == 1 and len(parts_read[0]) == count
    assert all(("+run_id" in where) != by_index for where in parts_read[0])
    pd.testing.assert_frame_equal(in_parts, one_child)
    assert in_parts["judgment_id"].tolist() == _ids(run_id)


@SQLITE
@pytest.mark.parametrize("count", [2, 4, 50])
def test_the_parts_cover_every_id_of_the_run_once_in_order_and_about_evenly(store_run: StoreRun, count: int) -> None:
    run_id = _store(store_run, 6, "a")
    _store(store_run, 2, "b")
    _append_copies(run_id, 5, "+late")
    ids = _ids(run_id)
    with session_scope() as session:
        connection = session.connection()
        id_range = frame_columns._id_range(connection, TABLE, run_id)
        wheres = frame_columns._part_wheres(connection, TABLE, run_id, id_range, count)
        parts = [
            [row[0] for row in connection.exec_driver_sql(f'SELECT "id" FROM judgments WHERE {w}', (run_id,))]
            for w in wheres
        ]
    assert id_range == (len(ids), ids[0], ids[-1])
    assert [i for part in parts for i in part] == ids  # each id once, the parts in order
    assert len(wheres) == min(count, len(ids))  # never an empty part
    sizes = [len(part) for part in parts]
    assert max(sizes) - min(sizes) <= 1


@SQLITE
def test_a_running_run_is_read_by_one_child(
    store_run: StoreRun, readers: Callable[[int], None], parts_read: list[list[str]]
) -> None:
    run_id = _store(store_run, 4, "a")
    readers(2)
    frame = _frame(run_id)
    assert parts_read == []  # its verdicts may commit out of stamp order: one snapshot, as before
    assert frame["judgment_id"].tolist() == _ids(run_id)


@SQLITE
@pytest.mark.parametrize("write", ["insert", "update", "delete"])
def test_a_write_while_the_parts_are_read_makes_one_child_read_the_run_again(
    store_run: StoreRun,
    readers: Callable[[int], None],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    write: str,
) -> None:
    run_id = _store(store_run, 5, "a")
    _finish(run_id)
    readers(2)
    real = frame_columns.read_sqlite_parts
    ids = _ids(run_id)

    def written_meanwhile(database: str, table: Table, run_id_: str, chunk: int, wheres: list[str]) -> Any:
        read = real(database, table, run_id_, chunk, wheres)
        with session_scope() as session:  # another connection commits after the parts' snapshots
            if write == "insert":
                session.commit()
                _append_copies(run_id, 1, "+meanwhile")
            elif write == "update":
                session.execute(update(Judgment).where(Judgment.id == ids[0]).values(score=42.0, updated_at=utcnow()))
            else:
                session.execute(text("DELETE FROM judgments WHERE id = :id"), {"id": ids[-1]})
        return read

    monkeypatch.setattr(frame_columns, "read_sqlite_parts", written_meanwhile)
    with caplog.at_level(logging.INFO, logger=frame_columns.__name__):
        frame = _frame(run_id)
    assert "was written while its parts were read" in caplog.text
    assert frame["judgment_id"].tolist() == _ids(run_id)  # the run as it is after the write
    if write == "update":
        assert frame.loc[frame["judgment_id"] == ids[0], "score"].tolist() == [42.0]


@SQLITE
def test_a_part_that_fails_makes_one_child_read_the_run(
    store_run: StoreRun, readers: Callable[[int], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = _store(store_run, 5, "a")
    _finish(run_id)
    readers(1)
    expected = _frame(run_id)
    readers(3)
    real = frame_columns._start_child
    calls: list[str] = []

    def second_part_fails(database: str, table: Table, run_id_: str, chunk: int, where: str) -> Any:
        calls.append(where)
        if len(calls) == 2:
            return None
        return real(database, table, run_id_, chunk, where)

    monkeypatch.setattr(frame_columns, "_start_child", second_part_fails)
    frame = _frame(run_id)
    assert len(calls) == 4  # three parts, then the run by one child
    pd.testing.assert_frame_equal(frame, expected)


POSTGRESQL = pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)


@POSTGRESQL
@pytest.mark.parametrize("count", [2, 3, 7])
@pytest.mark.parametrize("interleaved", [False, True], ids=["contiguous", "among-another-run"])
def test_postgresql_reads_a_run_in_parts_as_one_copy_does(
    store_run: StoreRun, pg_parts: list[int], settings_env: pytest.MonkeyPatch, count: int, interleaved: bool
) -> None:
    run_id = _store(store_run, 5, "a")
    if interleaved:
        _store(store_run, 3, "b")
        _append_copies(run_id, 4, "+late")
    settings_env.setenv("DJ_FRAME_READERS", "1")
    reset_settings_cache()
    one_copy = _frame(run_id)
    assert pg_parts == []
    settings_env.setenv("DJ_FRAME_READERS", str(count))
    reset_settings_cache()
    in_parts = _frame(run_id)
    assert pg_parts == [count]
    pd.testing.assert_frame_equal(in_parts, one_copy)
    assert in_parts["judgment_id"].tolist() == _ids(run_id)


@POSTGRESQL
def test_postgresql_parts_read_the_exporting_transactions_snapshot_not_a_later_commit(
    store_run: StoreRun, pg_parts: list[int], settings_env: pytest.MonkeyPatch
) -> None:
    """A write committed after the snapshot was exported, before the parts read, is in none of them: the frame is
    the run as one COPY at the export would have read it."""
    run_id = _store(store_run, 5, "a")
    ids = _ids(run_id)
    settings_env.setenv("DJ_FRAME_READERS", "2")
    reset_settings_cache()
    real_copy = frame_columns._copy_csv
    wrote: list[bool] = []

    def write_first(raw: Any, select: Any) -> pa.Table:
        if not wrote:
            wrote.append(True)
            with session_scope() as session:  # another connection, committed before any part reads
                session.execute(update(Judgment).where(Judgment.id == ids[0]).values(score=42.0))
                session.execute(text("DELETE FROM judgments WHERE id = :id"), {"id": ids[-1]})
        return real_copy(raw, select)

    settings_env.setattr(frame_columns, "_copy_csv", write_first)
    with session_scope() as session:
        before = frames.judgments_frame(session, run_id, readers=get_settings().frame_readers)
    assert pg_parts == [2] and wrote
    assert before["judgment_id"].tolist() == ids  # the deleted row is still there
    assert 42.0 not in before["score"].tolist()
    after = _frame(run_id)
    assert after["judgment_id"].tolist() == ids[:-1]
    assert after.loc[after["judgment_id"] == ids[0], "score"].tolist() == [42.0]


@POSTGRESQL
def test_postgresql_a_connection_that_wrote_reads_the_run_itself(
    store_run: StoreRun, pg_parts: list[int], settings_env: pytest.MonkeyPatch
) -> None:
    """The parts could not see this transaction's own uncommitted writes: it reads the run, and sees them."""
    run_id = _store(store_run, 5, "a")
    ids = _ids(run_id)
    settings_env.setenv("DJ_FRAME_READERS", "2")
    reset_settings_cache()
    with session_scope() as session:
        session.execute(update(Judgment).where(Judgment.id == ids[0]).values(score=42.0))
        frame = frames.judgments_frame(session, run_id, readers=get_settings().frame_readers)
        session.rollback()
    assert pg_parts == [-1]
    assert frame.loc[frame["judgment_id"] == ids[0], "score"].tolist() == [42.0]


@POSTGRESQL
def test_postgresql_a_part_that_fails_leaves_the_read_to_the_connection(
    store_run: StoreRun, pg_parts: list[int], settings_env: pytest.MonkeyPatch
) -> None:
    run_id = _store(store_run, 5, "a")
    settings_env.setenv("DJ_FRAME_READERS", "1")
    reset_settings_cache()
    expected = _frame(run_id)
    settings_env.setenv("DJ_FRAME_READERS", "3")
    reset_settings_cache()
    real_copy = frame_columns._copy_csv
    calls: list[int] = []

    def second_fails(raw: Any, select: Any) -> pa.Table:
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("the connection was lost")
        return real_copy(raw, select)

    settings_env.setattr(frame_columns, "_copy_csv", second_fails)
    frame = _frame(run_id)
    assert pg_parts == [-1] and len(calls) == 4  # three parts, then one COPY
    pd.testing.assert_frame_equal(frame, expected)
    with session_scope() as session:  # no part's connection was left in its transaction (the snapshot released)
        idle = "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND state LIKE 'idle in%'"
        assert session.execute(text(idle)).scalar() == 0


@SQLITE
@pytest.mark.parametrize("cpus", [1, 2, 3])
def test_no_more_readers_than_the_process_has_cpus(
    store_run: StoreRun,
    readers: Callable[[int], None],
    parts_read: list[list[str]],
    monkeypatch: pytest.MonkeyPatch,
    cpus: int,
) -> None:
    run_id = _store(store_run, 5, "a")
    _finish(run_id)
    monkeypatch.setattr(frames, "available_cpus", lambda: cpus)
    readers(16)
    frame = _frame(run_id)
    assert [len(wheres) for wheres in parts_read] == ([] if cpus == 1 else [cpus])
    assert frame["judgment_id"].tolist() == _ids(run_id)


def test_available_cpus_is_this_process_affinity() -> None:
    import os

    assert frames.available_cpus() == len(os.sched_getaffinity(0))


@POSTGRESQL
@pytest.mark.parametrize(("cpus", "parts"), [(1, -1), (2, -1), (3, -1), (4, 2), (9, 4)])
def test_postgresql_reads_one_part_per_two_cpus(
    store_run: StoreRun, settings_env: pytest.MonkeyPatch, cpus: int, parts: int
) -> None:
    """A COPY keeps two CPUs busy (the server writes, this process parses): fewer than four, and one COPY reads."""
    run_id = _store(store_run, 4, "a")
    settings_env.setattr(frame_columns, "PARALLEL_MIN_ROWS", 0)
    settings_env.setattr(frames, "available_cpus", lambda: cpus)
    settings_env.setenv("DJ_FRAME_READERS", "16")
    reset_settings_cache()
    asked: list[int] = []
    real = frame_columns.read_postgresql_parts

    def spy(connection: Any, table: Table, run_id_: str, readers: int) -> Any:
        asked.append(readers)
        return real(connection, table, run_id_, readers)

    settings_env.setattr(frame_columns, "read_postgresql_parts", spy)
    frame = _frame(run_id)
    assert asked == ([] if parts == -1 else [parts])
    assert frame["judgment_id"].tolist() == _ids(run_id)


@POSTGRESQL
def test_postgresql_one_read_in_parts_at_a_time_per_process(
    store_run: StoreRun, pg_parts: list[int], settings_env: pytest.MonkeyPatch
) -> None:
    """The parts' connections are outside the pool: while one read in parts holds them, another reads with its
    session's COPY, so a process opens at most DJ_FRAME_READERS connections beyond its pool."""
    run_id = _store(store_run, 5, "a")
    settings_env.setenv("DJ_FRAME_READERS", "2")
    reset_settings_cache()
    with frame_columns._PARTS_IN_FLIGHT:
        meanwhile = _frame(run_id)
    after = _frame(run_id)
    assert pg_parts == [-1, 2]
    pd.testing.assert_frame_equal(meanwhile, after)
