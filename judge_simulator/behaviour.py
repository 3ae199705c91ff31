"""Rule evaluation and verdict synthesis: turn a prompt into a deterministic judge reply.

Nothing here does I/O or keeps state; the same script, prompt and sample index always give the
same :class:`Judgement`. Pseudo-random choices (scores of unmarked responses, position bias,
sample jitter) come from a keyed BLAKE2 hash of the script seed and the relevant text, so they do
not depend on request order or concurrency.

Planting scores: a judged response containing ``<<q=NN>>`` gets exactly score NN (single) or
quality NN (pairwise comparison), which lets tests and benchmarks know the "true" verdict.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping

from .facts import judge_extract, judge_facts, judge_memory
from .requests import (
    MARKER,
    Judgement,
    JudgeRequest,
    compile_pattern,
    locate_pair,
    locate_response,
)
from .script import FALLBACK_RULE, Rule, Script

_TEMPLATE_FIELD = re.compile(r"\{(score|verdict|explanation|json|rule|model)\}")

DEFAULT_SINGLE_REPLY = "{explanation}\n\nRating: [[{score}]]"
DEFAULT_GRADED_REPLY = "{explanation}\n\nVerdict: {verdict}"
DEFAULT_FASTCHAT_REPLY = "{explanation}\n\nFinal verdict: {verdict}"


def stable_hash(*parts: object) -> int:
    """A 64-bit hash that is stable across processes (unlike ``hash()``)."""
    digest = hashlib.blake2b("\x1f".join(map(str, parts)).encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def unit_hash(*parts: object) -> float:
    """Map ``parts`` to a stable pseudo-random float in [0, 1)."""
    return stable_hash(*parts) / 2.0**64


def approx_tokens(text: str) -> int:
    """Token estimate used for ``usage``: ``len(text) // 4 + 1`` (about 4 characters a token)."""
    return len(text) // 4 + 1


def format_number(value: float) -> str:
    """``83.0`` -> ``"83"``, ``7.5`` -> ``"7.5"``: scores render like a judge would write them."""
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def select_rule(script: Script, model: str, prompt: str) -> Rule:
    """First rule whose ``match`` and ``model`` regexes both match, else :data:`FALLBACK_RULE`."""
    for rule in script.rules:
        if rule.match is not None and not compile_pattern(rule.match).search(prompt):
            continue
        if rule.model is not None and not compile_pattern(rule.model).search(model):
            continue
        return rule
    return FALLBACK_RULE


def quality(text: str, seed: int, scale_min: int, scale_max: int) -> float:
    """The planted ``<<q=NN>>`` value (last one) in ``text``, else a stable hash in the scale."""
    found = MARKER.findall(text)
    if found:
        return float(found[-1])
    span = scale_max - scale_min + 1
    return float(scale_min + stable_hash(seed, "quality", hash_key(text)) % span)


_LEADING_LABEL = re.compile(
    r"\A\s*(?:[\w' ]{0,30}\b(?:response|answer|reply)[ \t]*:?[ \t]*\n)?\s*(?:bot|assistant)[ \t]*:[ \t]*",
    re.I,
)


def hash_key(text: str) -> str:
    """The text a score hash is taken of: stripped, without a leading label line and speaker
    prefix (MemoChat's "Bot Response\\nbot: ..."), so one response hashes alike in every rubric."""
    return _LEADING_LABEL.sub("", text.strip(), count=1).strip()


def _jitter(script: Script, request: JudgeRequest, sample_index: int, salt: str) -> float:
    """Deterministic per-sample score offset in [-sample_jitter, +sample_jitter] (0 at temperature 0)."""
    if script.sample_jitter <= 0 or request.temperature <= 0:
        return 0.0
    span = int(script.sample_jitter)
    if span == 0:
        return 0.0
    h = stable_hash(script.seed, "jitter", salt, request.prompt, request.request_seed, sample_index)
    return float(h % (2 * span + 1) - span)


def render(template: str, values: dict[str, str]) -> str:
    """Substitute ``{score}``-style fields; other braces (e.g. JSON in a template) stay as they are."""
    return _TEMPLATE_FIELD.sub(lambda m: values.get(m.group(1), m.group(0)), template)


def _single_explanation(score: float, rule: Rule) -> str:
    span = max(rule.scale_max - rule.scale_min, 1)
    frac = (score - rule.scale_min) / span
    if frac >= 0.75:
        return "The response is coherent, engaging and consistent with the dialogue history."
    if frac >= 0.45:
        return "The response is relevant but misses some chances to engage with the user."
    return "The response is generic and only loosely connected to the conversation."


def _values(
    judgement_score: str, verdict: str, explanation: str, rule: Rule, model: str, obj: Mapping[str, object]
) -> dict[str, str]:
    return {
        "score": judgement_score,
        "verdict": verdict,
        "explanation": explanation,
        "json": json.dumps(obj),
        "rule": rule.name,
        "model": model,
    }


def _judge_single(script: Script, rule: Rule, request: JudgeRequest, sample_index: int) -> Judgement:
    if rule.score is not None:
        score = float(rule.score)
    else:
        response = locate_response(request.prompt, rule)
        if response is not None and MARKER.search(response):
            score = quality(response, script.seed, rule.scale_min, rule.scale_max)
        elif MARKER.search(request.prompt):
            # the locator missed the marked text (e.g. a multi-line inline response): trust the marker
            score = quality(request.prompt, script.seed, rule.scale_min, rule.scale_max)
        else:
            text = response if response is not None else request.prompt
            score = quality(text, script.seed, rule.scale_min, rule.scale_max)
        score += _jitter(script, request, sample_index, "single")
    explanation = _single_explanation(score, rule)
    shown = format_number(score)
    obj = {"explanation": explanation, "score": int(score) if float(score).is_integer() else score}
    text = render(rule.reply or DEFAULT_SINGLE_REPLY, _values(shown, "", explanation, rule, request.model, obj))
    return Judgement(rule.name, "single", score, "", "", explanation, text)


def pairwise_preference(q1: float, q2: float, rule: Rule, slight: bool, tie: bool, coin: float) -> int:
    """Graded preference for response 1 (+2/+1/0/-1/-2) from the two qualities.

    ``slight``: the prompt offers "slightly better" options; ``tie``: it offers a tie. Without a
    tie option (the 4-way rsum rubric) a tie in quality is broken by ``coin`` (in [0, 1)) into
    the weakest preference available.
    """
    diff = q1 - q2
    if abs(diff) <= rule.tie_margin:
        if tie:
            return 0
        weakest = 1 if slight else 2
        return weakest if coin < 0.5 else -weakest
    strength = 2 if not slight or abs(diff) >= rule.clear_margin else 1
    return strength if diff > 0 else -strength


def _pairwise_format(rule: Rule, prompt: str) -> str:
    if rule.pairwise_format != "auto":
        return rule.pairwise_format
    return "fastchat" if re.search(r"\[\[[AB]\]\]", prompt) else "graded"


def _verdict_texts(rule: Rule, fmt: str, preference: int) -> tuple[str, str]:
    v = rule.verdicts
    if fmt == "fastchat":
        sign = (preference > 0) - (preference < 0)
        return {1: (v.fastchat_a, "A"), 0: (v.fastchat_tie, "C"), -1: (v.fastchat_b, "B")}[sign]
    return {
        2: (v.graded_better_1, "1"),
        1: (v.graded_slightly_1, "1"),
        0: (v.graded_tie, "tie"),
        -1: (v.graded_slightly_2, "2"),
        -2: (v.graded_better_2, "2"),
    }[max(-2, min(2, preference))]


def _judge_pairwise(script: Script, rule: Rule, request: JudgeRequest, sample_index: int) -> Judgement:
    prompt = request.prompt
    fmt = _pairwise_format(rule, prompt)
    if fmt == "fastchat":
        slight, tie = False, True
    else:
        slight = re.search(r"slightly", prompt, re.IGNORECASE) is not None
        tie = rule.verdicts.graded_tie.lower() in prompt.lower()
    pair = locate_pair(prompt, rule)
    if pair is None:
        pair = (f"1\x1f{prompt}", f"2\x1f{prompt}")  # nothing to compare: a stable coin flip
    lo, hi = rule.scale_min, rule.scale_max
    q1 = quality(pair[0], script.seed, lo, hi) + _jitter(script, request, sample_index, "1")
    q2 = quality(pair[1], script.seed, lo, hi) + _jitter(script, request, sample_index, "2")
    coin = unit_hash(script.seed, "tie-break", prompt, sample_index)
    preference = int(rule.score) if rule.score is not None else pairwise_preference(q1, q2, rule, slight, tie, coin)
    bias = rule.position_bias if rule.position_bias is not None else script.position_bias
    if bias > 0 and unit_hash(script.seed, "position-bias", prompt, sample_index) < bias:
        preference = 2  # the biased judge prefers whatever was shown first
    verdict, token = _verdict_texts(rule, fmt, preference)
    template = rule.reply or (DEFAULT_FASTCHAT_REPLY if fmt == "fastchat" else DEFAULT_GRADED_REPLY)
    explanation = (
        "Both candidates are of similar quality for the requested aspect."
        if preference == 0
        else "After comparing both candidates on the requested aspect, one engages more directly "
        "and stays more consistent with the dialogue history."
    )
    obj = {"explanation": explanation, "verdict": verdict}
    text = render(template, _values(str(preference), verdict, explanation, rule, request.model, obj))
    return Judgement(rule.name, "pairwise", float(preference), verdict, token, explanation, text)


def judge(script: Script, request: JudgeRequest, sample_index: int = 0) -> Judgement:
    """Evaluate the script's rules for ``request``; ``sample_index`` distinguishes ``n`` choices."""
    rule = select_rule(script, request.model, request.prompt)
    if rule.kind == "facts":
        return judge_facts(rule, request)
    if rule.kind == "memory":
        return judge_memory(rule, request)
    if rule.kind == "extract":
        return judge_extract(rule, request)
    if rule.kind == "pairwise":
        return _judge_pairwise(script, rule, request, sample_index)
    return _judge_single(script, rule, request, sample_index)
