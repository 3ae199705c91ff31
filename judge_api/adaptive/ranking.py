"""The Bradley-Terry state of an adaptive ranking and its stopping rule. Pure: numpy only, no I/O.

Model
-----
The report's own (``judge_api.stats.ranking.fit_bradley_terry``): one order-combined outcome per (item, pair)
(both presentation orders combined as in ``preferences.combine_orders``), a win counts 1, a tie half a win each
way, ``prior`` virtual ties per pair of systems, centred log strengths.

Uncertainty
-----------
The comparisons of one item share that item (a hard question hurts a weak system against everyone), so the
covariance of the log strengths is the cluster-robust *sandwich* ``A^-1 M A^-1`` with items as clusters: ``A`` is
the Fisher information of the (penalised) likelihood at the estimate, ``M`` the sum over items of the outer product
of each item's score contributions (times ``m / (m - 1)`` for ``m`` items). It also gets ties right (a tie is
half a win with less spread than a coin flip, which the model-based ``c' A^-1 c`` overstates). With few items the
sandwich can be far too small (a handful of items may all agree), so until ``MIN_ROBUST_ITEMS`` items are judged a
contrast's variance is the larger of the two. ``A`` is made invertible on the space of contrasts by adding ``J / S``
(``J`` all ones), which leaves every contrast's variance unchanged.

Stopping rule: a confidence sequence, so that looking after every batch costs nothing
------------------------------------------------------------------------------------------
The planner looks at the evidence after every batch and stops the first time the ranking looks settled. A fixed
``z >= 1.96`` test at every look would declare truly tied systems apart far more often than 5 % (each look is a new
chance to cross). Two adjacent systems ``u, v`` are *separated at confidence c* when the estimate of their
difference ``d`` with information ``I = 1 / var(d)`` crosses the two-sided normal-mixture boundary (Robbins 1970)

    (d * I)^2 >= (I + r) * log((I + r) / (r * alpha^2)),      alpha = 1 - c,

the Ville-inequality bound for a Brownian motion in information time (the MLE's score process is asymptotically
one): the chance that it is *ever* crossed when ``d = 0`` is at most ``alpha``, however many looks are taken.
``r`` (``MIXTURE_INFORMATION``) sets where the boundary is tightest; it is fixed in advance at the information
that about 20 direct comparisons of two evenly matched systems carry (``20 * 1/4``); the boundary's z is within 8 %
of its minimum (3.04 at 95 %) from 40 to 320 such comparisons, the range in which a ranking over tens to hundreds
of items is decided. An adjacent pair that even every comparison still available is unlikely to separate is left
alone (``predictive_power``, the planner's futility rule); that never declares a pair separated, so it cannot raise
the error rate. Each adjacent pair is tested at ``c`` on its own, as "every adjacent pair is
separated at the requested confidence" reads; ``tests/adaptive`` measures the error rate on simulated ties.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from judge_api.stats.ranking import fit_bradley_terry

MIXTURE_INFORMATION = 5.0
"""``r`` of the normal-mixture boundary, in units of Fisher information (see the module docstring)."""
PRIOR = 1.0
"""Virtual ties per pair of systems: the report's default (``stats.ranking``)."""
MIN_ROBUST_ITEMS = 30
"""From this many judged items on, the cluster-robust variance alone is used (see the module docstring)."""
DEGENERATE_SHARE = 1e-6
"""A cluster-robust variance below this share of the model-based one is degenerate (every comparison a tie, or
rounding below zero) and the model-based variance is used instead: no spread seen is not certainty."""
DIFF_TOLERANCE = 1e-9
"""A log-strength difference at or below this is no difference (two systems tied on every comparison are equal up
to rounding): its z is 0, never separated."""


@dataclass(frozen=True, slots=True)
class Comparison:
    """One order-combined outcome: ``score`` is system ``a``'s (1 win, 0.5 tie, 0 loss)."""

    item: str
    a: str
    b: str
    score: float


@dataclass(frozen=True, slots=True)
class Gap:
    """Two systems adjacent in the current order (``upper`` ranked above ``lower``)."""

    upper: str
    lower: str
    rank: int
    """1-based position of ``upper``."""
    diff: float
    """Estimated log-strength difference, >= 0."""
    se: float
    information: float
    """``1 / var(diff)``."""
    z: float
    z_needed: float
    """The boundary's z at this information: the pair is separated once ``z >= z_needed``."""
    separated: bool


def predictive_power(gap: Gap, information_max: float, alpha: float) -> float:
    """Chance that the gap is separated once every comparison still available is judged: the Brownian motion in
    information time continued from its current value to ``information_max`` with the drift drawn from its current
    estimate (``N(diff, 1 / information)``, flat prior), tested against the boundary there."""
    if gap.separated:
        return 1.0
    info, more = gap.information, information_max - gap.information
    if not math.isfinite(info) or info <= 0 or more <= 1e-12 * max(info, 1.0):
        return 0.0
    needed = mixture_z(information_max, alpha) * math.sqrt(information_max)
    spread = math.sqrt(more * information_max / info)
    return float(0.5 * math.erfc((needed - abs(gap.diff) * information_max) / spread / math.sqrt(2.0)))


def mixture_z(information: float, alpha: float, r: float = MIXTURE_INFORMATION) -> float:
    """The z a contrast with ``information`` must reach to cross the two-sided normal-mixture boundary."""
    if information <= 0 or not math.isfinite(information):
        return math.inf
    return math.sqrt((1.0 + r / information) * math.log((information + r) / (r * alpha * alpha)))


class RankingState:
    """Bradley-Terry fit of the comparisons so far over ``systems`` (every system is ranked, compared or not)."""

    def __init__(self, systems: Sequence[str], comparisons: Sequence[Comparison], *, prior: float = PRIOR) -> None:
        self.systems = list(systems)
        self.index = {name: i for i, name in enumerate(self.systems)}
        self.prior = prior
        s = len(self.systems)
        self.comparisons = list(comparisons)
        a = np.array([self.index[c.a] for c in self.comparisons], dtype=np.int64)
        b = np.array([self.index[c.b] for c in self.comparisons], dtype=np.int64)
        score = np.array([c.score for c in self.comparisons], dtype="float64")
        self._a, self._b, self._score = a, b, score
        wins = np.zeros((s, s))
        np.add.at(wins, (a, b), score)
        np.add.at(wins, (b, a), 1.0 - score)
        self.wins = wins
        counts = np.zeros((s, s))
        np.add.at(counts, (a, b), 1.0)
        np.add.at(counts, (b, a), 1.0)
        self.counts = counts
        self.theta = fit_bradley_terry(wins, prior=prior) if s else np.empty(0)
        self.order = sorted(range(s), key=lambda i: (-self.theta[i], self.systems[i]))
        self.information = self._information()
        self._a_inv = np.linalg.inv(self.information + np.ones((s, s)) / max(s, 1)) if s else np.empty((0, 0))
        items = [c.item for c in self.comparisons]
        self.n_items = len(set(items))
        self._sandwich = self._robust_covariance(items)

    # -- the fit -----------------------------------------------------------------------------------------------

    def win_probability(self, i: int, j: int) -> float:
        return float(1.0 / (1.0 + math.exp(-(self.theta[i] - self.theta[j]))))

    def _information(self) -> np.ndarray:
        """Fisher information of the penalised likelihood at the estimate (prior ties included)."""
        s = len(self.systems)
        n = self.counts + self.prior * (1.0 - np.eye(s))
        diff = self.theta[:, None] - self.theta[None, :]
        p = 1.0 / (1.0 + np.exp(-diff))
        w = n * p * (1.0 - p)
        np.fill_diagonal(w, 0.0)
        return np.diag(w.sum(axis=1)) - w

    def _robust_covariance(self, items: list[str]) -> np.ndarray:
        s = len(self.systems)
        if not items:
            return np.zeros((s, s))
        cluster = {name: k for k, name in enumerate(dict.fromkeys(items))}
        m = len(cluster)
        ids = np.array([cluster[i] for i in items], dtype=np.int64)
        p = 1.0 / (1.0 + np.exp(-(self.theta[self._a] - self.theta[self._b])))
        resid = self._score - p
        scores = np.zeros((m, s))
        np.add.at(scores, (ids, self._a), resid)
        np.add.at(scores, (ids, self._b), -resid)
        meat = scores.T @ scores * (m / (m - 1) if m > 1 else 1.0)
        return np.asarray(self._a_inv @ meat @ self._a_inv)

    def contrast_variance(self, i: int, j: int) -> float:
        """Variance of ``theta_i - theta_j`` (see the module docstring)."""
        c = np.zeros(len(self.systems))
        c[i], c[j] = 1.0, -1.0
        return self._variance(c)

    def _variance(self, c: np.ndarray) -> float:
        robust = float(c @ self._sandwich @ c)
        model = float(c @ self._a_inv @ c)
        if self.n_items < MIN_ROBUST_ITEMS:
            return max(robust, model)
        if not robust > DEGENERATE_SHARE * model:
            # every item contributes nothing (all ties) or rounding made it negative: the sandwich says no more
            # than "no spread seen", which is no information; the model-based variance is the floor
            return model
        return robust

    # -- the ranking and its gaps --------------------------------------------------------------------------------

    def ranking(self) -> list[str]:
        return [self.systems[i] for i in self.order]

    def gaps(self, confidence: float, top_k: int | None = None) -> list[Gap]:
        """The adjacent pairs the stopping rule checks: all of them, or those that decide the top ``top_k``
        (positions 1..k among themselves and k against k+1)."""
        alpha = 1.0 - confidence
        last = len(self.order) - 1 if top_k is None else min(top_k, len(self.order) - 1)
        out: list[Gap] = []
        for pos in range(last):
            i, j = self.order[pos], self.order[pos + 1]
            diff = float(self.theta[i] - self.theta[j])
            var = self.contrast_variance(i, j)
            info = 1.0 / var if var > 0 else 0.0
            se = math.sqrt(var) if var > 0 else math.inf
            z = diff / se if diff > DIFF_TOLERANCE and math.isfinite(se) else 0.0
            needed = mixture_z(info, alpha)
            separated = math.isfinite(z) and math.isfinite(needed) and z >= needed
            out.append(Gap(self.systems[i], self.systems[j], pos + 1, diff, se, info, z, needed, separated))
        return out

    def intervals(self, confidence: float) -> dict[str, tuple[float, float]]:
        """Per system, ``theta +- z * se`` with the confidence sequence's z at that system's information (centred
        strengths, same scale as the report's ``strength``)."""
        alpha = 1.0 - confidence
        s = len(self.systems)
        out: dict[str, tuple[float, float]] = {}
        for i, name in enumerate(self.systems):
            c = np.full(s, -1.0 / s)
            c[i] += 1.0
            var = self._variance(c)
            half = mixture_z(1.0 / var, alpha) * math.sqrt(var) if var > 0 else math.inf
            out[name] = (float(self.theta[i] - half), float(self.theta[i] + half))
        return out
