"""Queue faults against the real stack: a worker killed with SIGKILL mid-run, and Redis restarted mid-run (losing
every queued and unacknowledged message). Either way the run finishes and each judgment is written exactly once."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from dialogue_judge.testing import LiveService, OwnRedis
from judge_simulator.process import SimulatorProcess

from .conftest import (
    make_items,
    run_counts,
    scores_for,
    single_run,
    verify_exactly_once,
    wait_until,
)

pytestmark = [pytest.mark.e2e]

SYSTEMS = {"a": 10, "b": 55}


def test_kill_9_worker_mid_run(
    pg_url: str, own_redis: OwnRedis, tmp_path: Path, sim: SimulatorProcess, services: list[LiveService]
) -> None:
    """Two workers share the run; one is SIGKILLed while it holds claimed judgments and reserved messages."""
    sim.set_script({"latency": {"kind": "fixed", "seconds": 0.4}})
    judge = f"openai-compatible:sim-judge@{sim.base_url}"
    service = LiveService(own_redis.url, pg_url, tmp_path / "svc", worker_concurrency=4)
    services.append(service)
    service.start_api()
    victim = service.start_worker()
    service.start_worker()
    items = make_items(20, SYSTEMS)
    created = service.client().create_run(single_run(items, judge))
    wait_until(
        lambda: (
            run_counts(service.api_url, created["id"])["running"] >= 4
            and run_counts(service.api_url, created["id"])["done"] >= 2
        ),
        60,
        "both workers busy",
    )
    in_flight = run_counts(service.api_url, created["id"])["running"]
    service.kill_worker(victim, signal.SIGKILL)
    assert victim.returncode == -signal.SIGKILL
    service.start_worker()  # a replacement, as compose's restart policy would start
    verdict = verify_exactly_once(
        service, pg_url, created["id"], 40, sim=sim, expected_scores=scores_for(items, SYSTEMS), timeout_s=120
    )
    assert verdict.by_status == {"done": 40}
    # the calls the dead worker made were paid for but are not counted: at most one per judgment it held
    assert sim.stats()["total_calls"] - verdict.provider_calls <= in_flight + 4
    assert all(r["provider_calls"] + int(r["cached"]) >= 1 for r in verdict.rows)


def test_redis_restart_mid_run(
    sqlite_url: str, own_redis: OwnRedis, tmp_path: Path, sim: SimulatorProcess, services: list[LiveService]
) -> None:
    """Redis dies (SIGKILL, no persistence) with work queued and in flight, and comes back empty on the same port."""
    sim.set_script({"latency": {"kind": "fixed", "seconds": 0.3}})
    judge = f"openai-compatible:sim-judge@{sim.base_url}"
    # small batches and few calls in flight, so most of the run is still queued when Redis dies
    env = {"DJ_TASK_BATCH": "2", "DJ_CALL_CONCURRENCY": "4"}
    service = LiveService(own_redis.url, sqlite_url, tmp_path / "svc", env_overrides=env, worker_concurrency=4)
    services.append(service)
    service.start_api()
    service.start_worker()
    items = make_items(16, SYSTEMS)
    created = service.client().create_run(single_run(items, judge))
    wait_until(lambda: run_counts(service.api_url, created["id"])["done"] >= 4, 60, "first verdicts")
    before = own_redis.run_id()
    counts = run_counts(service.api_url, created["id"])
    assert counts["pending"] + counts["running"] > 8  # most of the run is still queued: it is lost with Redis
    own_redis.kill()
    time.sleep(1.5)
    own_redis.start()
    assert own_redis.run_id() != before
    verdict = verify_exactly_once(
        service, sqlite_url, created["id"], 32, sim=sim, expected_scores=scores_for(items, SYSTEMS), timeout_s=120
    )
    assert set(verdict.by_status) <= {"done", "failed"}
    failed = [r for r in verdict.rows if r["status"] == "failed"]
    assert not failed, [r["error"] for r in failed]
    # the worker kept consuming through the restart (kombu's errors on the old channel are survived, not fatal)
    assert "Unrecoverable error" not in (tmp_path / "svc" / "worker1.log").read_text(errors="replace")
