"""Never paid twice (issues 26.6 and 28.6), against a real Celery worker process, PostgreSQL, Redis and the
simulator over HTTP (which counts what it was asked):

- a generation (a run with systems) whose replies arrived while the database was away, and whose worker then died
  or whose write failed, is taken over without asking the chat model again: its replies were stashed;
- two identical judge requests in flight at once make one provider call even when the call takes longer than the
  single-flight lock's lease (the lock is renewed while the call is in flight)."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import pytest

from dialogue_judge.testing import LiveService, OwnRedis, TcpProxy
from judge_simulator.process import SimulatorProcess

from .conftest import make_items, run_counts, single_run, verify_exactly_once, wait_until

pytestmark = [pytest.mark.e2e]

MEMORY = "MEM<the user has two cats>"


def chat_calls(sim: SimulatorProcess, status: str | None = None) -> int:
    """Calls the chat model (not the judge) received; with ``status``: answered with it."""
    if status is None:
        return int(sim.stats()["by_model"].get("sim-chat", 0))
    return sum(1 for r in sim.requests(1000) if r["model"] == "sim-chat" and str(r["status"]) == status)


@pytest.mark.parametrize("fault", ["write-fails", "worker-killed"])
def test_a_generation_paid_before_a_failed_write_is_not_asked_again(
    fault: str, pg_url: str, own_redis: OwnRedis, tmp_path: Path, sim: SimulatorProcess, services: list[LiveService]
) -> None:
    """rsum over one item makes two chat calls (the memory of session 1, then the answer), 1 s each. The database
    goes away while the answer is being generated: the reply arrives, the generation's write fails. Then either
    the database comes back and the same worker retries (``write-fails``), or the worker is SIGKILLed first and a
    new one takes the generation over (``worker-killed``). The chat model is asked twice in all, and the stored
    generation records both calls. The old code asked the killed worker's calls again (4 in all); its retry in the
    same worker found the replies in the process's call cache and recorded 0 calls for the 2 paid."""
    sim.set_script(
        {
            "latency": {"kind": "fixed", "seconds": 1.0},
            "rules": [
                {"name": "judge", "match": r"\[\[\s*score\s*\]\]", "kind": "single"},
                {
                    "name": "memory",
                    "match": r"\[Previous Memory\] none \[Session Context\] User: I have two cats",
                    "reply": MEMORY,
                },
                {
                    "name": "answer",
                    "match": r"\[Previous Memory\] MEM<the user has two cats> \[Current Context\]",
                    "reply": "You have two cats. <<q=80>>",
                },
            ],
        }
    )
    item = {
        "id": "i0",
        "dialogue": [
            {"speaker": "user", "text": "I have two cats.", "session": 1},
            {"speaker": "bot", "text": "Nice!", "session": 1},
            {"speaker": "user", "text": "How many cats do I have?", "session": 2},
        ],
    }
    with TcpProxy.for_url(pg_url) as proxy:
        service = LiveService(own_redis.url, proxy.proxied_url(pg_url), tmp_path / "svc", worker_concurrency=2)
        services.append(service)
        service.start_api()
        worker = service.start_worker()
        body = {
            "items": [item],
            "systems": {"rsum": f"strategy:rsum@openai-compatible:sim-chat@{sim.base_url}"},
            "rubrics": ["rsum-single"],
            "judges": [f"openai-compatible:sim-judge@{sim.base_url}"],
            "aspects": ["consistency"],
            "metrics": [],
        }
        run_id = service.client().create_run(body)["id"]
        wait_until(lambda: chat_calls(sim) >= 2, 60, "the answer's call")  # in flight for 1 s
        proxy.stop()
        wait_until(lambda: chat_calls(sim, "200") >= 2, 10, "the answer's reply")
        time.sleep(1.0)  # the reply is in the worker's hands, its write refused
        if fault == "worker-killed":
            service.kill_worker(worker, signal.SIGKILL)
        proxy.start()
        if fault == "worker-killed":
            service.start_worker()
        summary = service.wait_run(run_id, timeout_s=120)
        time.sleep(2)  # sweeps after the generation was stored must not send it again
        stored = service.client().get(f"/v1/runs/{run_id}/items")["items"][0]
        judgments = service.client().get(f"/v1/runs/{run_id}/judgments")["items"]
    assert chat_calls(sim) == 2  # the old code, worker killed: 4
    assert summary["generation"]["generated"] == 1 and summary["generation"]["pending"] == 0
    assert stored["candidates"] == {"rsum": "You have two cats. <<q=80>>"}
    record = stored["meta"]["generation"]["rsum"]
    assert (record["status"], record["memory"]) == ("done", MEMORY)
    assert record["calls"] == 2  # the calls paid before the fault, recorded by the claim that stored them
    assert [(j["system_a"], j["status"], j["score"]) for j in judgments] == [("rsum", "done", 80.0)]


def test_identical_requests_slower_than_the_lock_lease_make_one_call(
    pg_url: str, own_redis: OwnRedis, tmp_path: Path, sim: SimulatorProcess, services: list[LiveService]
) -> None:
    """Two judgments whose requests are identical (two items with the same dialogue and response), asked at the
    same time by one worker's two call slots. The call takes 4 s, the single-flight lock's lease 1.5 s: the old
    lock lapsed mid-call and the second request went out beside the first (2 calls). Renewed, the second waits and
    reads the first's reply from the cache."""
    sim.set_script({"latency": {"kind": "fixed", "seconds": 4.0}})
    judge = f"openai-compatible:sim-judge@{sim.base_url}"
    env = {"DJ_CLAIM_LEASE": "1.5", "DJ_JUDGE_TIMEOUT": "20", "DJ_CALL_CONCURRENCY": "4"}
    service = LiveService(own_redis.url, pg_url, tmp_path / "svc", env_overrides=env, worker_concurrency=2)
    services.append(service)
    service.start_api()
    service.start_worker()
    items: list[dict[str, Any]] = make_items(1, {"a": 30}, prefix="same")
    items.append({**items[0], "id": "same-copy"})
    created = service.client().create_run(single_run(items, judge))
    wait_until(lambda: sim.stats()["total_calls"] >= 1, 60, "the first call")
    verdict = verify_exactly_once(service, pg_url, created["id"], 2, sim=sim, exact_calls=True, timeout_s=60)
    assert verdict.by_status == {"done": 2}
    assert sim.stats()["total_calls"] == 1
    assert sorted(r["provider_calls"] for r in verdict.rows) == [0, 1]
    assert run_counts(service.api_url, created["id"])["done"] == 2
