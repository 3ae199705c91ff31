"""Prediction-powered inference of a mean (PPI++, power-tuned).

Angelopoulos, Duchi & Zrnic, *PPI++: efficient prediction-powered inference* (2023): ``n`` items carry a human label
``y`` and the judge's prediction ``yhat``; ``N`` more items carry only the judge's prediction ``yhat_unlabeled``. The
estimate of the human mean is

    theta = lam * mean(yhat_unlabeled) + mean(y - lam * yhat)

with ``lam`` chosen from the data to minimise the variance and clipped to ``[0, 1]``, and a normal interval whose
variance adds the two independent parts. At ``lam = 0`` it is the human-only mean; the judge can only help: its bias
cancels in ``yhat_unlabeled - yhat``, whatever the judge's errors, as long as the labeled items are a uniform random
sample of all the items.

With ``small_sample=False`` the arithmetic follows ``ppi_py.ppi_mean_pointestimate`` / ``ppi_mean_ci`` (ppi-python
0.2.3) exactly: ``lam`` from the covariance with ``1/n`` and the judge's pooled variance with ``1/(n+N-1)``, standard
deviations with ``1/n``, and a z interval; ``tests/stats/test_stats_ppi.py`` checks equality to 1e-9 against it. The
default adds the small-sample correction ``ppi_mean`` describes (same estimate, same ``lam``, a wider interval).
Where ppi-python would divide by zero (a judge that gives every item the same score, or no unlabeled item) ``lam``
is 0: the judge carries no information there, and the estimate is the humans' own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.stats import norm
from scipy.stats import t as student_t


@dataclass(frozen=True)
class MeanInterval:
    estimate: float
    ci_low: float
    ci_high: float
    se: float


@dataclass(frozen=True)
class PPIEstimate:
    """The calibrated mean, the human-only mean from the same labels, and what the judge was worth."""

    calibrated: MeanInterval
    human_only: MeanInterval
    lam: float
    n_labeled: int
    n_unlabeled: int

    @property
    def effective_labels(self) -> float | None:
        """How many human labels alone would give the calibrated interval's width: n x var(human) / var(PPI)."""
        if self.calibrated.se <= 0.0:
            return None
        return self.n_labeled * (self.human_only.se / self.calibrated.se) ** 2


def _quantile(ci: float, n: int, small_sample: bool) -> float:
    if not 0.0 < ci < 1.0:
        raise ValueError(f"ci must be in (0, 1), got {ci}")
    upper = 1.0 - (1.0 - ci) / 2.0
    if small_sample and n >= 2:
        return float(student_t.ppf(upper, n - 1))
    return float(norm.ppf(upper))


def _as_vector(values: object, name: str) -> np.ndarray:
    arr = np.asarray(values, dtype="float64").reshape(-1)
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} holds a missing or infinite value")
    return arr


def power_tuned_lambda(y: np.ndarray, yhat: np.ndarray, yhat_unlabeled: np.ndarray) -> float:
    """The variance-minimising ``lam`` of PPI++ for a mean, clipped to [0, 1]."""
    n, big_n = y.size, yhat_unlabeled.size
    if n < 2 or big_n == 0:
        return 0.0
    pooled = np.concatenate([yhat, yhat_unlabeled])
    pooled_var = float(np.var(pooled, ddof=1))
    if not pooled_var > 0.0:
        return 0.0
    covariance = float(np.mean((y - y.mean()) * (yhat - yhat.mean())))
    lam = covariance / ((1.0 + n / big_n) * pooled_var)
    return float(np.clip(lam, 0.0, 1.0))


def ppi_mean(
    y: object,
    yhat: object,
    yhat_unlabeled: object,
    *,
    ci: float = 0.95,
    lam: float | None = None,
    small_sample: bool = True,
    bounds: tuple[float, float] | None = None,
) -> PPIEstimate:
    """PPI++ estimate and ``ci`` interval of the mean of ``y`` (see the module docstring).

    ``bounds``: the scale of ``y`` and ``yhat``. Labels whose rectifier ``y - lam * yhat`` is the same on every item
    (all humans gave one score and the judge adds nothing) have zero spread, which says nothing about the items not
    labeled: with ``bounds`` that part of the interval is the scale's worst case (:func:`_unseen_share`) instead of
    zero width (10 labels all 5 on 1-5 with a constant judge covered 0.65 of the time, not 0.95).

    ``small_sample`` (the default) widens both intervals for the few labels they rest on: standard deviations with
    ``n - 1`` and Student's t quantile with ``n - 1`` degrees of freedom in place of the normal one. The z interval
    of the papers (``small_sample=False``, equal to ppi-python) covers 0.91-0.92 instead of 0.95 with 20 labels
    (``bench/bench_calibrated.py``); the estimate and ``lam`` are the same either way.
    """
    yv = _as_vector(y, "y")
    yhat_v = _as_vector(yhat, "yhat")
    unl = _as_vector(yhat_unlabeled, "yhat_unlabeled")
    if yv.size != yhat_v.size:
        raise ValueError(f"y and yhat differ in length ({yv.size} and {yhat_v.size})")
    if yv.size == 0:
        raise ValueError("no labeled item")
    n, big_n = yv.size, unl.size
    z = _quantile(ci, n, small_sample)
    ddof = 1 if small_sample and n >= 2 else 0
    human_se = float(np.std(yv, ddof=ddof)) / math.sqrt(n)
    human_mean = float(np.mean(yv))
    human = MeanInterval(human_mean, human_mean - z * human_se, human_mean + z * human_se, human_se)
    if bounds is not None and human_se == 0.0:
        human = _worst_case(human_mean, 0.0, bounds, n, ci)
    tuned = power_tuned_lambda(yv, yhat_v, unl) if lam is None else float(lam)
    if big_n == 0:
        tuned = 0.0
    rectifier = yv - tuned * yhat_v
    imputed_mean = float(np.mean(tuned * unl)) if big_n else 0.0
    estimate = imputed_mean + float(np.mean(rectifier))
    imputed_var = float(np.var(tuned * unl, ddof=ddof if big_n >= 2 else 0)) / big_n if big_n else 0.0
    se = math.sqrt(imputed_var + float(np.var(rectifier, ddof=ddof)) / n)
    calibrated = MeanInterval(estimate, estimate - z * se, estimate + z * se, se)
    if bounds is not None and float(np.ptp(rectifier)) == 0.0:
        lo, hi = bounds
        rect_bounds = (lo - tuned * hi, hi - tuned * lo)
        worst = _worst_case(float(np.mean(rectifier)), 0.0, rect_bounds, n, ci)
        spread = z * math.sqrt(imputed_var)
        calibrated = MeanInterval(
            estimate, imputed_mean + worst.ci_low - spread, imputed_mean + worst.ci_high + spread, se
        )
    return PPIEstimate(calibrated=calibrated, human_only=human, lam=tuned, n_labeled=n, n_unlabeled=big_n)


def _unseen_share(ci: float, n: int) -> float:
    """``1 - ((1 - ci) / 2) ** (1 / n)``: how far towards a scale's end the mean of ``n`` equal values may be, when
    a value at that end goes unseen in ``n`` draws with probability ``(1 - ci) / 2``."""
    return 1.0 - ((1.0 - ci) / 2.0) ** (1.0 / n)


def _worst_case(mean: float, se: float, bounds: tuple[float, float], n: int, ci: float) -> MeanInterval:
    share = _unseen_share(ci, n)
    return MeanInterval(mean, mean - (mean - bounds[0]) * share, mean + (bounds[1] - mean) * share, se)


def affine_to_scale(values: np.ndarray, source: tuple[float, float], target: tuple[float, float]) -> np.ndarray:
    """Map scores on ``source`` (lo, hi) linearly onto ``target`` (lo, hi): the fixed map the two stated scales give.

    PPI++ clips ``lam`` to [0, 1], so a judge on a narrower scale than the humans' would be under-used; on the
    humans' scale the estimate is unchanged by the judge's units.
    """
    s_lo, s_hi = source
    t_lo, t_hi = target
    if not s_hi > s_lo:
        raise ValueError(f"the source scale [{s_lo}, {s_hi}] is empty")
    return t_lo + (np.asarray(values, dtype="float64") - s_lo) * (t_hi - t_lo) / (s_hi - s_lo)


def ppi_mean_active(
    y: object,
    yhat: object,
    labeled: object,
    inclusion: object,
    *,
    ci: float = 0.95,
    small_sample: bool = True,
) -> PPIEstimate:
    """The active-inference estimate (Zrnic & Candès 2024) of the mean of ``y`` over all the items.

    Every item ``i`` has the judge's prediction ``yhat[i]``, an inclusion probability ``inclusion[i]`` and whether
    it was labeled (``labeled[i]``, drawn independently with that probability); ``y[i]`` is read where labeled. The
    estimate is the mean of ``z_i = lam * yhat_i + (y_i - lam * yhat_i) * labeled_i / pi_i``, unbiased for any
    probabilities, with a normal (or, with ``small_sample``, t) interval from the ``z``'s spread and ``lam`` the
    variance-minimising value in [0, 1]. ``human_only`` is the same with ``lam = 0`` (inverse-probability weighting
    of the labels alone).
    """
    yhat_v = _as_vector(yhat, "yhat")
    labeled_v = np.asarray(labeled, dtype=bool).reshape(-1)
    pi = _as_vector(inclusion, "inclusion")
    big_n = yhat_v.size
    if labeled_v.size != big_n or pi.size != big_n:
        raise ValueError("yhat, labeled and inclusion differ in length")
    if np.any((pi <= 0.0) | (pi > 1.0)):
        raise ValueError("every inclusion probability must be in (0, 1]")
    n = int(labeled_v.sum())
    if n == 0:
        raise ValueError("no labeled item")
    y_raw = np.asarray(y, dtype="float64").reshape(-1)
    if y_raw.size != big_n:
        raise ValueError("y and yhat differ in length")
    y_v = np.where(labeled_v, y_raw, 0.0)
    if not np.all(np.isfinite(y_v)):
        raise ValueError("y holds a missing or infinite value on a labeled item")
    weight = labeled_v / pi
    a = yhat_v * (1.0 - weight)  # z = lam * a + b
    b = y_v * weight
    a_var = float(np.var(a))
    lam = 0.0 if not a_var > 0.0 else float(np.clip(-float(np.mean((a - a.mean()) * (b - b.mean()))) / a_var, 0, 1))
    z_q = _quantile(ci, n, small_sample)
    ddof = 1 if small_sample and big_n >= 2 else 0

    def interval(z: np.ndarray) -> MeanInterval:
        mean = float(np.mean(z))
        se = float(np.std(z, ddof=ddof)) / math.sqrt(big_n)
        return MeanInterval(mean, mean - z_q * se, mean + z_q * se, se)

    return PPIEstimate(
        calibrated=interval(lam * a + b), human_only=interval(b), lam=lam, n_labeled=n, n_unlabeled=big_n - n
    )
