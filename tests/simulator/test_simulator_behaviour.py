"""Unit tests of the simulator's pure parts: script validation, rule evaluation, verdict synthesis,
structured outputs, fault schedules, rate limiting and latency sampling (no server involved)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from judge_simulator.behaviour import (
    JudgeRequest,
    approx_tokens,
    judge,
    locate_pair,
    locate_response,
    quality,
    render,
    select_rule,
)
from judge_simulator.faults import FaultEngine, LatencySampler, RateLimiter
from judge_simulator.script import FALLBACK_RULE, Latency, Provider, Rule, Script
from judge_simulator.structured import fill_schema

RSUM_SINGLE = (
    "You are an impartial judge.\nConversation Context:user: hi Personality:user: likes tea "
    "Assistant Response: {response}\nBegin your evaluation by providing a short explanation, then you must "
    "rate the Assistant\nResponse on an integer score of 1 (very bad) to 100 (very good) by strictly "
    "following this format:\n[[score]]."
)
HARDENED_SINGLE = (
    "Aspect to judge: Consistency\n\nResponse to judge:\n"
    '<untrusted-response id="ab12cd34">\n{response}\n</untrusted-response id="ab12cd34">\n\n'
    "Begin with a short explanation, then rate ... strictly in this format on the last line: [[score]]"
)
MEMOCHAT = (
    "You are an impartial judge.\n\n```\nRelated Conversation History\nuser: Response: nah\nbot: ok\n```\n\n"
    "```\nUser Question\nuser: where?\n```\n\n```\nBot Response\nbot: {response}\n```\n\n"
    "Please evaluate ... by strictly following this format: [[rating]]."
)
MTBENCH_SINGLE = (
    "[Question]\nwhere?\n\n[The Start of Assistant's Answer]\n{response}\n[The End of Assistant's Answer]\n"
    'Rate it: "[[rating]]", for example: "Rating: [[5]]".'
)
RSUM_PAIR = (
    "There are four options for you to choose from:\n1.Response 1 is better : ...\n"
    "2.Response 1 is slightly better : ...\n3.Response 2 is slightly better : ...\n"
    "4.Response 2 is better : ...\n"
    "Conversation Context:user: hi Personality:user: tea\nresponse 1: {r1} response 2: {r2}"
)
FASTCHAT_PAIR = (
    'Output your final verdict: "[[A]]" if assistant A is better, "[[B]]" if assistant B is better, '
    'and "[[C]]" for a tie.\n\n[User Question]\nwhere?\n\n'
    "[The Start of Assistant A's Answer]\n{r1}\n[The End of Assistant A's Answer]\n\n"
    "[The Start of Assistant B's Answer]\n{r2}\n[The End of Assistant B's Answer]"
)


def _judge(prompt: str, script: Script | None = None, **kwargs: object) -> str:
    return judge(script or Script(), JudgeRequest("gpt-4o", prompt, **kwargs)).text  # type: ignore[arg-type]


# ---- locating the judged response ---------------------------------------------------------------
@pytest.mark.parametrize(
    ("template", "expected_rule"),
    [
        (RSUM_SINGLE, "single-score"),
        (HARDENED_SINGLE, "single-score"),
        (MEMOCHAT, "single-score"),
        (MTBENCH_SINGLE, "single-score"),
    ],
)
def test_single_prompts_locate_the_response(template: str, expected_rule: str) -> None:
    prompt = template.format(response="Try the Cascades, they are lovely.")
    rule = select_rule(Script(), "gpt-4o", prompt)
    assert rule.name == expected_rule
    located = locate_response(prompt, rule)
    assert located is not None and "Try the Cascades, they are lovely." in located
    assert "nah" not in located  # MemoChat: a "Response:" inside the earlier fenced dialogue is not it


@pytest.mark.parametrize("template", [RSUM_SINGLE, HARDENED_SINGLE, MEMOCHAT, MTBENCH_SINGLE])
@pytest.mark.parametrize("planted", [1, 7, 83, 100])
def test_planted_marker_sets_the_single_score(template: str, planted: int) -> None:
    text = _judge(template.format(response=f"Sure, the Cascades. <<q={planted}>>"))
    assert text.endswith(f"Rating: [[{planted}]]")


def test_unmarked_score_is_a_stable_hash_shared_across_rubric_formats() -> None:
    response = "I would go to the Cascades in early autumn."
    replies = [_judge(t.format(response=response)) for t in (RSUM_SINGLE, HARDENED_SINGLE, MEMOCHAT, MTBENCH_SINGLE)]
    scores = {int(reply.rsplit("[[", 1)[1].rstrip("]")) for reply in replies}
    assert len(scores) == 1, replies  # the same response text gets the same score in every rubric
    assert 1 <= scores.pop() <= 100
    assert replies[0] == _judge(RSUM_SINGLE.format(response=response))  # and on every call


def test_hash_depends_on_script_seed_and_scale() -> None:
    values = {quality(f"response {i}", seed, 1, 10) for i in range(50) for seed in (0, 1)}
    assert values <= set(map(float, range(1, 11))) and len(values) > 5
    assert [quality(f"r{i}", 0, 1, 100) for i in range(20)] != [quality(f"r{i}", 1, 1, 100) for i in range(20)]


def test_rule_response_regex_takes_precedence() -> None:
    rule = Rule(name="custom", response_regex=r"CANDIDATE<(?P<response>[^>]*)>")
    prompt = "Response: decoy <<q=5>>\nCANDIDATE<the real one <<q=61>>>"
    assert locate_response(prompt, rule) == "the real one <<q=61"
    script = Script(rules=[Rule(name="custom", response_regex=r"CANDIDATE\[(?P<response>[^\]]*)\]")])
    assert _judge("Response: decoy <<q=5>>\nCANDIDATE[x <<q=61>>]", script).endswith("[[61]]")


# ---- pairwise verdicts ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("q1", "q2", "expected"),
    [
        (90, 20, "Response 1 is better"),
        (20, 90, "Response 2 is better"),
        (55, 50, "Response 1 is slightly better"),
        (50, 55, "Response 2 is slightly better"),
        (60, 50, "Response 1 is better"),  # clear_margin 10 reached
    ],
)
def test_graded_pairwise_follows_markers(q1: int, q2: int, expected: str) -> None:
    text = _judge(RSUM_PAIR.format(r1=f"tea? <<q={q1}>>", r2=f"coffee? <<q={q2}>>"))
    assert text.endswith(expected)


def test_graded_tie_without_tie_option_is_a_deterministic_slight_preference() -> None:
    prompts = [RSUM_PAIR.format(r1=f"a{i} <<q=50>>", r2=f"b{i} <<q=50>>") for i in range(30)]
    verdicts = [_judge(p).rsplit(": ", 1)[1] for p in prompts]
    assert set(verdicts) == {"Response 1 is slightly better", "Response 2 is slightly better"}
    assert verdicts == [_judge(p).rsplit(": ", 1)[1] for p in prompts]


def test_graded_tie_offered_in_prompt_is_used() -> None:
    prompt = RSUM_PAIR.replace("4.Response", "5.Both responses are equally good : ...\n4.Response").format(
        r1="x <<q=40>>", r2="y <<q=40>>"
    )
    assert _judge(prompt).endswith("Both responses are equally good")


def test_graded_three_level_prompt_never_says_slightly() -> None:
    prompt = "Say 'Response 1 is better' or 'Response 2 is better'.\n"
    prompt += "Response 1: a <<q=51>>\nResponse 2: b <<q=50>>"
    assert _judge(prompt).endswith("Response 1 is better")


@pytest.mark.parametrize(
    ("q1", "q2", "expected"),
    [(80, 30, "[[A]]"), (30, 80, "[[B]]"), (64, 64, "[[C]]"), (51, 50, "[[A]]")],
)
def test_fastchat_pairwise_follows_markers(q1: int, q2: int, expected: str) -> None:
    text = _judge(FASTCHAT_PAIR.format(r1=f"one <<q={q1}>>", r2=f"two <<q={q2}>>"))
    assert text.endswith(f"Final verdict: {expected}")
    assert text.count("[[") == 1  # the explanation never contains a verdict token


@pytest.mark.parametrize("template", [RSUM_PAIR, FASTCHAT_PAIR])
def test_pairwise_swapping_the_order_mirrors_the_verdict(template: str) -> None:
    mirror = {
        "Response 1 is better": "Response 2 is better",
        "Response 1 is slightly better": "Response 2 is slightly better",
        "[[A]]": "[[B]]",
    }
    mirror.update({v: k for k, v in mirror.items()})
    for q1, q2 in [(90, 10), (52, 50), (30, 70)]:
        ab = _judge(template.format(r1=f"x <<q={q1}>>", r2=f"y <<q={q2}>>")).rsplit(": ", 1)[1]
        ba = _judge(template.format(r1=f"y <<q={q2}>>", r2=f"x <<q={q1}>>")).rsplit(": ", 1)[1]
        assert mirror[ab] == ba


def test_pairwise_without_labels_uses_the_last_two_markers() -> None:
    assert locate_pair("Which is better, Response 1 is better or not? <<q=10>> vs <<q=70>>", Rule()) == (
        "<<q=10>>",
        "<<q=70>>",
    )


@pytest.mark.parametrize(("bias", "low", "high"), [(0.0, 0.0, 0.0), (1.0, 1.0, 1.0), (0.5, 0.25, 0.75)])
def test_position_bias_prefers_the_first_response_with_probability_p(bias: float, low: float, high: float) -> None:
    script = Script(position_bias=bias, seed=11)
    prompts = [FASTCHAT_PAIR.format(r1=f"weak {i} <<q=10>>", r2=f"strong {i} <<q=90>>") for i in range(80)]
    verdicts = [_judge(p, script) for p in prompts]
    share_first = sum(v.endswith("[[A]]") for v in verdicts) / len(verdicts)
    assert low <= share_first <= high
    assert verdicts == [_judge(p, script) for p in prompts]  # seeded: the same every time


def test_sample_jitter_only_at_positive_temperature() -> None:
    script = Script(sample_jitter=3)
    prompt = RSUM_SINGLE.format(response="ok <<q=50>>")
    cold = {judge(script, JudgeRequest("m", prompt, temperature=0.0), i).score for i in range(10)}
    warm = [judge(script, JudgeRequest("m", prompt, temperature=1.0), i).score for i in range(30)]
    assert cold == {50.0}
    assert set(warm) <= {47.0, 48.0, 49.0, 50.0, 51.0, 52.0, 53.0} and len(set(warm)) > 1
    assert warm == [judge(script, JudgeRequest("m", prompt, temperature=1.0), i).score for i in range(30)]


# ---- rules and templates -------------------------------------------------------------------------
def test_rules_match_on_prompt_and_model_in_order() -> None:
    script = Script(
        rules=[
            Rule(name="mini-only", model=r"-mini$", reply="mini says {score}", score=12),
            Rule(name="keyword", match=r"PLEASE_JSON", reply='{"score": {score}, "r": "{rule}"}', score=34),
        ]
    )
    assert _judge("PLEASE_JSON", script) == '{"score": 34, "r": "keyword"}'
    assert judge(script, JudgeRequest("gpt-4o-mini", "PLEASE_JSON")).text == "mini says 12"
    assert select_rule(script, "gpt-4o", "nothing matches") is FALLBACK_RULE
    assert _judge("no rubric here <<q=44>>", script).endswith("[[44]]")


def test_render_substitutes_only_known_fields() -> None:
    values = {"score": "7", "verdict": "[[A]]"}
    assert render('{"score": {score}, "x": {unknown}} {verdict}', values) == '{"score": 7, "x": {unknown}} [[A]]'


def test_single_json_rule_answers_with_a_json_object() -> None:
    prompt = 'Memory summary to judge:\nfoo <<q=72>>\n\nAnswer with one JSON object only: {"score": 1}'
    data = json.loads(_judge(prompt))
    assert set(data) == {"explanation", "score"} and data["score"] == 72 and data["explanation"]


def test_approx_tokens() -> None:
    assert [approx_tokens(t) for t in ("", "abc", "abcd", "a" * 401)] == [1, 1, 2, 101]


# ---- structured outputs --------------------------------------------------------------------------
def _single(score: int = 83) -> object:
    return judge(Script(), JudgeRequest("m", RSUM_SINGLE.format(response=f"x <<q={score}>>")))


def test_fill_schema_strict_single() -> None:
    schema = {
        "type": "object",
        "additionalProperties": False,
        "required": ["explanation", "score"],
        "properties": {"explanation": {"type": "string"}, "score": {"type": "integer", "minimum": 1}},
    }
    out = fill_schema(schema, _single())  # type: ignore[arg-type]
    assert out == {"explanation": out["explanation"], "score": 83} and out["explanation"]


def test_fill_schema_follows_refs_anyof_enums_and_nested_objects() -> None:
    schema = {
        "$defs": {
            "Err": {
                "type": "object",
                "properties": {"type": {"type": "string", "enum": ["fabricated_fact", "missing_detail"]}},
            }
        },
        "type": "object",
        "properties": {
            "errors": {"type": "array", "items": {"$ref": "#/$defs/Err"}},
            "rating": {"anyOf": [{"type": "number"}, {"type": "null"}]},
            "reasoning": {"type": "string"},
            "flag": {"type": "boolean"},
            "meta": {"type": "object", "properties": {"score": {"type": "string"}, "n": {"type": "integer"}}},
            "kind": {"const": "judge"},
        },
    }
    out = fill_schema(schema, _single(41))  # type: ignore[arg-type]
    assert out["errors"] == [] and out["rating"] == 41 and out["flag"] is False and out["kind"] == "judge"
    assert out["meta"] == {"score": "41", "n": 0} and isinstance(out["reasoning"], str)


@pytest.mark.parametrize(
    ("enum", "expected"),
    [(["A", "B", "C"], "B"), (["Response 1", "Response 2", "tie"], "Response 2"), ([2, 1, 0, -1, -2], -2)],
)
def test_fill_schema_maps_pairwise_verdict_onto_enums(enum: list[object], expected: object) -> None:
    pair = judge(Script(), JudgeRequest("m", FASTCHAT_PAIR.format(r1="a <<q=10>>", r2="b <<q=90>>")))
    assert fill_schema({"properties": {"verdict": {"enum": enum}}}, pair) == {"verdict": expected}


# ---- script ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0.5, {"kind": "fixed", "seconds": 0.5}),
        ("fixed(0.25)", {"kind": "fixed", "seconds": 0.25}),
        ("uniform(0.1, 0.3)", {"kind": "uniform", "lo": 0.1, "hi": 0.3}),
        ("lognormal(0.2,0.5)", {"kind": "lognormal", "median": 0.2, "sigma": 0.5}),
        ("none", {"kind": "none"}),
        ({"kind": "fixed", "seconds": 2}, {"kind": "fixed", "seconds": 2.0}),
    ],
)
def test_latency_shorthands(value: object, expected: dict[str, object]) -> None:
    latency = Latency.model_validate(value)
    assert {k: getattr(latency, k) for k in expected} == expected


@pytest.mark.parametrize(
    "bad",
    [
        {"latency": "uniform(0.3, 0.1)"},
        {"latency": "gaussian(1)"},
        {"rules": [{"match": "("}]},
        {"faults": [{"kind": "explode"}]},
        {"faults": [{"kind": "hang", "probability": 1.5}]},
        {"faults": [{"kind": "hang", "probabilty": 0.5}]},  # typo: unknown keys are errors
        {"rate_limit_rpm": 0},
    ],
)
def test_invalid_scripts_are_rejected(bad: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        Script.model_validate(bad)


def test_script_loads_from_yaml_and_json(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text(
        "seed: 5\nlatency: fixed(0.1)\nfaults:\n  - {kind: rate_limit, first_n: 2, retry_after: 3}\n",
        encoding="utf-8",
    )
    (tmp_path / "s.json").write_text(json.dumps({"seed": 5, "position_bias": 0.2}), encoding="utf-8")
    from_yaml, from_json = Script.from_file(tmp_path / "s.yaml"), Script.from_file(tmp_path / "s.json")
    assert from_yaml.seed == 5 and from_yaml.latency.seconds == 0.1 and from_yaml.faults[0].retry_after == 3
    assert from_json.position_bias == 0.2 and [r.name for r in from_json.rules] == [r.name for r in Script().rules]


# ---- faults, rate limiter, latency ------------------------------------------------------------------
def _fire_pattern(script: Script, calls: int, model: str = "m", provider: Provider = "openai") -> list[str | None]:
    engine = FaultEngine(script)
    out: list[str | None] = []
    for _ in range(calls):
        fault = engine.decide(provider, model, "prompt")
        out.append(fault.kind if fault else None)
    return out


@pytest.mark.parametrize(
    ("fault", "expected_calls"),
    [
        ({"first_n": 2}, [1, 2]),
        ({"every_k": 3}, [3, 6, 9]),
        ({"calls": [2, 5]}, [2, 5]),
        ({"every_k": 2, "max_count": 2}, [2, 4]),
        ({"first_n": 1, "every_k": 4}, [1, 4, 8]),
    ],
)
def test_deterministic_fault_schedules(fault: dict[str, object], expected_calls: list[int]) -> None:
    script = Script.model_validate({"faults": [{"kind": "server_error", **fault}]})
    pattern = _fire_pattern(script, 10)
    assert [i + 1 for i, kind in enumerate(pattern) if kind] == expected_calls


def test_probabilistic_faults_are_seeded() -> None:
    def pattern(seed: int) -> list[str | None]:
        return _fire_pattern(
            Script.model_validate({"seed": seed, "faults": [{"kind": "hang", "probability": 0.3}]}), 200
        )

    assert pattern(1) == pattern(1)
    assert pattern(1) != pattern(2)
    assert 30 <= sum(k is not None for k in pattern(1)) <= 90


def test_fault_filters_and_first_fault_wins() -> None:
    script = Script.model_validate(
        {
            "faults": [
                {"kind": "rate_limit", "model": "^mini$", "first_n": 100},
                {"kind": "server_error", "endpoint": "anthropic", "first_n": 100},
                {"kind": "malformed", "every_k": 2},
            ]
        }
    )
    engine = FaultEngine(script)
    calls: list[tuple[Provider, str]] = [("openai", "mini"), ("openai", "big"), ("anthropic", "big")]
    got = [engine.decide(p, m, "x") for p, m in calls]
    assert [f.kind if f else None for f in got] == ["rate_limit", "malformed", "server_error"]


def test_rate_limiter_sliding_window() -> None:
    now = [100.0]
    limiter = RateLimiter(rpm=3, window=60.0, clock=lambda: now[0])
    assert [limiter.check("a") for _ in range(3)] == [None, None, None]
    now[0] = 110.0
    assert limiter.check("a") == pytest.approx(50.0)  # the first call leaves the window at t=160
    assert limiter.check("b") is None  # per model
    now[0] = 160.5
    assert limiter.check("a") is None
    assert RateLimiter(rpm=None).check("a") is None


def test_latency_sampler_is_seeded_and_bounded() -> None:
    spec = Latency.model_validate("lognormal(0.2, 0.8)")
    first, again = LatencySampler(spec, 3), LatencySampler(spec, 3)
    assert [first.sample() for _ in range(5)] == [again.sample() for _ in range(5)]
    sampler = LatencySampler(Latency.model_validate({"kind": "uniform", "lo": 0.1, "hi": 0.2}), 0)
    assert all(0.1 <= sampler.sample() <= 0.2 for _ in range(100))
    capped = LatencySampler(Latency(kind="lognormal", median=1.0, sigma=3.0, max_seconds=1.5), 0)
    assert max(capped.sample() for _ in range(200)) <= 1.5
