"""Review r52c of 2e7a36c (issue 39): the span read (``+run_id = CAST(?1 AS TEXT)``) gives exactly the rows of the
index read (``run_id = ?1``) for every run id (str, numeric-looking strings, a Python int, unicode), by the ADBC
child (``read_sqlite_arrow``) and by ``read_sqlite_tuples``. Each test here fails on 2e7a36c."""

from __future__ import annotations

from typing import Any, cast

import pytest
from sqlalchemy import Table

from judge_api.db import session_scope
from judge_api.models import Judgment
from judge_api.repository import frame_columns

from .conftest import StoreRun, item

SQLITE = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
TABLE = cast(Table, Judgment.__table__)


@SQLITE
@pytest.mark.parametrize("numeric", [12345, 12345.0], ids=["int", "float"])
def test_the_adbc_child_reads_a_numeric_run_id_as_the_tuples_do(store_run: StoreRun, numeric: Any) -> None:
    """BUG (review r52c, 2e7a36c, minor: the service's run ids are strings): promise "the span read gives exactly
    the rows the index read gives for every run id ... a Python int ... via both the ADBC child and
    ``read_sqlite_tuples``". The tuples read 6 rows for the run stored as '12345' / '12345.0' by the index and by
    the span alike, but ``read_sqlite_arrow`` passes the id to ``subprocess.Popen`` as it is: a non-str argument
    raises ``TypeError`` ("expected str, bytes or os.PathLike object, not int"), which its ``except (OSError,
    ValueError)`` does not catch, so ``read_sqlite`` (and ``judgments_frame`` on a file database, for a run of
    ``ARROW_CHILD_MIN_ROWS`` rows or more) raises instead of giving the rows or falling back to the tuples
    (its docstring: None "when it cannot serve")."""
    items = [item(f"a{i}", {"a": f"Rex {i}.", "b": "No pets."}) for i in range(3)]
    run_id = store_run(items, rubrics=["rsum-single"])
    with session_scope() as session:
        raw = session.connection().connection.driver_connection
        assert raw is not None
        raw.execute("PRAGMA foreign_keys = OFF")
        raw.execute("UPDATE judgments SET run_id = ? WHERE run_id = ?", (str(numeric), run_id))
        raw.commit()
    with session_scope() as session:
        connection = session.connection()
        rows, where = frame_columns.sqlite_where(connection, TABLE, numeric)
        by_index = frame_columns.read_sqlite_tuples(connection, TABLE, numeric, 4, frame_columns.BY_INDEX)
        by_span = frame_columns.read_sqlite_tuples(connection, TABLE, numeric, 4, where)
    assert rows == by_index.num_rows == 6 and by_span.equals(by_index)
    with session_scope() as session:  # outside a transaction: the child may serve
        connection = session.connection()
        for read_by in (frame_columns.BY_INDEX, where):
            arrow = frame_columns.read_sqlite_arrow(connection, TABLE, numeric, 4, read_by)  # TypeError
            # the same values (the child's batches carry their own dictionaries, as in test_frame_adbc)
            assert arrow is None or arrow.to_pylist() == by_index.to_pylist()
        assert frame_columns.read_sqlite(connection, TABLE, numeric, 4).to_pylist() == by_index.to_pylist()
