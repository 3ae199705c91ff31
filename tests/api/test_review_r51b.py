"""Review r51b (hostile): commit 41374c6 - judgments in multi-row INSERTs on PostgreSQL, and the r51a fixes.

Each test says which promise it attacks. Tests marked "HOLDS" pass: coverage of a promise the review found kept.
The others fail on 41374c6 and reproduce a finding."""

from __future__ import annotations

import json
import threading
import time
from datetime import datetime
from typing import Any

from sqlalchemy import create_engine, func, insert, select

from judge_api.db import session_scope
from judge_api.models import Judgment, Run
from judge_api.planning import PlannedJudgment
from judge_api.repository import runs as runs_module
from judge_api.repository.rows import INSERT_JUDGMENTS, judgment_row
from tests.api.conftest import ApiFactory, run_body
from tests.api.test_report_cache import NO_WINDOW, _judge, _judgment_ids, _run
from tests.api.test_run_counts_kept import (
    _forget_polled,  # noqa: F401  (autouse: the poll's memory of finished runs starts empty)
    counted,
    finished_run,
    polled,
    statements,
)


def _rows_of(url: str, run_id: str) -> list[dict[str, Any]]:
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            rows = connection.execute(select(Judgment.__table__).where(Judgment.run_id == run_id).order_by(Judgment.id))
            return [dict(r._mapping) for r in rows]
    finally:
        engine.dispose()


# -- change 2: _FINISH_RUN "stamps finished_at only while no judgment of the run is pending or running" -----------


def test_a_retry_uncommitted_while_the_poll_stamps_leaves_a_running_run_finished(
    api_factory: ApiFactory, pg_url: str
) -> None:
    """FINDING (change 2: a running run is never served kept counts; _FINISH_RUN stamps only while nothing is pending
    or running), PostgreSQL, medium-low severity (a race, but the window is the whole retry request).

    Reproduction: a run whose judgments are all settled (two failed) and not yet stamped. POST /v1/runs/{id}/retry
    runs in its transaction (``retry_failed``: the failed judgments set 'pending'; ``run.finished_at = None`` is no
    change, so no UPDATE of the run's row and no lock) and has not committed yet; a GET /v1/runs/{id} polls then
    (autocommit): it counts the committed judgments (all settled) and ``_FINISH_RUN`` matches, since its NOT EXISTS
    reads the snapshot of its own statement, in which the retry's 'pending' rows are not committed. The retry then
    commits. The run has two pending judgments and ``finished_at`` set; from the next polls on its counts are kept and
    served from report_cache (no counting statement) while it runs, and its report is kept as finished.

    Root cause: the NOT EXISTS is a check, not a lock: nothing orders the stamp after an uncommitted write that
    reopens judgments (the retry neither touches the run's row nor is it seen by the stamp). The retry (and the
    generations' release, cancel-then-retry, a monitor's sample) would have to take the run's row lock (e.g. always
    UPDATE runs SET finished_at = NULL, or SELECT .. FOR UPDATE) before reopening, so the stamp's UPDATE waits for it
    and rechecks; or the stamp lock the run row and recount in a serialisable way."""
    api = api_factory(database_url=pg_url, **NO_WINDOW)
    run_id = _run(api, n_items=3)
    rows = _judgment_ids(run_id)
    _judge(rows[:-2])
    _judge(rows[-2:], status="failed")
    # Fixed (session 51): the retry locks the run's row before it reopens a judgment and bumps its data_version,
    # and the stamp matches only the data_version its counts were read with. The poll (another request, so another
    # thread here) waits for the retry's transaction, then stamps nothing.
    answers: list[dict[str, Any]] = []
    with session_scope() as retry:  # POST /v1/runs/{id}/retry, not committed yet
        assert runs_module.retry_failed(retry, run_id) == 2
        retry.flush()
        poller = threading.Thread(target=lambda: answers.append(polled(api, run_id)))
        poller.start()
        poller.join(timeout=2.0)
        assert poller.is_alive() or answers, "the poll neither waited nor answered"
    poller.join(timeout=60)
    assert answers and not poller.is_alive()
    # the retry has committed: two judgments pending
    with session_scope() as session:
        run = session.get(Run, run_id)
        assert run is not None
        pending = session.scalar(
            select(func.count(Judgment.id)).where(Judgment.run_id == run_id, Judgment.status == "pending")
        )
        stamped = run.finished_at
    assert pending == 2
    for _ in range(3):
        answer = polled(api, run_id)
    with statements() as seen:
        answer = polled(api, run_id)
    assert answer["status"] == "running"
    problems = []
    if counted(seen) != 1:
        problems.append("a running run's counts were served from report_cache")
    if stamped is not None:
        problems.append(f"a run with 2 pending judgments is stamped finished at {stamped} (the stamp raced the retry)")
    assert not problems, problems


def test_a_crafted_bundle_with_an_unreleased_item_is_not_imported_finished(api_factory: ApiFactory) -> None:
    """FINDING (change 2: a bundle with work left is not imported finished; a running run is never served kept
    counts), low-medium severity (a bundle is client input; the exporting deployment would not stamp such a run).

    Reproduction: export a finished run, give its config ``systems`` ({"a": "local:smollm2", ...}) and its items
    ``released_at`` None (no generation rows), import it. The import keeps the bundle's ``finished_at``; the poll
    says status 'running' (``run_summary``: items_released 0 < n_items, the sweeper's ``unreleased_settled_items``
    will release them here) and from the third poll on its counts are served from report_cache without counting.

    Root cause: ``retention._work_left`` checks judgments' status, generations' status and ``plan_open`` only, not
    what ``run_summary`` calls settled for a run with systems (every item released); it should derive "finished" from
    the same rule as the summary (items of a run with systems all released, and the judgments' count matching
    ``n_judgments``), e.g. by clearing ``finished_at`` and letting the first poll stamp it."""
    api = api_factory(**NO_WINDOW)
    run_id = finished_run(api, n_items=3)
    exported = api.client.get(f"/v1/runs/{run_id}/export")
    assert exported.status_code == 200, exported.text
    lines = [json.loads(line) for line in exported.text.splitlines()]
    header = lines[0]
    assert header["run"]["finished_at"] is not None
    header["run"]["config"] = {**header["run"]["config"], "systems": {"a": "local:smollm2", "b": "local:smollm2"}}
    for line in lines:
        if line.get("record") == "item":
            line["released_at"] = None
    body = "\n".join(json.dumps(line) for line in lines).encode()
    imported = api.client.post("/v1/runs/import", content=body)
    if imported.status_code != 201:
        return  # refused: nothing to break here
    new_id = str(imported.json()["run_id"])
    answer = polled(api, new_id)
    with session_scope() as session:
        run = session.get(Run, new_id)
        assert run is not None
        finished_at = run.finished_at
    for _ in range(3):
        polled(api, new_id)
    with statements() as seen:
        again = polled(api, new_id)
    assert answer["status"] == again["status"] == "running"  # items_released 0 < n_items: not settled
    problems = []
    if finished_at is not None:
        problems.append(f"imported 'running' run with finished_at {finished_at}")
    if counted(seen) != 1:
        problems.append("a running run's counts were served from report_cache")
    assert not problems, problems


def test_a_finished_run_is_stamped_once_and_keeps_its_stamp(api_factory: ApiFactory, db_url: str) -> None:
    """HOLDS (change 2: a finished run is still stamped exactly once by the poll, then the list and report agree)."""
    api = api_factory(database_url=db_url, **NO_WINDOW)
    run_id = finished_run(api, n_items=2)
    first = polled(api, run_id)["finished_at"]
    listed = next(e for e in api.client.get("/v1/runs").json()["items"] if e["id"] == run_id)
    report = api.client.get(f"/v1/runs/{run_id}/report", params={"n_boot": 10})
    assert report.status_code == 200, report.text
    assert listed["finished_at"] == first == polled(api, run_id)["finished_at"]


# -- change 1: multi-row INSERTs of judgments (render_nulls + insertmanyvalues without RETURNING) --------------------


def _planned(n: int, judge: str) -> list[PlannedJudgment]:
    out = []
    for i in range(n):
        item = f"item-{i % 4}"
        if i % 3 == 0:
            out.append(PlannedJudgment(item, "single", "a", None, None, "r", "v1", f"x{i}", judge, i % 2))
        else:
            order = "ab" if i % 2 else "ba"
            out.append(PlannedJudgment(item, "pairwise", "a", "b", order, "r", "v1", f"x{i}", judge, 0, i % 5 == 0))
    return out


_IGNORED = ("id", "run_id", "dedup_key", "item_pk")


def test_insert_judgments_stores_the_same_rows_as_the_plain_orm_insert(api_factory: ApiFactory, pg_url: str) -> None:
    """HOLDS (change 1a): on PostgreSQL, INSERT_JUDGMENTS (render_nulls, multi-row) stores, column by column, what
    the ORM bulk insert (``insert(Judgment)``, None keys left out) stored before: single and pairwise rows,
    sample_index 1, identical-response ties, enqueued_at / estimated_cost_usd None and set, across the 1,000-row and
    32,700-parameter page boundaries (2,600 rows)."""
    api = api_factory(database_url=pg_url)
    ids = [str(api.submit(body=run_body(4))["id"]) for _ in range(2)]
    now = datetime(2026, 1, 2, 3, 4, 5)
    with session_scope() as session:
        for run_id, statement in zip(ids, (INSERT_JUDGMENTS, insert(Judgment)), strict=True):
            pks = runs_module.item_pks_for(session, run_id)
            texts = {"a": "same", "b": "same"}
            rows = [
                judgment_row(
                    run_id, p, pks[p.item_id], texts, {"k": 1}, now, now if i % 2 else None, 0.5 if i % 7 else None
                )
                for i, p in enumerate(_planned(2600, "ext"))
            ]
            session.execute(statement, rows)
    mine, before = (_rows_of(pg_url, run_id) for run_id in ids)
    mine = [r for r in mine if r["judge"] == "ext"]
    before = [r for r in before if r["judge"] == "ext"]
    assert len(mine) == len(before) == 2600
    strip = lambda r: {k: v for k, v in r.items() if k not in _IGNORED}  # noqa: E731
    assert [strip(r) for r in mine] == [strip(r) for r in before]


def test_run_creation_is_linear_in_judgments_on_postgresql(api_factory: ApiFactory, pg_url: str) -> None:
    """HOLDS (change 1e): storing a run's judgments on PostgreSQL, 4x the judgments is well under 8x the time, and
    the run's data_version counts a handful of statements (a statement per 1,000-row page at most)."""
    api = api_factory(database_url=pg_url)
    times = {}
    for n_items in (100, 400):
        body = run_body(n_items, rubrics=["rsum-single", "rsum-pairwise"], mode=["single", "pairwise"])
        del body["aspects"]
        started = time.perf_counter()
        run_id = str(api.submit(body=body)["id"])
        times[n_items] = time.perf_counter() - started
        stored = _rows_of(pg_url, run_id)
        with session_scope() as session:
            version = session.scalar(select(Run.data_version).where(Run.id == run_id))
        assert version is not None and version <= 2 + len(stored) // 700, (len(stored), version)
    assert times[400] < 8 * times[100] + 1.0, times
