"""Report frames (judge_api.repository.frames) and human ratings (judge_api.repository.ratings)."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest
from sqlalchemy import select, update

from judge_api import repository
from judge_api.db import session_scope
from judge_api.models import Judgment
from judge_api.repository import frame_columns
from judge_api.schemas import HumanRatingIn

from .conftest import StoreRun, item


def test_judgments_frame_has_the_contract_columns_and_the_stored_values(store_run: StoreRun) -> None:
    run_id = store_run()
    with session_scope() as session:
        first = session.scalars(select(Judgment.id).where(Judgment.run_id == run_id).order_by(Judgment.id)).first()
        session.execute(update(Judgment).where(Judgment.id == first).values(status="done", score=64.0))
    with session_scope() as session:
        frame = repository.judgments_frame(session, run_id)
    assert set(repository.JUDGMENT_FRAME_COLUMNS) <= set(frame.columns)
    assert len(frame) == 2 and set(frame["system_a"]) == {"a", "b"}
    done = frame[frame["status"] == "done"]
    assert list(done["score"]) == [64.0] and list(done["item_id"]) == ["i1"]
    assert list(frame["len_a"].sort_values()) == sorted([len("Rex is a beagle."), len("I have no pets.")])


def test_ratings_upsert_replaces_the_same_rater_and_the_frame_reads_them(store_run: StoreRun) -> None:
    run_id = store_run()
    rating: dict[str, Any] = {
        "item_id": "i1",
        "system": "a",
        "aspect": "consistency",
        "rater": "r1",
        "scale_min": 0,
        "scale_max": 2,
    }
    with session_scope() as session:
        assert repository.upsert_ratings(session, run_id, [HumanRatingIn(**rating, value=1)]) == (1, 0)
    with session_scope() as session:
        again = [HumanRatingIn(**rating, value=2), HumanRatingIn(**{**rating, "rater": "r2"}, value=0)]
        assert repository.upsert_ratings(session, run_id, again) == (1, 1)
    with session_scope() as session:
        frame = repository.ratings_frame(session, run_id)
    assert set(repository.RATING_FRAME_COLUMNS) <= set(frame.columns)
    assert sorted(zip(frame["rater"], frame["value"], strict=True)) == [("r1", 2.0), ("r2", 0.0)]
    assert set(frame["scale_max"]) == {2.0}


def test_judgments_frame_read_in_chunks_is_the_frame_read_at_once(
    store_run: StoreRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 39: the frame is built chunk by chunk (flat memory); any chunk size gives the same frame."""
    from judge_api.repository import frames

    items = [item(f"i{i}", {"a": f"Rex {i}.", "b": "No pets.", "c": "Max?"}) for i in range(9)]
    run_id = store_run(items, rubrics=["rsum-single", "rsum-pairwise"], mode=["single", "pairwise"])
    with session_scope() as session:
        ids = session.scalars(select(Judgment.id).where(Judgment.run_id == run_id).order_by(Judgment.id)).all()
        session.execute(update(Judgment).where(Judgment.id == ids[0]).values(status="done", score=7.0))
        session.execute(update(Judgment).where(Judgment.id == ids[-1]).values(status="failed", error="down"))
    with session_scope() as session:
        whole = repository.judgments_frame(session, run_id)
    assert len(whole) == len(ids) > 7
    monkeypatch.setattr(frames, "FRAME_CHUNK", 7)
    with session_scope() as session:
        chunked = repository.judgments_frame(session, run_id)
    pd.testing.assert_frame_equal(chunked, whole)
    assert chunked["system_b"].isna().sum() == (chunked["mode"] == "single").sum()  # None stays missing
    assert list(chunked["status"].iloc[[0, -1]]) == ["done", "failed"]


@pytest.mark.parametrize("through_child", [False, True])
def test_the_columnar_reader_gives_the_frame_the_row_reader_gave(
    store_run: StoreRun, monkeypatch: pytest.MonkeyPatch, through_child: bool
) -> None:
    """Issue 39: PostgreSQL's COPY parsed by pyarrow and SQLite's chunks turned into Arrow columns give exactly the
    frame the driver's tuples gave: dtypes, missing values, empty strings, quotes, commas and newlines in strings,
    floats to the last bit, booleans, an imported judgment's own scale, a column with every value missing."""
    from judge_api.repository import frames

    if through_child:  # on SQLite: ADBC's driver in a child process, whatever the run's size
        monkeypatch.setattr(frame_columns, "ARROW_CHILD_MIN_ROWS", 0)
    items = [item(f"i{i}", {"a": f"Rex {i}.", "b": "No pets.", "c": "Max?"}) for i in range(5)]
    run_id = store_run(items, rubrics=["rsum-single", "rsum-pairwise"], mode=["single", "pairwise"])
    with session_scope() as session:
        ids = session.scalars(select(Judgment.id).where(Judgment.run_id == run_id).order_by(Judgment.id)).all()
        session.execute(
            update(Judgment)
            .where(Judgment.id == ids[0])
            .values(status="done", score=0.1 + 0.2, cached=True, item_key='it,"quoted"\nline', source="")
        )
        session.execute(
            update(Judgment)
            .where(Judgment.id == ids[1])
            .values(
                status="done", score=1e-310, scale_min=0.0, scale_max=7.5, source="imported", judge="h, j", len_b=12
            )
        )
        session.execute(update(Judgment).where(Judgment.id == ids[-1]).values(status="failed", error="down"))
    with session_scope() as session:
        columnar = frames.judgments_frame(session, run_id)
        if through_child and session.connection().dialect.name == "sqlite":  # the child served, not the fallback
            table = Judgment.__table__
            assert frame_columns.read_sqlite_arrow(session.connection(), table, run_id) is not None  # type: ignore[arg-type]
        rows = frames._finish(frames._rows_frame(session, run_id))
    assert len(columnar) == len(ids) > 10
    pd.testing.assert_frame_equal(columnar, rows)
    assert columnar["latency_ms"].dtype == object and columnar["latency_ms"].isna().all()  # every value missing
    assert columnar["len_b"].dtype == float and columnar["len_a"].dtype == "int64"
    first, second = columnar.iloc[0], columnar.iloc[1]
    assert first["item_id"] == 'it,"quoted"\nline' and first["score"] == 0.1 + 0.2 and first["cached"]
    assert first["source"] == "" and pd.isna(columnar.iloc[2]["source"])  # an empty string is not a missing value
    assert (second["score"], second["scale_min"], second["scale_max"]) == (1e-310, 0.0, 7.5)
    assert columnar.iloc[2]["scale_max"] == 100.0  # the rubric's scale
    monkeypatch.setattr(frames, "FRAME_CHUNK", 4)
    with session_scope() as session:
        pd.testing.assert_frame_equal(frames.judgments_frame(session, run_id), rows)
        empty = frames.judgments_frame(session, "no-such-run")
    assert list(empty.columns) == list(rows.columns) and empty.empty


def test_the_report_state_changes_with_every_write_of_what_the_report_reads(store_run: StoreRun) -> None:
    """Issue 39: the report cache's state of a run (one primary-key read and one index seek) changes when a judgment
    is added or deleted (even one that is not the last written), when a verdict is written, when a rating is added,
    changed in place or deleted, when a label queue is stored, when a lost claim's calls are counted; not on a read."""
    from sqlalchemy import delete, insert

    from judge_api.db import get_engine
    from judge_api.models import HumanRating
    from judge_api.repository import claims

    items = [item(f"i{i}", {"a": f"Rex {i}.", "b": "No pets."}) for i in range(3)]
    run_id = store_run(items)
    other = store_run(items)
    seen: list[str] = []

    def changed() -> bool:
        with session_scope() as session:
            state = repository.run_state(session, run_id)
        new = not seen or state != seen[-1]
        seen.append(state)
        return new

    changed()
    assert not changed()  # reading changes nothing
    with session_scope() as session:
        ids = session.scalars(select(Judgment.id).where(Judgment.run_id == run_id).order_by(Judgment.id)).all()
        session.execute(delete(Judgment).where(Judgment.id == ids[0]))  # the first written, not the last
    assert changed()
    with session_scope() as session:
        row = session.execute(select(Judgment.__table__).where(Judgment.id == ids[1])).mappings().one()
        session.execute(insert(Judgment), [{**{k: v for k, v in row.items() if k != "id"}, "dedup_key": "copy"}])
    assert changed()
    token, _ = claims.claim_many(get_engine(), [ids[2]], 600.0)
    assert changed()
    assert claims.write_verdicts(get_engine(), [(ids[2], token, {"status": "done", "score": 5.0})]) == [True]
    assert changed()
    claims.add_unused_calls(get_engine(), [{"jid": ids[2], "calls": 1, "cost": 0.5}])
    assert changed()
    rating = HumanRatingIn(
        item_id="i1", system="a", aspect="consistency", rater="r1", value=1, scale_min=0, scale_max=2
    )
    with session_scope() as session:
        repository.upsert_ratings(session, run_id, [rating])
    assert changed()
    with session_scope() as session:
        repository.upsert_ratings(session, run_id, [rating.model_copy(update={"value": 2.0})])
    assert changed()
    with session_scope() as session:
        repository.upsert_ratings(session, other, [rating])  # another run's write
    assert not changed()
    with session_scope() as session:
        session.execute(delete(HumanRating).where(HumanRating.run_id == run_id))
    assert changed()
    with session_scope() as session:
        repository.store_label_queue(
            session, run_id, strategy="uniform", seed=0, n_requested=1, drawn=["i1"], inclusion={"i1": 1.0, "i2": 0.5}
        )
    assert changed()
    from judge_api.repository.retention import delete_run

    with session_scope() as session:  # the triggers do not stand in the way of deleting the run and its rows
        delete_run(session, run_id)
    with session_scope() as session:
        assert repository.get_run(session, run_id) is None
        assert session.scalar(select(Judgment.id).where(Judgment.run_id == run_id)) is None
