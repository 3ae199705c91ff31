"""Monitor alert rules as statistics (pure numpy; docs/monitoring.md#alerts).

**compare**: is the candidate slice worse than the baseline slice by more than ``margin``? The two slices are
independent streams of verdicts. They are paired in arrival order: the i-th candidate verdict with the i-th baseline
verdict (or with the mean of the i-th block of ``block`` baseline verdicts, when the baseline is a longer window).
Each difference ``d_i = baseline_i - candidate_i`` (``candidate - baseline`` for a metric where higher is worse)
lies in ``[-(high - low), high - low]``, and when nothing changed the ``d_i`` are independent with mean 0 whatever the
order the responses arrived in. The gate's anytime-valid betting confidence sequence
(:mod:`judge_api.stats.sequential`) at level ``confidence`` then decides *regression* as soon as it puts the mean
difference above ``margin``: it may be looked at after every verdict, and the chance that it ever does so while the
slices are equal is at most ``1 - confidence`` (Ville's inequality). It never needs a final test, so the whole
alpha goes to the sequence.

**floor**: the metric's mean over at least ``min_n`` verdicts is below the floor: a plain threshold, without an
error-rate guarantee (a noisy mean crosses it by chance), for a hard lower bound the team wants to hear about.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike
from scipy import stats as sps

from judge_api.stats.sequential import Scale, confidence_sequence, first_crossing

CompareDecision = Literal["regression", "undecided"]
FloorDecision = Literal["breach", "ok", "insufficient"]
METHOD = "betting confidence sequence on arrival-order pairs (anytime-valid)"


@dataclass(frozen=True)
class CompareEvidence:
    decision: CompareDecision
    n: int
    """Pairs compared (the smaller of the candidate count and the baseline blocks)."""
    n_baseline: int
    n_candidate: int
    baseline_mean: float | None
    candidate_mean: float | None
    difference: float | None
    """Mean of the paired differences: how much worse the candidate is (positive = worse)."""
    ci_low: float | None
    ci_high: float | None
    confidence: float
    margin: float
    p_value: float | None
    """The smallest ``1 - confidence`` at which the sequence would have decided a regression (``1/K``)."""
    decided_at: int | None = None
    """Regression: the pair count at which the sequence first crossed (looked at after every pair)."""
    method: str = METHOD

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def blocks(values: ArrayLike, size: int) -> np.ndarray:
    """Means of consecutive blocks of ``size`` values (an incomplete last block is left out)."""
    x = np.asarray(values, dtype="float64").ravel()
    if size <= 1:
        return x
    whole = (x.size // size) * size
    return x[:whole].reshape(-1, size).mean(axis=1) if whole else np.empty(0)


def paired_differences(
    baseline: ArrayLike, candidate: ArrayLike, *, higher_is_worse: bool = False, block: int = 1
) -> np.ndarray:
    """``baseline_i - candidate_i`` (``candidate_i - baseline_i`` when higher is worse) over the pairs formed in
    order, the baseline averaged in blocks of ``block`` first."""
    base = blocks(baseline, block)
    cand = np.asarray(candidate, dtype="float64").ravel()
    n = min(base.size, cand.size)
    return (cand[:n] - base[:n]) if higher_is_worse else (base[:n] - cand[:n])


def compare(
    baseline: ArrayLike,
    candidate: ArrayLike,
    *,
    low: float,
    high: float,
    confidence: float,
    margin: float = 0.0,
    higher_is_worse: bool = False,
    block: int = 1,
    bounds: bool = True,
) -> CompareEvidence:
    """The compare rule's evidence after the verdicts so far (both in arrival order)."""
    if not 0.0 < confidence < 1.0:
        raise ValueError("confidence must be in (0, 1)")
    base = np.asarray(baseline, dtype="float64").ravel()
    cand = np.asarray(candidate, dtype="float64").ravel()
    diffs = paired_differences(base, cand, higher_is_worse=higher_is_worse, block=block)
    scale = Scale("single", low, high)
    width = scale.width
    alpha = 1.0 - confidence
    base_mean = float(base.mean()) if base.size else None
    cand_mean = float(cand.mean()) if cand.size else None
    if diffs.size == 0:
        return CompareEvidence(
            "undecided",
            0,
            int(base.size),
            int(cand.size),
            base_mean,
            cand_mean,
            None,
            None,
            None,
            confidence,
            margin,
            None,
        )
    unit = np.clip(scale.to_unit(diffs), 0.0, 1.0)
    threshold = scale.threshold_to_unit(min(margin, width))
    state = confidence_sequence(unit, alpha, threshold, bounds=bounds)
    regression = state.log_capital_up >= math.log(1.0 / alpha)
    low_d = scale.from_unit(state.low) if bounds else None
    high_d = scale.from_unit(state.high) if bounds else None
    return CompareEvidence(
        "regression" if regression else "undecided",
        int(diffs.size),
        int(base.size),
        int(cand.size),
        base_mean,
        cand_mean,
        float(diffs.mean()),
        low_d,
        high_d,
        confidence,
        margin,
        float(min(1.0, math.exp(-state.log_capital_up))),
        first_crossing(unit, alpha, threshold) if regression else None,
    )


@dataclass(frozen=True)
class FloorEvidence:
    decision: FloorDecision
    n: int
    mean: float | None
    floor: float
    min_n: int
    ci_low: float | None
    ci_high: float | None
    """A 95% Student t interval of the mean, for the reader (the rule itself compares the mean with the floor)."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def floor(values: ArrayLike, *, below: float, min_n: int) -> FloorEvidence:
    """``breach`` when at least ``min_n`` values have a mean below ``below``; ``ok`` when they do not;
    ``insufficient`` with fewer values."""
    x = np.asarray(values, dtype="float64").ravel()
    x = x[np.isfinite(x)]
    n = int(x.size)
    if n == 0:
        return FloorEvidence("insufficient", 0, None, below, min_n, None, None)
    mean = float(x.mean())
    ci_low = ci_high = None
    if n > 1:
        half = float(sps.t.ppf(0.975, n - 1)) * float(x.std(ddof=1)) / math.sqrt(n)
        ci_low, ci_high = mean - half, mean + half
    decision: FloorDecision = "insufficient" if n < min_n else ("breach" if mean < below else "ok")
    return FloorEvidence(decision, n, mean, below, min_n, ci_low, ci_high)
