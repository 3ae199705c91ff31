"""Verdict parsers against adversarial replies: strict first, documented fallbacks, last occurrence wins,
range-checked, truncated replies refused, and never a default score."""

from __future__ import annotations

from typing import Any

import pytest

from judge_api.rubrics import Rubric, get_registry
from workers.parsing import ParsedVerdict, parse_reply

REFUSED = None  # expected value of a reply that must be unparseable


@pytest.fixture(scope="module")
def rubrics() -> dict[str, Rubric]:
    registry = get_registry(refresh=True)
    json_rubric = registry.get("dj-consistency").model_copy(update={"parser": "json_score", "id": "json-test"})
    return {
        "bracket_score": registry.get("rsum-single"),
        "pairwise_4way": registry.get("rsum-pairwise"),
        "pairwise_abc": registry.get("mtbench-pair-v2"),
        "json_score": json_rubric,
        "memory_faithfulness": registry.get("memory-faithfulness"),
    }


def check(parsed: ParsedVerdict, expected: Any, field: str) -> None:
    if expected is REFUSED:
        assert not parsed.ok, f"should be unparseable, got {parsed}"
        assert parsed.score is None and parsed.verdict is None and parsed.preference is None  # no default
        assert parsed.error
    else:
        assert parsed.ok, parsed.error
        assert getattr(parsed, field) == expected


BRACKET_CASES = [
    ("plain", "The reply is warm and on topic.\n\nRating: [[85]]", 85),
    ("several [[n]]: the last wins", "At first I thought [[40]], but on reflection it deserves [[72]].", 72),
    ("padded", "Rating: [[ 75 ]]", 75),
    ("with /100", "[[80/100]]", 80),
    ("out of range", "Excellent! [[150]]", REFUSED),
    ("zero", "[[0]]", REFUSED),
    ("negative", "[[-5]]", REFUSED),
    ("decimal on an integer scale", "[[85.5]]", REFUSED),
    ("last is out of range, an earlier one is not", "[[80]] ... no, make that [[101]]", REFUSED),
    ("denominator is not the scale", "[[8/10]]", REFUSED),
    ("zero-width character inside", "Rating: [[9\u200b0]]", 90),
    ("bidi override inside", "Rating: [[\u202e75]]", 75),
    ("full-width brackets and digits", "評価：［［８０］］", 80),
    ("words like downgrade:", "I downgrade it a little. downgrade: 5", REFUSED),
    ("subscore", "Subscore: 5 for fluency", REFUSED),
    ("truncated [[8", "The response is fine. Rating: [[8", REFUSED),
    (
        "explanation quotes [[rating]] and [[score]], then a verdict",
        'The instructions ask for "[[rating]]", i.e. the format [[score]]. The bot is consistent. Rating: [[64]]',
        64,
    ),
    (
        "only the format string quoted",
        "I must rate on an integer score of 1 (very bad) to 100 (very good) by strictly following this format: "
        "[[score]].",
        REFUSED,
    ),
    ("the range quoted in words", "I must give an integer rating of 1 to 100 as requested.", REFUSED),
    ("Rating: 7/10 on a 1-100 scale", "Rating: 7/10", REFUSED),
    ("7 out of 10 on a 1-100 scale", "The score is 7 out of 10.", REFUSED),
    ("fallback Rating: n", "Nice and engaging.\nRating: 77", 77),
    ("fallback at the end of a sentence", "Overall this is decent. Score: 80.", 80),
    ("fallback n/100", "Score: 66/100", 66),
    ("fallback n out of 100", "I give it a rating of 58 out of 100", 58),
    ("fallback in markdown bold", "**Score**: 66", 66),
    ("fallback: the last wins", "Rating: 30 at first; after re-reading, Rating: 45", 45),
    ("strict beats a later fallback", "[[70]]\n(an earlier draft said Score: 20)", 70),
    ("lower-case fallback", "final score: 91", 91),
    ("no verdict at all", "The response is great.", REFUSED),
    ("empty", "   ", REFUSED),
]


@pytest.mark.parametrize(("text", "expected"), [c[1:] for c in BRACKET_CASES], ids=[c[0] for c in BRACKET_CASES])
def test_bracket_score(rubrics: dict[str, Rubric], text: str, expected: Any) -> None:
    check(parse_reply(text, rubrics["bracket_score"]), expected, "score")


@pytest.mark.parametrize("reason", ["length", "max_tokens"])
def test_truncated_reply_is_never_trusted(rubrics: dict[str, Rubric], reason: str) -> None:
    parsed = parse_reply("Looks good. Rating: [[80]]", rubrics["bracket_score"], finish_reason=reason)
    check(parsed, REFUSED, "score")
    assert "truncated" in (parsed.error or "")


def test_fallbacks_can_be_turned_off(rubrics: dict[str, Rubric]) -> None:
    strict_only = rubrics["bracket_score"].model_copy(update={"parser_options": {"fallback": False}})
    check(parse_reply("Rating: 77", strict_only), REFUSED, "score")
    check(parse_reply("Rating: [[77]]", strict_only), 77, "score")


FOUR_WAY_CASES = [
    ("better", "Response 1 is more engaging.\nResponse 1 is better", 2),
    ("lower-case slightly", "response 2 is slightly better", -1),
    ("upper case", "RESPONSE 1 IS SLIGHTLY BETTER", 1),
    ("several: the last wins", "Response 1 is better at first glance, but overall Response 2 is better.", -2),
    ("markdown emphasis", "Verdict: Response 2 is *slightly* better", -1),
    ("bold verdict", "**Response 1 is better**", 2),
    ("zero-width inside", "Response\u200b 2 is better", -2),
    ("full-width digit", "Response ２ is better", -2),
    (
        "option definitions quoted after the verdict",
        "Response 2 is slightly better.\n(The options were 1.Response 1 is better : If you think response 1 has an "
        "advantage, then choose this option.)",
        -1,
    ),
    (
        "only the list of choices quoted",
        "I must choose from ['Response 1 is better', 'Response 1 is slightly better', 'Response 2 is better', "
        "'Response 2 is slightly better'] but I cannot decide.",
        REFUSED,
    ),
    ("a tie is not an option", "Both responses are equally good.", REFUSED),
    ("negated", "Response 1 is not better than response 2 in any way I can see.", REFUSED),
    ("truncated", "After comparing, Response 2 is sli", REFUSED),
]


@pytest.mark.parametrize(("text", "expected"), [c[1:] for c in FOUR_WAY_CASES], ids=[c[0] for c in FOUR_WAY_CASES])
def test_pairwise_4way(rubrics: dict[str, Rubric], text: str, expected: Any) -> None:
    parsed = parse_reply(text, rubrics["pairwise_4way"])
    check(parsed, expected, "preference")
    if expected is not REFUSED:
        assert parsed.verdict in rubrics["pairwise_4way"].verdicts


ABC_CASES = [
    ("A", "Assistant A answers the question directly. [[A]]", 2),
    ("B", "[[B]]", -2),
    ("C is a tie", "Both are equally helpful. [[C]]", 0),
    ("lower case", "My final verdict: [[b]]", -2),
    ("padded", "[[ A ]]", 2),
    ("several: the last wins", "I lean to [[A]]... on reflection, [[B]]", -2),
    ("full-width", "［［A］］", 2),
    (
        "format string quoted, then the verdict",
        'I will output "[[A]]" if assistant A is better, "[[B]]" if assistant B is better, and "[[C]]" for a tie. '
        "Assistant B is more accurate. [[B]]",
        -2,
    ),
    (
        "verdict, then the format string quoted",
        'Final verdict: [[B]] (format: "[[A]]" if assistant A is better, "[[B]]" if assistant B is better, and '
        '"[[C]]" for a tie)',
        -2,
    ),
    (
        "only the format string quoted",
        'Output "[[A]]" if assistant A is better, "[[B]]" if assistant B is better, and "[[C]]" for a tie.',
        REFUSED,
    ),
    ("unknown letter", "[[D]]", REFUSED),
    ("truncated", "Assistant A is better. [[", REFUSED),
    ("single brackets are not the format", "[A]", REFUSED),
]


@pytest.mark.parametrize(("text", "expected"), [c[1:] for c in ABC_CASES], ids=[c[0] for c in ABC_CASES])
def test_pairwise_abc(rubrics: dict[str, Rubric], text: str, expected: Any) -> None:
    check(parse_reply(text, rubrics["pairwise_abc"]), expected, "preference")


JSON_CASES = [
    ("plain", '{"explanation": "consistent", "score": 70}', 70),
    ("fenced with prose", 'Here you go:\n```json\n{"explanation": "ok", "score": 42}\n```', 42),
    ("two objects: the last wins", '{"score": 10} then corrected: {"explanation": "x", "score": 20}', 20),
    ("nested score is not the score", '{"meta": {"score": 99}, "explanation": "e", "score": 10}', 10),
    ("score as a digit string", '{"explanation": "e", "score": "85"}', 85),
    ("out of range", '{"explanation": "e", "score": 150}', REFUSED),
    ("boolean", '{"explanation": "e", "score": true}', REFUSED),
    ("no score", '{"explanation": "e"}', REFUSED),
    ("format quoted, not valid JSON", 'Format: {"explanation": "...", "score": <integer 1-100>}', REFUSED),
    ("truncated object", '{"explanation": "The response is consistent", "score": 8', REFUSED),
    ("no JSON", "The response is consistent. Score 80", REFUSED),
]


@pytest.mark.parametrize(("text", "expected"), [c[1:] for c in JSON_CASES], ids=[c[0] for c in JSON_CASES])
def test_json_score(rubrics: dict[str, Rubric], text: str, expected: Any) -> None:
    check(parse_reply(text, rubrics["json_score"]), expected, "score")


MEMORY_CASES = [
    (
        "errors listed",
        '{"errors": [{"type": "fabricated_fact", "evidence": "says Rex is a cat"}, {"type": "missing_detail", '
        '"evidence": "no breed"}], "explanation": "two problems", "score": 40}',
        40,
        {"fabricated_fact": 1, "incorrect_relationship": 0, "missing_detail": 1},
    ),
    (
        "type spelled loosely",
        'Analysis first.\n{"errors": [{"type": "Incorrect Relationship", "evidence": "e"}], "explanation": "x", '
        '"score": 55}',
        55,
        {"fabricated_fact": 0, "incorrect_relationship": 1, "missing_detail": 0},
    ),
    (
        "no errors",
        '{"errors": [], "explanation": "faithful", "score": 95}',
        95,
        {"fabricated_fact": 0, "incorrect_relationship": 0, "missing_detail": 0},
    ),
    ("unknown error type", '{"errors": [{"type": "hallucination"}], "explanation": "x", "score": 50}', REFUSED, None),
    ("errors not a list", '{"errors": "many", "explanation": "x", "score": 50}', REFUSED, None),
    ("no score", '{"errors": [], "explanation": "x"}', REFUSED, None),
    ("truncated", '{"errors": [{"type": "fabricated_fact", "evidence": "Rex', REFUSED, None),
]


@pytest.mark.parametrize(
    ("text", "expected", "counts"), [c[1:] for c in MEMORY_CASES], ids=[c[0] for c in MEMORY_CASES]
)
def test_memory_faithfulness(rubrics: dict[str, Rubric], text: str, expected: Any, counts: Any) -> None:
    parsed = parse_reply(text, rubrics["memory_faithfulness"])
    check(parsed, expected, "score")
    if counts is not None:
        assert parsed.details["error_counts"] == counts


def test_structured_output_is_read_before_the_text(rubrics: dict[str, Rubric]) -> None:
    """A tool-use / JSON-schema reply carries the verdict in ``structured``; the text is only kept."""
    parsed = parse_reply("", rubrics["bracket_score"], structured={"explanation": "fine", "score": 61})
    check(parsed, 61, "score")
    check(parse_reply("", rubrics["bracket_score"], structured={}), REFUSED, "score")
    check(parse_reply("", rubrics["bracket_score"], structured={"score": 0}), REFUSED, "score")


def test_no_parser_returns_a_default(rubrics: dict[str, Rubric]) -> None:
    """Whatever junk comes back, a parser either finds the verdict or refuses: nothing in between."""
    junk = ["", "n/a", "{}", "[]", "[[]]", "[[ ]]", "null", "Rating:", "Score: NaN", "[[score]]", "[[A/B]]", "\u200b"]
    for rubric in rubrics.values():
        for text in junk:
            check(parse_reply(text, rubric), REFUSED, "score")


@pytest.mark.parametrize(
    ("reply", "explanation"),
    [
        ("Consistent with the persona.\n\nVerdict: [[A]]", "Consistent with the persona."),
        ("Fine. Rating: [[80]]", "Fine."),
        ("Stays on topic.\n**Final verdict**: [[B]]", "Stays on topic."),
        ("The rating scale is wide; I give [[7]]", "The rating scale is wide; I give"),
    ],
)
def test_explanation_drops_a_dangling_verdict_label(reply: str, explanation: str) -> None:
    from workers.parsing import _explanation

    assert _explanation(reply, reply.index("[[")) == explanation
