"""The ``memory_audit`` parser: a generated memory audited against the item's gold facts (docs/facts.md).

The judged "response" is a system's generated memory (summary); the fact sheet is the gold memory. The reply is one
JSON object (structured output, or the last top-level JSON object of the text)::

    {"gold": [{"id": "user.1", "label": "recalled|missing", "evidence": "<quote from the memory>"}],
     "generated": [{"fact": "<quote from the memory>", "label": "supported|fabricated|wrong_relationship"}],
     "explanation": "..."}

Parsed strictly: every gold fact exactly once, no unknown id, known labels; a ``recalled`` gold fact quotes the
memory as evidence, and every generated fact is a non-empty quote of the memory (compared after NFKC normalisation,
case and runs of white space ignored), each quote at most once. Anything else is unparseable with the reason.

Figures (``details``), with the conventions of the lexical audit (a side with nothing gives 0 for what divides by
it)::

    precision = supported generated facts / generated facts      (0 with no generated fact)
    recall    = recalled gold facts / gold facts                 (0 with no gold fact)
    f1        = 2 P R / (P + R)                                  (0 when P + R = 0)
    errors    = fabricated + wrong_relationship + missing (gold facts not recalled)
    error_shares[type] = count of type / errors                  (None when there is no error)
    score     = round_half_up(1 + 99 * f1)

``fabricated``, ``wrong_relationship`` (incorrect relationships) and ``missing`` (missing details) are the
recursive-summarisation paper's error taxonomy of generated memory; the labels, evidence rule and score are this
project's.
"""

from __future__ import annotations

import math
from typing import Any

from judge_api.rubrics import Rubric
from workers.parsed import ParsedVerdict, last_json_object
from workers.textnorm import normalise

GOLD_LABELS = ("recalled", "missing")
GENERATED_LABELS = ("supported", "fabricated", "wrong_relationship")
ERROR_TYPES = ("fabricated", "wrong_relationship", "missing")


def _comparable(text: str) -> str:
    return " ".join(normalise(text).casefold().split())


def memory_figures(gold_labels: list[str], generated_labels: list[str]) -> dict[str, Any]:
    """Counts, precision / recall / F1, the error counts and shares, and the 1-100 score of one audited memory."""
    counts = {label: gold_labels.count(label) for label in GOLD_LABELS}
    counts.update({label: generated_labels.count(label) for label in GENERATED_LABELS})
    precision = counts["supported"] / len(generated_labels) if generated_labels else 0.0
    recall = counts["recalled"] / len(gold_labels) if gold_labels else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    errors = {kind: counts[kind] for kind in ERROR_TYPES}
    total = sum(errors.values())
    return {
        "counts": counts,
        "n_gold": len(gold_labels),
        "n_generated": len(generated_labels),
        "precision": precision,
        "recall": recall,
        "f1": f1,
        "errors": errors,
        "error_shares": {kind: (n / total if total else None) for kind, n in errors.items()},
        "memory_score": math.floor(1 + 99 * f1 + 0.5),
    }


def _gold(entries: Any, sheet: dict[str, Any], memory: str) -> list[dict[str, str]] | str:
    if not isinstance(entries, list):
        return "'gold' must be a list of {id, label, evidence}"
    labelled: dict[str, dict[str, str]] = {}
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict):
            return f"gold[{index}] is not an object"
        fact_id, label, evidence = entry.get("id"), entry.get("label"), entry.get("evidence") or ""
        if not isinstance(fact_id, str) or fact_id not in sheet:
            return f"gold[{index}]: unknown fact id {fact_id!r}"
        if fact_id in labelled:
            return f"gold[{index}]: fact {fact_id!r} labelled twice"
        if label not in GOLD_LABELS:
            return f"gold[{index}]: label {label!r} for {fact_id!r} is not one of {', '.join(GOLD_LABELS)}"
        if not isinstance(evidence, str):
            return f"gold[{index}]: evidence for {fact_id!r} is not a string"
        if label == "recalled" and not evidence.strip():
            return f"gold[{index}]: recalled fact {fact_id!r} has no evidence"
        if evidence.strip() and _comparable(evidence) not in memory:
            return f"gold[{index}]: evidence for {fact_id!r} is not in the memory: {evidence[:200]!r}"
        labelled[fact_id] = {"id": fact_id, "label": label, "evidence": evidence.strip()[:1000]}
    missing = [fact_id for fact_id in sheet if fact_id not in labelled]
    if missing:
        return f"gold facts not labelled: {', '.join(missing)}"
    return [{**labelled[fact_id], "source": sheet[fact_id]["source"]} for fact_id in sheet]


def _generated(entries: Any, memory: str) -> list[dict[str, str]] | str:
    if not isinstance(entries, list):
        return "'generated' must be a list of {fact, label}"
    out: list[dict[str, str]] = []
    seen: set[str] = set()
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict):
            return f"generated[{index}] is not an object"
        fact, label = entry.get("fact"), entry.get("label")
        if not isinstance(fact, str) or not fact.strip():
            return f"generated[{index}]: 'fact' must quote the memory"
        if label not in GENERATED_LABELS:
            return f"generated[{index}]: label {label!r} is not one of {', '.join(GENERATED_LABELS)}"
        key = _comparable(fact)
        if key not in memory:
            return f"generated[{index}]: the fact is not in the memory: {fact[:200]!r}"
        if key in seen:
            return f"generated[{index}]: the fact {fact[:200]!r} is listed twice"
        seen.add(key)
        out.append({"fact": fact.strip()[:1000], "label": label})
    return out


def parse_memory_audit(
    text: str, rubric: Rubric, structured: dict[str, Any] | None, context: dict[str, Any]
) -> ParsedVerdict:
    data = structured if structured is not None else last_json_object(normalise(text))
    if data is None:
        return ParsedVerdict(False, error="no JSON object in the reply")
    sheet = {f["id"]: f for f in context["facts"]}
    memory = _comparable(context["response"])
    gold = _gold(data.get("gold"), sheet, memory)
    if isinstance(gold, str):
        return ParsedVerdict(False, error=gold)
    generated = _generated(data.get("generated"), memory)
    if isinstance(generated, str):
        return ParsedVerdict(False, error=generated)
    figures = memory_figures([g["label"] for g in gold], [g["label"] for g in generated])
    return ParsedVerdict(
        True,
        score=float(figures["memory_score"]),
        explanation=str(data.get("explanation", ""))[:4000],
        details={"gold": gold, "generated": generated, **figures},
        method="json",
    )
