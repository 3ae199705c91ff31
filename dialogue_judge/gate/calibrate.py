"""``calibrate: human``: the gate decides on the calibrated (PPI++) drop on the humans' scale, not on the judge's.

When the baseline and the candidate are runs that carry human score ratings of the gated aspect for their system,
each side's labels (the mean of the raters per item) and the judge's scores on every item (mapped onto the humans'
stated scale with the fixed map of the two scales) give ``stats.ppi.ppi_mean_difference``: the PPI++ estimate of
``mean human(baseline) - mean human(candidate)`` over the items both sides were judged on, with the interval at the
gate's level (``1 - alpha / n_aspects``, the fixed-sample test's). The labels are taken as a uniform random sample of
the items on each side; the same labelled items on both sides give the paired difference, different ones the
two-sample difference whose variance counts the items the sides share. The tolerance ``max_drop`` is put on the
humans' scale with the same map. *regression*: the interval lies above it; *no regression*: below; otherwise
undecided (exit 2).

Without enough labels (``min_labels`` per side, or sides that are files, whose labels no run holds) the gate does
what ``calibrate_missing`` says: ``fail`` (default) stops with exit 2 and says which side lacks how many labels;
``judge`` decides on the judge alone and says so in the headline and the notes.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np

from dialogue_judge.gate.inputs import BASELINE, CANDIDATE
from dialogue_judge.gate.outcome import AspectReport, GateOutcome

CALIBRATE_VALUES = ("human",)
MISSING_POLICIES = ("fail", "judge")
DEFAULT_MIN_LABELS = 10
METHOD = "ppi++"


@dataclass
class SideLabels:
    """One side's human labels of one aspect: item -> mean of the raters, and the scale they rated on."""

    values: dict[str, float]
    scale: tuple[float, float] | None
    problem: str | None = None
    active: dict[str, float] | None = None
    """The run's ``active`` label queue: each drawn item's inclusion probability (None: no such queue)."""


def side_labels(
    ratings: list[dict[str, Any]] | None,
    system: str | None,
    aspect: str,
    queue: tuple[str, dict[str, float]] | None = None,
) -> SideLabels:
    """The score ratings of ``system`` on ``aspect`` from a run's human ratings (``None``: the side is no run), with
    the run's label queue (strategy, drawn item -> inclusion probability) if it has one."""
    active = queue[1] if queue is not None and queue[0] == "active" else None
    if ratings is None:
        return SideLabels({}, None, "it is a file, not a run: human labels live on a run")
    mine = [
        r
        for r in ratings
        if r.get("kind", "score") == "score"
        and r.get("aspect") == aspect
        and (system is None or r.get("system") == system)
        and r.get("value") is not None
    ]
    scales = {(r.get("scale_min"), r.get("scale_max")) for r in mine}
    if len(scales) > 1:
        return SideLabels({}, None, f"its ratings of {aspect} use more than one scale ({sorted(map(str, scales))})")
    scale: tuple[float, float] | None = None
    if scales:
        lo, hi = next(iter(scales))
        if lo is None or hi is None or not float(hi) > float(lo):
            return SideLabels({}, None, f"its ratings of {aspect} carry no usable scale")
        scale = (float(lo), float(hi))
    per_item: dict[str, list[float]] = defaultdict(list)
    for r in mine:
        per_item[str(r["item_id"])].append(float(r["value"]))
    return SideLabels({item: float(np.mean(v)) for item, v in per_item.items()}, scale, active=active)


def _to_scale(value: float, source: tuple[float, float], target: tuple[float, float]) -> float:
    return target[0] + (value - source[0]) * (target[1] - target[0]) / (source[1] - source[0])


def _missing(side: str, labels: SideLabels, items: list[str], min_labels: int) -> str | None:
    n = sum(i in labels.values for i in items)
    if labels.problem:
        return f"the {side} has no usable labels: {labels.problem}"
    if n < min_labels:
        return f"the {side} has {n} labelled item(s) among the judged ones; calibration needs at least {min_labels}"
    if labels.active is not None:
        outside = sum(i not in labels.active for i in items if i in labels.values)
        if outside:
            return (
                f"the {side} run has an active label queue but {outside} of its labelled items were not drawn by "
                "it: active labels are no uniform sample, and labels outside the queue have no known probability"
            )
        waiting = sum(i not in labels.values for i in items if i in labels.active)
        if waiting:
            return (
                f"{waiting} item(s) drawn by the {side} run's active label queue are not labelled yet: its "
                "inverse-probability weights need every drawn item"
            )
    return None


def calibrate_aspect(
    aspect: str,
    scores: dict[tuple[str, str], float],
    baseline: SideLabels,
    candidate: SideLabels,
    *,
    judge_scale: tuple[float, float],
    threshold: float,
    level: float,
    min_labels: int,
    judge_only: AspectReport,
) -> dict[str, Any]:
    """The calibrated decision of one aspect (a JSON-ready dict); ``verdict`` is ``missing_labels`` with ``reason``
    when a side lacks labels."""
    from judge_api.stats.ppi import ppi_mean_difference, ppi_mean_difference_active

    items = sorted({i for (i, s) in scores if s == BASELINE} & {i for (i, s) in scores if s == CANDIDATE})
    n_base = sum(i in baseline.values for i in items)
    n_cand = sum(i in candidate.values for i in items)
    entry: dict[str, Any] = {
        "aspect": aspect,
        "method": METHOD,
        "verdict": "missing_labels",
        "reason": None,
        "n_items": len(items),
        "n_labels_baseline": n_base,
        "n_labels_candidate": n_cand,
        "n_labels_both": sum(i in baseline.values and i in candidate.values for i in items),
        "min_labels": min_labels,
        "human_scale": None,
        "threshold": None,
        "estimate": None,
        "ci_low": None,
        "ci_high": None,
        "ci_level": level,
        "paired": None,
        "design": None,
        "lambda_baseline": None,
        "lambda_candidate": None,
        "human_only": None,
        "judge_only": _judge_only(judge_only, None, judge_scale),
    }
    reasons = [
        r
        for r in (
            _missing("baseline", baseline, items, min_labels),
            _missing("candidate", candidate, items, min_labels),
        )
        if r
    ]
    if not reasons and baseline.scale != candidate.scale:
        reasons.append(f"the two runs' humans rated on different scales ({baseline.scale} and {candidate.scale})")
    if reasons:
        entry["reason"] = "; ".join(reasons)
        return entry
    human_scale = baseline.scale
    assert human_scale is not None
    mapped = {key: _to_scale(v, judge_scale, human_scale) for key, v in scores.items()}
    yhat_b = np.array([mapped[(i, BASELINE)] for i in items])
    yhat_c = np.array([mapped[(i, CANDIDATE)] for i in items])
    lab_b = np.array([i in baseline.values for i in items])
    lab_c = np.array([i in candidate.values for i in items])
    y_b = np.array([baseline.values.get(i, np.nan) for i in items])
    y_c = np.array([candidate.values.get(i, np.nan) for i in items])
    if baseline.active is None and candidate.active is None:
        est = ppi_mean_difference(y_b, yhat_b, lab_b, y_c, yhat_c, lab_c, ci=level, bounds=human_scale)
        design = "ppi++ paired" if est.paired else "ppi++ two-sample"
    else:  # an active queue's labels: inverse-probability weighted (a uniform side's probability is n/N)
        pi_b = _inclusion(baseline, items, lab_b)
        pi_c = _inclusion(candidate, items, lab_c)
        est = ppi_mean_difference_active(
            y_b, yhat_b, lab_b, pi_b, y_c, yhat_c, lab_c, pi_c, ci=level, bounds=human_scale
        )
        design = "ppi++ active (inverse-probability weighted)"
    tolerance = threshold * (human_scale[1] - human_scale[0]) / (judge_scale[1] - judge_scale[0])
    c = est.calibrated
    verdict = "regression" if c.ci_low > tolerance else "no_regression" if c.ci_high < tolerance else "undecided"
    h = est.human_only
    entry.update(
        verdict=verdict,
        human_scale=list(human_scale),
        threshold=tolerance,
        estimate=c.estimate,
        ci_low=c.ci_low,
        ci_high=c.ci_high,
        paired=est.paired,
        design=design,
        lambda_baseline=est.lam_a,
        lambda_candidate=est.lam_b,
        human_only={"estimate": h.estimate, "ci_low": h.ci_low, "ci_high": h.ci_high},
        judge_only=_judge_only(judge_only, human_scale, judge_scale),
    )
    return entry


def _inclusion(labels: SideLabels, items: list[str], labeled: np.ndarray) -> np.ndarray:
    """Each item's inclusion probability: the active queue's on its drawn items, else ``n/N`` (uniform)."""
    if labels.active is None:
        return np.full(len(items), labeled.sum() / len(items))
    return np.array([labels.active.get(i, 1.0) for i in items])


def _judge_only(
    report: AspectReport, human_scale: tuple[float, float] | None, judge_scale: tuple[float, float]
) -> dict[str, Any]:
    """The judge-only figure for comparison, in judge points and, where known, on the humans' scale."""
    out: dict[str, Any] = {
        "verdict": report.verdict,
        "estimate": report.estimate,
        "ci_low": report.ci_low,
        "ci_high": report.ci_high,
        "ci_level": report.ci_level,
        "threshold": report.threshold,
    }
    if human_scale is not None:
        factor = (human_scale[1] - human_scale[0]) / (judge_scale[1] - judge_scale[0])
        out["on_human_scale"] = {
            k: None if report.__dict__[k] is None else report.__dict__[k] * factor
            for k in ("estimate", "ci_low", "ci_high")
        }
    return out


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def describe(entry: dict[str, Any]) -> str:
    """``calibrated mean drop 0.412 on the humans' 0-2 scale, 95% CI [0.201, 0.623]``."""
    lo, hi = entry["human_scale"]
    level = f"{100 * entry['ci_level']:.2f}".rstrip("0").rstrip(".")
    return (
        f"calibrated mean drop {_fmt(entry['estimate'])} on the humans' {lo:g}-{hi:g} scale, {level}% CI "
        f"[{_fmt(entry['ci_low'])}, {_fmt(entry['ci_high'])}]"
    )


def _judge_words(entry: dict[str, Any]) -> str:
    judge = entry["judge_only"]
    verdict = {"regression": "FAIL", "no_regression": "PASS"}.get(judge["verdict"], "UNDECIDED")
    mapped = (judge.get("on_human_scale") or {}).get("estimate")
    return f"the judge alone: mean drop {_fmt(mapped)} on that scale, {verdict}"


def apply_calibration(result: GateOutcome, entries: list[dict[str, Any]], on_missing: str) -> None:
    """Decide ``result`` on the calibrated entries (or, per ``on_missing``, fail or keep the judge's decision)."""
    result.calibration = entries
    if result.status == "error":  # the judge-only gate could not run (failed judgments): nothing to calibrate
        return
    by_aspect = {a.aspect: a for a in result.aspects}
    missing = [e for e in entries if e["verdict"] == "missing_labels"]
    if missing:
        why = "; ".join(f"{e['aspect']}: {e['reason']}" for e in missing)
        if on_missing == "fail":
            result.status = "error"
            result.headline = (
                f"ERROR: calibrate: human could not calibrate ({why}). Label more items of both runs (a label "
                "queue draws them), or set calibrate_missing: judge to fall back to the judge alone"
            )
            return
        result.notes.append(
            f"calibrate: human fell back to the judge alone (calibrate_missing: judge): {why}. The decision below "
            "is the judge's, with its bias."
        )
        result.headline = f"{result.headline} [judge only: too few human labels]"
        return
    for entry in entries:
        report = by_aspect.get(entry["aspect"])
        if report is not None:
            report.verdict = entry["verdict"]
            report.decided_by = "calibrated drop (PPI++, human labels: see below)"
            report.look = None
        active = entry["design"].startswith("ppi++ active")
        kind = "inverse-probability weighted" if active else "paired" if entry["paired"] else "two-sample"
        sample = (
            "each label weighted by its item's inclusion probability in its run's label queue (uniform: n/N)"
            if active
            else "the labels are taken as a uniform random sample of each run's items"
        )
        result.notes.append(
            f"{entry['aspect']}: decided on the {kind} calibrated (PPI++) drop from {entry['n_labels_baseline']} "
            f"baseline and {entry['n_labels_candidate']} candidate human labels ({entry['n_labels_both']} items "
            f"labelled on both) and the judge's scores on {entry['n_items']} items; {sample}."
        )
    regressed = [e for e in entries if e["verdict"] == "regression"]
    undecided = [e for e in entries if e["verdict"] == "undecided"]
    if regressed:
        first = regressed[0]
        result.status = "regression"
        result.headline = (
            f"FAIL: regression in {', '.join(e['aspect'] for e in regressed)} (calibrated on human labels): "
            f"{describe(first)} above the allowed {_fmt(first['threshold'])} ({_judge_words(first)})"
        )
    elif undecided:
        first = undecided[0]
        result.status = "undecided"
        result.headline = (
            f"UNDECIDED: need more human labels or a larger --max-drop: {first['aspect']}'s {describe(first)} "
            f"contains the allowed {_fmt(first['threshold'])} ({_judge_words(first)})"
        )
    else:
        first = entries[0]
        result.status = "pass"
        names = ", ".join(e["aspect"] for e in entries)
        result.headline = (
            f"PASS: no regression in {names} (calibrated on human labels): {describe(first)} below the allowed "
            f"{_fmt(first['threshold'])} ({_judge_words(first)})"
        )
