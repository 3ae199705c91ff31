"""One definition of a provider call (issue 40, finding 2): a request the provider answered and billed. The report's
``cost.n_provider_calls``, the run endpoint's ``provider_calls`` (which the dashboard's Runs page shows) and the calls
the simulator saw are one number for a single run with reference metrics, a pairwise run, a metrics-only run and a
run served wholly from the judge cache: reference metrics and cache hits are no calls."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from .harness import Harness, dialogue_item


def items() -> list[dict[str, Any]]:
    """Three items whose prompts differ (items sharing a prompt would share its verdict from the cache)."""
    return [
        dialogue_item(
            f"r{k}",
            {"gold": f"Yes, your beagle {k} is called Rex! <<q=90>>", "off": f"I like {k} cats a lot. <<q=20>>"},
            reference=f"Rex the beagle, of course ({k}).",
        )
        for k in range(3)
    ]


def counts(client: TestClient, run_id: str) -> tuple[int, int]:
    """(the run endpoint's provider calls, the report's)."""
    run = client.get(f"/v1/runs/{run_id}")
    report = client.get(f"/v1/runs/{run_id}/report", params={"n_boot": 0})
    assert run.status_code == 200 and report.status_code == 200, (run.text, report.text)
    return int(run.json()["provider_calls"]), int(report.json()["cost"]["n_provider_calls"])


def test_the_report_and_the_run_count_the_same_provider_calls(harness: Harness) -> None:
    judge = harness.judge("openai-compatible")
    assert harness.engine is not None  # migrates the database the API below reads
    from judge_api.app import create_app

    client = TestClient(create_app(), raise_server_exceptions=False)  # no lifespan: nothing is dispatched
    single: dict[str, Any] = {
        "items": items(),
        "rubrics": ["rsum-single"],
        "judges": [judge],
        "aspects": ["consistency", "coherence"],
    }
    runs = {}
    harness.sim.reset()
    runs["single"] = harness.run(**single)
    single_calls = harness.calls()
    assert single_calls == 3 * 2 * 2  # items x candidates x aspects; the F1 / BLEU rows call nothing
    harness.sim.reset()
    runs["pairwise"] = harness.run(items=items(), rubrics=["rsum-pairwise"], judges=[judge], mode=["pairwise"])
    pairwise_calls = harness.calls()
    assert pairwise_calls == 3 * 2  # items x both orders of the one pair
    harness.sim.reset()
    runs["metrics only"] = harness.run(items=items(), judges=["reference"], rubrics=[])
    harness.sim.reset()
    runs["cached"] = harness.run(**single)  # the same request again: every judge verdict from the cache
    assert harness.calls() == 0
    expected = {"single": single_calls, "pairwise": pairwise_calls, "metrics only": 0, "cached": 0}
    measured = {kind: counts(client, run_id) for kind, run_id in runs.items()}
    assert measured == {kind: (calls, calls) for kind, calls in expected.items()}
