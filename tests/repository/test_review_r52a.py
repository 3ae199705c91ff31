"""Review r52a of 18da42a (issue 39): ``frame_columns.sqlite_where`` promises that the scan of a run's id range
reads the same frame as the index (``run_id = ?1``). Each test here failed on 1bf55d6."""

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
def test_the_span_compares_the_run_id_as_the_index_does(store_run: StoreRun, monkeypatch: pytest.MonkeyPatch) -> None:
    """BUG (review r52a, 18da42a, minor: run ids are strings in the service): the span's ``+run_id = ?1`` drops the
    column's TEXT affinity, so a run id bound as a number no longer equals the stored text, while the bounds'
    subqueries (``run_id = ?1``, with affinity) and the count still find the run: ``sqlite_where`` counts 6 rows,
    chooses the span, and the tuples read 0 rows where the index read gives all 6 (the ADBC child, which passes the
    id as a string, would give 6: the two readers disagree too). Promise broken: "the same frame as the index read"."""
    items = [item(f"a{i}", {"a": f"Rex {i}.", "b": "No pets."}) for i in range(3)]
    run_id = store_run(items, rubrics=["rsum-single"])
    with session_scope() as session:
        raw = session.connection().connection.driver_connection
        assert raw is not None
        raw.execute("PRAGMA foreign_keys = OFF")  # the run's judgments under a numeric-looking id
        raw.execute("UPDATE judgments SET run_id = '12345' WHERE run_id = ?", (run_id,))
        raw.commit()
    numeric: Any = 12345
    with session_scope() as session:
        connection = session.connection()
        rows, where = frame_columns.sqlite_where(connection, TABLE, numeric)
        by_index = frame_columns.read_sqlite_tuples(connection, TABLE, numeric, 4, frame_columns.BY_INDEX)
        assert rows == by_index.num_rows > 0
        assert where != frame_columns.BY_INDEX
        by_span = frame_columns.read_sqlite_tuples(connection, TABLE, numeric, 4, where)
    assert by_span.equals(by_index)
