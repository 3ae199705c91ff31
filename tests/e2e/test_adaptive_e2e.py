"""Adaptive runs end to end: HTTP -> API -> Redis -> Celery worker (which plans the next batch after each one it
judges) -> the loopback judge simulator -> the database -> status and report. Also with the worker killed
mid-run: the sweeper takes the planning step the dead worker never took, and nothing is judged twice."""

from __future__ import annotations

import hashlib
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from dialogue_judge.testing import LiveService
from judge_simulator.process import SimulatorProcess

pytestmark = [pytest.mark.e2e]

QUALITY = {"alpha": 80, "beta": 62, "gamma": 44, "delta": 26}


def items(n: int) -> list[dict[str, Any]]:
    out = []
    for k in range(n):
        candidates = {}
        for system, base in QUALITY.items():
            noise = hashlib.sha256(f"{k}/{system}".encode()).digest()[0] % 25 - 12  # item-level noise
            candidates[system] = f"Answer of {system} about Rex, take {k}. <<q={base + noise}>>"
        out.append(
            {
                "id": f"item-{k:03d}",
                "dialogue": [
                    {"speaker": "user", "text": f"I adopted a dog called Rex {k} years ago."},
                    {"speaker": "bot", "text": "How lovely!"},
                    {"speaker": "user", "text": "Do you remember my dog's name?"},
                ],
                "candidates": candidates,
            }
        )
    return out


def rows(database_url: str, run_id: str) -> list[Any]:
    engine = create_engine(database_url)
    with engine.connect() as connection:
        found = connection.execute(
            text(
                'SELECT item_key, system_a, system_b, "order", sample_index, status, provider_calls '
                "FROM judgments WHERE run_id = :r"
            ),
            {"r": run_id},
        ).all()
    engine.dispose()
    return list(found)


def body(judge: str, **adaptive: Any) -> dict[str, Any]:
    return {
        "items": items(40),
        "rubrics": ["rsum-pairwise"],
        "judges": [judge],
        "mode": ["pairwise"],
        "pairing": "adaptive",
        "adaptive": {"batch": 8, **adaptive},
        "options": {"samples": "adaptive", "max_samples": 3, "temperature": 0.7},
    }


def check_finished(summary: dict[str, Any], found: list[Any], sim_calls: int, killed: bool = False) -> dict[str, Any]:
    assert summary["status"] == "done" and summary["counts"]["done"] == len(found) == summary["n_judgments"]
    keys = [(r.item_key, r.system_a, r.system_b, r.order, r.sample_index) for r in found]
    assert len(keys) == len(set(keys))  # nothing planned twice
    paid = sum(r.provider_calls for r in found)
    # nothing judged twice (a worker killed mid-call leaves calls the simulator saw and no verdict recorded)
    assert paid == sim_calls if not killed else paid <= sim_calls
    economy = summary["economy"]
    assert economy["finished"]
    return dict(economy)


def test_adaptive_run_through_the_worker_and_simulator(
    sqlite_url: str, redis_url: str, tmp_path: Path, judge_simulator: SimulatorProcess
) -> None:
    judge_simulator.reset(restore_script=True)
    judge_simulator.set_script({"sample_jitter": 6})
    judge = f"openai-compatible:sim-judge@{judge_simulator.base_url}"
    with LiveService(redis_url, sqlite_url, tmp_path / "svc") as service:
        client = service.client()
        created = client.create_run(body(judge))
        assert created["n_judgments"] == 8 * 2  # the first batch only
        summary = service.wait_run(created["id"], timeout_s=240)
        found = rows(sqlite_url, created["id"])
        economy = check_finished(summary, found, int(judge_simulator.stats()["total_calls"]))
        pairing = economy["pairing"]
        assert pairing["stop"] == "separated", summary["message"]
        assert [r["system"] for r in pairing["ranking"]] == list(QUALITY)
        assert pairing["round_robin_calls"] == 6 * 40 * 2 * 3  # round robin at the fixed count (max_samples)
        assert pairing["calls"] == len(found) < 6 * 40 * 2
        assert economy["rounds"] >= 2 and "adaptive pairing stopped" in summary["message"]
        samples = economy["samples"]
        assert samples["samples"] == len(found) and samples["fixed"] == 3
        assert set(samples["histogram"]) >= {"1"} and samples["saving"] > 0
        # hedged verdicts ("slightly better") took more samples, clear ones one
        assert any(int(n) > 1 for n in samples["histogram"])
        report = client.report(created["id"], n_boot=100)
        assert report["run"]["economy"]["pairing"]["stop"] == "separated"
        assert [r["system"] for r in report["ranking"]] == list(QUALITY)


def test_adaptive_run_survives_a_killed_worker(
    sqlite_url: str, redis_url: str, tmp_path: Path, judge_simulator: SimulatorProcess
) -> None:
    judge_simulator.reset(restore_script=True)
    judge_simulator.set_script({"latency": {"kind": "fixed", "seconds": 0.3}, "sample_jitter": 6})
    judge = f"openai-compatible:sim-judge@{judge_simulator.base_url}"
    service = LiveService(redis_url, sqlite_url, tmp_path / "svc", worker_concurrency=4)
    try:
        service.start_api()
        first = service.start_worker()
        client = service.client()
        created = client.create_run(body(judge))
        # wait until the worker has planned a batch of its own and is judging it, then kill -9 it
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            summary = client.run(created["id"])
            if (summary["economy"] or {}).get("rounds", 0) >= 1 and summary["counts"]["running"] > 0:
                break
            time.sleep(0.05)
        assert summary["counts"]["running"] > 0
        service.kill_worker(first, signal.SIGKILL)
        service.start_worker()
        summary = service.wait_run(created["id"], timeout_s=300)
    finally:
        service.stop()
    found = rows(sqlite_url, created["id"])
    economy = check_finished(summary, found, int(judge_simulator.stats()["total_calls"]), killed=True)
    assert economy["pairing"]["stop"] == "separated"
    assert [r["system"] for r in economy["pairing"]["ranking"]] == list(QUALITY)
