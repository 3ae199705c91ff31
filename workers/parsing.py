"""Verdict parsers, registered by name and chosen by a rubric's ``parser`` field.

Rules every parser follows: normalise first (NFKC, invisible characters removed); strict format first, then the
documented fallbacks; the *last* occurrence wins (judges restate the format before answering); values are
range-checked; a reply cut off by the token limit is never trusted; anything else is ``unparseable`` with the raw
text kept. No parser ever returns a default score.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from judge_api.rubrics import Rubric
from workers.textnorm import normalise


@dataclass
class ParsedVerdict:
    ok: bool
    score: float | None = None
    verdict: str | None = None
    preference: int | None = None  # for the response shown first
    explanation: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    method: str | None = None


Parser = Callable[[str, Rubric, "dict[str, Any] | None"], ParsedVerdict]
PARSERS: dict[str, Parser] = {}


def register(name: str) -> Callable[[Parser], Parser]:
    def decorator(func: Parser) -> Parser:
        PARSERS[name] = func
        return func

    return decorator


def parse_reply(
    text: str, rubric: Rubric, *, finish_reason: str | None = None, structured: dict[str, Any] | None = None
) -> ParsedVerdict:
    if finish_reason in ("length", "max_tokens"):
        return ParsedVerdict(False, error="truncated: the reply hit the token limit before a complete verdict")
    if not text.strip() and structured is None:
        return ParsedVerdict(False, error="empty reply")
    return PARSERS[rubric.parser](text, rubric, structured)


def _explanation(text: str, match_start: int | None) -> str:
    body = text[:match_start] if match_start is not None else text
    return body.strip()[:4000]


# 1-3 digits, optionally "/100"; a lone number only (no decimals, signs or more digits around it)
_STRICT_SCORE = re.compile(r"\[\[\s*(-?\d+(?:\.\d+)?)\s*(?:/\s*\d+\s*)?\]\]")
_FALLBACK_SCORE = re.compile(
    r"(?<![A-Za-z_-])(?:rating|score)\s*(?:is|of|:|=)\s*\**\s*(-?\d+(?:\.\d+)?)\s*(?:/\s*(\d+))?(?![\d.])",
    re.IGNORECASE,
)


def _score_in_range(value: float, rubric: Rubric) -> bool:
    assert rubric.scale is not None
    low, high = rubric.scale
    return low <= value <= high and float(value).is_integer()


@register("bracket_score")
def parse_bracket_score(text: str, rubric: Rubric, structured: dict[str, Any] | None) -> ParsedVerdict:
    """``[[n]]``, last occurrence; fallback ``Rating: n`` / ``Score: n`` (``n/100`` allowed) as whole words."""
    if structured is not None:
        return parse_json_score(json.dumps(structured), rubric, structured)
    clean = normalise(text)
    strict = list(_STRICT_SCORE.finditer(clean))
    if strict:
        last = strict[-1]
        value = float(last.group(1))
        if not _score_in_range(value, rubric):
            return ParsedVerdict(False, error=f"score {last.group(1)} is outside the scale {rubric.scale}")
        return ParsedVerdict(True, score=value, explanation=_explanation(clean, last.start()), method="strict")
    loose = list(_FALLBACK_SCORE.finditer(clean))
    if loose:
        last = loose[-1]
        value = float(last.group(1))
        denominator = last.group(2)
        assert rubric.scale is not None
        if denominator is not None and float(denominator) != rubric.scale[1]:
            return ParsedVerdict(False, error=f"score given out of {denominator}, the scale is {rubric.scale}")
        if not _score_in_range(value, rubric):
            return ParsedVerdict(False, error=f"score {last.group(1)} is outside the scale {rubric.scale}")
        return ParsedVerdict(True, score=value, explanation=_explanation(clean, last.start()), method="fallback")
    return ParsedVerdict(False, error="no [[score]] in the reply")


_FOUR_WAY = re.compile(r"response\s*([12])\s*is\s*(slightly\s+)?better", re.IGNORECASE)


@register("pairwise_4way")
def parse_pairwise_4way(text: str, rubric: Rubric, structured: dict[str, Any] | None) -> ParsedVerdict:
    """The recursive-summarisation paper's 4 options; the last stated option wins."""
    clean = normalise(structured.get("verdict", "") if structured else text)
    matches = list(_FOUR_WAY.finditer(clean))
    if not matches:
        return ParsedVerdict(False, error="none of the four options (Response 1/2 is [slightly] better) found")
    last = matches[-1]
    label = f"Response {last.group(1)} is {'slightly ' if last.group(2) else ''}better"
    return _verdict(rubric, label, clean, last.start(), "strict")


_ABC_STRICT = re.compile(r"\[\[([ABC])\]\]")
_ABC_LOOSE = re.compile(r"\[\[\s*([abc])\s*\]\]", re.IGNORECASE)


@register("pairwise_abc")
def parse_pairwise_abc(text: str, rubric: Rubric, structured: dict[str, Any] | None) -> ParsedVerdict:
    """FastChat ``[[A]]``/``[[B]]``/``[[C]]``; fallback: lower case or padded; last occurrence wins."""
    clean = normalise(structured.get("verdict", "") if structured else text)
    strict = list(_ABC_STRICT.finditer(clean))
    method = "strict"
    if not strict:
        strict = list(_ABC_LOOSE.finditer(clean))
        method = "fallback"
    if not strict:
        return ParsedVerdict(False, error="no [[A]], [[B]] or [[C]] in the reply")
    last = strict[-1]
    return _verdict(rubric, f"[[{last.group(1).upper()}]]", clean, last.start(), method)


def _verdict(rubric: Rubric, label: str, clean: str, start: int, method: str) -> ParsedVerdict:
    if label not in rubric.verdicts:
        return ParsedVerdict(False, error=f"verdict {label!r} is not one of the rubric's verdicts")
    return ParsedVerdict(
        True, verdict=label, preference=rubric.verdicts[label], explanation=_explanation(clean, start), method=method
    )


def _last_json_object(text: str) -> dict[str, Any] | None:
    decoder = json.JSONDecoder()
    found: dict[str, Any] | None = None
    for index, char in enumerate(text):
        if char != "{":
            continue
        try:
            value, _ = decoder.raw_decode(text[index:])
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            found = value
    return found


@register("json_score")
def parse_json_score(text: str, rubric: Rubric, structured: dict[str, Any] | None) -> ParsedVerdict:
    """Structured output ``{"explanation": ..., "score": n}``; the last JSON object in the reply."""
    data = structured if structured is not None else _last_json_object(normalise(text))
    if data is None:
        return ParsedVerdict(False, error="no JSON object in the reply")
    raw = data.get("score")
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        return ParsedVerdict(False, error="the JSON has no numeric 'score'")
    if not _score_in_range(float(raw), rubric):
        return ParsedVerdict(False, error=f"score {raw} is outside the scale {rubric.scale}")
    return ParsedVerdict(True, score=float(raw), explanation=str(data.get("explanation", ""))[:4000], method="json")


MEMORY_ERROR_TYPES = ("fabricated_fact", "incorrect_relationship", "missing_detail")


@register("memory_faithfulness")
def parse_memory_faithfulness(text: str, rubric: Rubric, structured: dict[str, Any] | None) -> ParsedVerdict:
    """JSON ``{"errors": [{"type", "evidence"}], "explanation", "score"}``; error types are checked."""
    data = structured if structured is not None else _last_json_object(normalise(text))
    if data is None:
        return ParsedVerdict(False, error="no JSON object in the reply")
    scored = parse_json_score("", rubric, data)
    if not scored.ok:
        return scored
    errors = data.get("errors", [])
    if not isinstance(errors, list):
        return ParsedVerdict(False, error="'errors' must be a list")
    labels: list[dict[str, str]] = []
    for entry in errors:
        kind = entry.get("type") if isinstance(entry, dict) else None
        if kind not in MEMORY_ERROR_TYPES:
            return ParsedVerdict(False, error=f"unknown error type {kind!r} (known: {', '.join(MEMORY_ERROR_TYPES)})")
        labels.append({"type": kind, "evidence": str(entry.get("evidence", ""))[:1000]})
    counts = {kind: sum(1 for e in labels if e["type"] == kind) for kind in MEMORY_ERROR_TYPES}
    scored.details = {"errors": labels, "error_counts": counts}
    return scored
