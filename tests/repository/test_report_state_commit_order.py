"""Review r39: on PostgreSQL two writers commit in the other order than their stamps. The report state
(``data_version`` + ``max(updated_at)``) read between the two commits is the state after both, so a report computed
in between matches it. While the run runs, such an entry is provisional: computed less than ``settle_s`` after the
run's last write, it is served until ``settle_s`` has passed since that write and then comes back ``provisional``:
computed again (``report_cache.cached_report``, ``DJ_REPORT_SETTLE_SECONDS``)."""

from __future__ import annotations

import time
from datetime import datetime, timedelta

import pytest
from sqlalchemy import select, update

from judge_api.db import get_engine, session_scope
from judge_api.models import Judgment, Run, utcnow
from judge_api.repository import report_cache
from judge_api.repository.claims import _bump_if_overtaken

from .conftest import StoreRun, item

SETTLE_S = 1.5


def _keep(run_id: str, state: str, computed_at: datetime, body: str = "{}") -> None:
    with session_scope() as session:
        project = session.scalar(select(Run.project_id).where(Run.id == run_id))
        report_cache.store_report(session, run_id, str(project), "k", state, body, computed_at)


def _served(run_id: str) -> bool:
    with session_scope() as session:
        hit, _ = report_cache.cached_report(session, run_id, "k", settle_s=SETTLE_S)
    return hit is not None and not hit.provisional  # a provisional entry is to be computed again


@pytest.mark.parametrize("db_url", ["postgres"], indirect=True)
def test_a_report_computed_between_two_commits_out_of_stamp_order_is_computed_again(store_run: StoreRun) -> None:
    run_id = store_run([item(f"i{i}", {"a": "x", "b": "y"}) for i in range(2)])
    with session_scope() as session:
        ids = session.scalars(select(Judgment.id).where(Judgment.run_id == run_id).order_by(Judgment.id)).all()
        first, second = ids[0], ids[1]
    time.sleep(0.05)  # the rows' creation stamps are older than `early` (a run is stored in a few ms with COPY)
    engine = get_engine()
    early = utcnow() - timedelta(milliseconds=5)
    with engine.connect() as a, engine.connect() as b:
        a.execute(update(Judgment).where(Judgment.id == first).values(status="done", score=1.0, updated_at=early))
        _bump_if_overtaken(a, [first], early)  # nothing later is committed yet: no bump
        b.execute(update(Judgment).where(Judgment.id == second).values(status="done", score=2.0, updated_at=utcnow()))
        _bump_if_overtaken(b, [second], utcnow())
        b.commit()
        with session_scope() as session:
            between = report_cache.run_state(session, run_id)
        computed_at = utcnow()  # a report computed now misses `first`
        _keep(run_id, between, computed_at)
        a.commit()
    with session_scope() as session:
        after = report_cache.run_state(session, run_id)
    assert after == between  # the state cannot tell: hence the settle window
    assert _served(run_id)  # within the window it is served, as a running run's report may be seconds old
    time.sleep(SETTLE_S + 0.2)
    assert not _served(run_id)  # after it, computed again: the new computation sees `first`
    _keep(run_id, after, utcnow())  # computed after the window: no transaction stamped before it is still open
    assert _served(run_id)
    time.sleep(0.3)
    assert _served(run_id)


@pytest.mark.parametrize("db_url", ["sqlite", "postgres"], indirect=True)
def test_the_settle_window_leaves_finished_runs_and_old_entries_alone(store_run: StoreRun) -> None:
    run_id = store_run([item("i0", {"a": "x", "b": "y"})])
    with session_scope() as session:
        session.execute(update(Judgment).where(Judgment.run_id == run_id).values(updated_at=utcnow()))
    with session_scope() as session:
        state = report_cache.run_state(session, run_id)
    _keep(run_id, state, utcnow())
    time.sleep(SETTLE_S + 0.2)
    assert not _served(run_id)  # running, computed right after the last write: provisional
    with session_scope() as session:
        hit, _ = report_cache.cached_report(session, run_id, "k", settle_s=0.0)
    assert hit is not None and not hit.provisional  # without a window (DJ_REPORT_SETTLE_SECONDS=0): as before
    _keep(run_id, state, utcnow())  # computed after the window
    assert _served(run_id)
    with session_scope() as session:
        session.execute(update(Run).where(Run.id == run_id).values(finished_at=utcnow()))
    with session_scope() as session:
        session.execute(update(Judgment).where(Judgment.run_id == run_id).values(updated_at=utcnow()))
    with session_scope() as session:
        finished = report_cache.run_state(session, run_id)
    _keep(run_id, finished, utcnow())
    time.sleep(SETTLE_S + 0.2)
    assert _served(run_id)  # a finished run's state is exact: no window


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
