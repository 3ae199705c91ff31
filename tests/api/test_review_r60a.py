"""Review r60a (hostile): commit 8c196d2's status poll, which now reads a run's kept counts on its first poll in a
process (``runs.POLLED``) before counting its judgments.

Tests named ``test_BUG_*`` fail on 8c196d2 and reproduce a finding; ``test_HOLDS_*`` pin a promise the review could
not break (restarts are simulated by forgetting ``FINISHED_POLLED`` and ``POLLED``)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from sqlalchemy import delete, select, update

from judge_api.db import session_scope
from judge_api.models import Judgment, Run
from judge_api.repository.runs import FINISHED_POLLED, POLLED
from tests.api.conftest import Api, ApiFactory
from tests.api.test_monitors import ingest, response, sampling_monitor
from tests.api.test_report_cache import NO_WINDOW, _judge, _judgment_ids, _run
from tests.api.test_review_r51a import fresh, shown
from tests.api.test_run_counts_kept import (
    _forget_polled,  # noqa: F401  (autouse: the poll's memory of runs starts empty)
    counted,
    finished_run,
    forget_polls,
    kept_rows,
    kept_then,
    listed,
    polled,
    statements,
)


def _retry(api: Api, run_id: str) -> None:
    assert api.client.post(f"/v1/runs/{run_id}/retry").status_code == 200


def _retry_unparseable(api: Api, run_id: str) -> None:
    assert api.client.post(f"/v1/runs/{run_id}/retry", json={"unparseable": True}).status_code == 200


def _import_verdict(api: Api, run_id: str) -> None:
    row = {"item_id": "item-0", "system": "a", "judge": "ext", "score": 5, "scale_min": 1, "scale_max": 10}
    assert api.client.post(f"/v1/runs/{run_id}/verdicts", json={"verdicts": [row]}).status_code == 201


def _delete_judgments(api: Api, run_id: str) -> None:
    with session_scope() as session:
        ids = session.scalars(select(Judgment.id).where(Judgment.run_id == run_id).limit(3)).all()
        session.execute(delete(Judgment).where(Judgment.id.in_(ids)))


def _rate(api: Api, run_id: str) -> None:
    ratings = [
        {"item_id": "item-0", "system": "a", "aspect": "consistency", "rater": "ann", "kind": "score", "value": 3.0,
         "scale_min": 1.0, "scale_max": 10.0}
    ]  # fmt: skip
    assert api.client.post(f"/v1/runs/{run_id}/human-ratings", json={"ratings": ratings}).status_code == 201


def _cancel(api: Api, run_id: str) -> None:
    assert api.client.post(f"/v1/runs/{run_id}/cancel").status_code == 200


def _reopen(api: Api, run_id: str) -> None:
    with session_scope() as session:
        session.execute(update(Run).where(Run.id == run_id).values(n_judgments=Run.n_judgments + 1, finished_at=None))


WRITES: dict[str, Callable[[Api, str], None]] = {
    "retry": _retry,
    "retry-unparseable": _retry_unparseable,
    "imported-verdict": _import_verdict,
    "deleted-judgments": _delete_judgments,
    "human-rating": _rate,
    "cancel": _cancel,
    "reopened": _reopen,
}


def _settled_run(api: Api) -> str:
    """A finished run with one failed and one unparseable judgment (so both retries have work)."""
    run_id = _run(api, n_items=3)
    rows = _judgment_ids(run_id)
    _judge(rows[:-2])
    _judge(rows[-2:-1], status="failed")
    _judge(rows[-1:], status="unparseable")
    assert polled(api, run_id)["finished_at"] is not None
    return run_id


@pytest.mark.parametrize("write", list(WRITES))
@pytest.mark.parametrize("restart", ["before-the-write", "after-the-write"])
def test_HOLDS_a_restarted_apis_first_poll_is_never_stale(
    api_factory: ApiFactory, db_url: str, write: str, restart: str
) -> None:
    """Counts kept on a finished run; the API restarts before or after a write (every write the brief lists); the
    first poll of the new process, and the ones after it, equal a fresh count of the judgments and the runs list."""
    api = api_factory(database_url=db_url, **NO_WINDOW)
    run_id = _settled_run(api)
    kept_then(api, run_id)
    if restart == "before-the-write":
        forget_polls()
        with statements() as seen:
            answer = polled(api, run_id)  # served from the kept counts
        assert counted(seen) == 0 and run_id in FINISHED_POLLED
        assert shown(answer) == fresh(run_id)
    WRITES[write](api, run_id)
    if restart == "after-the-write":
        forget_polls()
    for _ in range(3):
        answer = polled(api, run_id)
        assert shown(answer) == fresh(run_id)
        assert answer == listed(api, run_id)


@pytest.mark.parametrize("restart", [False, True])
def test_HOLDS_a_deleted_run_is_404_on_its_first_poll(api_factory: ApiFactory, db_url: str, restart: bool) -> None:
    api = api_factory(database_url=db_url, **NO_WINDOW)
    run_id = finished_run(api)
    kept_then(api, run_id)
    assert api.client.delete(f"/v1/runs/{run_id}").status_code == 200
    if restart:
        forget_polls()
    for _ in range(2):
        gone = api.client.get(f"/v1/runs/{run_id}")
        assert gone.status_code == 404, gone.text
    assert [r for r in kept_rows(api) if r[0] == run_id] == []


def test_HOLDS_a_monitor_runs_new_samples_are_in_a_restarted_apis_first_poll(api_factory: ApiFactory) -> None:
    """A monitor's run judged and found finished, its counts kept; new sampled responses arrive (new judgments,
    ``finished_at`` cleared); the first poll of a restarted API counts them, pending."""
    api = api_factory(**NO_WINDOW)
    monitor_id, run_id = sampling_monitor(api)
    ingest(api, monitor_id, [response(i) for i in range(3)])
    _judge(_judgment_ids(run_id))
    assert polled(api, run_id)["finished_at"] is not None
    for _ in range(2):
        polled(api, run_id)
    forget_polls()
    with statements() as seen:
        polled(api, run_id)  # a restarted API: served from the kept counts
    assert counted(seen) == 0
    ingest(api, monitor_id, [response(i) for i in range(3, 5)])
    forget_polls()
    answer = polled(api, run_id)
    assert shown(answer) == fresh(run_id) and answer["counts"]["pending"] > 0
    assert answer["finished_at"] is None and answer["status"] in ("queued", "running")


def test_HOLDS_another_projects_first_poll_after_a_restart_is_404(secured: Api) -> None:
    """After a restart, beta's first poll of alpha's finished run (counts kept) is 404 without counts, and leaves
    alpha's poll right; beta's kept entry never appears."""
    run_id = finished_run(secured, key="alpha")
    kept_then_by = [polled(secured, run_id, "alpha") for _ in range(3)]
    forget_polls()
    denied = secured.client.get(f"/v1/runs/{run_id}", headers=secured.as_key("beta"))
    assert denied.status_code == 404 and "counts" not in denied.text
    assert polled(secured, run_id, "alpha") == kept_then_by[-1]
    forget_polls()
    with statements() as seen:
        assert polled(secured, run_id, "alpha-read") == kept_then_by[-1]
    assert counted(seen) == 0
    assert {r[1] for r in kept_rows(secured)} == {"alpha"}


def test_HOLDS_the_first_poll_of_a_settled_run_stamps_finished_at_once(api_factory: ApiFactory, db_url: str) -> None:
    """A run settled but never polled (a restarted API): its first poll stamps ``finished_at`` (one read of the kept
    counts, which misses: not finished yet), the next polls answer the stamped value."""
    api = api_factory(database_url=db_url, **NO_WINDOW)
    run_id = _run(api, n_items=3)
    _judge(_judgment_ids(run_id))
    with statements() as seen:
        first = polled(api, run_id)
    assert first["finished_at"] is not None and counted(seen) == 1
    with session_scope() as session:
        stamped = session.get(Run, run_id)
        assert stamped is not None and stamped.finished_at is not None
    answers = [polled(api, run_id) for _ in range(4)]
    assert all(a["finished_at"] == answers[0]["finished_at"] for a in answers)
    assert shown(answers[-1]) == fresh(run_id)


@pytest.mark.parametrize("odd", ["%00", "a%00b", "x" * 4000, "%ED%A0%80", "%FF", "..%2F..", "%F0%9F%98%80"])
def test_HOLDS_odd_ids_are_404_on_first_and_later_polls(api_factory: ApiFactory, db_url: str, odd: str) -> None:
    api = api_factory(database_url=db_url, **NO_WINDOW)
    finished_run(api)
    for _ in range(2):
        answer = api.client.get(f"/v1/runs/{odd}")
        assert answer.status_code == (422 if "%00" in odd else 404), answer.text  # a NUL: the path's own 422


def test_HOLDS_a_running_runs_polls_read_the_kept_counts_once_per_process(api_factory: ApiFactory) -> None:
    """A running run: one report_cache read on its first poll of each process, none on the next ones, never kept."""
    api = api_factory(**NO_WINDOW)
    run_id = _run(api, n_items=3)
    _judge(_judgment_ids(run_id)[:3])
    for _process in range(2):
        forget_polls()
        with statements() as seen:
            for _ in range(4):
                assert polled(api, run_id)["status"] == "running"
        assert counted(seen) == 4 and len([s for s in seen if "report_cache" in s]) == 1
    assert run_id in POLLED and run_id not in FINISHED_POLLED
    assert kept_rows(api) == []
