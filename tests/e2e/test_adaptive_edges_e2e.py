"""Issue 28.1-28.2 end to end: adaptive runs at the ranking's zero-variance edges through HTTP -> API -> Redis ->
a Celery worker process (which plans each next batch) -> the loopback judge simulator -> the database -> status and
report (the in-process planning steps are pinned by tests/adaptive/test_zero_variance.py).

* A judge with pure position bias (the simulator's ``position_bias: 1``) prefers whatever it is shown first, so
  both orders of every comparison combine to a tie: 3 systems x 120 items must not stop ``separated`` (before the
  fix every gap was certified at z = inf).
* Two systems with identical responses (ties stored without a judge call) and a worse third: the run must finish
  ``done`` with the tied pair not separated (before the fix every planning step failed on the bulk insert and the
  run stayed ``running``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dialogue_judge.testing import LiveService
from judge_simulator.process import SimulatorProcess

from .test_adaptive_e2e import rows

pytestmark = [pytest.mark.e2e]

N_ITEMS = 120


def edge_items(candidates: dict[str, str]) -> list[dict[str, Any]]:
    return [
        {
            "id": f"item-{k:03d}",
            "dialogue": [
                {"speaker": "user", "text": f"I adopted a dog called Rex {k} years ago."},
                {"speaker": "user", "text": "Do you remember my dog's name?"},
            ],
            "candidates": {system: text.format(k=k) for system, text in candidates.items()},
        }
        for k in range(N_ITEMS)
    ]


def adaptive_body(judge: str, candidates: dict[str, str], **adaptive: Any) -> dict[str, Any]:
    return {
        "items": edge_items(candidates),
        "rubrics": ["rsum-pairwise"],
        "judges": [judge],
        "mode": ["pairwise"],
        "pairing": "adaptive",
        "adaptive": adaptive,
    }


def finished(
    service: LiveService, run_id: str, database_url: str, simulator: SimulatorProcess, timeout_s: float = 300
) -> dict[str, Any]:
    summary = service.wait_run(run_id, timeout_s=timeout_s)
    sim_calls = int(simulator.stats()["total_calls"])
    assert summary["status"] == "done", summary["message"]
    found = rows(database_url, run_id)
    assert summary["counts"]["done"] == len(found) == summary["n_judgments"]
    keys = [(r.item_key, r.system_a, r.system_b, r.order, r.sample_index) for r in found]
    assert len(keys) == len(set(keys))  # nothing planned twice
    assert sum(r.provider_calls for r in found) == sim_calls  # nothing judged twice, nothing paid unrecorded
    economy = summary["economy"]
    assert economy["finished"]
    return dict(economy["pairing"])


def test_position_biased_judge_certifies_no_ranking_end_to_end(
    sqlite_url: str, redis_url: str, tmp_path: Path, judge_simulator: SimulatorProcess
) -> None:
    judge_simulator.reset(restore_script=True)
    judge_simulator.set_script({"position_bias": 1.0})
    judge = f"openai-compatible:sim-judge@{judge_simulator.base_url}"
    candidates = {
        "s1": "Rex is doing great, take {k}. <<q=80>>",
        "s2": "Rex, of course! Take {k}. <<q=65>>",
        "s3": "Who is Rex? Take {k}. <<q=50>>",
    }
    with LiveService(redis_url, sqlite_url, tmp_path / "svc") as service:
        client = service.client()
        # large batches: fewer planning rounds through the worker (at 48 the old code already certified every gap)
        created = client.create_run(adaptive_body(judge, candidates, batch=48))
        pairing = finished(service, created["id"], sqlite_url, judge_simulator)
        assert pairing["stop"] in {"inseparable", "budget", "items_exhausted"}, pairing
        assert len(pairing["gaps"]) == 2 and not any(g["separated"] for g in pairing["gaps"])
        assert all(g["z"] is not None and g["z"] == 0.0 for g in pairing["gaps"])  # finite: no z = inf
        # the judge really was position-biased: order ab always a win, ba always a loss, combined a tie
        report = client.report(created["id"], n_boot=50)
        prefs = report["preferences"]
        assert prefs and all(r["tie_rate_pct"] == 100.0 for r in prefs)
        assert report["run"]["economy"]["pairing"]["stop"] == pairing["stop"]


def test_identical_responses_finish_with_the_tied_pair_unseparated_end_to_end(
    sqlite_url: str, redis_url: str, tmp_path: Path, judge_simulator: SimulatorProcess
) -> None:
    judge_simulator.reset(restore_script=True)
    judge = f"openai-compatible:sim-judge@{judge_simulator.base_url}"
    same = "The same answer about Rex on item {k}. <<q=80>>"
    candidates = {"s1": same, "s2": same, "s3": "A worse answer on item {k}. <<q=30>>"}
    with LiveService(redis_url, sqlite_url, tmp_path / "svc") as service:
        client = service.client()
        # the default batch (16): batches that mix identical-response ties with pending rows, which made every
        # planning step of the old code fail (a batch of 48 happened not to mix them)
        created = client.create_run(adaptive_body(judge, candidates))
        pairing = finished(service, created["id"], sqlite_url, judge_simulator, timeout_s=180)
        gaps = {frozenset((g["upper"], g["lower"])): g for g in pairing["gaps"]}
        assert not gaps[frozenset(("s1", "s2"))]["separated"], pairing
        assert {r["system"] for r in pairing["ranking"][:2]} == {"s1", "s2"} and pairing["ranking"][2]["system"] == "s3"
        judged = rows(sqlite_url, created["id"])
        identical = [r for r in judged if {r.system_a, r.system_b} == {"s1", "s2"}]
        assert identical and all(r.provider_calls == 0 for r in identical)  # ties stored without a judge call
        assert any(r.provider_calls == 1 for r in judged if "s3" in (r.system_a, r.system_b))  # s3 was judged
