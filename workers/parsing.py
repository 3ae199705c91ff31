"""Verdict parsers, registered by name and chosen by a rubric's ``parser`` field.

Rules every parser follows:

* normalise first (NFKC, so full-width ``［［80］］`` is ``[[80]]``; zero-width and bidi characters removed, so
  ``[[9\\u200b0]]`` is ``[[90]]``);
* a reply cut off by the token limit (``finish_reason`` ``length`` / ``max_tokens``) is never trusted;
* the strict format first, then the documented fallbacks (``parser_options.fallback: false`` turns them off);
* the *last* occurrence wins (judges restate the format, or change their mind, before the final verdict);
* quotations of the rubric's own format string ("[[rating]]", ``"[[A]]" if assistant A is better``, the 4-option
  list) are masked before matching, so an explanation that quotes the instructions is not read as a verdict;
* values are range-checked against the rubric's scale (integers only) and a denominator must be the scale's
  maximum (``Rating: 7/10`` on a 1-100 scale is refused, not rescaled);
* anything else is ``unparseable`` with the reason; the caller keeps the raw text. No parser ever returns a default
  score.

Documented fallbacks:

* ``bracket_score``: ``Rating: n`` / ``Score: n`` / ``score is n`` / ``rating of n`` (also ``n/100`` and
  ``n out of 100``; markdown bold allowed) as whole words - never a range ("rating of 1 to 100"), never a word that
  merely contains the keyword ("downgrade: 5", "subscore: 5");
* ``pairwise_abc``: lower-case or padded ``[[ a ]]``;
* ``pairwise_4way``: case-insensitive, markdown emphasis ignored ("response 2 is *slightly* better");
* ``json_score`` / ``memory_faithfulness``: the last top-level JSON object in the text (fenced or not); a score
  given as a string of digits is accepted; error types are matched case- and separator-insensitively.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from judge_api.rubrics import Rubric
from workers import factcheck, factextract, memoryaudit
from workers.parsed import ParsedVerdict, last_json_object
from workers.textnorm import normalise

__all__ = ["CONTEXT_PARSERS", "PARSERS", "ParsedVerdict", "parse_reply", "register"]


Parser = Callable[[str, Rubric, "dict[str, Any] | None"], ParsedVerdict]
PARSERS: dict[str, Parser] = {}
# parsers that check the reply against the judged item: (text, rubric, structured, context)
ContextParser = Callable[[str, Rubric, "dict[str, Any] | None", "dict[str, Any]"], ParsedVerdict]
CONTEXT_PARSERS: dict[str, ContextParser] = {
    "fact_check": factcheck.parse_fact_check,
    "fact_extract": factextract.parse_fact_extract,
    "memory_audit": memoryaudit.parse_memory_audit,
}
TRUNCATED_REASONS = ("length", "max_tokens")


def register(name: str) -> Callable[[Parser], Parser]:
    def decorator(func: Parser) -> Parser:
        PARSERS[name] = func
        return func

    return decorator


def parse_reply(
    text: str,
    rubric: Rubric,
    *,
    finish_reason: str | None = None,
    structured: dict[str, Any] | None = None,
    context: dict[str, Any] | None = None,
) -> ParsedVerdict:
    if finish_reason in TRUNCATED_REASONS:
        return ParsedVerdict(False, error="truncated: the reply hit the token limit before a complete verdict")
    if not text.strip() and structured is None:
        return ParsedVerdict(False, error="empty reply")
    if rubric.parser in CONTEXT_PARSERS:
        if context is None:
            return ParsedVerdict(False, error=f"parser {rubric.parser!r} needs the judged item, none was given")
        return CONTEXT_PARSERS[rubric.parser](text, rubric, structured, context)
    return PARSERS[rubric.parser](text, rubric, structured)


def _fallbacks(rubric: Rubric) -> bool:
    return bool(rubric.parser_options.get("fallback", True))


_TRAILING_LABEL = re.compile(
    r"(?:[\s*_#>-]*(?:final\s+)?(?:verdict|rating|score|answer|decision)\s*(?:is)?[\s*_]*[:=-]?[\s*_]*)+$",
    re.IGNORECASE,
)


def _explanation(text: str, match_start: int | None) -> str:
    """The judge's words before its verdict, without a dangling "Verdict:" / "Rating:" label."""
    body = text[:match_start] if match_start is not None else text
    return _TRAILING_LABEL.sub("", body.strip()).strip()[:4000]


def _mask(text: str, patterns: list[re.Pattern[str]]) -> str:
    """Blank out quotations of the format string, keeping every other character at its position."""
    for pattern in patterns:
        text = pattern.sub(lambda m: " " * len(m.group(0)), text)
    return text


# -- single scores -----------------------------------------------------------------------------------------------

_NUMBER = r"(-?\d+(?:\.\d+)?)"
_NOT_MORE_NUMBER = r"(?!\d|\.\d)"  # "80." ends a sentence; "80.5" and "800" are other numbers
_RANGE_FOLLOWS = r"(?!\s*(?:\([^)\n]{0,40}\)\s*)?(?:to|through|-|–)\s*\d)"  # "1 (very bad) to 100": a range
_STRICT_SCORE = re.compile(r"\[\[\s*" + _NUMBER + r"\s*(?:/\s*(\d+)\s*)?\]\]")
_FALLBACK_SCORE = re.compile(
    r"(?<![A-Za-z_-])(?:rating|score)\b\**\s*(?:is|of|:|=)\s*\**\s*"
    + _NUMBER
    + r"(?:\s*(?:/|out\s+of)\s*(\d+))?"
    + _NOT_MORE_NUMBER
    + _RANGE_FOLLOWS,
    re.IGNORECASE,
)


def _score_in_range(value: float, rubric: Rubric) -> bool:
    assert rubric.scale is not None
    low, high = rubric.scale
    return low <= value <= high and float(value).is_integer()


def _checked_score(raw: str, denominator: str | None, rubric: Rubric) -> tuple[float | None, str | None]:
    assert rubric.scale is not None
    if denominator is not None and float(denominator) != rubric.scale[1]:
        return None, f"score {raw}/{denominator} is not on the rubric's scale {list(rubric.scale)}"
    value = float(raw)
    if not _score_in_range(value, rubric):
        return None, f"score {raw} is outside the scale {list(rubric.scale)} (integers only)"
    return value, None


@register("bracket_score")
def parse_bracket_score(text: str, rubric: Rubric, structured: dict[str, Any] | None) -> ParsedVerdict:
    """``[[n]]``, last occurrence; fallback ``Rating: n`` / ``Score: n`` (see the module docstring)."""
    if structured is not None:
        return parse_json_score("", rubric, structured)
    clean = normalise(text)
    strict = list(_STRICT_SCORE.finditer(clean))
    if strict:
        last = strict[-1]
        value, error = _checked_score(last.group(1), last.group(2), rubric)
        if value is None:
            return ParsedVerdict(False, error=error)
        return ParsedVerdict(True, score=value, explanation=_explanation(clean, last.start()), method="strict")
    loose = list(_FALLBACK_SCORE.finditer(clean)) if _fallbacks(rubric) else []
    if loose:
        last = loose[-1]
        value, error = _checked_score(last.group(1), last.group(2), rubric)
        if value is None:
            return ParsedVerdict(False, error=error)
        return ParsedVerdict(True, score=value, explanation=_explanation(clean, last.start()), method="fallback")
    return ParsedVerdict(False, error="no [[score]] in the reply")


# -- pairwise ---------------------------------------------------------------------------------------------------

_OPTION = r"response\s*[12]\s*is\s*(?:slightly\s+)?better"
_FOUR_WAY = re.compile(r"response\s*([12])\s*is\s*(slightly\s+)?better", re.IGNORECASE)
_FOUR_WAY_QUOTES = [
    # the option definitions of the prompt: "1.Response 1 is better : If you think response 1 has an advantage"
    re.compile(_OPTION + r"\s*:\s*(?:if\s+you\s+think|response\s*[12]\s*is\s*very)", re.IGNORECASE),
    # the list of choices (the extraction prompt): ['Response 1 is better', 'Response 1 is slightly better', ...]
    re.compile(r"\[\s*(['\"])" + _OPTION + r"\1(?:\s*,\s*(['\"])" + _OPTION + r"\2)+\s*\]", re.IGNORECASE),
]


@register("pairwise_4way")
def parse_pairwise_4way(text: str, rubric: Rubric, structured: dict[str, Any] | None) -> ParsedVerdict:
    """The recursive-summarisation paper's 4 options; the last stated option wins."""
    clean = normalise(str(structured.get("verdict", "")) if structured else text).replace("*", "")
    matches = list(_FOUR_WAY.finditer(_mask(clean, _FOUR_WAY_QUOTES)))
    if not matches:
        return ParsedVerdict(False, error="none of the four options (Response 1/2 is [slightly] better) found")
    last = matches[-1]
    label = f"Response {last.group(1)} is {'slightly ' if last.group(2) else ''}better"
    return _verdict(rubric, label, clean, last.start(), "strict")


_ABC_STRICT = re.compile(r"\[\[([ABC])\]\]")
_ABC_LOOSE = re.compile(r"\[\[\s*([abc])\s*\]\]", re.IGNORECASE)
_ABC_QUOTES = [
    # FastChat's format sentence: "[[A]]" if assistant A is better, "[[B]]" if ..., and "[[C]]" for a tie
    re.compile(
        r"[\"'“‘]?\[\[\s*[ABC]\s*\]\][\"'”’]?\s*(?:if\s+(?:assistant|response)\s*[AB12]\s+is\s+better|for\s+a\s+tie)",
        re.IGNORECASE,
    ),
]


@register("pairwise_abc")
def parse_pairwise_abc(text: str, rubric: Rubric, structured: dict[str, Any] | None) -> ParsedVerdict:
    """FastChat ``[[A]]``/``[[B]]``/``[[C]]``; fallback: lower case or padded; last occurrence wins."""
    clean = normalise(str(structured.get("verdict", "")) if structured else text)
    masked = _mask(clean, _ABC_QUOTES)
    strict = list(_ABC_STRICT.finditer(masked))
    method = "strict"
    if not strict and _fallbacks(rubric):
        strict = list(_ABC_LOOSE.finditer(masked))
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


# -- JSON -------------------------------------------------------------------------------------------------------


def _json_number(raw: Any) -> float | None:
    if isinstance(raw, bool):
        return None
    if isinstance(raw, int | float):
        return float(raw)
    if isinstance(raw, str) and re.fullmatch(r"\s*-?\d+\s*", raw):
        return float(raw)
    return None


@register("json_score")
def parse_json_score(text: str, rubric: Rubric, structured: dict[str, Any] | None) -> ParsedVerdict:
    """Structured output ``{"explanation": ..., "score": n}``; else the last top-level JSON object in the reply."""
    data = structured if structured is not None else last_json_object(normalise(text))
    if data is None:
        return ParsedVerdict(False, error="no JSON object in the reply")
    value = _json_number(data.get("score"))
    if value is None:
        return ParsedVerdict(False, error="the JSON has no numeric 'score'")
    if not _score_in_range(value, rubric):
        return ParsedVerdict(False, error=f"score {data.get('score')} is outside the scale {rubric.scale}")
    return ParsedVerdict(True, score=value, explanation=str(data.get("explanation", ""))[:4000], method="json")


MEMORY_ERROR_TYPES = ("fabricated_fact", "incorrect_relationship", "missing_detail")


def _error_type(raw: Any) -> str | None:
    if not isinstance(raw, str):
        return None
    key = re.sub(r"[\s-]+", "_", raw.strip().lower())
    return key if key in MEMORY_ERROR_TYPES else None


@register("memory_faithfulness")
def parse_memory_faithfulness(text: str, rubric: Rubric, structured: dict[str, Any] | None) -> ParsedVerdict:
    """JSON ``{"errors": [{"type", "evidence"}], "explanation", "score"}``; error types are checked."""
    data = structured if structured is not None else last_json_object(normalise(text))
    if data is None:
        return ParsedVerdict(False, error="no JSON object in the reply")
    scored = parse_json_score("", rubric, data)
    if not scored.ok:
        return scored
    errors = data.get("errors") or []
    if not isinstance(errors, list):
        return ParsedVerdict(False, error="'errors' must be a list")
    labels: list[dict[str, str]] = []
    for entry in errors:
        kind = _error_type(entry.get("type") if isinstance(entry, dict) else None)
        if kind is None:
            shown = entry.get("type") if isinstance(entry, dict) else entry
            return ParsedVerdict(False, error=f"unknown error type {shown!r} (known: {', '.join(MEMORY_ERROR_TYPES)})")
        labels.append({"type": kind, "evidence": str(entry.get("evidence", ""))[:1000]})
    counts = {kind: sum(1 for e in labels if e["type"] == kind) for kind in MEMORY_ERROR_TYPES}
    scored.details = {"errors": labels, "error_counts": counts}
    return scored
