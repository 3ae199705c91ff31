"""The reference metrics' judgments: computed here from the item's reference, no provider call (see
``judge_api.reference_metrics`` for the definitions)."""

from __future__ import annotations

import time
from typing import Any

from judge_api.config import Settings
from judge_api.reference_metrics import LABELS, METRICS, lexical_metrics
from judge_api.reference_tokens import tokenisation_of
from judge_api.repository.claims import JudgmentTask
from workers.bertscore import BertScoreUnavailable, bertscore_f1


def reference_values(judgment: JudgmentTask, settings: Settings) -> dict[str, Any]:
    """The verdict values of one reference-metric judgment (aspect = metric name): done with the score, or failed
    with the reason (no reference, BERTScore not set up)."""
    started = time.perf_counter()
    item = judgment.item
    reference = item.get("reference") or ""
    candidate = item["candidates"].get(judgment.system_a)
    metric = judgment.aspect
    base: dict[str, Any] = {"attempts": 0, "provider_calls": 0, "cost_usd": 0.0, "cached": False}
    if metric not in METRICS:
        return {**base, "status": "failed", "error": f"unknown reference metric {metric!r}"}
    if not reference.strip() or candidate is None:
        return {**base, "status": "failed", "error": "the item has no reference (or no such candidate) to compare with"}
    try:
        # the planned version names the tokenisation (auto was resolved when the item was planned)
        tokens = tokenisation_of(judgment.rubric_version)
    except ValueError as exc:
        return {**base, "status": "failed", "error": str(exc)}
    try:
        if metric == "bertscore":
            value = bertscore_f1([candidate], [reference], settings.bertscore_model, settings.bertscore_layers)[0]
        else:
            value = lexical_metrics(candidate, reference, (metric,), tokens)[metric]
    except BertScoreUnavailable as exc:
        return {**base, "status": "failed", "error": str(exc)}
    return {
        **base,
        "status": "done",
        "score": value,
        "error": None,
        "explanation": f"{LABELS[metric]} of the response against the item's reference ({judgment.rubric_version})",
        "latency_ms": round((time.perf_counter() - started) * 1000, 3),
    }
