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


def _quantile(ci: float, n: int, small_sample: bool, fitted: int = 1) -> float:
    """The two-sided ``ci`` quantile: Student's t with ``n - fitted`` degrees of freedom (``small_sample``), else
    the normal one."""
    if not 0.0 < ci < 1.0:
        raise ValueError(f"ci must be in (0, 1), got {ci}")
    upper = 1.0 - (1.0 - ci) / 2.0
    if small_sample and n > fitted:
        return float(student_t.ppf(upper, n - fitted))
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
    if bounds is not None and _flat(yv, bounds):
        human = _worst_case(human_mean, 0.0, bounds, n, ci)
    tuned = power_tuned_lambda(yv, yhat_v, unl) if lam is None else float(lam)
    if big_n == 0:
        tuned = 0.0
    rectifier = yv - tuned * yhat_v
    imputed_mean = float(np.mean(tuned * unl)) if big_n else 0.0
    estimate = imputed_mean + float(np.mean(rectifier))
    imputed_var = float(np.var(tuned * unl, ddof=ddof if big_n >= 2 else 0)) / big_n if big_n else 0.0
    # lam fitted on the labels is a second parameter of the rectifier (as the slope of a regression estimator):
    # its spread with n - 2 and t with n - 2 degrees of freedom (the small-sample default only)
    fitted = 2 if small_sample and lam is None and tuned > 0.0 and n > 2 else 1
    r_ddof = fitted if small_sample and n >= 2 else 0
    z = _quantile(ci, n, small_sample, fitted)
    se = math.sqrt(imputed_var + float(np.var(rectifier, ddof=r_ddof)) / n)
    calibrated = MeanInterval(estimate, estimate - z * se, estimate + z * se, se)
    if bounds is not None and _flat(rectifier, bounds):
        lo, hi = bounds
        rect_bounds = (lo - tuned * hi, hi - tuned * lo)
        worst = _worst_case(float(np.mean(rectifier)), 0.0, rect_bounds, n, ci)
        spread = z * math.sqrt(imputed_var)
        calibrated = MeanInterval(
            estimate, imputed_mean + worst.ci_low - spread, imputed_mean + worst.ci_high + spread, se
        )
    return PPIEstimate(calibrated=calibrated, human_only=human, lam=tuned, n_labeled=n, n_unlabeled=big_n)


FLAT = 1e-9
"""Values whose range is below this share of their scale's width are equal: labels such as ``1.4 - 1.0`` and
``1.2 - 0.8`` differ in the last bit, and an exact ``== 0`` test let that rounding pass for spread (a standard
deviation of 1e-16, an interval of zero width)."""


def _flat(values: np.ndarray, bounds: tuple[float, float]) -> bool:
    """Whether ``values`` are all the same, up to float rounding (:data:`FLAT` of the scale ``bounds``)."""
    return values.size > 0 and float(np.ptp(values)) <= FLAT * abs(bounds[1] - bounds[0])


def _unseen_share(ci: float, n: int) -> float:
    """``1 - ((1 - ci) / 2) ** (1 / n)``: how far towards a scale's end the mean of ``n`` equal values may be, when
    a value at that end goes unseen in ``n`` draws with probability ``(1 - ci) / 2``."""
    return 1.0 - ((1.0 - ci) / 2.0) ** (1.0 / n)


def _worst_case(mean: float, se: float, bounds: tuple[float, float], n: int, ci: float) -> MeanInterval:
    share = _unseen_share(ci, n)
    return MeanInterval(mean, mean - (mean - bounds[0]) * share, mean + (bounds[1] - mean) * share, se)


def _flat_widening(
    residual: np.ndarray, lams: tuple[float, ...], bounds: tuple[float, float] | None, ci: float
) -> tuple[float, float]:
    """``(down, up)``: how far below and above the labeled value the mean of a rectifier ``y - lam * yhat`` may lie
    over the items not labeled, when the rectifier is the same on every labeled item (zero spread says nothing about
    them): the scale's worst case :func:`_unseen_share` of the way to the rectifier's ends (``lams``: every lambda
    the rectifier was computed with). ``(0, 0)`` when the rectifier varies, or without ``bounds``."""
    if bounds is None or residual.size == 0 or not _flat(residual, bounds):
        return 0.0, 0.0
    lo, hi = bounds
    r_lo = min(lo - lam * hi for lam in lams)
    r_hi = max(hi - lam * lo for lam in lams)
    value = float(residual[0])
    share = _unseen_share(ci, residual.size)
    return max(value - r_lo, 0.0) * share, max(r_hi - value, 0.0) * share


def _widened(interval: MeanInterval, down: float, up: float, within: tuple[float, float] | None = None) -> MeanInterval:
    """``interval`` reaching ``down`` lower and ``up`` higher, cut to ``within`` (the values the mean can take),
    which keeps its coverage."""
    if down == 0.0 and up == 0.0 and within is None:
        return interval
    low, high = interval.ci_low - down, interval.ci_high + up
    if within is not None:
        low, high = max(low, float(within[0])), min(high, float(within[1]))
    return MeanInterval(interval.estimate, low, high, interval.se)


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
    bounds: tuple[float, float] | None = None,
) -> PPIEstimate:
    """The active-inference estimate (Zrnic & Candès 2024) of the mean of ``y`` over all the items.

    Every item ``i`` has the judge's prediction ``yhat[i]``, an inclusion probability ``inclusion[i]`` and whether
    it was labeled (``labeled[i]``, drawn independently with that probability); ``y[i]`` is read where labeled. The
    estimate is the mean of ``z_i = lam * yhat_i + (y_i - lam * yhat_i) * labeled_i / pi_i``, unbiased for any
    probabilities, with a normal (or, with ``small_sample``, t) interval from the ``z``'s spread and ``lam`` the
    variance-minimising value in [0, 1]. ``human_only`` is the same with ``lam = 0`` (inverse-probability weighting
    of the labels alone).

    ``bounds``: the scale of ``y`` and ``yhat``. As in ``ppi_mean``, a rectifier ``y - lam * yhat`` that is the same
    on every labeled item (every label one score, a judge that adds nothing) says nothing about the items not labeled:
    the interval then reaches the scale's worst case (:func:`_flat_widening`) instead of having zero width (a uniform
    queue's 10 labels all 5 on 1-5 with a constant judge of 5 gave ``[5, 5]``).
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

    y_lab, yhat_lab = y_v[labeled_v], yhat_v[labeled_v]
    calibrated = _widened(
        interval(lam * a + b), *_flat_widening(y_lab - lam * yhat_lab, (lam,), bounds, ci), within=bounds
    )
    human = _widened(interval(b), *_flat_widening(y_lab, (0.0,), bounds, ci), within=bounds)
    return PPIEstimate(calibrated=calibrated, human_only=human, lam=lam, n_labeled=n, n_unlabeled=big_n - n)


@dataclass(frozen=True)
class DifferenceEstimate:
    """A calibrated difference ``mean(y_a) - mean(y_b)`` over one population of items, with the human-only one."""

    calibrated: MeanInterval
    human_only: MeanInterval
    """From the labels alone: the difference of the two sides' label means."""
    lam_a: float
    lam_b: float
    n_labeled_a: int
    n_labeled_b: int
    n_labeled_both: int
    n_items: int
    paired: bool
    """Both sides carry labels on the same items: the difference is the PPI++ mean of the per-item differences."""


def _group_variance(
    u_a: np.ndarray,
    u_b: np.ndarray,
    p: np.ndarray,
    q: np.ndarray,
    groups: np.ndarray,
    lam: tuple[float, float],
    ddof: int,
    fitted: tuple[int, int] = (0, 0),
) -> float:
    """Var of ``sum_i c_i``, ``c_i = (u_a + lam_a p)_i + (u_b + lam_b q)_i``, for items independent given their group
    (labeled on a, on b): ``sum_g m_g var_g(c)``. ``fitted``: whether each side's lambda was tuned on the labels: one
    more degree of freedom taken from the groups labeled on that side (as a regression's fitted slope).

    A group of one item has no spread of its own: its variance is bounded by ``(sd_a + sd_b)^2`` (Cauchy-Schwarz),
    each side's part's spread taken over every item labeled like it on that side, which never understates it."""
    part_a = u_a + lam[0] * p
    part_b = u_b + lam[1] * q
    c = part_a + part_b
    lab_a, lab_b = groups // 2 == 1, groups % 2 == 1
    total = 0.0
    for g in np.unique(groups):
        members = groups == g
        m = int(members.sum())
        own = ddof + fitted[0] * int(g // 2 == 1) + fitted[1] * int(g % 2 == 1)
        if m >= 2:
            total += m * float(np.var(c[members], ddof=min(own, m - 1)))
        else:
            same_a = lab_a == lab_a[members][0]
            same_b = lab_b == lab_b[members][0]
            sd_a = float(np.std(part_a[same_a], ddof=ddof)) if same_a.sum() >= 2 else float(np.ptp(part_a))
            sd_b = float(np.std(part_b[same_b], ddof=ddof)) if same_b.sum() >= 2 else float(np.ptp(part_b))
            total += (sd_a + sd_b) ** 2
    return total


def _tuned_pair(u: np.ndarray, p: np.ndarray, q: np.ndarray, groups: np.ndarray) -> tuple[float, float]:
    """The ``(lam_a, lam_b)`` in [0, 1]^2 minimising the grouped variance (a quadratic: the unconstrained optimum
    if it lies in the box, else the best of the edges' optima and the corners)."""
    m_mat = np.zeros((2, 2))
    v = np.zeros(2)
    for g in np.unique(groups):
        members = groups == g
        m = int(members.sum())
        if m < 2:
            continue
        pq = np.vstack([p[members], q[members]])
        cov = np.cov(np.vstack([pq, u[members]]), ddof=0)
        m_mat += m * cov[:2, :2]
        v += m * cov[:2, 2]

    def value(lam: tuple[float, float]) -> float:
        x = np.asarray(lam)
        return float(x @ m_mat @ x + 2.0 * v @ x)

    candidates: list[tuple[float, float]] = [(0.0, 0.0), (0.0, 1.0), (1.0, 0.0), (1.0, 1.0)]
    if abs(float(np.linalg.det(m_mat))) > 1e-15:
        free = -np.linalg.solve(m_mat, v)
        if np.all((free >= 0.0) & (free <= 1.0)):
            candidates.append((float(free[0]), float(free[1])))
    for axis in (0, 1):  # the optimum along each edge of the box
        other = 1 - axis
        if not m_mat[other, other] > 0:
            continue
        for fixed in (0.0, 1.0):
            best = float(np.clip(-(v[other] + m_mat[other, axis] * fixed) / m_mat[other, other], 0.0, 1.0))
            candidates.append((fixed, best) if axis == 0 else (best, fixed))
    return min(candidates, key=value)


def _difference_range(bounds: tuple[float, float] | None) -> tuple[float, float] | None:
    """The values a difference of two means on ``bounds`` can take."""
    return None if bounds is None else (bounds[0] - bounds[1], bounds[1] - bounds[0])


def _sides_widening(
    residual_a: np.ndarray,
    residual_b: np.ndarray,
    lams_a: tuple[float, ...],
    lams_b: tuple[float, ...],
    bounds: tuple[float, float] | None,
    ci: float,
) -> tuple[float, float]:
    """``(down, up)`` of a difference ``a - b``: each side's :func:`_flat_widening`, added (a's downward and b's
    upward room lower the difference)."""
    down_a, up_a = _flat_widening(residual_a, lams_a, bounds, ci)
    down_b, up_b = _flat_widening(residual_b, lams_b, bounds, ci)
    return down_a + up_b, up_a + down_b


def _pair_widening(
    rect_a: np.ndarray,
    rect_b: np.ndarray,
    lams: list[tuple[float, float]],
    bounds: tuple[float, float] | None,
    ci: float,
) -> tuple[float, float]:
    """``(down, up)`` of a difference labeled on the same items on both sides whose per-item rectifier difference
    ``rect_a - rect_b`` is the same on every labeled item (each side varies, their difference does not): the worst
    case of :func:`_flat_widening` on the difference's range, over every lambda pair used."""
    if bounds is None or rect_a.size == 0 or rect_a.size != rect_b.size:
        return 0.0, 0.0
    diff = rect_a - rect_b
    lo, hi = bounds
    if not _flat(diff, (lo - hi, hi - lo)):
        return 0.0, 0.0
    r_lo = min((lo - la * hi) - (hi - lb * lo) for la, lb in lams)
    r_hi = max((hi - la * lo) - (lo - lb * hi) for la, lb in lams)
    value = float(diff[0])
    share = _unseen_share(ci, diff.size)
    return max(value - r_lo, 0.0) * share, max(r_hi - value, 0.0) * share


def ppi_mean_difference(
    y_a: object,
    yhat_a: object,
    labeled_a: object,
    y_b: object,
    yhat_b: object,
    labeled_b: object,
    *,
    ci: float = 0.95,
    lam: tuple[float, float] | None = None,
    bounds: tuple[float, float] | None = None,
) -> DifferenceEstimate:
    """PPI++ estimate and ``ci`` interval of ``E[y_a] - E[y_b]`` when both sides are judged on the same items.

    Every item ``i`` of the population has both judge predictions; side ``a``'s human label ``y_a[i]`` is read where
    ``labeled_a[i]`` (likewise ``b``), each side's labeled items a uniform random sample of the population (drawn
    independently, or the same items on both sides). Each side's estimate is the PPI++ mean
    ``lam * mean(yhat over its unlabeled items) + mean(y - lam * yhat over its labeled items)``, and the estimate
    is their difference. Given which items are labeled, the items are independent, so the variance is the sum over
    the four groups (labeled on both sides, on ``a`` only, on ``b`` only, on neither) of the group's size times the
    variance of each item's contribution within it: the two sides' dependence through shared items is counted, not
    assumed away. With the same labeled items on both sides this is the PPI++ mean of the per-item differences
    (``paired``: computed by ``ppi_mean`` on the differences, one lambda). Otherwise ``lam_a``, ``lam_b`` minimise
    that variance in [0, 1]; as in ``ppi_mean``'s small-sample default, a lambda tuned above 0 is a fitted parameter:
    the spread within the groups labeled on its side takes one degree of freedom more for it, and Student's t has
    ``min(n_a, n_b) - 2`` degrees of freedom (``- 1`` when nothing was fitted). ``lam`` fixes the pair.

    ``bounds``: the humans' scale (of ``y`` and ``yhat`` on each side). Labels whose rectifier is the same on every
    labeled item of a side (the humans gave the same scores, the judge adds nothing) have zero spread, which says
    nothing about the items not labeled: the interval then reaches the scale's worst case for that side (as in
    ``ppi_mean``) instead of having zero width (10 items labelled alike on both runs gave ``[0, 0]``: a certain
    "no regression" while a tenth of the items had dropped).
    """
    ya_raw = np.asarray(y_a, dtype="float64").reshape(-1)
    yb_raw = np.asarray(y_b, dtype="float64").reshape(-1)
    ha = _as_vector(yhat_a, "yhat_a")
    hb = _as_vector(yhat_b, "yhat_b")
    la = np.asarray(labeled_a, dtype=bool).reshape(-1)
    lb = np.asarray(labeled_b, dtype=bool).reshape(-1)
    big_n = ha.size
    if not (hb.size == la.size == lb.size == ya_raw.size == yb_raw.size == big_n):
        raise ValueError("y, yhat and labeled differ in length between or within the two sides")
    n_a, n_b = int(la.sum()), int(lb.sum())
    if n_a < 2 or n_b < 2:
        raise ValueError(f"each side needs at least 2 labeled items (got {n_a} and {n_b})")
    ya = np.where(la, ya_raw, 0.0)
    yb = np.where(lb, yb_raw, 0.0)
    if not (np.all(np.isfinite(ya)) and np.all(np.isfinite(yb))):
        raise ValueError("y holds a missing or infinite value on a labeled item")
    u_a, u_b = big_n - n_a, big_n - n_b
    # item i's contribution: u_i + lam_a p_i + lam_b q_i
    u_part_a = np.where(la, ya / n_a, 0.0)
    u_part_b = -np.where(lb, yb / n_b, 0.0)
    u = u_part_a + u_part_b
    p = np.where(la, -ha / n_a, ha / u_a if u_a else 0.0)
    q = np.where(lb, hb / n_b, -hb / u_b if u_b else 0.0)
    groups = la.astype(int) * 2 + lb.astype(int)
    both = la & lb
    paired = bool(np.array_equal(la, lb))
    if paired and lam is None:  # one lambda on the per-item differences: ppi_mean itself
        diff = ppi_mean(ya_raw[la] - yb_raw[la], (ha - hb)[la], (ha - hb)[~la], ci=ci, bounds=_difference_range(bounds))
        return DifferenceEstimate(
            calibrated=diff.calibrated,
            human_only=diff.human_only,
            lam_a=diff.lam,
            lam_b=diff.lam,
            n_labeled_a=n_a,
            n_labeled_b=n_b,
            n_labeled_both=n_a,
            n_items=big_n,
            paired=True,
        )
    fitted = (0, 0)
    if lam is None:
        lam = (0.0, 0.0) if u_a == 0 or u_b == 0 else _tuned_pair(u, p, q, groups)
        fitted = (int(lam[0] > 0.0), int(lam[1] > 0.0))
    n_min = min(n_a, n_b)
    z = _quantile(ci, n_min, True, 1 + max(fitted))
    estimate = float(np.sum(u + lam[0] * p + lam[1] * q))
    se = math.sqrt(_group_variance(u_part_a, u_part_b, p, q, groups, lam, 1, fitted))
    calibrated = _widened(
        MeanInterval(estimate, estimate - z * se, estimate + z * se, se),
        *_sides_widening(ya_raw[la] - lam[0] * ha[la], yb_raw[lb] - lam[1] * hb[lb], (lam[0],), (lam[1],), bounds, ci),
        within=_difference_range(bounds),
    )
    human = float(np.mean(ya_raw[la]) - np.mean(yb_raw[lb]))
    if paired:
        d = ya_raw[la] - yb_raw[lb]
        h_se = float(np.std(d, ddof=1)) / math.sqrt(d.size)
    else:
        # labels only: the mean of each side's labels; items labeled on both sides share their covariance
        va = float(np.var(ya_raw[la], ddof=1)) / n_a
        vb = float(np.var(yb_raw[lb], ddof=1)) / n_b
        cov = 0.0
        if int(both.sum()) >= 2:
            cov = float(np.cov(ya_raw[both], yb_raw[both], ddof=1)[0, 1]) * int(both.sum()) / (n_a * n_b)
        h_se = math.sqrt(max(va + vb - 2.0 * cov, 0.0))
    human_only = _widened(
        MeanInterval(human, human - z * h_se, human + z * h_se, h_se),
        *_sides_widening(ya_raw[la], yb_raw[lb], (0.0,), (0.0,), bounds, ci),
        within=_difference_range(bounds),
    )
    return DifferenceEstimate(
        calibrated=calibrated,
        human_only=human_only,
        lam_a=lam[0],
        lam_b=lam[1],
        n_labeled_a=n_a,
        n_labeled_b=n_b,
        n_labeled_both=int(both.sum()),
        n_items=big_n,
        paired=paired,
    )


def ppi_mean_difference_active(
    y_a: object,
    yhat_a: object,
    labeled_a: object,
    inclusion_a: object,
    y_b: object,
    yhat_b: object,
    labeled_b: object,
    inclusion_b: object,
    *,
    ci: float = 0.95,
    bounds: tuple[float, float] | None = None,
) -> DifferenceEstimate:
    """``E[y_a] - E[y_b]`` over items judged on both sides whose labels were drawn with known probabilities.

    The active-inference estimator (Zrnic & Candès 2024, as ``ppi_mean_active``) per side,
    ``z_i = lam * yhat_i + (y_i - lam * yhat_i) * labeled_i / pi_i``, and the difference ``mean(z_a - z_b)`` with the
    interval from the per-item differences' spread (the sides share the items, so their dependence is counted) and t
    with ``min(n_a, n_b) - 1`` degrees of freedom. ``lam_a``, ``lam_b`` minimise that spread in [0, 1], cross-fitted
    (Zrnic & Candès, *Cross-prediction-powered inference*): the items fall in two seeded halves, each computed with
    the pair tuned on the other; the pair reported is the halves' mean. ``human_only``: both lambdas 0.
    ``bounds``: the humans' scale; a side whose rectifier is the same on every labeled item widens the interval to
    the scale's worst case, as in ``ppi_mean_difference``.
    """
    ha = _as_vector(yhat_a, "yhat_a")
    hb = _as_vector(yhat_b, "yhat_b")
    la = np.asarray(labeled_a, dtype=bool).reshape(-1)
    lb = np.asarray(labeled_b, dtype=bool).reshape(-1)
    pa = np.asarray(inclusion_a, dtype="float64").reshape(-1)
    pb = np.asarray(inclusion_b, dtype="float64").reshape(-1)
    ya_raw = np.asarray(y_a, dtype="float64").reshape(-1)
    yb_raw = np.asarray(y_b, dtype="float64").reshape(-1)
    big_n = ha.size
    if not all(v.size == big_n for v in (hb, la, lb, pa, pb, ya_raw, yb_raw)):
        raise ValueError("y, yhat, labeled and inclusion differ in length between or within the two sides")
    if np.any(((pa <= 0.0) | (pa > 1.0)) & la) or np.any(((pb <= 0.0) | (pb > 1.0)) & lb):
        raise ValueError("every labeled item's inclusion probability must be in (0, 1]")
    n_a, n_b = int(la.sum()), int(lb.sum())
    if n_a < 2 or n_b < 2:
        raise ValueError(f"each side needs at least 2 labeled items (got {n_a} and {n_b})")
    wa = np.where(la, 1.0 / np.where(la, pa, 1.0), 0.0)
    wb = np.where(lb, 1.0 / np.where(lb, pb, 1.0), 0.0)
    ya = np.where(la, ya_raw, 0.0)
    yb = np.where(lb, yb_raw, 0.0)
    if not (np.all(np.isfinite(ya)) and np.all(np.isfinite(yb))):
        raise ValueError("y holds a missing or infinite value on a labeled item")
    u = ya * wa - yb * wb  # z_a - z_b = u + lam_a p + lam_b q
    p = ha * (1.0 - wa)
    q = -hb * (1.0 - wb)
    # cross-fitted lambdas: each half of the items gets the pair tuned on the other half, so no item's own labels
    # pick the weights its term is computed with (tuned on all the items, the pair exploits the spread of the few
    # heavily weighted labels: 0.93 coverage at 95 % in tests/stats/test_stats_ppi.py's design, 0.95 cross-fitted)
    fold = np.random.default_rng(0).permutation(big_n) % 2
    single = np.zeros(big_n, dtype=int)
    lam_of = np.zeros((2, big_n))
    pairs = []
    for k in (0, 1):
        other = fold != k
        pair = _tuned_pair(u[other], p[other], q[other], single[other]) if other.sum() >= 2 else (0.0, 0.0)
        pairs.append(pair)
        lam_of[0, fold == k], lam_of[1, fold == k] = pair
    lam = (float(np.mean([a for a, _ in pairs])), float(np.mean([b for _, b in pairs])))
    z_q = _quantile(ci, min(n_a, n_b), True)

    def interval(values: np.ndarray) -> MeanInterval:
        mean = float(np.mean(values))
        se = float(np.std(values, ddof=1)) / math.sqrt(big_n)
        return MeanInterval(mean, mean - z_q * se, mean + z_q * se, se)

    lams_a = tuple(float(v) for v in np.unique(lam_of[0][la]))
    lams_b = tuple(float(v) for v in np.unique(lam_of[1][lb]))
    rect_a = ya_raw[la] - lam_of[0][la] * ha[la]
    rect_b = yb_raw[lb] - lam_of[1][lb] * hb[lb]
    widen = _sides_widening(rect_a, rect_b, lams_a, lams_b, bounds, ci)
    widen_h = _sides_widening(ya_raw[la], yb_raw[lb], (0.0,), (0.0,), bounds, ci)
    if np.array_equal(la, lb):  # the same items: the per-item differences may be flat where neither side is
        if widen == (0.0, 0.0):
            widen = _pair_widening(rect_a, rect_b, pairs, bounds, ci)
        if widen_h == (0.0, 0.0):
            widen_h = _pair_widening(ya_raw[la], yb_raw[lb], [(0.0, 0.0)], bounds, ci)
    return DifferenceEstimate(
        calibrated=_widened(interval(u + lam_of[0] * p + lam_of[1] * q), *widen, within=_difference_range(bounds)),
        human_only=_widened(interval(u), *widen_h, within=_difference_range(bounds)),
        lam_a=lam[0],
        lam_b=lam[1],
        n_labeled_a=n_a,
        n_labeled_b=n_b,
        n_labeled_both=int((la & lb).sum()),
        n_items=big_n,
        paired=bool(np.array_equal(la, lb)),
    )
