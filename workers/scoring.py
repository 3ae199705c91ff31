"""Probability-weighted scores (G-Eval, Liu et al. 2023): the expectation of the score over the judge's token
distribution at the position where it wrote the score, instead of the sampled integer.

A rubric (``scoring: expected``) or a run (``options.scoring``) asks for it; the client then requests the top token
log-probabilities (OpenAI ``logprobs``/``top_logprobs``, also llama.cpp's server and vLLM) and keeps, per numeric
token of the reply, its character offset and its numeric alternatives (``numeric_positions``). After the reply is
parsed:

* the score's characters are located in the reply (the last ``[[n]]`` for ``bracket_score``, the last ``"score": n``
  for the JSON parsers) and the token that starts there is looked up;
* the score must be that one token (``"85"``, not ``"8"`` then ``"5"``), else the scale does not map to single
  tokens; on a scale with multi-digit values a one-digit score is refused too (an alternative ``"8"`` could be the
  first digit of 85 for a tokenizer that splits digits);
* ``expected = sum_v p(v) * v / sum_v p(v)`` over the alternatives that are whole numbers on the scale (``" 4"`` and
  ``"4"`` add up); ``score_mass`` is ``sum_v p(v)``.

Whenever one of these fails the parsed score stays and the reason is recorded (``details.scoring_fallback``); the
judgment is never failed for it.
"""

from __future__ import annotations

import math
import re
from typing import Any

from judge_api.rubrics import Rubric
from workers.parsing import ParsedVerdict

_DIGITS = re.compile(r"^\s*-?\d+\s*$")
_BRACKET = re.compile(r"\[\[\s*(-?\d+)\s*(?:/\s*\d+\s*)?\]\]")
_JSON_SCORE = re.compile(r"\"score\"\s*:\s*\"?(-?\d+)")


def numeric_positions(tokens: list[tuple[str, float, list[tuple[str, float]]]]) -> list[dict[str, Any]]:
    """The reply's numeric tokens with their character offset and numeric alternatives (what the cache keeps)."""
    out: list[dict[str, Any]] = []
    offset = 0
    for text, logprob, top in tokens:
        if _DIGITS.match(text):  # number tokens only: nothing else of the reply is kept
            alternatives = [[t, lp] for t, lp in top if _DIGITS.match(t) and math.isfinite(lp)]
            out.append({"offset": offset, "token": text, "logprob": logprob, "top": alternatives})
        offset += len(text)
    return out


def _score_span(text: str, rubric: Rubric) -> tuple[int, str] | None:
    pattern = _BRACKET if rubric.parser == "bracket_score" else _JSON_SCORE
    matches = list(pattern.finditer(text))
    if not matches:
        return None
    last = matches[-1]
    return last.start(1), last.group(1)


def _fallback(parsed: ParsedVerdict, reason: str) -> ParsedVerdict:
    parsed.details = {**parsed.details, "scoring": "parsed", "scoring_fallback": reason}
    return parsed


def apply_expected_scoring(
    parsed: ParsedVerdict, rubric: Rubric, text: str, positions: list[dict[str, Any]] | None, structured: bool
) -> ParsedVerdict:
    """Replace a parsed single score by its probability-weighted expectation, or record why not."""
    if not parsed.ok or parsed.score is None or rubric.scale is None:
        return parsed
    if positions is None:
        return _fallback(parsed, "the provider returned no token log-probabilities")
    if rubric.parser not in ("bracket_score", "json_score", "memory_faithfulness"):
        return _fallback(parsed, f"expected scoring does not know where parser {rubric.parser!r} reads the score")
    span = _score_span(text, rubric)
    if span is None or float(span[1]) != parsed.score:
        where = "structured output" if structured else "reply"
        return _fallback(parsed, f"the score {parsed.score:g} was not found as written text in the {where}")
    start, digits = span
    token = next((p for p in positions if p["offset"] <= start < p["offset"] + len(p["token"])), None)
    if token is None:
        return _fallback(parsed, "the log-probabilities do not cover the score's position in the reply")
    if token["token"].strip() != digits or token["offset"] + len(token["token"]) < start + len(digits):
        pieces = [p["token"] for p in positions if start <= p["offset"] < start + len(digits)] or [token["token"]]
        return _fallback(
            parsed,
            f"the score {digits} is written in several tokens ({', '.join(repr(p) for p in pieces)}): "
            "the scale does not map to single tokens",
        )
    low, high = rubric.scale
    if (high > 9 or low < 0) and len(digits.lstrip("-")) == 1:
        return _fallback(
            parsed,
            f"the score {digits} is one digit on the {low:g}-{high:g} scale: an alternative token like '8' could "
            "be the first digit of 85, so the scale does not map to single tokens",
        )
    distribution: dict[int, float] = {}
    for alternative, logprob in token["top"]:
        stripped = alternative.strip()
        if stripped != str(int(stripped)):  # "07" is not a value on the scale
            continue
        value = int(stripped)
        if low <= value <= high:
            distribution[value] = distribution.get(value, 0.0) + math.exp(logprob)
    mass = sum(distribution.values())
    if mass <= 0:
        return _fallback(parsed, "no alternative at the score's position is a value on the scale")
    expected = sum(v * p for v, p in distribution.items()) / mass
    parsed.details = {
        **parsed.details,
        "scoring": "expected",
        "parsed_score": parsed.score,
        "expected_score": expected,
        "score_mass": mass,
        "score_distribution": {str(v): p / mass for v, p in sorted(distribution.items())},
    }
    parsed.score = expected
    return parsed
