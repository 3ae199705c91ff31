"""Issue 28.3 against the real stack (API, Redis, a Celery worker process, SQLite, the simulator over HTTP): the
verdict writer's failures never leave a task waiting for good.

Faults are injected into the worker process only, by a ``sitecustomize`` module put first on its ``PYTHONPATH``
(``workers/writer.py`` itself is unchanged):

* ``settle``: the settle step after every commit raises (a Redis error the writer did not expect). Before the fix
  the writer thread ended there and the group's futures never resolved: the task waited with no timeout while its
  lease keeper renewed the claims, so neither the task nor the sweeper ever finished the run.
* ``write-once``: the first group write raises an error that is not the database being away. Every caller gets
  the error, the task hands its judgments back (claims released, stashed replies kept) and its retry re-sends
  them at once, long before the claim lease (120 s here) would let the sweeper take them: nothing lost, nothing
  paid or written twice."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from dialogue_judge.testing import REPO_ROOT, LiveService, OwnRedis
from judge_simulator.process import SimulatorProcess

from .conftest import make_items, scores_for, single_run, verify_exactly_once, wait_run, wait_until

pytestmark = [pytest.mark.e2e]

SYSTEMS = {"a": 21, "b": 64}
LEASE_S = 120  # a judgment re-sent well inside this was handed back, not left for the sweeper after the lease

SITECUSTOMIZE = """
import os
import sys
import time

_FAULT = os.environ.get("DJ_TEST_WRITER_FAULT")
_LOG = os.environ.get("DJ_TEST_WRITER_FAULT_LOG", "")


def _mark(what):
    with open(_LOG, "a") as out:
        out.write(f"{time.time()} {what}\\n")


if _FAULT and "worker" in sys.argv:
    from judge_api.repository import claims
    from workers import writer

    if _FAULT == "settle":
        def _settle(self, group, written):
            _mark(f"settle {len(group)}")
            raise RuntimeError("injected: the settle step failed")

        writer.VerdictWriter._settle_stashes = _settle
    elif _FAULT == "write-once":
        _real = claims.write_verdicts
        _done = []

        def _write(*args, **kwargs):
            if not _done:
                _done.append(1)
                _mark("write")
                raise RuntimeError("injected: the group write failed")
            return _real(*args, **kwargs)

        claims.write_verdicts = _write
"""


TASK_LINE = re.compile(r"Task dialogue_judge\.\w+\[([0-9a-f-]+)\] (received|succeeded|raised|retry)")


def unfinished_tasks(service: LiveService) -> set[str]:
    """Tasks the worker received and has not finished (succeeded, raised or retried), from its log."""
    received: set[str] = set()
    ended: set[str] = set()
    for log in service.home.glob("worker*.log"):
        for task_id, what in TASK_LINE.findall(log.read_text(errors="replace")):
            (received if what == "received" else ended).add(task_id)
    return received - ended


def faulty_service(fault: str, redis_url: str, database_url: str, tmp_path: Path) -> tuple[LiveService, Path]:
    inject = tmp_path / "inject"
    inject.mkdir()
    (inject / "sitecustomize.py").write_text(SITECUSTOMIZE)
    log = tmp_path / "faults.log"
    env = {
        "PYTHONPATH": f"{inject}:{REPO_ROOT}",
        "DJ_TEST_WRITER_FAULT": fault,
        "DJ_TEST_WRITER_FAULT_LOG": str(log),
        "DJ_CLAIM_LEASE": str(LEASE_S),
        "DJ_REQUEUE_AFTER": str(LEASE_S),
        "DJ_VISIBILITY_TIMEOUT": str(2 * LEASE_S),
    }
    return LiveService(redis_url, database_url, tmp_path / "svc", env_overrides=env, worker_concurrency=2), log


def test_a_settle_step_that_raises_never_leaves_a_task_waiting(
    sqlite_url: str, own_redis: OwnRedis, tmp_path: Path, sim: SimulatorProcess, services: list[LiveService]
) -> None:
    judge = f"openai-compatible:sim-judge@{sim.base_url}"
    service, log = faulty_service("settle", own_redis.url, sqlite_url, tmp_path)
    services.append(service)
    service.start_api()
    service.start_worker()
    items = make_items(10, SYSTEMS, prefix="settle")
    created = service.client().create_run(single_run(items, judge))
    wait_until(lambda: sim.stats()["total_calls"] >= 1, 120, "the worker's first call")  # a loaded machine
    started = time.monotonic()
    summary = wait_run(service.api_url, created["id"], timeout_s=LEASE_S / 2)  # old code: never finishes
    assert summary["status"] == "done" and time.monotonic() - started < LEASE_S / 2
    assert log.read_text().count("settle") >= 1  # the fault did happen, after every committed group
    # the verdicts were committed before the settle step, so the run looks done either way: what the old code lost
    # was the tasks, each waiting for good on a future that never resolved (its message never acknowledged)
    wait_until(lambda: not unfinished_tasks(service), 30, "every task the worker received to finish")
    verdict = verify_exactly_once(
        service, sqlite_url, created["id"], 20, sim=sim, exact_calls=True, expected_scores=scores_for(items, SYSTEMS)
    )
    assert verdict.by_status == {"done": 20}


def test_a_failed_group_write_hands_the_judgments_back_and_they_are_resent_within_the_lease(
    sqlite_url: str, own_redis: OwnRedis, tmp_path: Path, sim: SimulatorProcess, services: list[LiveService]
) -> None:
    judge = f"openai-compatible:sim-judge@{sim.base_url}"
    service, log = faulty_service("write-once", own_redis.url, sqlite_url, tmp_path)
    services.append(service)
    service.start_api()
    service.start_worker()
    items = make_items(10, SYSTEMS, prefix="handback")
    created = service.client().create_run(single_run(items, judge))
    wait_until(lambda: log.exists(), 120, "the injected write failure")  # a loaded machine starts slowly
    summary = wait_run(service.api_url, created["id"], timeout_s=LEASE_S / 2)
    finished = time.time()
    (line,) = log.read_text().splitlines()
    failed_at = float(line.split()[0])
    assert summary["status"] == "done" and finished - failed_at < LEASE_S / 2  # re-sent, not swept after the lease
    # every judgment stored once; the provider saw one call per judgment (the re-sent ones used the stashed
    # replies) and every call it saw is recorded
    verdict = verify_exactly_once(
        service, sqlite_url, created["id"], 20, sim=sim, exact_calls=True, expected_scores=scores_for(items, SYSTEMS)
    )
    assert verdict.by_status == {"done": 20}
    assert sim.stats()["total_calls"] == 20
    wait_until(lambda: not unfinished_tasks(service), 30, "every task the worker received to finish")
