"""The API's reads and writes of runs (judge_api.repository.runs), on SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import func, select, update

from judge_api import repository
from judge_api.db import session_scope
from judge_api.models import Judgment, RubricSnapshot, Run, RunItem

from .conftest import StoreRun, item


def counts() -> tuple[int, int, int, int]:
    with session_scope() as session:
        return tuple(  # type: ignore[return-value]
            session.scalar(select(func.count()).select_from(model)) or 0
            for model in (Run, RunItem, Judgment, RubricSnapshot)
        )


def test_a_run_is_stored_with_its_items_judgments_and_rubric_versions(store_run: StoreRun) -> None:
    run_id = store_run()
    assert counts() == (1, 1, 2, 1)  # one item, two systems x one aspect, the rubric version it was planned with
    with session_scope() as session:
        statuses = session.scalars(select(Judgment.status).where(Judgment.run_id == run_id)).all()
        run = repository.get_run(session, run_id)
        assert run is not None and run.id == run_id
        assert repository.run_item_keys(session, run_id) == {"i1"}
    assert sorted(statuses) == ["pending", "pending"]


def test_a_failing_insert_leaves_nothing_behind(store_run: StoreRun) -> None:
    from sqlalchemy import event

    from judge_api.db import get_engine

    store_run()
    before = counts()

    def exploding(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.lstrip().upper().startswith("INSERT INTO JUDGMENTS"):
            raise RuntimeError("disk full")

    engine = get_engine()
    event.listen(engine, "before_cursor_execute", exploding)
    # PostgreSQL stores the judgments with COPY (rows.insert_judgment_rows): the connection fails in the middle of it
    import psycopg

    sent = [0]
    real_write_row = psycopg.Copy.write_row

    def write_row_then_fail(self: Any, row: Any) -> None:
        sent[0] += 1
        if sent[0] == 2:
            raise RuntimeError("disk full")
        real_write_row(self, row)

    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(psycopg.Copy, "write_row", write_row_then_fail)
            with pytest.raises(RuntimeError, match="disk full"):
                store_run(items=[item("i2", {"a": "x", "b": "y"})])
    finally:
        event.remove(engine, "before_cursor_execute", exploding)
    assert counts() == before
    assert sent[0] == (2 if engine.dialect.name == "postgresql" else 0)


def test_summary_counts_statuses_and_retry_resets_only_failed(store_run: StoreRun) -> None:
    run_id = store_run(items=[item("i1", {"a": "x", "b": "y"}), item("i2", {"a": "x", "b": "y"})])
    with session_scope() as session:
        ids = session.scalars(select(Judgment.id).where(Judgment.run_id == run_id).order_by(Judgment.id)).all()
        session.execute(update(Judgment).where(Judgment.id == ids[0]).values(status="done", score=70.0))
        session.execute(update(Judgment).where(Judgment.id == ids[1]).values(status="failed", error="boom"))
    with session_scope() as session:
        run = repository.get_run(session, run_id)
        assert run is not None
        summary = repository.summarize_runs(session, [run])[0]
        assert (summary.counts.done, summary.counts.failed, summary.counts.pending) == (1, 1, 2)
        assert repository.retry_failed(session, run_id) == 1
    with session_scope() as session:
        statuses = dict(session.execute(select(Judgment.id, Judgment.status).where(Judgment.run_id == run_id)).all())
    assert statuses[ids[0]] == "done" and statuses[ids[1]] == "pending"


def test_cancel_pending_touches_only_unfinished_work(store_run: StoreRun) -> None:
    run_id = store_run()
    with session_scope() as session:
        first = session.scalars(select(Judgment.id).where(Judgment.run_id == run_id).order_by(Judgment.id)).first()
        session.execute(update(Judgment).where(Judgment.id == first).values(status="done", score=50.0))
    with session_scope() as session:
        assert repository.cancel_pending(session, run_id, "budget exhausted") == 1
    with session_scope() as session:
        rows = session.execute(select(Judgment.status, Judgment.error).where(Judgment.run_id == run_id)).all()
    assert sorted(rows, key=lambda r: r[0]) == [("cancelled", "budget exhausted"), ("done", None)]


def test_items_come_back_as_submitted_and_filtered_by_key(store_run: StoreRun) -> None:
    run_id = store_run(items=[item("i1", {"a": "x", "b": "y"}), item("i2", {"a": "p", "b": "q"}, reference="r")])
    with session_scope() as session:
        everything = repository.get_items(session, run_id)
        only = repository.get_items(session, run_id, ["i2"])
    assert [i["id"] for i in everything] == ["i1", "i2"]
    assert [i["id"] for i in only] == ["i2"] and only[0]["candidates"] == {"a": "p", "b": "q"}


def test_item_references_and_the_reference_versions_a_run_is_stored_with(store_run: StoreRun) -> None:
    """Issue 26.5: the report reads each item's reference out of the stored payload (JSON on either database), and
    create_run stores the reference metrics' definition of every version the plan uses (auto: one per script)."""
    quoted = '记得，"你的"小猎犬叫雷克斯！\n'
    run_id = store_run(
        items=[
            item("zh", {"a": "你的狗叫雷克斯。"}, reference=quoted),
            item("en", {"a": "Rex."}, reference="Your beagle is called Rex."),
            item("none", {"a": "Rex."}),
            item("blank", {"a": "Rex."}, reference=""),
        ],
        metrics=["f1"],
    )
    with session_scope() as session:
        assert repository.item_references(session, run_id) == {"zh": quoted, "en": "Your beagle is called Rex."}
        versions = session.scalars(
            select(Judgment.rubric_version).where(Judgment.run_id == run_id, Judgment.judge == "reference")
        ).all()
        stored = session.scalars(
            select(RubricSnapshot.version).where(RubricSnapshot.rubric_id == "reference-metrics")
        ).all()
    assert sorted(versions) == ["parlai-nltk-1", "parlai-nltk-1.tok-char"]
    assert sorted(stored) == ["parlai-nltk-1", "parlai-nltk-1.tok-char"]
