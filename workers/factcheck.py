"""The ``fact_check`` parser: one label per fact of the item's fact sheet, with evidence (docs/facts.md).

The reply is one JSON object (structured output, or the last top-level JSON object of the text)::

    {"facts": [{"id": "user.1", "label": "supported|contradicted|not_addressed", "evidence": "..."}],
     "explanation": "..."}

Parsed strictly: every fact of the sheet exactly once, no unknown id, a known label, and for ``supported`` /
``contradicted`` an evidence span that occurs in the judged response (an ``not_addressed`` label may leave it empty,
and any evidence it gives must follow the same rule). The evidence rule (``evidence_problem``): compared after NFKC
normalisation, with case and runs of white space ignored, the evidence is at least ``MIN_EVIDENCE_WORDS`` (2) words
or ``MIN_EVIDENCE_CHARS`` (8) characters long, and it occurs in the response on word boundaries (no letter or digit
of the response right before or after it where the evidence itself starts or ends with one): "I", "a" or a piece
inside a word never passes. Anything else is unparseable with the reason; no label is ever guessed.

The per-response figures go into ``details`` and the score is the consistency score::

    contradiction_rate = contradicted / facts            (0 when the sheet is empty)
    retention_rate     = supported / (supported + contradicted)   (None when neither)
    addressed          = supported + contradicted > 0
    score              = round_half_up(1 + 99 * retention_rate); None (n/a) when no fact is addressed

A response that addresses no fact (or is judged against an empty sheet) has no consistency score: it is ``done``
with score n/a (``details.addressed`` false), a separate outcome that the report counts in the addressed rate
(``stats.facts``), never a 100 that would reward ignoring the conversation.
"""

from __future__ import annotations

import math
import re
from typing import Any

from judge_api.rubrics import Rubric
from workers.parsed import ParsedVerdict, last_json_object
from workers.textnorm import normalise

FACT_LABELS = ("supported", "contradicted", "not_addressed")
MIN_EVIDENCE_WORDS = 2
MIN_EVIDENCE_CHARS = 8


def _comparable(text: str) -> str:
    return " ".join(normalise(text).casefold().split())


def evidence_problem(evidence: str, response: str) -> str | None:
    """Why ``evidence`` (comparable text) does not locate a span of ``response`` (comparable text), or None.

    Long enough: at least ``MIN_EVIDENCE_WORDS`` words or ``MIN_EVIDENCE_CHARS`` characters. On word boundaries:
    where the evidence starts (ends) with a word character, the response has none right before (after) it."""
    if len(evidence.split()) < MIN_EVIDENCE_WORDS and len(evidence) < MIN_EVIDENCE_CHARS:
        return f"is too short to locate (at least {MIN_EVIDENCE_WORDS} words or {MIN_EVIDENCE_CHARS} characters)"
    before = r"(?<!\w)" if re.match(r"\w", evidence[0]) else ""
    after = r"(?!\w)" if re.match(r"\w", evidence[-1]) else ""
    if re.search(before + re.escape(evidence) + after, response) is None:
        if evidence in response:
            return "occurs in the response only inside a word"
        return "is not in the response"
    return None


def fact_figures(labels: list[str]) -> dict[str, Any]:
    """Counts, contradiction rate, retention rate and the 1-100 consistency score of one response's labels."""
    counts = {label: labels.count(label) for label in FACT_LABELS}
    supported, contradicted = counts["supported"], counts["contradicted"]
    addressed = supported + contradicted
    retention = supported / addressed if addressed else None
    score = None if retention is None else math.floor(1 + 99 * retention + 0.5)
    return {
        "counts": counts,
        "n_facts": len(labels),
        "contradiction_count": contradicted,
        "contradiction_rate": contradicted / len(labels) if labels else 0.0,
        "retention_rate": retention,
        "addressed": addressed > 0,
        "consistency_score": score,
    }


def parse_fact_check(
    text: str, rubric: Rubric, structured: dict[str, Any] | None, context: dict[str, Any]
) -> ParsedVerdict:
    data = structured if structured is not None else last_json_object(normalise(text))
    if data is None:
        return ParsedVerdict(False, error="no JSON object in the reply")
    entries = data.get("facts")
    if not isinstance(entries, list):
        return ParsedVerdict(False, error="'facts' must be a list of {id, label, evidence}")
    sheet = {f["id"]: f for f in context["facts"]}
    response = _comparable(context["response"])
    labelled: dict[str, dict[str, str]] = {}
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict):
            return ParsedVerdict(False, error=f"facts[{index}] is not an object")
        fact_id, label, evidence = entry.get("id"), entry.get("label"), entry.get("evidence") or ""
        if not isinstance(fact_id, str) or fact_id not in sheet:
            return ParsedVerdict(False, error=f"facts[{index}]: unknown fact id {fact_id!r}")
        if fact_id in labelled:
            return ParsedVerdict(False, error=f"facts[{index}]: fact {fact_id!r} labelled twice")
        if label not in FACT_LABELS:
            return ParsedVerdict(
                False, error=f"facts[{index}]: label {label!r} for {fact_id!r} is not one of {', '.join(FACT_LABELS)}"
            )
        if not isinstance(evidence, str):
            return ParsedVerdict(False, error=f"facts[{index}]: evidence for {fact_id!r} is not a string")
        if label != "not_addressed" and not evidence.strip():
            return ParsedVerdict(False, error=f"facts[{index}]: {label} fact {fact_id!r} has no evidence")
        problem = evidence_problem(_comparable(evidence), response) if evidence.strip() else None
        if problem:
            return ParsedVerdict(False, error=f"facts[{index}]: evidence for {fact_id!r} {problem}: {evidence[:200]!r}")
        labelled[fact_id] = {"id": fact_id, "label": label, "evidence": evidence.strip()[:1000]}
    missing = [fact_id for fact_id in sheet if fact_id not in labelled]
    if missing:
        return ParsedVerdict(False, error=f"facts not labelled: {', '.join(missing)}")
    ordered = [{**labelled[fact_id], "source": sheet[fact_id]["source"]} for fact_id in sheet]
    figures = fact_figures([f["label"] for f in ordered])
    return ParsedVerdict(
        True,
        score=None if figures["consistency_score"] is None else float(figures["consistency_score"]),
        explanation=str(data.get("explanation", ""))[:4000],
        details={"facts": ordered, **figures},
        method="json",
    )
