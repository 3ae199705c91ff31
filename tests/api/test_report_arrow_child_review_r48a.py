"""Review r48a: GET /v1/runs/{id}/report on SQLite with the Arrow child (``repository.frame_columns``)."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import func, select

from judge_api.db import session_scope
from judge_api.models import Judgment
from judge_api.repository import frame_columns
from tests.api.conftest import ApiFactory
from tests.api.test_report_cache import _judge, _judgment_ids, _report, _run


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[bool, bool]]:
    """Per frame read: (the session was outside a transaction, so another process may read; the child served)."""
    seen: list[tuple[bool, bool]] = []
    real_read, real_arrow = frame_columns.read_sqlite, frame_columns.read_sqlite_arrow
    served: list[bool] = []

    def arrow(*args: Any, **kwargs: Any) -> Any:
        table = real_arrow(*args, **kwargs)
        served.append(table is not None)
        return table

    def read(connection: Any, *args: Any, **kwargs: Any) -> Any:
        outside = frame_columns.adbc_database(connection) is not None
        served.clear()
        table = real_read(connection, *args, **kwargs)
        seen.append((outside, bool(served) and served[0]))
        return table

    monkeypatch.setattr(frame_columns, "ARROW_CHILD_MIN_ROWS", 0)
    monkeypatch.setattr(frame_columns, "read_sqlite_arrow", arrow)
    monkeypatch.setattr(frame_columns, "read_sqlite", read)
    return seen


def test_the_report_of_a_run_that_just_finished_after_a_kept_report_is_read_outside_a_write_transaction(
    api_factory: ApiFactory, reads: list[tuple[bool, bool]]
) -> None:
    """BUG (review r48a): ``_answer`` commits after ``_summary`` only when it calls ``_summary`` itself. When the
    route called it (a kept report of a running run, and the run has just finished: ``summary`` is passed in), the
    summary's ``finished_at`` stamp is still uncommitted while the frame is read: the session is in a write
    transaction, so the child never serves (the 1M run's first final report goes back to the tuples, ~2x slower)
    and SQLite's writers wait on the reserved lock for the whole build — exactly what the commit was added for.
    This is the path every polled run takes when it finishes (poll while running, then the final report)."""
    api = api_factory(DJ_REPORT_FRESH_SECONDS="300")
    run_id = _run(api)
    rows = _judgment_ids(run_id)
    _judge(rows[:10])
    assert _report(api, run_id, n_boot=10)["cached"] is False  # running: computed, kept
    assert reads == [(True, True)]
    _judge(rows[10:])  # every judgment done; nothing has stamped finished_at yet
    done = _report(api, run_id, n_boot=10)  # the kept report is a hit, the route's _summary stamps finished_at
    assert done["cached"] is False and done["run"]["finished_at"] is not None
    assert reads[1] == (True, True), reads


def test_writes_and_checkpoints_during_the_childs_reads_never_leave_a_stale_kept_report(
    api_factory: ApiFactory, reads: list[tuple[bool, bool]]
) -> None:
    """Held in review r48a: verdicts committed (and the WAL checkpointed, truncated) while reports are read by the
    child; once the writer is done, the next report has every verdict, and a kept one is only served unchanged."""
    import sqlite3
    import threading

    from tests.api.test_report_cache import NO_WINDOW

    api = api_factory(**NO_WINDOW)
    run_id = _run(api, n_items=20)
    rows = _judgment_ids(run_id)
    done = threading.Event()

    def writer() -> None:
        try:
            path = api.database_url.removeprefix("sqlite:///")
            for start in range(0, len(rows) - 1, 7):
                _judge(rows[start : start + 7], seed=start)
                checkpoint = sqlite3.connect(path, timeout=60)
                checkpoint.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                checkpoint.close()
        finally:
            done.set()

    thread = threading.Thread(target=writer)
    thread.start()
    while not done.is_set():
        _report(api, run_id, n_boot=5)
    thread.join()
    final = _report(api, run_id, n_boot=5)
    with session_scope() as session:
        n_done = session.scalar(select(func.count()).where(Judgment.run_id == run_id, Judgment.status == "done"))
    assert final["counts"]["by_status"]["done"] == n_done
    again = _report(api, run_id, n_boot=5)
    assert again["cached"] is True and again["counts"] == final["counts"]
    assert any(served for _, served in reads)


def test_a_child_that_cannot_be_started_is_not_a_500(
    api_factory: ApiFactory, reads: list[tuple[bool, bool]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """BUG (review r48a): ``subprocess.Popen`` raising (``sys.executable`` empty or gone, fork failing with EAGAIN /
    ENOMEM / EMFILE under load) is not the "child failure" the reader falls back on: the report is a 500."""
    import sys

    api = api_factory()
    run_id = _run(api, n_items=3)
    _judge(_judgment_ids(run_id))
    monkeypatch.setattr(sys, "executable", "")
    response = api.client.get(f"/v1/runs/{run_id}/report", params={"n_boot": 5})
    assert response.status_code == 200, response.text
