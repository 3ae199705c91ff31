"""Issue 39: on SQLite the run's judgments are read through ADBC's driver (Arrow batches filled in C) when another
connection can read what the session would, and from the driver's tuples otherwise; both give the same frame."""

from __future__ import annotations

from typing import Any, cast

import pandas as pd
import pytest
from sqlalchemy import Table, select, text, update

from judge_api.db import session_scope
from judge_api.models import Judgment
from judge_api.repository import frame_columns, frames

from .conftest import StoreRun, item

SQLITE = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)

TABLE = cast(Table, Judgment.__table__)


@pytest.fixture(autouse=True)
def every_run_through_the_child(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(frame_columns, "ARROW_CHILD_MIN_ROWS", 0)


def _run(store_run: StoreRun, n: int = 6) -> tuple[str, list[int]]:
    items = [item(f"i{i}", {"a": f"Rex {i}.", "b": "No pets.", "c": "Max?"}) for i in range(n)]
    run_id = store_run(items, rubrics=["rsum-single", "rsum-pairwise"], mode=["single", "pairwise"])
    with session_scope() as session:
        ids = list(session.scalars(select(Judgment.id).where(Judgment.run_id == run_id).order_by(Judgment.id)))
    return run_id, ids


def _served_by(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Records, per read, whether ADBC's driver served it."""
    served: list[bool] = []
    real = frame_columns.read_sqlite_arrow

    def spy(*args: Any, **kwargs: Any) -> Any:
        table = real(*args, **kwargs)
        served.append(table is not None)
        return table

    monkeypatch.setattr(frame_columns, "read_sqlite_arrow", spy)
    return served


@SQLITE
def test_adbc_reads_the_frame_the_tuples_give_with_null_first_batches(
    store_run: StoreRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Batches of two rows: the first batches hold only NULL in the columns whose values come later (latency, a
    source, a judgment's own scale, a pairwise order), which the driver would have inferred as integers."""
    run_id, ids = _run(store_run)
    with session_scope() as session:
        last = ids[-1]
        session.execute(
            update(Judgment)
            .where(Judgment.id == last)
            .values(status="done", score=0.25, latency_ms=12.5, source="x", scale_min=0.0, scale_max=7.5, cached=True)
        )
    with session_scope() as session:
        rows = frames._finish(frames._rows_frame(session, run_id))  # in one chunk
        tuples = frame_columns.read_sqlite_tuples(session.connection(), TABLE, run_id, 2)
    served = _served_by(monkeypatch)
    monkeypatch.setattr(frames, "FRAME_CHUNK", 2)
    with session_scope() as session:
        adbc = frames.judgments_frame(session, run_id)
        table = frame_columns.read_sqlite_arrow(session.connection(), TABLE, run_id, 2)
    assert served == [True, True] and table is not None
    pd.testing.assert_frame_equal(adbc, rows)
    assert table.to_pylist() == tuples.to_pylist() and table.to_batches()[0].num_rows == 1  # 2 rows less the first
    final = adbc.iloc[-1]
    assert (final["latency_ms"], final["source"], final["scale_max"], final["cached"]) == (12.5, "x", 7.5, True)
    assert adbc["judgment_id"].tolist() == ids  # the typed first row is gone, the order is the ids'


@SQLITE
def test_a_session_with_its_own_uncommitted_writes_reads_them(
    store_run: StoreRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write not yet committed is seen only by its connection: the frame then comes from that connection."""
    run_id, ids = _run(store_run)
    served = _served_by(monkeypatch)
    with session_scope() as session:
        session.execute(update(Judgment).where(Judgment.id == ids[0]).values(status="done", score=42.0))
        assert frame_columns.adbc_database(session.connection()) is None
        frame = frames.judgments_frame(session, run_id)
        session.rollback()
    with session_scope() as session:
        assert frame_columns.adbc_database(session.connection()) is not None  # outside a transaction
    assert served == []
    assert frame.iloc[0]["score"] == 42.0 and frame.iloc[0]["status"] == "done"


@SQLITE
def test_a_value_of_another_type_than_its_column_falls_back_to_the_tuples(
    store_run: StoreRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite keeps what it is given: a real number in an integer column (a raw write) makes ADBC's batch another
    type; the reader then reads the tuples, which say what they always said about it."""
    run_id, ids = _run(store_run)
    with session_scope() as session:
        session.execute(text("UPDATE judgments SET len_a = 2.5 WHERE id = :id"), {"id": ids[-1]})
    with session_scope() as session:
        connection = session.connection()
        assert frame_columns.read_sqlite_arrow(connection, TABLE, run_id, 2) is None
        tuples = frame_columns.read_sqlite_tuples(connection, TABLE, run_id, 2)
        assert frame_columns.read_sqlite(connection, TABLE, run_id, 2).equals(tuples)


@SQLITE
def test_text_in_a_number_column_falls_back(store_run: StoreRun) -> None:
    run_id, ids = _run(store_run)
    with session_scope() as session:
        session.execute(text("UPDATE judgments SET input_tokens = 'many' WHERE id = :id"), {"id": ids[3]})
    with session_scope() as session:
        assert frame_columns.read_sqlite_arrow(session.connection(), TABLE, run_id, 4) is None


@SQLITE
def test_an_empty_run_reads_as_an_empty_table(store_run: StoreRun) -> None:
    with session_scope() as session:
        table = frame_columns.read_sqlite_arrow(session.connection(), TABLE, "no-such-run", 4)
    assert table is not None and table.num_rows == 0 and table.schema == frame_columns._schema()


def test_an_in_memory_database_is_read_by_its_own_connection() -> None:
    from sqlalchemy import create_engine

    engine = create_engine("sqlite://")
    with engine.connect() as connection:
        assert frame_columns.adbc_database(connection) is None


@SQLITE
def test_a_stored_row_with_the_typed_rows_id_falls_back(store_run: StoreRun) -> None:
    """The typed first row has the smallest id; a stored row with that id (a raw write) would make the order between
    them ambiguous: the child refuses, the tuples serve."""
    run_id, ids = _run(store_run)
    with session_scope() as session:
        session.execute(text("UPDATE judgments SET id = :low WHERE id = :id"), {"low": -(2**63), "id": ids[2]})
    with session_scope() as session:
        connection = session.connection()
        assert frame_columns.read_sqlite_arrow(connection, TABLE, run_id, 4) is None
        table = frame_columns.read_sqlite(connection, TABLE, run_id, 4)
        assert table.equals(frame_columns.read_sqlite_tuples(connection, TABLE, run_id, 4))
    assert table.column("judgment_id")[0].as_py() == -(2**63) and table.num_rows == len(ids)


@SQLITE
def test_no_temporary_file_falls_back(store_run: StoreRun, monkeypatch: pytest.MonkeyPatch) -> None:
    """A service whose temporary directory cannot be written (a read-only container) reads the tuples, no 500."""
    run_id, ids = _run(store_run)

    def refused(*args: Any, **kwargs: Any) -> Any:
        raise PermissionError(13, "read-only file system")

    monkeypatch.setattr(frame_columns.tempfile, "TemporaryFile", refused)
    with session_scope() as session:
        connection = session.connection()
        assert frame_columns.read_sqlite_arrow(connection, TABLE, run_id) is None
        assert frame_columns.read_sqlite(connection, TABLE, run_id).num_rows == len(ids)
