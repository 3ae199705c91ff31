"""Review r39, open: on PostgreSQL two writers commit in the other order than their stamps. The report state
(``data_version`` + ``max(updated_at)``) read between the two commits is the state after both: the kept report
misses the first writer's verdict until the run's next write. claims._bump_if_overtaken narrows the window to the
moment between its check and the commit; it cannot close it without a lock on the run's row."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select, update

from judge_api.db import get_engine, session_scope
from judge_api.models import Judgment, Run, utcnow
from judge_api.repository import report_cache
from judge_api.repository.claims import _bump_if_overtaken

from .conftest import StoreRun, item


@pytest.mark.xfail(strict=True, reason="review r39, open: commit order against stamp order on PostgreSQL")
@pytest.mark.parametrize("db_url", ["postgres"], indirect=True)
def test_a_verdict_committed_after_a_later_stamped_one_changes_the_state(store_run: StoreRun) -> None:
    run_id = store_run([item(f"i{i}", {"a": "x", "b": "y"}) for i in range(2)])
    with session_scope() as session:
        ids = session.scalars(select(Judgment.id).where(Judgment.run_id == run_id).order_by(Judgment.id)).all()
        first, second = ids[0], ids[1]
        before = report_cache.run_state(session, run_id)
    engine = get_engine()
    early = utcnow() - timedelta(milliseconds=5)
    with engine.connect() as a, engine.connect() as b:
        a.execute(update(Judgment).where(Judgment.id == first).values(status="done", score=1.0, updated_at=early))
        _bump_if_overtaken(a, [first], early)  # nothing later is committed yet: no bump
        b.execute(update(Judgment).where(Judgment.id == second).values(status="done", score=2.0, updated_at=utcnow()))
        _bump_if_overtaken(b, [second], utcnow())
        b.commit()
        with session_scope() as session:
            between = report_cache.run_state(session, run_id)  # a report computed now misses `first`
        a.commit()
    with session_scope() as session:
        after = report_cache.run_state(session, run_id)
    assert between != before
    assert after != between


@pytest.mark.parametrize("db_url", ["sqlite", "postgres"], indirect=True)
def test_a_report_kept_while_the_run_ran_is_not_the_finished_runs(store_run: StoreRun) -> None:
    """What narrows the open case above for good once the run ends: a run is found finished only when every
    judgment is settled (committed), and ``finished_at`` is part of the state, so a report kept from before is
    computed again on every verdict, whatever the order their commits landed in."""
    run_id = store_run([item("i0", {"a": "x", "b": "y"})])
    with session_scope() as session:
        running = report_cache.run_state(session, run_id)
        session.execute(update(Run).where(Run.id == run_id).values(finished_at=utcnow()))
    with session_scope() as session:
        assert report_cache.run_state(session, run_id) != running
