"""Review r39f: the settle window's edges at the repository level (``report_cache.cached_report``)."""

from __future__ import annotations

import time
from datetime import datetime, timedelta

import pytest
from sqlalchemy import select, text, update

from judge_api.db import session_scope
from judge_api.models import Judgment, Run, utcnow
from judge_api.repository import report_cache

from .conftest import StoreRun, item

SETTLE_S = 1.0


def _keep(run_id: str, state: str, computed_at: datetime) -> None:
    with session_scope() as session:
        project = session.scalar(select(Run.project_id).where(Run.id == run_id))
        report_cache.store_report(session, run_id, str(project), "k", state, "{}", computed_at)


@pytest.mark.parametrize("db_url", ["sqlite", "postgres"], indirect=True)
def test_past_the_settle_window_a_provisional_entry_is_marked_so_whatever_the_fresh_window(store_run: StoreRun) -> None:
    run_id = store_run([item("i0", {"a": "x", "b": "y"})])
    stamp = utcnow()
    with session_scope() as session:
        session.execute(update(Judgment).where(Judgment.run_id == run_id).values(updated_at=stamp))
        state = report_cache.run_state(session, run_id)
    _keep(run_id, state, stamp + timedelta(seconds=SETTLE_S - 0.1))  # provisional: computed within the window
    time.sleep(SETTLE_S + 0.3)
    with session_scope() as session:
        hit, _ = report_cache.cached_report(session, run_id, "k", fresh_s=3.0, settle_s=SETTLE_S)
    assert hit is not None and hit.provisional  # past last write + settle_s: computed again, fresh_s or not


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize(
    "stamp", ["2026-01-01T00:00:00", "2026-01-01 00:00:00", "2026-01-01 00:00:00+00:00", "2026-01-01T00:00:00Z"]
)
def test_sqlite_stamps_in_other_text_forms_do_not_500(store_run: StoreRun, stamp: str) -> None:
    run_id = store_run([item("i0", {"a": "x", "b": "y"})])
    with session_scope() as session:
        session.execute(text("UPDATE judgments SET updated_at = :s WHERE run_id = :r"), {"s": stamp, "r": run_id})
        state = report_cache.run_state(session, run_id)
    _keep(run_id, state, utcnow())
    with session_scope() as session:
        hit, again = report_cache.cached_report(session, run_id, "k", settle_s=SETTLE_S)
    assert hit is not None and again == state  # computed long after the (old) last write: not provisional
