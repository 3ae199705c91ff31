"""Issue 39: a finished run's judgment counts are kept per state of the run (``report_cache.COUNTS_KEY``).

The runs list, the status poll and the report's run summary read them instead of counting every judgment of the run
again (0.3-0.9 s per 1M-judgment run, on every draw of a dashboard page). They are never served after a write that
changes them: a retry, an imported verdict, deleted judgments, a reopened run; they belong to the run's project;
``DJ_REPORT_CACHE=false`` turns them off; and they do not push a report out of the run's kept reports."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import create_engine, delete, event, select, text, update

from judge_api.db import get_engine, session_scope
from judge_api.models import Judgment, ReportCacheEntry, Run
from judge_api.repository import report_cache
from judge_api.repository.runs import FINISHED_POLLED, POLLED
from tests.api.conftest import Api, ApiFactory
from tests.api.test_report_cache import NO_WINDOW, _judge, _judgment_ids, _report, _run

COUNTING = ("GROUP BY run_id, status", "GROUP BY status")
"""The statements that count a run's judgments (the runs list's, the poll's)."""


@contextmanager
def statements() -> Iterator[list[str]]:
    """Every SQL statement the app's engine runs inside the block."""
    seen: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        seen.append(statement)

    engine = get_engine()
    event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", record)


def counted(seen: list[str]) -> int:
    return sum(any(c in s for c in COUNTING) for s in seen)


def listed(api: Api, run_id: str, key: str | None = None) -> dict[str, Any]:
    response = api.client.get("/v1/runs", headers=api.as_key(key))
    assert response.status_code == 200, response.text
    return next(entry for entry in response.json()["items"] if entry["id"] == run_id)


def polled(api: Api, run_id: str, key: str | None = None) -> dict[str, Any]:
    response = api.client.get(f"/v1/runs/{run_id}", headers=api.as_key(key))
    assert response.status_code == 200, response.text
    return dict(response.json())


def kept_rows(api: Api) -> list[tuple[str, str, str]]:
    engine = create_engine(api.database_url)
    try:
        with engine.connect() as connection:
            rows = connection.execute(
                text("SELECT run_id, project_id, params_key FROM report_cache ORDER BY run_id, params_key")
            )
            return [(r[0], r[1], r[2]) for r in rows]
    finally:
        engine.dispose()


def finished_run(api: Api, n_items: int = 4, failed: int = 0, key: str | None = None) -> str:
    """A run whose judgments are all settled (``failed`` of them failed), found finished by a poll."""
    run_id = _run(api, n_items=n_items, key=key)
    rows = _judgment_ids(run_id)
    _judge(rows[: len(rows) - failed])
    if failed:
        _judge(rows[len(rows) - failed :], status="failed")
    assert polled(api, run_id, key)["finished_at"] is not None
    return run_id


@pytest.fixture(autouse=True)
def _forget_polled() -> Iterator[None]:
    # the poll's in-process memory of runs outlives an app: a test starts without it
    forget_polls()
    yield
    forget_polls()


def forget_polls() -> None:
    """What an API process that just started knows of runs: nothing."""
    FINISHED_POLLED._ids.clear()
    POLLED._ids.clear()


def test_the_runs_list_counts_a_finished_run_once_per_state(api_factory: ApiFactory, db_url: str) -> None:
    api = api_factory(database_url=db_url, **NO_WINDOW)
    run_id = finished_run(api, failed=2)
    with statements() as seen:
        first = listed(api, run_id)
    assert counted(seen) == 1  # counted, and kept
    assert (run_id, "default", report_cache.COUNTS_KEY) in kept_rows(api)
    with statements() as seen:
        again = listed(api, run_id)
    assert counted(seen) == 0 and again == first
    assert first["counts"]["done"] == first["n_judgments"] - 2 and first["counts"]["failed"] == 2
    # the poll and the report's run summary answer the same from what is kept
    assert polled(api, run_id) == first
    assert _report(api, run_id, n_boot=10)["run"] == first


def test_the_poll_of_a_finished_run_reads_the_kept_counts(api_factory: ApiFactory, db_url: str) -> None:
    api = api_factory(database_url=db_url, **NO_WINDOW)
    run_id = finished_run(api)  # that poll stamped finished_at
    answers = []
    with statements() as seen:
        answers.append(polled(api, run_id))  # found finished: remembered
        answers.append(polled(api, run_id))  # counted once more, and kept
    assert counted(seen) == 2
    with statements() as seen:
        answers += [polled(api, run_id) for _ in range(3)]
    assert counted(seen) == 0
    assert all(a == answers[0] for a in answers) and answers[0] == listed(api, run_id)


def test_a_running_runs_poll_is_one_statement_and_never_kept(api_factory: ApiFactory) -> None:
    api = api_factory(**NO_WINDOW)
    run_id = _run(api, n_items=3)
    rows = _judgment_ids(run_id)
    _judge(rows[:4])
    with statements() as seen:
        for _ in range(3):
            assert polled(api, run_id)["status"] == "running"
    # the first poll in this process looked for kept counts (one read), the next ones did not
    assert counted(seen) == 3 and len([s for s in seen if "report_cache" in s]) == 1
    assert listed(api, run_id)["counts"]["done"] == 4
    assert kept_rows(api) == []


def test_a_restarted_api_polls_a_finished_run_from_its_kept_counts(api_factory: ApiFactory, db_url: str) -> None:
    """Issue 39: after a restart the first poll of a finished run reads its kept counts, and counts nothing (it counted
    the run's judgments again: 0.6 s at 1M on SQLite, on every page the dashboard opened first)."""
    api = api_factory(database_url=db_url, **NO_WINDOW)
    run_id = finished_run(api, failed=1)
    first = listed(api, run_id)  # counted and kept
    forget_polls()  # a new API process
    with statements() as seen:
        answers = [polled(api, run_id) for _ in range(3)]
    assert counted(seen) == 0
    assert all(a == first for a in answers)


def test_a_restarted_api_counts_a_run_written_since_its_counts_were_kept(api_factory: ApiFactory) -> None:
    """The kept counts of a state that is no longer the run's are not served on a first poll either: a retry after
    the counts were kept shows in the first poll of a new process."""
    api = api_factory(**NO_WINDOW)
    run_id = finished_run(api, failed=2)
    before = listed(api, run_id)
    assert before["counts"]["failed"] == 2
    response = api.client.post(f"/v1/runs/{run_id}/retry")
    assert response.status_code in (200, 202), response.text
    forget_polls()
    with statements() as seen:
        after = polled(api, run_id)
    assert counted(seen) == 1
    assert after["counts"].get("failed", 0) == 0 and after["counts"]["pending"] == 2


def kept_then(api: Api, run_id: str) -> dict[str, Any]:
    """Keep the finished run's counts (the list and the poll both served from them), then return the list's answer."""
    for _ in range(3):
        polled(api, run_id)
    before = listed(api, run_id)
    with statements() as seen:
        assert listed(api, run_id) == before and polled(api, run_id) == before
    assert counted(seen) == 0
    return before


def test_a_retry_is_in_the_next_list_and_poll(api_factory: ApiFactory, db_url: str) -> None:
    api = api_factory(database_url=db_url, **NO_WINDOW)
    run_id = finished_run(api, failed=3)
    before = kept_then(api, run_id)
    assert api.client.post(f"/v1/runs/{run_id}/retry").status_code == 200
    after_poll = polled(api, run_id)
    after_list = listed(api, run_id)
    for after in (after_poll, after_list):
        assert after["counts"]["failed"] == 0 and after["counts"]["pending"] == 3
        assert after["status"] == "running" and after["finished_at"] is None
    # judged again, it finishes again: counted on the new state, never the old one
    _judge([r for r in _judgment_ids(run_id)][-3:])
    assert polled(api, run_id)["finished_at"] is not None
    done = kept_then(api, run_id)
    assert done["counts"]["done"] == before["counts"]["done"] + 3 and "failed" not in {
        k for k, v in done["counts"].items() if v
    }


def test_an_unparseable_retry_is_in_the_next_answers(api_factory: ApiFactory) -> None:
    api = api_factory(**NO_WINDOW)
    run_id = _run(api, n_items=3)
    rows = _judgment_ids(run_id)
    _judge(rows[:-2])
    _judge(rows[-2:], status="unparseable")
    assert polled(api, run_id)["finished_at"] is not None
    kept_then(api, run_id)
    assert api.client.post(f"/v1/runs/{run_id}/retry", json={"unparseable": True}).status_code == 200
    assert polled(api, run_id)["counts"]["pending"] == 2
    assert listed(api, run_id)["counts"]["unparseable"] == 0


def test_an_imported_verdict_is_in_the_next_answers(api_factory: ApiFactory, db_url: str) -> None:
    api = api_factory(database_url=db_url, **NO_WINDOW)
    run_id = finished_run(api)
    before = kept_then(api, run_id)
    row = {"item_id": "item-0", "system": "a", "judge": "ext", "score": 5, "scale_min": 1, "scale_max": 10}
    imported = api.client.post(f"/v1/runs/{run_id}/verdicts", json={"verdicts": [row]})
    assert imported.status_code == 201, imported.text
    for after in (polled(api, run_id), listed(api, run_id)):
        assert after["counts"]["done"] == before["counts"]["done"] + 1
        assert after["n_judgments"] == before["n_judgments"] + 1


def test_deleted_judgments_are_not_in_the_next_answers(api_factory: ApiFactory, db_url: str) -> None:
    """Judgments removed under the run (a monitor's retention does this) change the state the counts are kept on."""
    api = api_factory(database_url=db_url, **NO_WINDOW)
    run_id = finished_run(api)
    before = kept_then(api, run_id)
    with session_scope() as session:
        ids = session.scalars(select(Judgment.id).where(Judgment.run_id == run_id).limit(5)).all()
        session.execute(delete(Judgment).where(Judgment.id.in_(ids)))
    assert polled(api, run_id)["counts"]["done"] == before["counts"]["done"] - 5
    assert listed(api, run_id)["counts"]["done"] == before["counts"]["done"] - 5


def test_a_reopened_run_is_counted_while_it_runs(api_factory: ApiFactory) -> None:
    api = api_factory(**NO_WINDOW)
    run_id = finished_run(api)
    kept_then(api, run_id)
    with session_scope() as session:  # more work for a finished run (a monitor's new sample, a released item)
        session.execute(update(Run).where(Run.id == run_id).values(n_judgments=Run.n_judgments + 1, finished_at=None))
    with statements() as seen:
        reopened = polled(api, run_id)
        assert listed(api, run_id) == reopened
    assert reopened["status"] == "running" and reopened["finished_at"] is None
    assert counted(seen) == 2
    assert run_id not in FINISHED_POLLED


def test_deleting_the_run_deletes_its_kept_counts(api_factory: ApiFactory) -> None:
    api = api_factory(**NO_WINDOW)
    run_id = finished_run(api)
    other = finished_run(api)
    kept_then(api, run_id)
    kept_then(api, other)
    assert {r[0] for r in kept_rows(api)} == {run_id, other}
    assert api.client.delete(f"/v1/runs/{run_id}").status_code == 200
    assert api.client.get(f"/v1/runs/{run_id}").status_code == 404  # the poll remembered it finished
    assert {r[0] for r in kept_rows(api)} == {other}


def test_kept_counts_never_cross_projects(secured: Api) -> None:
    run_id = finished_run(secured, key="alpha")
    kept_then_by = [polled(secured, run_id, "alpha") for _ in range(3)]
    assert listed(secured, run_id, "alpha-read") == kept_then_by[-1]
    denied = secured.client.get(f"/v1/runs/{run_id}", headers=secured.as_key("beta"))
    assert denied.status_code == 404 and "counts" not in denied.text
    assert all(
        entry["id"] != run_id
        for entry in secured.client.get("/v1/runs", headers=secured.as_key("beta")).json()["items"]
    )
    assert {r[1] for r in kept_rows(secured)} == {"alpha"}


@pytest.mark.parametrize(
    "body",
    [
        "not json",
        "[]",
        '{"counts": {"done": "3"}, "cost": 0, "in": 0, "out": 0, "calls": 0, "cached": 0}',
        '{"counts": {}}',
    ],
)
def test_an_entry_that_is_not_counts_is_counted_again(api_factory: ApiFactory, body: str) -> None:
    api = api_factory(**NO_WINDOW)
    run_id = finished_run(api)
    truth = kept_then(api, run_id)
    with session_scope() as session:
        session.execute(
            update(ReportCacheEntry)
            .where(ReportCacheEntry.run_id == run_id, ReportCacheEntry.params_key == report_cache.COUNTS_KEY)
            .values(body=body)
        )
    with statements() as seen:
        assert polled(api, run_id) == truth
        assert listed(api, run_id) == truth
    assert counted(seen) >= 1


def test_an_entry_kept_on_another_state_is_not_served(api_factory: ApiFactory) -> None:
    """Counts kept on a state that is not the run's current one (a write committed while they were being counted) are
    counted again, even when the entry says otherwise in its body."""
    api = api_factory(**NO_WINDOW)
    run_id = finished_run(api)
    truth = kept_then(api, run_id)
    lying = '{"counts": {"done": 999}, "cost": 1.5, "in": 1, "out": 1, "calls": 1, "cached": 0}'
    with session_scope() as session:
        session.execute(
            update(ReportCacheEntry)
            .where(ReportCacheEntry.run_id == run_id, ReportCacheEntry.params_key == report_cache.COUNTS_KEY)
            .values(body=lying, state=ReportCacheEntry.state + "x")
        )
    assert polled(api, run_id) == truth
    assert listed(api, run_id) == truth


def test_the_kept_counts_can_be_turned_off(api_factory: ApiFactory) -> None:
    api = api_factory(DJ_REPORT_CACHE="false")
    run_id = finished_run(api)
    with statements() as seen:
        answers = [polled(api, run_id) for _ in range(3)] + [listed(api, run_id) for _ in range(2)]
    assert counted(seen) == 5 and all(a == answers[0] for a in answers)
    assert kept_rows(api) == []


def test_kept_counts_do_not_push_out_a_kept_report(api_factory: ApiFactory) -> None:
    api = api_factory(**NO_WINDOW)
    run_id = finished_run(api, n_items=3)
    for n_boot in range(10, 10 + report_cache.KEEP_PER_RUN):
        _report(api, run_id, n_boot=n_boot)
    kept_then(api, run_id)
    keys = [r[2] for r in kept_rows(api)]
    assert keys.count(report_cache.COUNTS_KEY) == 1 and len(keys) == report_cache.KEEP_PER_RUN + 1
    # a ninth report pushes out the oldest report, never the counts
    _report(api, run_id, n_boot=99)
    keys = [r[2] for r in kept_rows(api)]
    assert keys.count(report_cache.COUNTS_KEY) == 1 and len(keys) == report_cache.KEEP_PER_RUN + 1
    assert _report(api, run_id, n_boot=10)["cached"] is False  # the oldest report went


def test_a_settled_bundle_keeps_its_finished_at_and_a_bundle_with_work_left_does_not(api: Api) -> None:
    """``retention.import_run`` keeps a bundle's ``finished_at`` only when nothing is left to judge here (review r51a:
    a run stamped finished while a judgment was pending was served kept counts)."""
    run_id = finished_run(api, n_items=2)
    exported = api.client.get(f"/v1/runs/{run_id}/export")
    assert exported.status_code == 200, exported.text
    lines = [json.loads(line) for line in exported.text.splitlines()]

    def imported(records: list[dict[str, Any]]) -> str:
        response = api.client.post("/v1/runs/import", content="\n".join(json.dumps(r) for r in records).encode())
        assert response.status_code == 201, response.text
        return str(response.json()["run_id"])

    settled = imported(lines)
    original = polled(api, run_id)
    assert polled(api, settled)["finished_at"] == original["finished_at"]
    kept = kept_then(api, settled)
    assert kept["counts"] == original["counts"] and kept["status"] == original["status"]

    held = next(i for i, line in enumerate(lines) if line["record"] == "judgment")
    for status in ("running", "pending"):
        reopened = imported([{**line, "status": status} if i == held else line for i, line in enumerate(lines)])
        answer = polled(api, reopened)
        assert answer["finished_at"] is None and answer["counts"]["pending"] == 1
        assert answer["status"] in ("queued", "running")
