"""Review r54a of 9bd3927: ``insert_judgment_rows`` on PostgreSQL (COPY through the raw psycopg connection) must fail
the way the INSERT it replaced failed, so the callers' handlers (``except sqlalchemy.exc.IntegrityError``, the 503 of
``DATABASE_OUTAGES``, a savepoint that catches and carries on) keep working. On SQLite both are the INSERT."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest
from sqlalchemy import exc as sa_exc
from sqlalchemy import func, select

from judge_api.db import session_scope
from judge_api.models import Judgment, Run
from judge_api.planning import PlannedJudgment
from judge_api.repository import rows, runs

from .conftest import StoreRun, item


def _row(run_id: str, item_pk: int, aspect: str = "x", **changes: Any) -> dict[str, Any]:
    p = PlannedJudgment("i1", "single", "a", None, None, "rsum-single", "1", aspect, "ext", 0)
    row = rows.judgment_row(run_id, p, item_pk, {"a": "text"}, {"t": 1}, datetime(2026, 11, 30))
    row.update(changes)
    return row


def test_a_duplicate_dedup_key_is_sqlalchemys_integrity_error(store_run: StoreRun) -> None:
    """routers/verdicts.py answers a concurrent import (``uq_judgments_dedup``) with a 409 by catching
    ``sqlalchemy.exc.IntegrityError``; runs.py replays an idempotent submit the same way."""
    run_id = store_run(items=[item("i1", {"a": "x"})])
    with session_scope() as session:
        pk = runs.item_pks_for(session, run_id)["i1"]
        rows.insert_judgment_rows(session, [_row(run_id, pk)])
    with pytest.raises(sa_exc.IntegrityError), session_scope() as session:
        rows.insert_judgment_rows(session, [_row(run_id, pk)])


def test_a_missing_item_is_sqlalchemys_integrity_error(store_run: StoreRun) -> None:
    run_id = store_run(items=[item("i1", {"a": "x"})])
    with pytest.raises(sa_exc.IntegrityError), session_scope() as session:
        rows.insert_judgment_rows(session, [_row(run_id, 10**9)])


def test_a_value_too_long_for_its_column_is_sqlalchemys_data_error(store_run: StoreRun, store_db: str) -> None:
    if not store_db.startswith("postgresql"):
        pytest.skip("SQLite does not enforce VARCHAR lengths")
    run_id = store_run(items=[item("i1", {"a": "x"})])
    with pytest.raises(sa_exc.DataError), session_scope() as session:
        pk = runs.item_pks_for(session, run_id)["i1"]
        rows.insert_judgment_rows(session, [_row(run_id, pk, aspect="a" * 65)])


def test_a_savepoint_around_a_failed_insert_lets_the_transaction_carry_on(store_run: StoreRun) -> None:
    """The pattern ``with session.begin_nested(): ...`` / ``except IntegrityError: ...`` (try, and carry on without
    the rows): the other rows of the transaction are committed, the failed ones are not."""
    run_id = store_run(items=[item("i1", {"a": "x"})])
    with session_scope() as session:
        pk = runs.item_pks_for(session, run_id)["i1"]
        rows.insert_judgment_rows(session, [_row(run_id, pk, aspect="first")])
    with session_scope() as session:
        rows.insert_judgment_rows(session, [_row(run_id, pk, aspect="kept")])
        try:
            with session.begin_nested():
                rows.insert_judgment_rows(session, [_row(run_id, pk, aspect="other"), _row(run_id, pk, aspect="first")])
        except sa_exc.IntegrityError:
            pass
        session.get(Run, run_id)  # the transaction is usable after the savepoint's rollback
    with session_scope() as session:
        aspects = session.scalars(select(Judgment.aspect).where(Judgment.judge == "ext").order_by(Judgment.id)).all()
        assert aspects == ["first", "kept"]
        assert session.scalar(select(func.count()).select_from(Judgment)) == 2 + 1  # and the run's own judgment


def test_rows_of_a_run_added_to_the_session_but_not_flushed_are_stored(store_run: StoreRun) -> None:
    """``session.execute(INSERT_JUDGMENTS, rows)`` autoflushed the session first (an ORM-enabled INSERT), so rows
    could refer to a run just ``session.add``-ed; the COPY goes to the raw connection without a flush (a foreign key
    violation on PostgreSQL)."""
    template = store_run(items=[item("i1", {"a": "x"})])
    with session_scope() as session:
        source = session.get(Run, template)
        assert source is not None
        pk = runs.item_pks_for(session, template)["i1"]
        config, project = source.config, source.project_id
        session.add(Run(id="run_notflushed0001", project_id=project, config=config, n_items=0, n_judgments=1))
        rows.insert_judgment_rows(session, [_row("run_notflushed0001", pk)])
    with session_scope() as session:
        assert session.scalar(select(func.count()).where(Judgment.run_id == "run_notflushed0001")) == 1
