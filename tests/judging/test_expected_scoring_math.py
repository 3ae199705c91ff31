"""Probability-weighted scores (workers.scoring): the expectation over the score token's alternatives, and every
fallback to the parsed score with its reason."""

from __future__ import annotations

import math

import pytest

from judge_api.rubrics import Rubric
from workers.clients import _logprobs
from workers.parsing import parse_reply
from workers.scoring import apply_expected_scoring, numeric_positions


def rubric(parser: str = "bracket_score", scale: tuple[int, int] = (1, 5)) -> Rubric:
    return Rubric.model_validate(
        {
            "id": "geval-test",
            "description": "test",
            "kind": "single",
            "aspects": [{"name": "consistency"}],
            "scale": list(scale),
            "messages": [{"role": "user", "text": "{{ response }}"}],
            "parser": parser,
            "scoring": "expected",
        }
    )


def tokens(*pieces: tuple[str, dict[str, float]]) -> list[tuple[str, float, list[tuple[str, float]]]]:
    """(token text, {alternative: probability}) -> the (text, logprob, top) triples a client reads."""
    out = []
    for text, alternatives in pieces:
        top = [(t, math.log(p)) for t, p in alternatives.items()]
        out.append((text, math.log(alternatives.get(text, 1.0)), top))
    return out


def score(text: str, rub: Rubric, pieces: list[tuple[str, float, list[tuple[str, float]]]] | None) -> tuple:
    parsed = parse_reply(text, rub)
    positions = numeric_positions(pieces) if pieces is not None else None
    result = apply_expected_scoring(parsed, rub, text, positions, structured=False)
    return result.score, result.details


def test_expectation_over_the_scale_tokens() -> None:
    # "Fine. [[4]]": at the score, P(4)=0.5, P(" 3")=0.2 (same value as "3": they add), P(3)=0.1, P(5)=0.1, and
    # P("x")=0.1 which is no value on the scale. E = (4*.5 + 3*.3 + 5*.1) / .9 = 3.4/.9 = 3.7777...
    pieces = tokens(
        ("Fine. ", {}),
        ("[[", {}),
        ("4", {"4": 0.5, " 3": 0.2, "3": 0.1, "5": 0.1, "x": 0.1}),
        ("]]", {}),
    )
    value, details = score("Fine. [[4]]", rubric(), pieces)
    assert value == pytest.approx(3.4 / 0.9)
    assert details["scoring"] == "expected" and details["parsed_score"] == 4
    assert details["score_mass"] == pytest.approx(0.9)
    assert details["score_distribution"] == pytest.approx({"3": 1 / 3, "4": 5 / 9, "5": 1 / 9})


def test_json_score_and_out_of_scale_alternatives() -> None:
    # {"score": 2, ...}: P(2)=.6, P(1)=.3, P(7)=.1 (off the 1-5 scale, ignored) -> E = (2*.6 + 1*.3)/.9 = 1.6667
    text = '{"score": 2, "explanation": "3 contradictions"}'
    pieces = tokens(
        ('{"score": ', {}),
        ("2", {"2": 0.6, "1": 0.3, "7": 0.1}),
        (', "explanation": "', {}),
        ("3", {"3": 1.0}),
        (' contradictions"}', {}),
    )
    value, details = score(text, rubric("json_score"), pieces)
    assert value == pytest.approx(1.5 / 0.9) and details["parsed_score"] == 2


@pytest.mark.parametrize(
    ("text", "pieces", "scale", "reason"),
    [
        ("[[4]]", None, (1, 5), "no token log-probabilities"),
        (
            "[[85]]",
            tokens(("[[", {}), ("8", {"8": 0.9}), ("5", {"5": 1.0}), ("]]", {})),
            (1, 100),
            "written in several tokens ('8', '5')",
        ),
        ("[[7]]", tokens(("[[", {}), ("7", {"7": 0.9, "8": 0.1}), ("]]", {})), (1, 100), "is one digit on the 1-100"),
        ("[[4]]", tokens(("[[", {}), ("4", {"4": 1.0}), ("]]", {}))[:1], (1, 5), "do not cover the score"),
        ("[[4]]", tokens(("[[", {}), ("4", {"four": 0.9}), ("]]", {})), (1, 5), "no alternative"),
    ],
)
def test_fallbacks_keep_the_parsed_score_and_say_why(text: str, pieces: list | None, scale: tuple, reason: str) -> None:
    value, details = score(text, rubric(scale=scale), pieces)
    assert value == float(text.strip("[]"))
    assert details["scoring"] == "parsed" and reason in details["scoring_fallback"]


def test_multi_digit_score_as_one_token_is_weighted() -> None:
    # a tokenizer with whole-number tokens (cl100k): "85" alternatives "80" .25, "85" .5, "90" .25 -> 85
    pieces = tokens(("[[", {}), ("85", {"85": 0.5, "80": 0.25, "90": 0.25}), ("]]", {}))
    value, _ = score("[[85]]", rubric(scale=(1, 100)), pieces)
    assert value == pytest.approx(85.0)


def test_client_reads_both_logprob_layouts() -> None:
    chat = {
        "content": [
            {"token": "[[", "logprob": -0.01, "top_logprobs": [{"token": "[[", "logprob": -0.01}]},
            {
                "token": "4",
                "logprob": math.log(0.75),
                "top_logprobs": [{"token": "4", "logprob": math.log(0.75)}, {"token": "5", "logprob": math.log(0.25)}],
            },
            {"token": "]]", "logprob": 0.0, "top_logprobs": []},
        ]
    }
    legacy = {
        "tokens": ["[[", "4", "]]"],
        "token_logprobs": [-0.01, math.log(0.75), 0.0],
        "top_logprobs": [{"[[": -0.01}, {"4": math.log(0.75), "5": math.log(0.25)}, {}],
    }
    for data in (chat, legacy):
        positions = _logprobs(data)
        assert positions is not None and len(positions) == 1  # only number tokens are kept
        assert positions[0]["offset"] == 2 and positions[0]["token"] == "4"
        parsed = apply_expected_scoring(parse_reply("[[4]]", rubric()), rubric(), "[[4]]", positions, False)
        assert parsed.score == pytest.approx(4 * 0.75 + 5 * 0.25)
    assert _logprobs(None) is None and _logprobs({"content": [{"token": 1}]}) is None
