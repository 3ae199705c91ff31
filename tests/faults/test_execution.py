"""Provider-bound execution against the real stack (issue 13): a call slot is not held while its verdict's write
lingers; a database outage mid-run makes no second provider call and every call the provider saw is recorded; a
worker killed with SIGKILL has its work resumed within the bound with the shipped recovery timers."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from dialogue_judge.testing import LiveService, OwnRedis, TcpProxy
from judge_simulator.process import SimulatorProcess

from .conftest import make_items, run_counts, scores_for, shipped_timers, single_run, verify_exactly_once, wait_until

pytestmark = [pytest.mark.e2e]

SYSTEMS = {"a": 21, "b": 64}


def test_a_call_slot_is_free_while_a_write_lingers(
    pg_url: str, own_redis: OwnRedis, tmp_path: Path, sim: SimulatorProcess, services: list[LiveService]
) -> None:
    """4 call slots, 24 judgments of 0.2 s each in one message, and a 3 s write linger. The calls take 6 x 0.2 s
    when a slot is released as its reply arrives; a slot that waited for its verdict's write would hold each
    judgment for the linger too (6 x 3.2 s)."""
    sim.set_script({"latency": {"kind": "fixed", "seconds": 0.2}})
    judge = f"openai-compatible:sim-judge@{sim.base_url}"
    env = {"DJ_CALL_CONCURRENCY": "4", "DJ_TASK_BATCH": "24", "DJ_WRITE_LINGER_MS": "3000"}
    service = LiveService(own_redis.url, pg_url, tmp_path / "svc", env_overrides=env, worker_concurrency=2)
    services.append(service)
    service.start_api()
    service.start_worker()
    items = make_items(12, SYSTEMS, prefix="slots")
    created = service.client().create_run(single_run(items, judge))
    wait_until(lambda: sim.stats()["total_calls"] >= 1, 60, "the first call")
    first = time.monotonic()
    wait_until(lambda: sim.stats()["total_calls"] >= 24, 20, "every call")
    calls_took = time.monotonic() - first
    assert calls_took < 2.5, calls_took  # well under one linger: no slot waited for a write
    assert sim.stats()["max_in_flight"] == 4
    verdict = verify_exactly_once(
        service, pg_url, created["id"], 24, sim=sim, exact_calls=True, expected_scores=scores_for(items, SYSTEMS)
    )
    assert verdict.by_status == {"done": 24}


def test_a_database_outage_mid_run_makes_no_extra_provider_call(
    pg_url: str, own_redis: OwnRedis, tmp_path: Path, sim: SimulatorProcess, services: list[LiveService]
) -> None:
    """PostgreSQL becomes unreachable (the proxy in front of it stops: open connections cut, new ones refused)
    while calls are in flight, for 5 s. The replies that arrive meanwhile are stashed and written once it is back:
    the provider sees one call per judgment, and the database records every call it saw."""
    sim.set_script({"latency": {"kind": "fixed", "seconds": 0.3}})
    judge = f"openai-compatible:sim-judge@{sim.base_url}"
    with TcpProxy.for_url(pg_url) as proxy:
        # 8 call slots: the 60 calls go in waves of 0.3 s for ~2.4 s, so the outage starts with calls in flight
        # (with 32 slots two waves ended within ~0.6 s and a late poll could find none: stop 32's CI, "0 > 0")
        service = LiveService(
            own_redis.url,
            proxy.proxied_url(pg_url),
            tmp_path / "svc",
            env_overrides={**shipped_timers(), "DJ_CALL_CONCURRENCY": "8"},
        )
        services.append(service)
        service.start_api()
        service.start_worker(concurrency=4)
        items = make_items(30, SYSTEMS, prefix="outage")
        created = service.client().create_run(single_run(items, judge))
        wait_until(
            lambda: run_counts(service.api_url, created["id"])["done"] >= 6 and sim.stats()["in_flight"] > 0,
            60,
            "first verdicts, with calls still in flight",
        )
        proxy.stop()
        in_flight_at_stop = sim.stats()["in_flight"]
        time.sleep(5.0)
        proxy.start()
        verdict = verify_exactly_once(
            service,
            pg_url,
            created["id"],
            60,
            sim=sim,
            exact_calls=True,
            expected_scores=scores_for(items, SYSTEMS),
            timeout_s=120,
        )
    assert verdict.by_status == {"done": 60}
    assert in_flight_at_stop > 0  # replies did arrive during the outage
    assert sim.stats()["total_calls"] == 60  # not one judgment asked twice
    assert verdict.provider_calls == 60 and all(r["provider_calls"] == 1 for r in verdict.rows)


def test_a_killed_worker_resumes_within_the_bound_with_default_timers(
    pg_url: str, own_redis: OwnRedis, tmp_path: Path, sim: SimulatorProcess, services: list[LiveService]
) -> None:
    """Two workers with the shipped timers; one is SIGKILLed holding claimed judgments and is not replaced. The
    other finishes the run: the dead worker's claims lapse (the lease is no longer renewed) and the sweeper re-sends
    them, within 60 s of the kill and without any operator action."""
    sim.set_script({"latency": {"kind": "fixed", "seconds": 0.5}})
    judge = f"openai-compatible:sim-judge@{sim.base_url}"
    env = {**shipped_timers(), "DJ_TASK_BATCH": "8"}
    service = LiveService(own_redis.url, pg_url, tmp_path / "svc", env_overrides=env, worker_concurrency=2)
    services.append(service)
    service.start_api()
    victim = service.start_worker()
    service.start_worker()
    items = make_items(30, SYSTEMS, prefix="killed")
    created = service.client().create_run(single_run(items, judge))
    wait_until(
        lambda: (
            run_counts(service.api_url, created["id"])["running"] >= 8
            and run_counts(service.api_url, created["id"])["done"] >= 2
        ),
        60,
        "both workers busy",
    )
    service.kill_worker(victim, signal.SIGKILL)
    killed_at = time.monotonic()
    verdict = verify_exactly_once(
        service, pg_url, created["id"], 60, sim=sim, expected_scores=scores_for(items, SYSTEMS), timeout_s=90
    )
    recovered_in = time.monotonic() - killed_at
    assert verdict.by_status == {"done": 60}
    assert recovered_in <= 60, recovered_in
