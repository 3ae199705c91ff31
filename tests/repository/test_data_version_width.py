"""Review r39: ``runs.data_version`` is bumped by every inserted judgment (and rating, label queue write) of its run;
a monitor's run lives for years. On PostgreSQL the counter was 32-bit: past 2^31 - 1 every such insert failed with
"integer out of range"."""

from __future__ import annotations

from sqlalchemy import select, update

from judge_api.db import session_scope
from judge_api.models import Judgment, Run
from judge_api.repository import report_cache

from .conftest import StoreRun, item


def test_the_run_counter_passes_two_to_the_31(store_run: StoreRun) -> None:
    run_id = store_run([item("i1", {"a": "x", "b": "y"})])
    with session_scope() as session:
        session.execute(update(Run).where(Run.id == run_id).values(data_version=2**31 - 1))
        before = report_cache.run_state(session, run_id)
    with session_scope() as session:
        row = session.scalars(select(Judgment).where(Judgment.run_id == run_id)).first()
        assert row is not None
        clone = {c.name: getattr(row, c.name) for c in Judgment.__table__.columns if c.name != "id"}
        session.add(Judgment(**{**clone, "dedup_key": "another", "sample_index": 1}))
    with session_scope() as session:
        assert session.scalar(select(Run.data_version).where(Run.id == run_id)) == 2**31
        assert report_cache.run_state(session, run_id) != before
