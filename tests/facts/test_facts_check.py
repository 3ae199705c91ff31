"""Fact-check judging: the rubric renders the fact sheet, the simulator answers the protocol from markers, and the
strict parser turns the reply into labels, rates and the consistency score, or into a parse error."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from judge_api.rubrics import RubricError, get_registry, load_rubric
from judge_simulator.behaviour import JudgeRequest, judge
from judge_simulator.script import Script
from workers.factcheck import fact_figures
from workers.parsing import parse_reply
from workers.prompting import parse_context, render

ITEM: dict[str, Any] = {
    "id": "i1",
    "dialogue": [{"speaker": "user", "text": "Guess what my dogs did today!", "session": 3}],
    "persona": {"user": ["I have two dogs.", "I live in Oslo."], "bot": ["I am a nurse."]},
    "candidates": {},
}


@pytest.fixture(scope="module")
def rubric() -> Any:
    return get_registry(refresh=True).get("fact-check")


def _judge(rubric: Any, response: str, item: dict[str, Any] | None = None) -> Any:
    item = item or ITEM
    prompt = render(rubric, item, "consistency", response)
    reply = judge(Script(), JudgeRequest(model="sim", prompt=prompt.text))
    assert reply.rule == "fact-check"
    return parse_reply(reply.text, rubric, context=parse_context(rubric, item, response)), reply.text


def test_rubric_is_a_facts_rubric_serving_single_mode(rubric: Any) -> None:
    assert rubric.kind == "facts" and rubric.mode == "single" and rubric.scale == (1, 100)
    assert "paper" in (rubric.origin or "") and "this project's" in (rubric.origin or "")


def test_labels_rates_and_score_from_markers(rubric: Any) -> None:
    response = "How are your two dogs <<f:user.1=s>>? Working my shifts as a teacher <<f:bot.1=c>> is tiring."
    parsed, _ = _judge(rubric, response)
    assert parsed.ok, parsed.error
    labels = {f["id"]: (f["label"], f["source"]) for f in parsed.details["facts"]}
    assert labels == {
        "user.1": ("supported", "persona.user"),
        "user.2": ("not_addressed", "persona.user"),
        "bot.1": ("contradicted", "persona.bot"),
    }
    evidence = {f["id"]: f["evidence"] for f in parsed.details["facts"]}
    assert evidence["user.1"] == "How are your two dogs <<f:user.1=s>>"
    assert evidence["user.2"] == ""
    assert parsed.details["contradiction_count"] == 1
    assert parsed.details["contradiction_rate"] == pytest.approx(1 / 3)
    assert parsed.details["retention_rate"] == pytest.approx(0.5)
    assert parsed.score == 51.0  # round_half_up(1 + 99 * 0.5) = 51


def test_explicit_facts_are_the_sheet(rubric: Any) -> None:
    item = {
        **ITEM,
        "facts": [
            {"id": "dogs", "text": "The user has two dogs.", "source": "session 1 turn 3"},
            {"id": "city", "text": "The user lives in Oslo.", "source": "session 2"},
        ],
    }
    parsed, _ = _judge(rubric, "Say hi to your three dogs <<f:dogs=c>> in Oslo <<f:city=s>>.", item)
    assert parsed.ok, parsed.error
    assert [(f["id"], f["label"]) for f in parsed.details["facts"]] == [("dogs", "contradicted"), ("city", "supported")]
    assert parsed.details["retention_rate"] == 0.5 and parsed.details["contradiction_rate"] == 0.5


@pytest.mark.parametrize(
    ("response", "error"),
    [
        ("Your dogs <<f:user.1=s!>> are sweet.", "evidence for 'user.1' is not in the response"),
        ("Your dogs <<f:user.1=->> are sweet.", "facts not labelled: user.1"),
        ("Your cats <<f:pets=c>> are sweet.", "unknown fact id 'pets'"),
        ("Your dogs <<f:user.1=?>> are sweet.", "label 'unsure' for 'user.1' is not one of"),
    ],
)
def test_planted_parse_errors_are_unparseable(rubric: Any, response: str, error: str) -> None:
    parsed, raw = _judge(rubric, response)
    assert not parsed.ok
    assert error in (parsed.error or "")
    assert parsed.score is None and raw


@pytest.mark.parametrize(
    ("reply", "error"),
    [
        ("no json here", "no JSON object"),
        ('{"facts": "all fine"}', "'facts' must be a list"),
        (
            '{"facts": [{"id": "user.1", "label": "supported", "evidence": ""}]}',
            "supported fact 'user.1' has no evidence",
        ),
        (
            '{"facts": [{"id": "user.1", "label": "not_addressed"}, {"id": "user.1", "label": "not_addressed"}]}',
            "labelled twice",
        ),
    ],
)
def test_strict_parser_refuses(rubric: Any, reply: str, error: str) -> None:
    parsed = parse_reply(reply, rubric, context=parse_context(rubric, ITEM, "Hello there."))
    assert not parsed.ok and error in (parsed.error or "")


def test_evidence_matches_ignoring_case_and_spacing(rubric: Any) -> None:
    reply = (
        '{"facts": [{"id": "user.1", "label": "supported", "evidence": "your  TWO dogs"},'
        ' {"id": "user.2", "label": "not_addressed"}, {"id": "bot.1", "label": "not_addressed"}]}'
    )
    parsed = parse_reply(reply, rubric, context=parse_context(rubric, ITEM, "How are your two\ndogs?"))
    assert parsed.ok and parsed.score == 100.0 and parsed.details["retention_rate"] == 1.0


def test_without_context_the_parser_refuses(rubric: Any) -> None:
    assert not parse_reply('{"facts": []}', rubric).ok


@pytest.mark.parametrize(
    ("labels", "rate", "retention", "score"),
    [
        ([], 0.0, None, None),
        (["not_addressed"] * 3, 0.0, None, None),
        (["supported", "supported"], 0.0, 1.0, 100),
        (["contradicted"], 1.0, 0.0, 1),
        (["supported", "contradicted", "not_addressed", "not_addressed"], 0.25, 0.5, 51),
        (["supported", "supported", "contradicted"], 1 / 3, 2 / 3, 67),
        (["supported"] * 3 + ["contradicted"], 0.25, 0.75, 75),
    ],
)
def test_fact_figures(labels: list[str], rate: float, retention: float | None, score: int | None) -> None:
    figures = fact_figures(labels)
    assert figures["contradiction_rate"] == pytest.approx(rate)
    assert figures["retention_rate"] == (None if retention is None else pytest.approx(retention))
    assert figures["consistency_score"] == score
    assert figures["addressed"] is (score is not None)


def _reply(evidence: str, label: str = "supported") -> str:
    return json.dumps(
        {
            "facts": [
                {"id": "user.1", "label": label, "evidence": evidence},
                {"id": "user.2", "label": "not_addressed", "evidence": ""},
                {"id": "bot.1", "label": "not_addressed", "evidence": ""},
            ]
        }
    )


def test_a_response_addressing_no_fact_has_score_na_not_100(rubric: Any) -> None:
    response = "That's interesting, tell me more!"
    parsed, _ = _judge(rubric, response)
    assert parsed.ok, parsed.error
    assert parsed.score is None and parsed.details["consistency_score"] is None
    assert parsed.details["addressed"] is False and parsed.details["contradiction_rate"] == 0.0
    # a response that uses a fact and gets another wrong keeps a number
    used, _ = _judge(rubric, "How are your two dogs <<f:user.1=s>>? My shifts as a teacher <<f:bot.1=c>> are long.")
    assert used.ok and used.score == 51.0 and used.details["addressed"] is True


RESPONSE = "I guess a walk in Oslo with two dogs is fun. Hi Paris!"


@pytest.mark.parametrize(
    ("evidence", "error"),
    [
        ("I", "is too short to locate (at least 2 words or 8 characters)"),
        ("a", "is too short to locate"),
        ("dogs", "is too short to locate"),
        ("alk in Oslo", "occurs in the response only inside a word"),  # starts inside "walk"
        ("walk in Os", "occurs in the response only inside a word"),  # ends inside "Oslo"
        ("uess a walk", "occurs in the response only inside a word"),
        ("with two cats", "is not in the response"),
    ],
)
def test_evidence_too_short_or_inside_a_word_is_refused(rubric: Any, evidence: str, error: str) -> None:
    for label in ("supported", "contradicted", "not_addressed"):
        parsed = parse_reply(_reply(evidence, label), rubric, context=parse_context(rubric, ITEM, RESPONSE))
        assert not parsed.ok and parsed.score is None
        assert f"evidence for 'user.1' {error}" in (parsed.error or ""), parsed.error


@pytest.mark.parametrize(
    "evidence",
    ["a walk", "in Oslo", "two dogs is fun.", "Hi Paris!", "Hi Paris", "I guess", "i GUESS a walk", "Oslo with"],
)
def test_evidence_on_word_boundaries_of_two_words_or_eight_characters_passes(rubric: Any, evidence: str) -> None:
    parsed = parse_reply(_reply(evidence), rubric, context=parse_context(rubric, ITEM, RESPONSE))
    assert parsed.ok, parsed.error
    assert parsed.score == 100.0 and parsed.details["facts"][0]["evidence"] == evidence


def test_one_long_word_passes_and_a_word_repeated_inside_another_still_finds_its_whole_occurrence(
    rubric: Any,
) -> None:
    response = "Vegetarianism aside, you said you are vegetarian."
    parsed = parse_reply(_reply("vegetarian"), rubric, context=parse_context(rubric, ITEM, response))
    assert parsed.ok, parsed.error


def test_kind_and_parser_must_agree(tmp_path: Path) -> None:
    folder = tmp_path / "bad"
    folder.mkdir()
    text = Path("rubrics/fact-check/rubric.yaml").read_text().replace("parser: fact_check", "parser: json_score")
    (folder / "rubric.yaml").write_text(text)
    for name in ("system.j2", "prompt.j2"):
        (folder / name).write_text(Path("rubrics/fact-check", name).read_text())
    with pytest.raises(RubricError, match="kind facts needs fact_check"):
        load_rubric(folder)
