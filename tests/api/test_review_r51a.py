"""Review r51a (hostile): the kept counts of finished runs (``report_cache.COUNTS_KEY``, commit 5cd5135).

Each test says which promise of the change it attacks. Tests marked "HOLDS" pass: they add coverage of a promise
the review found kept. The others fail on 5cd5135 and reproduce a finding."""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import delete, select, update

from judge_api.db import get_engine, session_scope
from judge_api.models import Judgment, ReportCacheEntry, Run
from judge_api.repository import claims, report_cache, retention
from judge_api.repository import runs as runs_module
from judge_api.repository.runs import FINISHED_POLLED, run_counts
from tests.api.conftest import Api, ApiFactory
from tests.api.test_report_cache import NO_WINDOW, _judge, _judgment_ids, _report, _run
from tests.api.test_run_counts_kept import (
    _forget_polled,  # noqa: F401  (autouse: the poll's memory of finished runs starts empty)
    counted,
    finished_run,
    kept_rows,
    kept_then,
    listed,
    polled,
    statements,
)


def fresh(run_id: str) -> dict[str, Any]:
    """What counting the run's judgments gives now (``run_counts``), as a summary shows it (zeros left out)."""
    with session_scope() as session:
        entry = run_counts(session, [run_id])[run_id]
    return {
        "counts": {k: v for k, v in entry["counts"].items() if v},
        "cost_usd": round(entry["cost"], 6),
        "input_tokens": entry["in"],
        "output_tokens": entry["out"],
        "provider_calls": entry["calls"],
        "cached": entry["cached"],
    }


def shown(summary: dict[str, Any]) -> dict[str, Any]:
    """The counted part of a summary, in ``fresh``'s shape."""
    return {
        "counts": {k: v for k, v in summary["counts"].items() if v},
        **{k: summary[k] for k in ("cost_usd", "input_tokens", "output_tokens", "provider_calls", "cached")},
    }


# -- promise 5: no 500 when the run is deleted between the count and the store ----------------------------------


def test_a_poll_storing_counts_of_a_run_deleted_meanwhile_is_no_500(
    api_factory: ApiFactory, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FINDING (promise 5: no 500 when a run is deleted between reads).

    Reproduction: a finished run the poll remembers finished (FINISHED_POLLED) and without kept counts; its poll
    reads the kept entry (a miss, with the run's state), counts the judgments (``_poll_counted``), and a
    DELETE /v1/runs/{id} commits right then (simulated by deleting the run in another session just after the count);
    the poll then stores the counts. Expected: 200 (the counts it had) or 404; got 500.

    Root cause: ``report_cache.store_counts`` is a bare INSERT .. ON CONFLICT into ``report_cache``, whose ``run_id``
    references ``runs.id``: the row is gone, so the insert violates the foreign key (IntegrityError), which nothing
    catches (``store_report`` catches IntegrityError in a savepoint; ``store_counts`` does not, and the poll runs in
    AUTOCOMMIT). The same happens for two API processes: one polling, one deleting."""
    api = api_factory(database_url=db_url, **NO_WINDOW)
    run_id = finished_run(api)
    polled(api, run_id)  # now remembered finished: the next poll reads the kept entry first
    assert run_id in FINISHED_POLLED
    real = runs_module._poll_counted

    def counted_then_deleted(session: Any, rid: str) -> Any:
        out = real(session, rid)
        with session_scope() as other:  # another request's DELETE /v1/runs/{id}, committed meanwhile
            retention.delete_run(other, rid)
        return out

    monkeypatch.setattr(runs_module, "_poll_counted", counted_then_deleted)
    response = api.client.get(f"/v1/runs/{run_id}")
    assert response.status_code in (200, 404), response.text


def test_the_runs_list_storing_counts_of_a_run_deleted_meanwhile_is_no_500(
    api_factory: ApiFactory, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FINDING (promise 5: no 500 when a run is deleted between reads; also the report's run summary).

    Reproduction: GET /v1/runs lists a finished run without kept counts; ``counted_runs`` reads its state
    (``kept_counts``), counts it (``run_counts``), and a DELETE /v1/runs/{id} commits right then (another session);
    ``store_counts`` then inserts the entry for a run that is gone. Expected: 200; got 500.

    Root cause: as for the poll, ``store_counts``' INSERT .. ON CONFLICT violates ``report_cache.run_id``'s foreign
    key and nothing catches the IntegrityError (no savepoint, unlike ``store_report``). The runs list is the dashboard's
    sidebar: one user deleting a run makes every concurrent page draw of that project fail."""
    api = api_factory(database_url=db_url, **NO_WINDOW)
    run_id = finished_run(api)
    real = runs_module.run_counts
    calls: list[int] = []

    def counted_then_deleted(session: Any, run_ids: Any) -> Any:
        out = real(session, run_ids)
        if run_id in run_ids and not calls:
            calls.append(1)
            with session_scope() as other:
                retention.delete_run(other, run_id)
        return out

    monkeypatch.setattr(runs_module, "run_counts", counted_then_deleted)
    response = api.client.get("/v1/runs")
    assert calls, "the list did not count the run"
    assert response.status_code == 200, response.text


# -- promise 2 (and 1): a run that is not finished is never served kept counts ----------------------------------


def _bundle_of_finished_run_with_work_left(api: Api, ahead: timedelta) -> tuple[str, int]:
    """Import the export of a finished run in which one judgment was still pending in the exporting deployment
    (status 'running' in the bundle, which the import brings back 'pending'), stamped ``ahead`` of this
    deployment's clock (the exporting deployment's clock). Returns the imported run and that judgment's id here."""
    run_id = finished_run(api, n_items=3)
    exported = api.client.get(f"/v1/runs/{run_id}/export")
    assert exported.status_code == 200, exported.text
    lines = [json.loads(line) for line in exported.text.splitlines()]
    assert lines[0]["run"]["finished_at"] is not None  # the bundle carries the run's finished_at
    stamp = (datetime.utcnow() + ahead).isoformat()
    held = next(i for i, line in enumerate(lines) if line["record"] == "judgment")
    lines[held] = {**lines[held], "status": "running", "updated_at": stamp}
    for line in lines:
        if line["record"] == "judgment" and line is not lines[held]:
            line["updated_at"] = stamp
    body = "\n".join(json.dumps(line) for line in lines).encode()
    imported = api.client.post("/v1/runs/import", content=body)
    assert imported.status_code == 201, imported.text
    new_id = str(imported.json()["run_id"])
    pending = [jid for jid, _ in _judgment_ids(new_id)]
    with session_scope() as session:
        waiting = session.scalars(
            select(Judgment.id).where(Judgment.run_id == new_id, Judgment.status == "pending")
        ).all()
    assert len(waiting) == 1 and waiting[0] in pending
    return new_id, int(waiting[0])


def test_an_imported_run_with_work_left_is_not_served_kept_counts(api_factory: ApiFactory) -> None:
    """FINDING (promise 2: a running run is never served kept counts; promise 1 through it).

    Reproduction: import a bundle whose run has ``finished_at`` and one judgment the exporting deployment was
    holding ('running': the import brings it back 'pending', to be judged here). The imported run is running
    (status 'queued'/'running', ``outcome`` None) but its ``finished_at`` is set, so the poll and the list keep and
    then serve its counts from ``report_cache`` without counting (``counted(seen) == 0``).

    Root cause: ``counts_on_state`` / ``counted_runs`` take "finished" to mean ``runs.finished_at IS NOT NULL``, but
    the import (``retention.import_run``) copies the bundle's ``finished_at`` onto a run whose judgments it reopens;
    the poll never clears a ``finished_at`` (nor does ``run_summary``), so the run stays "finished" for the cache
    while it runs."""
    api = api_factory(**NO_WINDOW)
    run_id, _ = _bundle_of_finished_run_with_work_left(api, timedelta(0))
    for _ in range(3):
        first = polled(api, run_id)
    assert first["status"] in ("queued", "running") and first["outcome"] is None
    with statements() as seen:
        again = polled(api, run_id)
    assert again["status"] in ("queued", "running")
    assert counted(seen) == 1, "a running run's counts were served from report_cache"


def test_a_claim_stamped_before_an_imported_runs_last_write_is_in_the_next_answers(api_factory: ApiFactory) -> None:
    """FINDING (promise 1: a kept count is never served when it differs from a fresh count; clock effects).

    Reproduction: as above, the imported run carries ``finished_at`` and one judgment reopened 'pending'; its
    judgments' ``updated_at`` come from the exporting deployment, whose clock is 10 minutes ahead of this one. Its
    counts are kept (three polls). A worker here claims the pending judgment (``claims.claim_many``: status
    'running', ``updated_at`` = now, before the run's max ``updated_at``). The next poll and list still say
    ``pending: 1, running: 0``; counting gives ``pending: 0, running: 1``.

    Root cause: the state is ``data_version`` + max(``updated_at``) + ``finished_at``; a claim changes a counted
    column (``status``) but bumps no ``data_version`` when its stamp is below the run's max (``_bump_if_overtaken``
    guards verdict writes only, not ``_claim_statement``), and ``finished_at`` stays set (previous test). The kept
    counts were only ever safe because no judgment of a finished run could change status without a state change;
    an imported run breaks that premise."""
    api = api_factory(**NO_WINDOW)
    run_id, waiting = _bundle_of_finished_run_with_work_left(api, timedelta(minutes=10))
    for _ in range(3):
        polled(api, run_id)
    _, claimed = claims.claim_many(get_engine(), [waiting], 600.0)
    assert waiting in claimed
    truth = fresh(run_id)
    assert truth["counts"].get("running") == 1
    assert shown(polled(api, run_id)) == truth
    assert shown(listed(api, run_id)) == truth


# -- promise 5: concurrency, corrupted bodies ------------------------------------------------------------------


def test_concurrent_first_reads_of_a_finished_run_store_its_counts_without_error(
    api_factory: ApiFactory, db_url: str
) -> None:
    """HOLDS (promise 5: concurrent requests storing the same run at once, SQLite and PostgreSQL).

    Six threads at once (three polls of a run the poll remembers finished, three runs lists), three rounds, the
    kept entry removed before each: every answer is 200 and equal to a fresh count, and one entry is left."""
    api = api_factory(database_url=db_url, **NO_WINDOW)
    run_id = finished_run(api, failed=1)
    polled(api, run_id)
    truth = fresh(run_id)
    for _ in range(3):
        with session_scope() as session:
            session.execute(delete(ReportCacheEntry).where(ReportCacheEntry.run_id == run_id))
        barrier = threading.Barrier(6)

        def go(i: int, barrier: threading.Barrier = barrier) -> tuple[int, Any]:
            barrier.wait()
            if i % 2:
                r = api.client.get(f"/v1/runs/{run_id}")
                return r.status_code, r.json() if r.status_code == 200 else r.text
            r = api.client.get("/v1/runs")
            if r.status_code != 200:
                return r.status_code, r.text
            return 200, next(e for e in r.json()["items"] if e["id"] == run_id)

        with ThreadPoolExecutor(6) as pool:
            answers = list(pool.map(go, range(6)))
        assert [code for code, _ in answers] == [200] * 6, answers
        assert all(shown(a) == truth for _, a in answers)
    assert [r for r in kept_rows(api) if r[2] == report_cache.COUNTS_KEY] == [
        (run_id, "default", report_cache.COUNTS_KEY)
    ]


@pytest.mark.parametrize(
    "body",
    [
        '{"counts": {"done": 1, "bogus": 7}, "cost": NaN, "in": 0, "out": 0, "calls": 0, "cached": 0}',
        '{"counts": {"done": 1}, "cost": Infinity, "in": 0, "out": 0, "calls": 0, "cached": 0}',
        '{"counts": {"done": 1}, "cost": 1e400, "in": 0, "out": 0, "calls": 0, "cached": 0}',
        '{"counts": {"done": 100000000000000000000000}, "cost": 0, "in": 0, "out": 0, "calls": 0, "cached": 0}',
        "null",
        '{"counts": []}',
    ],
)
def test_a_corrupted_entry_on_the_current_state_is_no_500(api_factory: ApiFactory, body: str) -> None:
    """HOLDS (promise 5: corrupted entry bodies give no 500).

    The kept entry's body is replaced by one that parses but is no honest count (NaN / Infinity cost, a status no
    summary knows, a count beyond 64 bits), on the run's current state: the poll, the list and the report answer
    200. (Such a body is served as it is when it passes ``_counts_of``: the state cannot tell; not a finding, the
    table is the service's own.)"""
    api = api_factory(**NO_WINDOW)
    run_id = finished_run(api, n_items=2)
    kept_then(api, run_id)
    with session_scope() as session:
        session.execute(
            update(ReportCacheEntry)
            .where(ReportCacheEntry.run_id == run_id, ReportCacheEntry.params_key == report_cache.COUNTS_KEY)
            .values(body=body)
        )
    assert api.client.get(f"/v1/runs/{run_id}").status_code == 200
    assert api.client.get("/v1/runs").status_code == 200
    response = api.client.get(f"/v1/runs/{run_id}/report", params={"n_boot": 10})
    assert response.status_code == 200, response.text


# -- promise 1: write paths ------------------------------------------------------------------------------------


def test_lost_claims_calls_cancel_and_retry_are_in_the_next_answers(api_factory: ApiFactory, db_url: str) -> None:
    """HOLDS (promise 1: add_unused_calls, cancel, retry of a finished run; the report's run object too).

    A finished run's counts kept; ``claims.add_unused_calls`` adds provider calls and cost to a done judgment
    (without a new ``updated_at``: it bumps ``data_version``); every answer equals a fresh count. Then a cancel of the
    finished run (nothing pending: nothing changes) and a retry (nothing failed: ``finished_at`` cleared, stamped again
    by the next poll): every answer equals a fresh count, the report's ``run`` object included."""
    api = api_factory(database_url=db_url, **NO_WINDOW)
    run_id = finished_run(api, failed=1)
    kept_then(api, run_id)
    jid = _judgment_ids(run_id)[0][0]
    claims.add_unused_calls(get_engine(), [{"jid": jid, "calls": 3, "cost": 0.25}])
    truth = fresh(run_id)
    assert truth["provider_calls"] >= 3
    assert shown(polled(api, run_id)) == truth
    assert shown(listed(api, run_id)) == truth
    assert shown(_report(api, run_id, n_boot=10)["run"]) == truth
    assert api.client.post(f"/v1/runs/{run_id}/cancel").status_code == 200
    assert shown(polled(api, run_id)) == fresh(run_id)
    assert api.client.post(f"/v1/runs/{run_id}/retry").status_code == 200
    _judge(_judgment_ids(run_id)[-1:])
    for _ in range(3):
        polled(api, run_id)
    truth = fresh(run_id)
    assert truth["counts"].get("failed") is None
    assert shown(polled(api, run_id)) == truth
    assert shown(listed(api, run_id)) == truth
    assert shown(_report(api, run_id, n_boot=11)["run"]) == truth


def test_the_report_route_keeps_nothing_when_the_cache_is_off(api_factory: ApiFactory) -> None:
    """HOLDS (promise 4: DJ_REPORT_CACHE=false keeps nothing, the report route included: it reads ``get_settings``,
    the list and the poll the app's settings; the same environment here)."""
    api = api_factory(DJ_REPORT_CACHE="false")
    run_id = finished_run(api)
    for _ in range(3):
        polled(api, run_id)
    _report(api, run_id, n_boot=10)
    listed(api, run_id)
    assert kept_rows(api) == []
    assert run_id not in FINISHED_POLLED


def test_another_projects_run_is_404_after_the_poll_remembered_it(secured: Api) -> None:
    """HOLDS (promise 3: a run the poll remembers finished is still 404 to another project; its kept entry is its
    own project's; the list of the other project neither lists it nor stores for it)."""
    run_id = finished_run(secured, key="alpha")
    mine = _run(secured, n_items=2, key="beta")
    _judge(_judgment_ids(mine))
    for _ in range(3):
        polled(secured, run_id, "alpha")
        polled(secured, mine, "beta")
    assert run_id in FINISHED_POLLED and mine in FINISHED_POLLED
    for key, other in (("beta", run_id), ("alpha", mine)):
        denied = secured.client.get(f"/v1/runs/{other}", headers=secured.as_key(key))
        assert denied.status_code == 404 and "counts" not in denied.text
        report = secured.client.get(f"/v1/runs/{other}/report", headers=secured.as_key(key))
        assert report.status_code == 404
    rows = {(r[0], r[1]) for r in kept_rows(secured) if r[2] == report_cache.COUNTS_KEY}
    assert rows == {(run_id, "alpha"), (mine, "beta")}
    assert shown(polled(secured, run_id, "alpha")) == fresh(run_id)
    assert shown(polled(secured, mine, "beta")) == fresh(mine)


def test_deleting_a_monitorless_run_with_reports_and_counts_leaves_no_entry(api_factory: ApiFactory) -> None:
    """HOLDS (promise 6: the counts entry is one more than the 8 reports, a ninth report pushes out a report, and
    deleting the run deletes all its entries)."""
    api = api_factory(**NO_WINDOW)
    run_id = finished_run(api, n_items=2)
    kept_then(api, run_id)
    for n_boot in range(10, 10 + report_cache.KEEP_PER_RUN + 2):
        _report(api, run_id, n_boot=n_boot)
    keys = [r[2] for r in kept_rows(api) if r[0] == run_id]
    assert keys.count(report_cache.COUNTS_KEY) == 1 and len(keys) == report_cache.KEEP_PER_RUN + 1
    assert api.client.delete(f"/v1/runs/{run_id}").status_code == 200
    assert [r for r in kept_rows(api) if r[0] == run_id] == []
    with session_scope() as session:
        assert session.get(Run, run_id) is None


def test_a_retry_committed_during_the_finishing_poll_leaves_no_kept_counts_for_a_running_run(
    api_factory: ApiFactory, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FINDING (promise 2: a running run is never served kept counts), low severity.

    Reproduction: a run whose judgments are all settled (two failed) but not yet found finished. Its poll counts the
    judgments (all terminal), and a POST /v1/runs/{id}/retry commits right then (simulated in another session just
    after the count: the two failed judgments back to 'pending', ``finished_at`` cleared). The poll then stamps
    ``finished_at`` (``_FINISH_RUN``: an UPDATE with no ``finished_at IS NULL`` / settled condition), over the retry.
    The run is now running (two pending judgments, status 'running', outcome None) with ``finished_at`` set, and from
    the third poll on its counts are served from ``report_cache`` without counting.

    Root cause: kept counts take ``finished_at IS NOT NULL`` to mean "every judgment is settled", but the poll's (and
    the runs list's ORM) finish stamp is unconditional, so a retry racing it leaves a stamped run that runs. (The
    race is older than 5cd5135; the change makes the stamp decide what is cached. Its counts stay right only while
    every later write moves max(updated_at): a claim from a worker whose clock is behind does not, see
    test_a_claim_stamped_before_an_imported_runs_last_write_is_in_the_next_answers.)"""
    api = api_factory(database_url=db_url, **NO_WINDOW)
    run_id = _run(api, n_items=3)
    rows = _judgment_ids(run_id)
    _judge(rows[:-2])
    _judge(rows[-2:], status="failed")
    real = runs_module._poll_counted
    raced: list[int] = []

    def counted_then_retried(session: Any, rid: str) -> Any:
        out = real(session, rid)
        if not raced:
            raced.append(1)
            with session_scope() as other:  # another request's POST /v1/runs/{id}/retry, committed meanwhile
                runs_module.retry_failed(other, rid)
        return out

    monkeypatch.setattr(runs_module, "_poll_counted", counted_then_retried)
    polled(api, run_id)  # found settled: stamps finished_at, over the retry
    monkeypatch.setattr(runs_module, "_poll_counted", real)
    for _ in range(3):
        answer = polled(api, run_id)
    assert answer["status"] == "running" and answer["counts"]["pending"] == 2
    with statements() as seen:
        answer = polled(api, run_id)
    assert answer["status"] == "running"
    assert counted(seen) == 1, "a running run's counts were served from report_cache"


def test_the_reports_run_summary_storing_counts_of_a_run_deleted_meanwhile_is_no_500(
    api_factory: ApiFactory, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FINDING (promise 5, the report route): same root cause as the poll and the list.

    Reproduction: GET /v1/runs/{id}/report of a finished run with neither a kept report nor kept counts; its run
    summary (``routers.reports._summary`` -> ``summarize_runs(keep_counts=True)``) reads the state, counts, and a
    DELETE /v1/runs/{id} commits right then (another session); ``store_counts`` raises IntegrityError (foreign key)
    -> 500. (On 3fa0ff7 the summary stored nothing; the report's own ``store_report`` swallows the same
    IntegrityError in a savepoint.)"""
    api = api_factory(database_url=db_url, **NO_WINDOW)
    run_id = finished_run(api, n_items=2)
    real = runs_module.run_counts
    calls: list[int] = []

    def counted_then_deleted(session: Any, run_ids: Any) -> Any:
        out = real(session, run_ids)
        if run_id in run_ids and not calls:
            calls.append(1)
            with session_scope() as other:
                retention.delete_run(other, run_id)
        return out

    monkeypatch.setattr(runs_module, "run_counts", counted_then_deleted)
    response = api.client.get(f"/v1/runs/{run_id}/report", params={"n_boot": 10})
    assert calls, "the report's summary did not count the run"
    assert response.status_code in (200, 404), response.text
