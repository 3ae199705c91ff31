"""Back to full speed seconds after a fault, with the shipped timers, and a call count that equals the provider's
(issue 29), against the real stack (API, Celery worker processes, Redis, PostgreSQL, the simulator over HTTP):

- a killed worker's claims are released once its heartbeat lapses (seconds), not when the 30 s lease runs out;
- after a database outage the last verdict is written within 10 s of the database's return;
- a judge connection refused before the request was sent is an attempt, not a provider call;
- across 5 Redis restarts mid-run, the calls recorded equal the calls the provider saw.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
import redis
from sqlalchemy import create_engine, text

from dialogue_judge.testing import LiveService, OwnRedis, TcpProxy
from judge_api import heartbeats
from judge_api.config import Settings
from judge_simulator.process import SimulatorProcess

from .conftest import judgment_rows, make_items, run_counts, scores_for, single_run, verify_exactly_once, wait_until
from .conftest import shipped_timers as conftest_shipped_timers

pytestmark = [pytest.mark.e2e]

SYSTEMS = {"a": 17, "b": 58}
TERMINAL = "('done', 'failed', 'unparseable', 'cancelled')"


def shipped_timers() -> dict[str, str]:
    """The shipped recovery timers and retry back-off (LiveService shortens both for the other fault tests)."""
    fields = Settings.model_fields
    return {
        **conftest_shipped_timers(),
        "DJ_BACKOFF_BASE": str(fields["backoff_base_s"].default),
        "DJ_BACKOFF_MAX": str(fields["backoff_max_s"].default),
    }


def count(database_url: str, sql: str, **params: object) -> int:
    engine = create_engine(database_url)
    try:
        with engine.connect() as connection:
            return int(connection.execute(text(sql), params).scalar_one())
    finally:
        engine.dispose()


def instance_of(redis_url: str, worker_name_prefix: str) -> str:
    """The instance id (the holder part of its claim tokens) a worker registered with its heartbeat."""
    client = redis.Redis.from_url(redis_url)
    known = {k.decode(): v.decode() for k, v in client.hgetall(heartbeats.KNOWN).items()}
    matches = [instance for instance, name in known.items() if name.startswith(worker_name_prefix)]
    assert len(matches) == 1, known
    return matches[0]


def test_a_killed_workers_claims_are_released_within_the_heartbeat_window(
    pg_url: str, own_redis: OwnRedis, tmp_path: Path, sim: SimulatorProcess, services: list[LiveService]
) -> None:
    """Two workers, the shipped timers (30 s lease, 10 s sweep); one is SIGKILLed holding claims and is not
    replaced. Its claims are handed back within the heartbeat's time to live plus a look of the sweeper (6 + 2 s;
    under load, 15 s), half the lease, and the other worker finishes the run within 25 s of the kill."""
    sim.set_script({"latency": {"kind": "fixed", "seconds": 0.5}})
    judge = f"openai-compatible:sim-judge@{sim.base_url}"
    env = {**shipped_timers(), "DJ_TASK_BATCH": "8"}
    service = LiveService(own_redis.url, pg_url, tmp_path / "svc", env_overrides=env, worker_concurrency=2)
    services.append(service)
    service.start_api()
    victim = service.start_worker()
    service.start_worker()
    items = make_items(40, SYSTEMS, prefix="heartbeat")
    created = service.client().create_run(single_run(items, judge))
    wait_until(lambda: len(redis.Redis.from_url(own_redis.url).hgetall(heartbeats.KNOWN)) == 2, 60, "two beats")
    holder = instance_of(own_redis.url, "w1-")
    held_q = "SELECT COUNT(*) FROM judgments WHERE status = 'running' AND claim_token LIKE :p"
    wait_until(
        lambda: count(pg_url, held_q, p=holder + "%") >= 4 and run_counts(service.api_url, created["id"])["done"] >= 2,
        60,
        "the victim holding claims",
    )
    service.kill_worker(victim, signal.SIGKILL)
    killed_at = time.monotonic()
    wait_until(lambda: count(pg_url, held_q, p=holder + "%") == 0, 60, "the dead worker's claims released", 0.2)
    released_in = time.monotonic() - killed_at
    verdict = verify_exactly_once(
        service, pg_url, created["id"], 80, sim=sim, expected_scores=scores_for(items, SYSTEMS), timeout_s=90
    )
    finished_in = time.monotonic() - killed_at
    assert verdict.by_status == {"done": 80}
    assert released_in <= 15, released_in  # the heartbeat window, not the 30 s lease
    assert finished_in <= 25, finished_in


def test_after_a_database_outage_the_last_verdict_is_written_within_10_s_of_its_return(
    pg_url: str, own_redis: OwnRedis, tmp_path: Path, sim: SimulatorProcess, services: list[LiveService]
) -> None:
    """PostgreSQL unreachable for 8 s while messages are queued and calls in flight. Tasks that meet the outage
    wait for the database in place (they used to go back to Celery with a back-off of up to a minute, and claims
    whose hand-back failed waited out their lease), so the run is finished within 10 s of the database's return,
    with one provider call per judgment."""
    sim.set_script({"latency": {"kind": "fixed", "seconds": 0.3}})
    judge = f"openai-compatible:sim-judge@{sim.base_url}"
    env = {**shipped_timers(), "DJ_TASK_BATCH": "2"}
    with TcpProxy.for_url(pg_url) as proxy:
        service = LiveService(
            own_redis.url, proxy.proxied_url(pg_url), tmp_path / "svc", env_overrides=env, worker_concurrency=4
        )
        services.append(service)
        service.start_api()
        service.start_worker()
        items = make_items(60, SYSTEMS, prefix="outage10")
        created = service.client().create_run(single_run(items, judge))
        finished_q = f"SELECT COUNT(*) FROM judgments WHERE run_id = :r AND status IN {TERMINAL}"
        wait_until(lambda: count(pg_url, finished_q, r=created["id"]) >= 50, 60, "verdicts", 0.02)
        proxy.stop()
        time.sleep(8.0)
        assert count(pg_url, finished_q, r=created["id"]) < 120  # the outage came mid-run
        proxy.start()
        back_at = time.monotonic()
        wait_until(lambda: count(pg_url, finished_q, r=created["id"]) == 120, 60, "every verdict", 0.1)
        last_verdict_after = time.monotonic() - back_at
        verdict = verify_exactly_once(
            service,
            pg_url,
            created["id"],
            120,
            sim=sim,
            exact_calls=True,
            expected_scores=scores_for(items, SYSTEMS),
            timeout_s=60,
        )
    assert verdict.by_status == {"done": 120}
    assert last_verdict_after <= 10, last_verdict_after
    assert sim.stats()["total_calls"] == 120


def test_a_judge_connection_refused_before_sending_is_an_attempt_not_a_provider_call(
    sqlite_url: str, own_redis: OwnRedis, tmp_path: Path, sim: SimulatorProcess, services: list[LiveService]
) -> None:
    """The judge's address refuses connections (a proxy in front of the simulator, stopped) for the first seconds
    of the run: every judgment retries, then goes through once it listens. Each refused attempt is counted in
    ``attempts`` and not in ``provider_calls``: the run's calls equal the simulator's, one per judgment."""
    sim.set_script({"latency": {"kind": "fixed", "seconds": 0.05}})
    proxy = TcpProxy("127.0.0.1", int(sim.base_url.rsplit(":", 1)[1].split("/")[0]))
    judge = f"openai-compatible:sim-judge@http://127.0.0.1:{proxy.port}/v1"
    env = {"DJ_MAX_ATTEMPTS": "100", "DJ_BACKOFF_BASE": "0.5", "DJ_BACKOFF_MAX": "0.5"}
    service = LiveService(own_redis.url, sqlite_url, tmp_path / "svc", env_overrides=env, worker_concurrency=2)
    services.append(service)
    service.start_api()
    service.start_worker()
    items = make_items(4, SYSTEMS, prefix="refused")
    created = service.client().create_run(single_run(items, judge))
    wait_until(
        lambda: "connection_error" in (tmp_path / "svc" / "worker1.log").read_text(errors="replace"),
        60,
        "refused attempts",
    )
    time.sleep(2.0)  # every judgment has been refused a few times
    proxy.start()
    try:
        verdict = verify_exactly_once(
            service,
            sqlite_url,
            created["id"],
            8,
            sim=sim,
            exact_calls=True,
            expected_scores=scores_for(items, SYSTEMS),
            timeout_s=60,
        )
    finally:
        proxy.stop()
    assert verdict.by_status == {"done": 8}
    rows = judgment_rows(sqlite_url, created["id"])
    assert all(r["provider_calls"] == 1 for r in rows), [(r["attempts"], r["provider_calls"]) for r in rows]
    assert all(r["attempts"] >= 2 for r in rows), [r["attempts"] for r in rows]
    assert sim.stats()["total_calls"] == 8


def test_five_redis_restarts_mid_run_record_every_call_the_provider_saw(
    pg_url: str, own_redis: OwnRedis, tmp_path: Path, sim: SimulatorProcess, services: list[LiveService]
) -> None:
    """Redis killed (no persistence) and restarted 5 times during one run, the default timers and connection
    pools. The sum of ``provider_calls`` equals the calls the simulator received: no failed attempt that never
    reached it is counted as a call (the phantom calls seen after a restart), and none it answered is lost."""
    sim.set_script({"latency": {"kind": "uniform", "lo": 0.3, "hi": 0.7}})
    judge = f"openai-compatible:sim-judge@{sim.base_url}"
    env = {**shipped_timers(), "DJ_TASK_BATCH": "2"}  # 2 workers x 2 threads x 2: about 16 judgments a second
    service = LiveService(own_redis.url, pg_url, tmp_path / "svc", env_overrides=env, worker_concurrency=2)
    services.append(service)
    service.start_api()
    service.start_worker()
    service.start_worker()
    items = make_items(300, SYSTEMS, prefix="restarts")
    created = service.client().create_run(single_run(items, judge))
    finished_q = f"SELECT COUNT(*) FROM judgments WHERE run_id = :r AND status IN {TERMINAL}"
    wait_until(lambda: count(pg_url, finished_q, r=created["id"]) >= 20, 60, "first verdicts")
    restarts = 0
    for _ in range(5):
        if count(pg_url, finished_q, r=created["id"]) >= 600:
            break
        own_redis.kill()
        time.sleep(1.5)
        own_redis.start()
        restarts += 1
        time.sleep(5.0)
    assert restarts == 5, restarts  # all five came mid-run
    verdict = verify_exactly_once(
        service,
        pg_url,
        created["id"],
        600,
        sim=sim,
        exact_calls=True,
        expected_scores=scores_for(items, SYSTEMS),
        timeout_s=180,
    )
    assert verdict.by_status == {"done": 600}
    assert verdict.provider_calls == sim.stats()["total_calls"]
