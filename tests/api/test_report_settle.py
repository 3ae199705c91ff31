"""Review r39f: the report cache's settle window (DJ_REPORT_SETTLE_SECONDS) and fresh window never answer a finished
run stale, cost at most one more computation per quiet period and one per process at the window's end, and the item
aggregates' pages have the same window."""

from __future__ import annotations

import time
from datetime import datetime, timedelta

import pytest
from sqlalchemy import func, select, update

from judge_api.db import session_scope
from judge_api.models import Judgment
from judge_api.routers import reports
from tests.api.conftest import ApiFactory
from tests.api.test_report_cache import _judge, _judgment_ids, _report, _run


def _before(last: datetime | None) -> datetime:
    assert last is not None
    return last - timedelta(milliseconds=3)


def test_the_fresh_window_never_answers_a_just_finished_run_with_a_kept_report(api_factory: ApiFactory) -> None:
    """A client polling the report until run.finished_at is set takes that answer as final: it has every verdict."""
    api = api_factory(DJ_REPORT_FRESH_SECONDS="300")
    run_id = _run(api, n_items=4)
    rows = _judgment_ids(run_id)
    _judge(rows[:-2])
    _report(api, run_id, n_boot=10)
    _judge(rows[-2:], seed=1)  # the last verdicts: the run is finished now
    final = _report(api, run_id, n_boot=10)
    assert final["run"]["finished_at"] is not None
    assert final["counts"]["by_status"]["done"] == len(rows), (final["cached"], final["counts"]["by_status"])


@pytest.mark.parametrize("db", ["sqlite", "postgres"])
def test_a_late_commit_is_in_the_report_of_the_run_it_finished(
    api_factory: ApiFactory, request: pytest.FixtureRequest, db: str
) -> None:
    """The out-of-order commit emulated: the last verdict lands with a stamp older than the run's last write (its
    _bump_if_overtaken check ran before the later-stamped verdict committed). Within the window the provisional
    entry would be served; the summary stamps finished_at, so the report is computed on every verdict instead."""
    url = request.getfixturevalue("pg_url") if db == "postgres" else None
    api = api_factory(database_url=url, DJ_REPORT_FRESH_SECONDS="0", DJ_REPORT_SETTLE_SECONDS="30")
    run_id = _run(api, n_items=4)
    rows = _judgment_ids(run_id)
    _judge(rows[:-1])
    with session_scope() as session:
        last = session.scalar(select(func.max(Judgment.updated_at)).where(Judgment.run_id == run_id))
    first = _report(api, run_id, n_boot=10)
    assert first["cached"] is False
    _judge(rows[-1:], seed=1)
    with session_scope() as session:  # its stamp taken before the other's: commit order != stamp order
        session.execute(update(Judgment).where(Judgment.id == rows[-1][0]).values(updated_at=_before(last)))
    final = _report(api, run_id, n_boot=10)
    assert final["run"]["finished_at"] is not None
    assert final["counts"]["by_status"]["done"] == len(rows), (final["cached"], final["counts"]["by_status"])


def test_a_quiet_running_run_is_computed_at_most_twice(
    api_factory: ApiFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cost: a running run that goes quiet: one computation, one more after the window, then hits (no loop)."""
    calls: list[float] = []
    real = reports.build_report

    def counting(*args: object, **kwargs: object) -> object:
        calls.append(time.monotonic())
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(reports, "build_report", counting)
    api = api_factory(DJ_REPORT_FRESH_SECONDS="0", DJ_REPORT_SETTLE_SECONDS="1")
    run_id = _run(api, n_items=4)
    rows = _judgment_ids(run_id)
    _judge(rows[:-2])  # still running
    end = time.monotonic() + 3.0
    cached = []
    while time.monotonic() < end:
        cached.append(_report(api, run_id, n_boot=10)["cached"])
        time.sleep(0.1)
    assert len(calls) == 2, (len(calls), cached)
    assert all(cached[-5:])


def test_the_item_scores_page_has_a_late_commit_after_the_settle_window(api_factory: ApiFactory) -> None:
    """routers/item_aggregates keeps pages per report_cache.run_state in the process, settled or not: a page kept
    within the window is computed again after it, so the same out-of-order commit is in the page then."""
    from judge_api.routers import item_aggregates

    item_aggregates._CACHE.clear()
    api = api_factory(DJ_REPORT_FRESH_SECONDS="0", DJ_REPORT_SETTLE_SECONDS="1")
    run_id = _run(api, n_items=4)
    rows = [r for r in _judgment_ids(run_id) if r[1] is None]  # single-mode judgments
    _judge(rows[:-2])
    with session_scope() as session:
        last = session.scalar(select(func.max(Judgment.updated_at)).where(Judgment.run_id == run_id))
    before = api.client.get(f"/v1/runs/{run_id}/item-scores").json()
    _judge(rows[-2:-1], seed=1)  # one verdict more, committed late with an earlier stamp; one judgment still pending
    with session_scope() as session:
        session.execute(update(Judgment).where(Judgment.id == rows[-2][0]).values(updated_at=_before(last)))
    time.sleep(1.5)  # past the report cache's window
    assert _report(api, run_id, n_boot=10)["counts"]["by_status"]["done"] >= len(rows) - 1  # the report has it
    after = api.client.get(f"/v1/runs/{run_id}/item-scores").json()
    assert after != before


def test_readers_arriving_while_the_window_recompute_runs_are_served_the_provisional_report(
    api_factory: ApiFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cost at 1M (a computation of ~17-32 s): once the window has passed, one read of the process computes the report
    again and the others are served the provisional entry meanwhile (one computation per process)."""
    import threading

    calls: list[float] = []
    real = reports.build_report

    def slow(*args: object, **kwargs: object) -> object:
        calls.append(time.monotonic())
        time.sleep(1.0)  # a large run's computation
        return real(*args, **kwargs)  # type: ignore[arg-type]

    api = api_factory(DJ_REPORT_FRESH_SECONDS="0", DJ_REPORT_SETTLE_SECONDS="1")
    run_id = _run(api, n_items=4)
    rows = _judgment_ids(run_id)
    _judge(rows[:-2])  # still running, quiet from now on
    _report(api, run_id, n_boot=10)  # provisional
    time.sleep(1.2)
    monkeypatch.setattr(reports, "build_report", slow)
    threads = [threading.Thread(target=_report, args=(api, run_id), kwargs={"n_boot": 10}) for _ in range(4)]
    for t in threads:
        t.start()
        time.sleep(0.1)
    for t in threads:
        t.join()
    assert len(calls) == 1, f"{len(calls)} computations for one window's end"
