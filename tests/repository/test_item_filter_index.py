"""Issue 39: one item's judgments are read along their item's index (``ix_judgments_item_pk``), not by walking the
run's index in id order or by status (0.6-1.0 s for an item of a 1M-judgment run on SQLite, ~20 ms along the item's):
the same rows, in id order, with every other filter and the keyset cursor; the plan is pinned on SQLite."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import select, update

from judge_api import repository
from judge_api.db import session_scope
from judge_api.models import Judgment
from judge_api.repository import exports

from .conftest import StoreRun, item

FILTERS: list[dict[str, Any]] = [
    {},
    {"status": "done"},
    {"system": "b"},
    {"mode": "pairwise", "aspect": "consistency"},
    {"status": "failed", "judge": "nobody"},
]


def _run(store_run: StoreRun) -> tuple[str, list[int]]:
    items = [item(f"i{i}", {"a": f"Rex {i}.", "b": "No pets.", "c": "Max?"}) for i in range(6)] + [
        item("i1x", {"a": "x", "b": "y", "c": "z"})  # a key another key is a prefix of
    ]
    run_id = store_run(items, rubrics=["rsum-single", "rsum-pairwise"], mode=["single", "pairwise"])
    with session_scope() as session:
        ids = list(session.scalars(select(Judgment.id).where(Judgment.run_id == run_id).order_by(Judgment.id)))
        for k, jid in enumerate(ids):
            session.execute(update(Judgment).where(Judgment.id == jid).values(status="done" if k % 3 else "failed"))
    return run_id, ids


@pytest.mark.parametrize("extra", FILTERS)
def test_an_items_judgments_are_the_runs_judgments_of_that_item(store_run: StoreRun, extra: dict[str, Any]) -> None:
    run_id, _ = _run(store_run)
    other, _ = _run(store_run)  # the same item keys in another run: never mixed in
    with session_scope() as session:
        _, everything, _ = repository.list_judgments(session, run_id, 0, 10_000, dict(extra))
        for key in ("i1", "i1x", "i5", "nope"):
            want = [j.id for j in everything if j.item_id == key]
            total, page, cursor = repository.list_judgments(session, run_id, 0, 10_000, {**extra, "item_id": key})
            assert (total, [j.id for j in page], cursor) == (len(want), want, None)
            assert {j.run_id for j in page} <= {run_id}
            if len(want) > 2:  # the keyset cursor pages the same rows
                total, first, cursor = repository.list_judgments(session, run_id, 0, 2, {**extra, "item_id": key})
                assert cursor == want[1] and [j.id for j in first] == want[:2]
                _, rest, _ = repository.list_judgments(
                    session, run_id, 0, 10_000, {**extra, "item_id": key}, after=cursor
                )
                assert [j.id for j in rest] == want[2:]
            rows = [
                r[0]
                for page in exports.export_rows(
                    session, exports.judgment_conditions(run_id, {**extra, "item_id": key}), chunk=2
                )
                for r in page
            ]
            assert rows == want
    assert other != run_id


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize("extra", FILTERS)
def test_sqlite_reads_an_item_along_its_index(store_run: StoreRun, extra: dict[str, Any]) -> None:
    run_id, _ = _run(store_run)
    conditions = exports.judgment_conditions(run_id, {**extra, "item_id": "i1"})
    for query in (
        select(Judgment).where(*conditions).order_by(Judgment.id).offset(0).limit(100),
        select(Judgment).where(*conditions, Judgment.id > 3).order_by(Judgment.id).limit(100),
    ):
        with session_scope() as session:
            compiled = query.compile(session.get_bind(), compile_kwargs={"literal_binds": True})
            plan = " ".join(str(r[-1]) for r in session.connection().exec_driver_sql(f"EXPLAIN QUERY PLAN {compiled}"))
        assert "ix_judgments_item_pk" in plan and "TEMP B-TREE" not in plan, plan
