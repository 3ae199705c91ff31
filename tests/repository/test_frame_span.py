"""Issue 39: on SQLite a run whose ids lie close together is read by a scan of its id range, not by a search of the
table per row through the index on ``run_id`` (``frame_columns.sqlite_where``). Both read exactly the run's rows,
in id order, through ADBC's child and through the tuples alike."""

from __future__ import annotations

from typing import cast

import pandas as pd
import pytest
from sqlalchemy import Table, select, text

from judge_api.db import session_scope
from judge_api.models import Judgment
from judge_api.repository import frame_columns, frames

from .conftest import StoreRun, item

SQLITE = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
TABLE = cast(Table, Judgment.__table__)


def _store(store_run: StoreRun, n: int, prefix: str) -> str:
    items = [item(f"{prefix}{i}", {"a": f"Rex {i}.", "b": "No pets.", "c": "Max?"}) for i in range(n)]
    return store_run(items, rubrics=["rsum-single", "rsum-pairwise"], mode=["single", "pairwise"])


def _ids(run_id: str) -> list[int]:
    with session_scope() as session:
        return list(session.scalars(select(Judgment.id).where(Judgment.run_id == run_id).order_by(Judgment.id)))


def _append_copies(run_id: str, count: int, tag: str) -> None:
    """``count`` more judgments of the run, stored after every row there is now (copies of its first ones)."""
    names = [c.name for c in TABLE.columns if c.name not in ("id", "dedup_key")]
    quoted = ", ".join(f'"{n}"' for n in names)
    with session_scope() as session:
        for source in _ids(run_id)[:count]:
            session.execute(
                text(
                    f"INSERT INTO judgments (dedup_key, {quoted}) "
                    f"SELECT dedup_key || :tag, {quoted} FROM judgments WHERE id = :id"
                ),
                {"tag": tag, "id": source},
            )


def _frame(run_id: str, *, child: bool, monkeypatch: pytest.MonkeyPatch) -> pd.DataFrame:
    monkeypatch.setattr(frame_columns, "ARROW_CHILD_MIN_ROWS", 0 if child else 10**12)
    with session_scope() as session:
        return frames.judgments_frame(session, run_id)


def _where(run_id: str) -> tuple[int, str]:
    with session_scope() as session:
        return frame_columns.sqlite_where(session.connection(), TABLE, run_id)


@SQLITE
@pytest.mark.parametrize("child", [True, False], ids=["adbc-child", "tuples"])
def test_a_run_among_another_runs_rows_is_read_by_its_span_and_gets_only_its_rows(
    store_run: StoreRun, monkeypatch: pytest.MonkeyPatch, child: bool
) -> None:
    first = _store(store_run, 4, "a")
    other = _store(store_run, 4, "b")
    _append_copies(first, 3, "+late")  # the first run's ids now span the other run's
    ids, other_ids = _ids(first), set(_ids(other))
    assert min(other_ids) > min(ids) and max(other_ids) < max(ids)
    rows, where = _where(first)
    assert rows == len(ids) and where != frame_columns.BY_INDEX

    by_span = _frame(first, child=child, monkeypatch=monkeypatch)
    monkeypatch.setattr(frame_columns, "SPAN_FACTOR", 0)  # every run by the index, as before
    assert _where(first)[1] == frame_columns.BY_INDEX
    by_index = _frame(first, child=child, monkeypatch=monkeypatch)

    pd.testing.assert_frame_equal(by_span, by_index)
    assert by_span["judgment_id"].tolist() == ids  # the run's rows, in id order, none of the other run's
    assert set(by_span["item_id"]) == {f"a{i}" for i in range(4)}


@SQLITE
def test_a_run_whose_ids_are_spread_wide_is_read_by_the_index(
    store_run: StoreRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = _store(store_run, 1, "a")
    _store(store_run, 12, "b")  # many more rows between the first run's
    _append_copies(first, 1, "+late")
    ids = _ids(first)
    rows, where = _where(first)
    assert rows == len(ids) and max(ids) - min(ids) + 1 > frame_columns.SPAN_FACTOR * rows
    assert where == frame_columns.BY_INDEX
    for child in (True, False):
        assert _frame(first, child=child, monkeypatch=monkeypatch)["judgment_id"].tolist() == ids


@SQLITE
def test_the_span_is_bounded_when_the_rows_are_read_not_when_the_plan_is_chosen(store_run: StoreRun) -> None:
    """A row the run gains after the plan was chosen, stored past its last id then, is read: the bounds are
    subqueries of the statement that reads the rows (one snapshot), not numbers taken before it."""
    run_id = _store(store_run, 2, "a")
    _, where = _where(run_id)
    assert where != frame_columns.BY_INDEX
    _append_copies(run_id, 1, "+after-the-plan")
    with session_scope() as session:
        connection = session.connection()
        tuples = frame_columns.read_sqlite_tuples(connection, TABLE, run_id, 3, where)
        arrow = frame_columns.read_sqlite_arrow(connection, TABLE, run_id, 3, where)
    assert arrow is not None
    assert tuples.column("judgment_id").to_pylist() == _ids(run_id) == arrow.column("judgment_id").to_pylist()


@SQLITE
def test_a_run_without_judgments_is_read_by_the_index_and_gives_an_empty_frame(
    store_run: StoreRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _where("run_none") == (0, frame_columns.BY_INDEX)
    _store(store_run, 1, "a")
    assert _frame("run_none", child=False, monkeypatch=monkeypatch).empty
