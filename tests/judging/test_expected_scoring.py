"""Expected (G-Eval) scoring against the simulator's ``top_logprobs``, through the real OpenAI SDK transport: the
stored score is the probability-weighted expectation computed by hand; every case without usable log-probabilities
keeps the parsed score and says why."""

from __future__ import annotations

from typing import Any

import pytest

from .harness import Harness, dialogue_item

# the simulator writes [[80]] for <<q=80>>; with logprob_spread {-10: 0.2, 5: 0.1} the score token's alternatives
# are 80 (p = 0.7), 70 (0.2), 85 (0.1): E = 0.7*80 + 0.2*70 + 0.1*85 = 56 + 14 + 8.5 = 78.5
SPREAD = {"-10": 0.2, "5": 0.1}
EXPECTED = 78.5


def request(harness: Harness, provider: str = "openai-compatible", **options: Any) -> dict[str, Any]:
    return {
        "items": [dialogue_item("e1", {"sys": "Rex is a fine beagle. <<q=80>>"})],
        "rubrics": ["rsum-single"],
        "judges": [harness.judge(provider)],
        "aspects": ["consistency"],
        "metrics": [],
        "options": {"scoring": "expected", **options},
    }


def test_expected_score_is_the_probability_weighted_mean(harness: Harness) -> None:
    harness.sim.set_script({"logprob_spread": SPREAD})
    run_id = harness.run(**request(harness))
    (row,) = harness.rows(run_id)
    assert row.status == "done" and row.score == pytest.approx(EXPECTED)
    details = row.details or {}
    assert details["scoring"] == "expected" and details["parsed_score"] == 80
    assert details["score_mass"] == pytest.approx(1.0)
    assert details["score_distribution"] == pytest.approx({"70": 0.2, "80": 0.7, "85": 0.1})
    (sent,) = harness.sim.requests(1)
    assert sent["body"]["logprobs"] is True and sent["body"]["top_logprobs"] == 20

    # the cache keeps the score tokens' log-probabilities: a re-run is free and gives the same expectation
    harness.sim.reset()
    harness.sim.set_script({"logprob_spread": SPREAD})
    again = harness.run(**request(harness))
    (cached,) = harness.rows(again)
    assert harness.calls() == 0 and cached.cached and cached.score == pytest.approx(EXPECTED)


def test_without_scoring_expected_nothing_changes(harness: Harness) -> None:
    harness.sim.set_script({"logprob_spread": SPREAD})
    body = request(harness)
    body["options"] = {}
    (row,) = harness.rows(harness.run(**body))
    assert row.score == 80 and not (row.details or {}).get("scoring")
    (sent,) = harness.sim.requests(1)
    assert "logprobs" not in sent["body"] and "top_logprobs" not in sent["body"]


@pytest.mark.parametrize(
    ("script", "provider", "reason"),
    [
        ({"logprob_spread": SPREAD, "digit_tokens": "single"}, "openai-compatible", "written in several tokens"),
        ({"logprob_spread": SPREAD}, "anthropic", "no token log-probabilities"),
    ],
)
def test_fallback_to_the_parsed_score_with_the_reason(
    harness: Harness, script: dict[str, Any], provider: str, reason: str
) -> None:
    harness.sim.set_script(script)
    (row,) = harness.rows(harness.run(**request(harness, provider)))
    assert row.status == "done" and row.score == 80
    assert (row.details or {})["scoring"] == "parsed" and reason in (row.details or {})["scoring_fallback"]


def test_simulator_rejects_top_logprobs_without_logprobs(harness: Harness) -> None:
    import httpx

    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "top_logprobs": 3}
    response = httpx.post(f"{harness.sim.base_url}/chat/completions", json=body, headers={"Authorization": "Bearer x"})
    assert response.status_code == 400 and "logprobs" in response.text
