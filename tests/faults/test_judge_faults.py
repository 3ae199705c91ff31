"""Judge faults against the real stack (API -> Redis -> Celery worker -> simulator over HTTP -> database): 429 storms,
500s, calls hanging past the timeout, and malformed output. Transient faults are retried into verdicts; permanent
ones end as ``failed`` / ``unparseable`` with the reason. Every judgment is written once, and the provider calls the
judgments record are exactly the calls the simulator received (nothing lost, nothing counted twice)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dialogue_judge.testing import LiveService, OwnRedis
from judge_simulator.process import SimulatorProcess

from .conftest import make_items, scores_for, single_run, verify_exactly_once

pytestmark = [pytest.mark.e2e]

SYSTEMS = {"a": 20, "b": 70}
MAX_ATTEMPTS = 6

# A fault's ``match`` only makes calls eligible; ``probability: 1.0`` makes it fire on every eligible call.
SCENARIOS: dict[str, dict[str, Any]] = {
    # the first 10 calls are refused with 429 + Retry-After: every judgment still gets its verdict
    "429-storm": {
        "faults": [{"kind": "rate_limit", "first_n": 10, "retry_after": 0.2}],
        "permanent": None,
    },
    # a burst of 503s is retried away; an item the provider always answers with 500 fails with the reason
    "500s": {
        "faults": [
            {"kind": "server_error", "status": 500, "match": "ALWAYS_FAILS", "probability": 1.0},
            {"kind": "server_error", "status": 503, "first_n": 6},
        ],
        "permanent": ("failed", "server_error HTTP 500", f"(after {MAX_ATTEMPTS} attempts)"),
    },
    # malformed or truncated replies are re-asked (options.reask=2: one judgment may meet both); half a JSON body is
    # retried; a judge that never answers in the format ends 'unparseable' with the parser's reason
    "malformed": {
        "faults": [
            {"kind": "malformed", "match": "ALWAYS_FAILS", "probability": 1.0},
            {"kind": "malformed", "first_n": 3},
            {"kind": "invalid_json", "calls": [6, 7]},
            {"kind": "truncated", "calls": [9]},
        ],
        "permanent": ("unparseable", "", ""),
        "options": {"reask": 2},
    },
    # calls hanging past DJ_JUDGE_TIMEOUT (1 s) time out and are retried; a judge that always hangs fails
    "hangs": {
        "faults": [
            {"kind": "hang", "hang_seconds": 3, "match": "ALWAYS_FAILS", "probability": 1.0},
            {"kind": "hang", "hang_seconds": 3, "first_n": 3},
        ],
        "permanent": ("failed", "timeout", f"(after {MAX_ATTEMPTS} attempts)"),
    },
}


def test_judge_faults(
    sqlite_url: str, own_redis: OwnRedis, tmp_path: Path, sim: SimulatorProcess, services: list[LiveService]
) -> None:
    judge = f"openai-compatible:sim-judge@{sim.base_url}"
    env = {
        "DJ_MAX_ATTEMPTS": str(MAX_ATTEMPTS),
        "DJ_JUDGE_TIMEOUT": "1",
        "DJ_CLAIM_LEASE": "60",
        "DJ_REQUEUE_AFTER": "60",
        "DJ_BACKOFF_MAX": "0.5",
    }
    service = LiveService(own_redis.url, sqlite_url, tmp_path / "svc", env_overrides=env, worker_concurrency=4)
    services.append(service)
    service.start_api()
    service.start_worker()
    client = service.client()
    problems: dict[str, str] = {}
    for name, scenario in SCENARIOS.items():
        sim.reset(restore_script=True)
        sim.set_script({"latency": {"kind": "fixed", "seconds": 0.05}, "faults": scenario["faults"]})
        items = make_items(8, SYSTEMS, prefix=name)
        doomed = make_items(1, SYSTEMS, marker="ALWAYS_FAILS", prefix=f"{name}-doomed")
        body = single_run(items + (doomed if scenario["permanent"] else []), judge)
        if "options" in scenario:
            body["options"] = scenario["options"]
        created = client.create_run(body)
        try:
            verdict = verify_exactly_once(
                service,
                sqlite_url,
                created["id"],
                created["n_judgments"],
                sim=sim,
                exact_calls=True,
                expected_scores=scores_for(items + doomed, SYSTEMS),
                timeout_s=90,
            )
            by_item = {"ok": [], "doomed": []}  # type: dict[str, list[dict[str, Any]]]
            for row in verdict.rows:
                by_item["doomed" if "doomed" in row["item_key"] else "ok"].append(row)
            assert len(by_item["ok"]) == 16 and {r["status"] for r in by_item["ok"]} == {"done"}, [
                (r["status"], r["error"]) for r in by_item["ok"] if r["status"] != "done"
            ]
            # the transient faults really happened and were retried (or re-asked) into verdicts
            assert sum(r["provider_calls"] for r in by_item["ok"]) > 16
            if scenario["permanent"]:
                status, reason, suffix = scenario["permanent"]
                assert len(by_item["doomed"]) == 2
                for row in by_item["doomed"]:
                    assert row["status"] == status and reason in row["error"] and row["error"].endswith(suffix), row
            stats = sim.stats()
            assert stats["total_calls"] == verdict.provider_calls
        except (AssertionError, KeyError, TimeoutError) as exc:
            problems[name] = str(exc)[:2000]
    assert not problems, problems
