"""Storing planned judgments builds the rows of one insert at a time (issue 39), on SQLite and PostgreSQL.

``create_run`` built every row dict of a run before the first insert: at a million judgments that held about 1.1 GB
in the API (``bench/bench_store_run.py``). These tests pin that no more than ``INSERT_CHUNK`` rows are built before
they are inserted, that every planned judgment is stored once in plan order, and that a failure in a later chunk
leaves nothing behind.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime
from typing import Any

import pytest
from sqlalchemy import JSON, String, event, func, insert, select

from judge_api import planning
from judge_api.db import get_engine, session_scope
from judge_api.models import Judgment, Run, RunItem
from judge_api.planning import PlannedJudgment
from judge_api.repository import plans, rows, runs
from judge_api.rubrics import get_registry
from judge_api.schemas import RunCreate

from .conftest import StoreRun, item

CHUNK = 7


class RowsBuilt:
    """Counts the rows built since the last insert into ``judgments``; ``most``: the largest count an insert saw."""

    def __init__(self) -> None:
        self.since_insert = 0
        self.most = 0
        self.inserts = 0
        self.in_insert_rows = False

    def built(self) -> None:
        self.since_insert += 1

    def insert(self) -> None:
        self.most = max(self.most, self.since_insert)
        self.since_insert = 0
        self.inserts += 1

    def inserted(self, _conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        """An INSERT statement sent through SQLAlchemy (``plans``' insert ... returning)."""
        if statement.lstrip().upper().startswith("INSERT INTO JUDGMENTS") and not self.in_insert_rows:
            self.insert()


@pytest.fixture
def rows_built(store_db: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[RowsBuilt]:
    counter = RowsBuilt()
    for module in (runs, plans):
        monkeypatch.setattr(module, "INSERT_CHUNK", CHUNK)
        real = module.judgment_row

        def counted(*args: Any, _real: Any = real, **kwargs: Any) -> dict[str, Any]:
            counter.built()
            return dict(_real(*args, **kwargs))

        monkeypatch.setattr(module, "judgment_row", counted)

    def insert_rows(session: Any, built: Any) -> None:  # runs' inserts: COPY on PostgreSQL, no INSERT to see
        counter.insert()
        counter.in_insert_rows = True
        try:
            rows.insert_judgment_rows(session, built)
        finally:
            counter.in_insert_rows = False

    monkeypatch.setattr(runs, "insert_judgment_rows", insert_rows)
    engine = get_engine()
    event.listen(engine, "before_cursor_execute", counter.inserted)
    yield counter
    event.remove(engine, "before_cursor_execute", counter.inserted)


def _items(n: int) -> list[dict[str, Any]]:
    return [item(f"i{k:02d}", {"a": f"answer a{k}", "b": f"answer b {k}!"}) for k in range(n)]


def _stored(run_id: str) -> list[tuple[str, str, str, int | None]]:
    with session_scope() as session:
        return [
            (r.item_key, r.system_a, r.aspect, r.len_a)
            for r in session.execute(
                select(Judgment.item_key, Judgment.system_a, Judgment.aspect, Judgment.len_a)
                .where(Judgment.run_id == run_id)
                .order_by(Judgment.id)
            )
        ]


def test_a_run_is_stored_one_insert_of_rows_at_a_time(store_run: StoreRun, rows_built: RowsBuilt) -> None:
    items = _items(9)  # 9 items x 2 systems x 2 aspects = 36 judgments: five chunks of 7 and one of 1
    body = {"items": items, "rubrics": ["rsum-single"], "judges": ["openai:gpt-4o"]}
    body["aspects"] = ["consistency", "coherence"]
    planned = planning.plan_run(RunCreate.model_validate(body), get_registry(), 1_000_000)
    assert len(planned) == 36
    run_id = store_run(items=items, aspects=["consistency", "coherence"])
    assert rows_built.most == CHUNK, "the rows of more than one insert were built at once"
    assert rows_built.inserts == 6
    stored = _stored(run_id)
    texts = {i["id"]: i["candidates"] for i in items}
    assert stored == [(p.item_id, p.system_a, p.aspect, len(texts[p.item_id][p.system_a])) for p in planned]
    with session_scope() as session:
        run = session.get(Run, run_id)
        assert run is not None and run.n_judgments == 36
        keys = session.scalars(select(Judgment.dedup_key).where(Judgment.run_id == run_id)).all()
    assert sorted(keys) == sorted(p.dedup_key(run_id) for p in planned)


def test_a_failure_in_a_later_chunk_leaves_nothing_behind(
    store_run: StoreRun, rows_built: RowsBuilt, monkeypatch: pytest.MonkeyPatch
) -> None:
    built = rows.judgment_row
    calls = [0]

    def fails_on_the_twentieth(*args: Any, **kwargs: Any) -> dict[str, Any]:
        calls[0] += 1
        if calls[0] == 20:  # in the third chunk: two inserts of this run are already sent
            raise RuntimeError("row 20")
        return built(*args, **kwargs)

    monkeypatch.setattr(runs, "judgment_row", fails_on_the_twentieth)
    with pytest.raises(RuntimeError, match="row 20"):
        store_run(items=_items(9), aspects=["consistency", "coherence"])
    assert rows_built.inserts == 2
    with session_scope() as session:
        assert [session.scalar(select(func.count()).select_from(m)) for m in (Run, RunItem, Judgment)] == [0, 0, 0]


def test_planned_judgments_added_to_a_run_are_inserted_one_chunk_at_a_time(
    store_run: StoreRun, rows_built: RowsBuilt
) -> None:
    items = _items(9)
    run_id = store_run(items=items)  # one aspect: 18 judgments
    registry = get_registry()
    body = {"items": items, "rubrics": ["rsum-single"], "judges": ["openai:gpt-4o"], "aspects": ["coherence"]}
    more = planning.plan_run(RunCreate.model_validate(body), registry, 1_000_000)
    before = rows_built.inserts
    with session_scope() as session:
        run = session.get(Run, run_id)
        assert run is not None
        ids = plans.insert_planned(session, run, more)
        again = plans.insert_planned(session, run, more)  # stored already: skipped by dedup key
    assert rows_built.most == CHUNK
    assert rows_built.inserts - before == 6  # 18 new (three chunks), then the same 18 again (three, none stored)
    assert len(ids) == 18 and ids == sorted(ids) and again == []
    with session_scope() as session:
        stored = session.execute(
            select(Judgment.id, Judgment.item_key, Judgment.aspect).where(Judgment.id.in_(ids)).order_by(Judgment.id)
        ).all()
        run = session.get(Run, run_id)
        assert run is not None and run.n_judgments == 36
    assert [(r.item_key, r.aspect) for r in stored] == [(p.item_id, p.aspect) for p in more]


HOSTILE_TEXTS = [
    "tab\there",
    "new\nline and\r\nreturn",
    "back\\slash \\N \\. end",
    "quote ' and \" and ,comma",
    "unicode: Rex 🐕 ünïcödé 中文",
    "",
    "\\",
]


def _raw_rows(run_id: str) -> list[tuple[Any, ...]]:
    """Every stored column of the run's judgments (the JSON ones as the database holds their text), in id order."""
    table = Judgment.__table__
    skip = {"id", "run_id", "dedup_key", "item_pk"}
    columns = [c for c in table.columns if c.name not in skip]
    as_text = [c.cast(String) if isinstance(c.type, JSON) else c for c in columns]
    with session_scope() as session:
        return [
            tuple(r)
            for r in session.execute(
                select(*as_text).where(Judgment.run_id == run_id, Judgment.judge == "ext").order_by(Judgment.id)
            )
        ]


def test_copy_stores_what_the_insert_stored_column_by_column(store_run: StoreRun) -> None:
    """``insert_judgment_rows`` (PostgreSQL: COPY; SQLite: the Core INSERT) stores, column by column and the JSON
    columns' text included, what the ORM's bulk INSERT stored before (issue 39), for hostile text, NULLs, floats
    and timestamps."""
    copied, inserted = store_run(items=_items(1)), store_run(items=_items(1))
    now = datetime(2026, 11, 30, 8, 30, 1, 123456)
    planned = [
        PlannedJudgment("i00", "single", "a", None, None, "rsum-single", "1", f"asp{k}", "ext", k % 3, k % 4 == 0)
        for k in range(len(HOSTILE_TEXTS) * 2)
    ] + [PlannedJudgment("i00", "pairwise", "a", "b", "ab", "rsum-pairwise", "1", "x", "ext", 0, False)]
    with session_scope() as session:
        for run_id, insert_rows in ((copied, rows.insert_judgment_rows), (inserted, _inserted)):
            pks = runs.item_pks_for(session, run_id)
            built = []
            for k, p in enumerate(planned):
                text = HOSTILE_TEXTS[k % len(HOSTILE_TEXTS)]
                params = {"temperature": 0.1 * k, "tab\t": text, "nested": [1, 2.5, None, {"ü": True}]}
                row = rows.judgment_row(run_id, p, pks[p.item_id], {"a": text, "b": "b"}, params, now, now, 1e-300 * k)
                row.update(explanation=text or None, verdict=text[:100], preference=[0.1, None, -2.0][k % 3])
                built.append(row)
            insert_rows(session, built)
    mine, before = _raw_rows(copied), _raw_rows(inserted)
    assert len(mine) == len(planned) and mine == before


def _inserted(session: Any, built: list[dict[str, Any]]) -> None:
    """What storing judgment rows sent before session 54: the ORM's bulk INSERT, a None sent as NULL."""
    session.execute(insert(Judgment).execution_options(render_nulls=True), built)


def test_rows_of_different_columns_are_refused(store_run: StoreRun) -> None:
    run_id = store_run(items=_items(1))
    now = datetime(2026, 11, 30)
    p = PlannedJudgment("i00", "single", "a", None, None, "rsum-single", "1", "z", "ext", 0)
    with session_scope() as session:
        pk = runs.item_pks_for(session, run_id)["i00"]
        one = rows.judgment_row(run_id, p, pk, {"a": "x"}, {}, now)
        other = {k: v for k, v in rows.judgment_row(run_id, replace(p, aspect="y"), pk, {"a": "x"}, {}, now).items()}
        other["source"] = "sha"
        if session.get_bind().dialect.name == "postgresql":
            with pytest.raises(ValueError, match="same columns"):
                rows.insert_judgment_rows(session, [one, other])
