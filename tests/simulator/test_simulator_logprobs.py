"""The simulator's token log-probabilities: tokens that rebuild the reply, certain tokens except the single score,
whose alternatives follow the script's ``logprob_spread``."""

from __future__ import annotations

import math

import pytest
from pydantic import ValidationError

from judge_simulator.logprobs import logprobs_object
from judge_simulator.script import Script


def test_tokens_rebuild_the_text_and_the_score_carries_the_spread() -> None:
    text = 'Good reply, 3 facts. {"score": 80, "explanation": "ok"}'
    content = logprobs_object(text, 5, {-10: 0.2, 5: 0.1})["content"]
    assert "".join(t["token"] for t in content) == text
    score = next(t for t in content if t["token"] == "80")
    alternatives = {a["token"]: math.exp(a["logprob"]) for a in score["top_logprobs"]}
    assert alternatives == pytest.approx({"80": 0.7, "70": 0.2, "85": 0.1})
    others = [t for t in content if t["token"] != "80"]
    assert all(t["logprob"] == 0.0 and t["top_logprobs"][0]["token"] == t["token"] for t in others)
    assert next(t for t in content if t["token"] == "3")["top_logprobs"] == [
        {"token": "3", "logprob": 0.0, "bytes": [51]}
    ]


def test_single_digit_tokens_and_no_alternatives() -> None:
    content = logprobs_object("[[85]]", 0, {1: 0.5}, digits="single")["content"]
    assert [t["token"] for t in content] == ["[", "[", "8", "5", "]", "]"]
    assert all(t["top_logprobs"] == [] for t in content)  # top_logprobs: 0
    eight = logprobs_object("[[85]]", 3, {1: 0.5}, digits="single")["content"][2]
    assert {a["token"] for a in eight["top_logprobs"]} == {"8", "9"}  # a digit-splitting tokenizer's view


def test_pairwise_verdicts_have_no_spread() -> None:
    content = logprobs_object("[[2]]", 3, {1: 0.5}, single=False)["content"]
    assert all(t["logprob"] == 0.0 for t in content)


@pytest.mark.parametrize("spread", [{0: 0.1}, {1: 0.6, -1: 0.5}, {1: 0.0}])
def test_spread_must_be_a_distribution(spread: dict[int, float]) -> None:
    with pytest.raises(ValidationError, match="logprob_spread"):
        Script.model_validate({"logprob_spread": spread})
