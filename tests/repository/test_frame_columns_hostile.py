"""Review r39: the columnar frame reader against the row reader on hostile content (control characters, lone CR,
backslashes, astral unicode, a string that reads as a float, signed zero, infinities, the extremes of float64)."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from sqlalchemy import select, update

from judge_api.db import session_scope
from judge_api.models import Judgment
from judge_api.repository import frame_columns

from .conftest import StoreRun, item

STRINGS = ["a\rb", "\r\n", "\\N", "back\\slash", "tab\there", " ", "NaN", "t", "😀 ü \u2028", '"', ",", "\x01\x7f"]
FLOATS = [-0.0, math.inf, -math.inf, 1.7976931348623157e308, 5e-324, -5e-324, 123456789.12345679]


@pytest.mark.parametrize("through_child", [False, True])
def test_hostile_content_reads_the_same_through_the_columns_and_the_rows(
    store_run: StoreRun, monkeypatch: pytest.MonkeyPatch, through_child: bool
) -> None:
    from judge_api.repository import frames

    if through_child:  # on SQLite: ADBC's driver in a child process, whatever the run's size
        monkeypatch.setattr(frame_columns, "ARROW_CHILD_MIN_ROWS", 0)
    items = [item(f"i{i}", {"a": f"Rex {i}.", "b": "No pets.", "c": "Max?"}) for i in range(8)]
    run_id = store_run(items, rubrics=["rsum-single", "rsum-pairwise"], mode=["single", "pairwise"])
    with session_scope() as session:
        ids = session.scalars(select(Judgment.id).where(Judgment.run_id == run_id).order_by(Judgment.id)).all()
        assert len(ids) >= len(STRINGS) + len(FLOATS)
        for jid, text in zip(ids, STRINGS, strict=False):
            session.execute(
                update(Judgment).where(Judgment.id == jid).values(status="done", item_key=text, source=text)
            )
        for jid, value in zip(ids[len(STRINGS) :], FLOATS, strict=False):
            session.execute(
                update(Judgment).where(Judgment.id == jid).values(status="done", score=value, latency_ms=value)
            )
    with session_scope() as session:
        columnar = frames.judgments_frame(session, run_id)
        if through_child and session.connection().dialect.name == "sqlite":  # the child served, not the fallback
            table = Judgment.__table__
            assert frame_columns.read_sqlite_arrow(session.connection(), table, run_id) is not None  # type: ignore[arg-type]
        rows = frames._finish(frames._rows_frame(session, run_id))
    pd.testing.assert_frame_equal(columnar, rows)
    assert list(columnar["source"][: len(STRINGS)]) == STRINGS
    got = list(columnar["score"][len(STRINGS) : len(STRINGS) + len(FLOATS)])
    assert got == FLOATS  # (SQLite stores -0.0 as 0: the sign is the row reader's too, compared above)
