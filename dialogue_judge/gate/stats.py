"""The consistency gate's decision procedure: pure numpy/scipy, no I/O, so it can be checked by simulation.

What is decided
---------------
* **single mode**: the per-item *drop* ``d_i = score(baseline) - score(candidate)`` of one aspect (positive = the
  candidate got worse). The parameter is the mean drop ``mu``, the tolerance ``D`` (``--max-drop``).
* **pairwise mode**: per item, the candidate's head-to-head outcome against the baseline with both presentation
  orders combined (``judge_api.stats.preferences.combine_orders``: orders agree -> that outcome, disagree -> tie).
  Its *loss value* is 1 for a loss, 1/2 for a tie and 0 for a win; the parameter is the *loss rate* ``p`` (the
  mean loss value = 1 - the candidate's win rate with ties counted half, the statistics library's convention).
  ``p = 0.5`` when nothing changed, whatever the judge's appetite for ties. The tolerance is ``L``
  (``--max-loss-rate``).

*regression* when a confidence interval for the parameter lies entirely above the tolerance; *no regression* when
it lies entirely below it (the drop is credibly smaller than what the team tolerates); otherwise *undecided*.

Error control with repeated looks: a confidence sequence plus one final fixed-sample test
------------------------------------------------------------------------------------------
Items are judged in a seeded random order, in batches, and the evidence is examined after every batch. Alpha is
split in two halves (and, with ``m`` gated aspects, each aspect gets ``alpha / m`` split the same way):

1. **Early stops: an anytime-valid betting confidence sequence** at level ``1 - alpha / 2`` (Waudby-Smith & Ramdas,
   "Estimating means of bounded random variables by betting", JRSS-B 2023: hedged capital process, predictable
   plug-in bets truncated at ``c / m`` with ``c = 3/4``, running intersection). It needs nothing but bounded
   values: drops lie in ``[-(max - min), max - min]`` of the rubric's scale and loss values in ``[0, 1]``. By
   Ville's inequality it covers the true parameter at *every* item count simultaneously with probability
   ``>= 1 - alpha / 2``, so any number of looks, at any time, is allowed. An aspect stops as soon as the sequence
   excludes the tolerance.
2. **The final fixed-sample test**, once, when the items run out (or the budget stops the run): a two-sided
   ``1 - alpha / 2`` interval on everything judged: for the mean drop, the inversion of a fixed-sample betting test
   (``bounded_mean_test``: an equal mixture of products ``prod(1 + lambda (x_i - m))`` over fixed bets, an e-value
   for any distribution on the bounded scale, so valid at every n; a t interval is not: five drops of exactly 10
   gave p = 0.0007 against D = 5, and two-point drops with mean below D failed 32% of builds at n = 5); the same
   test on the loss values in [0, 1] for the loss rate (Tango's asymptotic score interval, kept below as
   ``tango_test``, is not valid at small n: exactly computed, it passed 5.3% of builds with a loss rate of exactly
   L = 0.9 at n = 9).

By the union bound the gate errs (a false alarm, or a pass while the true drop exceeds the tolerance) with
probability at most ``alpha`` however early it stops. Why not the t interval at every look with Bonferroni
spending? Because a small early sample cannot rule out rare large effects: when a change ruins 10% of the dialogues
and leaves the rest untouched, 16 items show no damage 18% of the time and a t interval would declare them safe.
The betting sequence only stops early on evidence that no bounded distribution explains away; large regressions
(the calls worth saving) still stop early, and ordinary cases are settled by the final test, whose power is that
of a fixed-sample test at ``alpha / 2``. A sign or sign-flip permutation test would be sharper at small n but tests
the median (or assumes symmetry), not the mean: with drops +10 (p = 0.8) or -30 (mean 2 < D = 5), 10 items are all
+10 11% of the time and an exact sign test then rejects at 1/1024, so neither is used. The price of validity on a
bounded scale is the number of items: a drop of 10 on every item needs ~120 items to fail against D = 5 on 1-100 (no
valid test can do it under ~93: a 1-in-22 chance of a 99-point gain leaves the mean at 5).
With ``sequential=False`` (or when the verdicts already exist) the final test alone is run at the full ``alpha``.
``tests/gate/test_gate_stats.py`` measures the error rates by simulation rather than assuming them.

The reported p-value is *adjusted*: the smallest alpha at which the gate would have made the same decision at the
same look (``4m / K`` for the confidence sequence with capital ``K``, ``4m p`` for the one-sided p-value of the
final test), so it can be compared with alpha directly.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from numpy.typing import ArrayLike
from scipy import optimize
from scipy import stats as sps

if TYPE_CHECKING:
    from judge_api.stats.sequential import GateMode, Scale, SequenceState  # noqa: F401

# The betting confidence sequence and the scales live in judge_api.stats.sequential (the monitors' alert rules use
# them too). They are loaded on first use, not when this module is imported: importing dialogue_judge.gate (the CLI,
# the pytest plugin) must not load judge_api (tests/gate/test_gate_imports.py).
_MOVED = ("BET_TRUNCATION", "HEDGE", "GateMode", "Scale", "SequenceState", "confidence_sequence")


def __getattr__(name: str) -> Any:
    if name in _MOVED:
        from judge_api.stats import sequential

        return getattr(sequential, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _finite(values: ArrayLike) -> np.ndarray:
    from judge_api.stats.sequential import _finite as finite

    return finite(values)


Decision = Literal["regression", "no_regression", "undecided"]
DecidedBy = Literal["confidence sequence", "final test", ""]

MIN_BATCH = 10
"""Smallest automatic batch (items judged between two looks)."""
TARGET_LOOKS = 10
"""The automatic batch size aims at about this many looks."""
BOUNDED_METHOD = "bounded-mean betting test"
MIN_ITEMS_FINAL_TEST = 5
"""The final fixed-sample test never decides on fewer usable items than this."""


# -- batches ---------------------------------------------------------------------------------------------------


def look_schedule(n_items: int, batch: int | None = None, *, sequential: bool = True) -> list[int]:
    """Cumulative item counts after which the gate looks at the evidence (the last one is ``n_items``)."""
    if n_items <= 0:
        return []
    if not sequential:
        return [n_items]
    if batch is None:
        batch = max(MIN_BATCH, math.ceil(n_items / TARGET_LOOKS))
    if batch < 1:
        raise ValueError("a batch must hold at least one item")
    looks = list(range(batch, n_items, batch))
    looks.append(n_items)
    return looks


# -- final fixed-sample tests -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FixedTest:
    n: int
    estimate: float | None
    ci_low: float | None
    ci_high: float | None
    p_regression: float | None
    """One-sided p-value of H0 'no regression beyond the tolerance' (small -> regression)."""
    p_no_regression: float | None
    """One-sided p-value of H0 'a regression at least as large as the tolerance' (small -> pass)."""
    sd: float | None = None


BET_FRACTIONS = (1.0, 0.75, 0.5, 0.25, 0.125, 1.0 / 16.0, 1.0 / 32.0, 1.0 / 64.0)
"""Single mode's final test: the fixed bets ``lambda = c / m`` (``c / (1 - m)`` downwards) mixed with equal weight."""


def _log_evalues(unit: np.ndarray, m: np.ndarray | float) -> tuple[np.ndarray, np.ndarray]:
    """``log E+`` and ``log E-`` at hypothesised means ``m`` (broadcast against the rows of ``unit``, values in
    [0, 1], last axis = items): the equal mixture over ``BET_FRACTIONS`` of the products ``prod(1 + lambda (x - m))``
    with ``lambda = c / m`` (up) and ``prod(1 - lambda (x - m))`` with ``lambda = c / (1 - m)`` (down).

    Each product has expectation <= 1 when the mean is <= m (up) or >= m (down), for *any* distribution on
    [0, 1], so the mixture is an e-value and ``min(1, 1 / E)`` a valid p-value (Markov's inequality), whatever n.
    """
    m_arr = np.clip(np.asarray(m, dtype="float64"), 1e-12, 1.0 - 1e-12)[..., None, None]
    c = np.asarray(BET_FRACTIONS, dtype="float64")[:, None]
    x = unit[..., None, :]
    with np.errstate(divide="ignore"):
        log_up = np.log1p(c * (x / m_arr - 1.0)).sum(axis=-1)
        log_down = np.log1p(c * ((1.0 - x) / (1.0 - m_arr) - 1.0)).sum(axis=-1)
    g = math.log(len(BET_FRACTIONS))
    return _logsumexp(log_up) - g, _logsumexp(log_down) - g


def _logsumexp(a: np.ndarray) -> np.ndarray:
    top = np.max(a, axis=-1)
    safe = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(divide="ignore"):
        return safe + np.log(np.exp(a - safe[..., None]).sum(axis=-1))


def bounded_mean_p_values(unit: ArrayLike, m: float) -> tuple[np.ndarray, np.ndarray]:
    """One-sided p-values ``(H0: mean <= m, H0: mean >= m)`` for values in [0, 1] (rows = samples, vectorised)."""
    x = np.asarray(unit, dtype="float64")
    log_up, log_down = _log_evalues(x, m)
    return np.minimum(1.0, np.exp(-log_up)), np.minimum(1.0, np.exp(-log_down))


def bounded_mean_test(
    drops: ArrayLike, max_drop: float, alpha: float, *, scale: Scale, bounds: bool = True
) -> FixedTest:
    """Interval (two-sided level ``1 - alpha``) of the mean drop and the one-sided tests against D, valid for every
    distribution of the drops on ``[-(max - min), max - min]`` and every n: the tests of :func:`_log_evalues`,
    inverted for the interval (``E+`` falls and ``E-`` rises with m, so each bound is found by bisection; skipped
    with ``bounds=False``, the decision needs only the p-values)."""
    x = _finite(drops)
    n = int(x.size)
    if n == 0:
        return FixedTest(0, None, None, None, None, None)
    unit = scale.to_unit(x)
    barrier = math.log(2.0 / alpha)
    grid = np.linspace(0.0, 1.0, 65)

    def bound(index: int) -> float:
        lo, hi = 0.0, 1.0
        log_e = _log_evalues(unit, grid)[index]
        rejected = log_e >= barrier
        if index == 0:  # low: the largest m still rejected by E+ (E+ falls with m)
            if not rejected.any():
                return 0.0
            k = int(np.flatnonzero(rejected)[-1])
            lo, hi = float(grid[k]), float(grid[min(k + 1, grid.size - 1)])
        else:  # high: the smallest m rejected by E-
            if not rejected.any():
                return 1.0
            k = int(np.flatnonzero(rejected)[0])
            lo, hi = float(grid[max(k - 1, 0)]), float(grid[k])
        for _ in range(30):
            mid = (lo + hi) / 2.0
            hit = bool(_log_evalues(unit, mid)[index] >= barrier)
            if (index == 0) == hit:
                lo = mid
            else:
                hi = mid
        return (lo + hi) / 2.0

    p_up, p_down = bounded_mean_p_values(unit, scale.threshold_to_unit(max_drop))
    return FixedTest(
        n,
        float(x.mean()),
        scale.from_unit(bound(0)) if bounds else None,
        scale.from_unit(bound(1)) if bounds else None,
        float(p_up),
        float(p_down),
        float(x.std(ddof=1)) if n > 1 else None,
    )


def tango_z(losses: float, wins: float, n: float, delta0: float) -> float:
    """Tango's (1998) score statistic for H0: P(loss) - P(win) = delta0 (paired proportions; ties concordant)."""
    a = 2.0 * n
    b = -losses - wins + (2.0 * n - losses + wins) * delta0
    c = -wins * delta0 * (1.0 - delta0)
    p_win = (-b + math.sqrt(max(b * b - 4.0 * a * c, 0.0))) / (2.0 * a)
    variance = n * (2.0 * p_win + delta0 * (1.0 - delta0))
    diff = losses - wins - n * delta0
    if variance <= 0.0:
        return math.copysign(math.inf, diff) if diff else 0.0
    return diff / math.sqrt(variance)


def tango_test(loss_values: ArrayLike, max_loss_rate: float, alpha: float) -> FixedTest:
    """Tango score interval (level ``1 - alpha``) of the loss rate ``0.5 + (P(loss) - P(win)) / 2``."""
    x = _finite(loss_values)
    n = int(x.size)
    if n == 0:
        return FixedTest(0, None, None, None, None, None)
    losses, wins = float((x == 1.0).sum()), float((x == 0.0).sum())
    rate = float(x.mean())
    z_crit = float(sps.norm.ppf(1.0 - alpha / 2.0))
    eps = 1e-9
    delta_hat = (losses - wins) / n

    def root(target: float, lo: float, hi: float, edge: float) -> float:
        f = lambda d: tango_z(losses, wins, n, d) - target  # noqa: E731
        if f(lo) * f(hi) > 0:
            return edge
        return float(optimize.brentq(f, lo, hi, xtol=1e-10))

    d_low = root(z_crit, -1.0 + eps, min(delta_hat, 1.0 - eps), -1.0)
    d_high = root(-z_crit, max(delta_hat, -1.0 + eps), 1.0 - eps, 1.0)
    z = tango_z(losses, wins, n, 2.0 * max_loss_rate - 1.0)
    return FixedTest(n, rate, 0.5 + d_low / 2.0, 0.5 + d_high / 2.0, float(sps.norm.sf(z)), float(sps.norm.cdf(z)))


# -- one aspect at one look ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AspectEvidence:
    """The decision for one aspect at one look, with the numbers that justify it."""

    decision: Decision
    decided_by: DecidedBy
    n: int
    estimate: float | None
    ci_low: float | None
    ci_high: float | None
    ci_level: float
    ci_method: str
    p_value: float | None
    """Adjusted p-value of the decision's direction (regression when undecided); compare with alpha."""
    sd: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def evaluate_aspect(
    values: ArrayLike,
    *,
    scale: Scale,
    threshold: float,
    alpha: float,
    n_aspects: int = 1,
    final: bool,
    sequential: bool = True,
    report_bounds: bool = True,
) -> AspectEvidence:
    """Decide one aspect from its values so far (drops or loss values, in judging order; NaN = no verdict).

    ``sequential``: the confidence sequence is consulted (and the final test gets the other half of the
    aspect's alpha); ``final``: this is the last look, so the final fixed-sample test runs if the sequence did
    not decide.
    """
    x = _finite(values)
    n = int(x.size)
    alpha_aspect = alpha / n_aspects
    alpha_final = alpha_aspect / 2.0 if sequential else alpha_aspect
    if sequential and n:
        cs_alpha = alpha_aspect / 2.0
        from judge_api.stats.sequential import confidence_sequence

        state = confidence_sequence(
            scale.to_unit(x), cs_alpha, scale.threshold_to_unit(threshold), bounds=report_bounds
        )
        barrier = math.log(1.0 / cs_alpha)
        low: float | None = None
        high: float | None = None
        if report_bounds:
            low, high = scale.from_unit(state.low), scale.from_unit(state.high)
        estimate = float(x.mean())
        if state.log_capital_up >= barrier or state.log_capital_down >= barrier:
            regression = state.log_capital_up >= state.log_capital_down
            log_k = state.log_capital_up if regression else state.log_capital_down
            # the hedged barrier is theta*K >= 1/a', a' = alpha/(2m): the smallest alpha that rejects is 2m/(theta*K)
            p = min(1.0, 2.0 * n_aspects * math.exp(-log_k))
            return AspectEvidence(
                "regression" if regression else "no_regression",
                "confidence sequence",
                n,
                estimate,
                low,
                high,
                1.0 - cs_alpha,
                "betting confidence sequence",
                p,
            )
        if not final:
            p = min(1.0, 2.0 * n_aspects * math.exp(-state.log_capital_up))
            return AspectEvidence(
                "undecided", "", n, estimate, low, high, 1.0 - cs_alpha, "betting confidence sequence", p
            )
    # both modes: loss values lie in [0, 1] as drops lie on the scale. Tango's asymptotic interval, used here for
    # the loss rate until the issue 41 review, passed 5.3% of builds whose loss rate was exactly L = 0.9 at n = 9
    # (10.2% at L = 0.95 with --no-sequential), exactly computed, against the promised 2.5%.
    test = bounded_mean_test(x, threshold, alpha_final, scale=scale, bounds=report_bounds)
    method = BOUNDED_METHOD
    factor = 2.0 * alpha / alpha_final  # one-sided p vs alpha_final / 2, expressed against alpha
    decision: Decision = "undecided"
    if final and n >= MIN_ITEMS_FINAL_TEST:
        # the interval is the inversion of these tests; deciding on the p-values needs no bisection
        if test.p_regression is not None and test.p_regression <= alpha_final / 2.0:
            decision = "regression"
        elif test.p_no_regression is not None and test.p_no_regression <= alpha_final / 2.0:
            decision = "no_regression"
    raw_p = test.p_no_regression if decision == "no_regression" else test.p_regression
    p_final = None if raw_p is None else min(1.0, raw_p * factor)
    return AspectEvidence(
        decision,
        "final test" if decision != "undecided" else "",
        n,
        test.estimate,
        test.ci_low,
        test.ci_high,
        1.0 - alpha_final,
        method,
        p_final,
        test.sd,
    )


@dataclass(frozen=True)
class SequentialOutcome:
    decision: Decision
    look: int
    """1-based index of the look that decided (the last look when undecided)."""
    n_looks: int
    n_items: int
    """Items judged when the procedure stopped."""
    evidence: AspectEvidence


def sequential_decision(
    values: ArrayLike,
    *,
    scale: Scale,
    threshold: float,
    alpha: float,
    looks: Sequence[int],
    n_aspects: int = 1,
    sequential: bool = True,
    report_bounds: bool = False,
) -> SequentialOutcome:
    """The gate's procedure for one aspect on values already in judging order (NaN = no usable verdict).

    ``report_bounds=False`` (simulations) skips the bisection for the confidence sequence's bounds.
    """
    x = np.asarray(values, dtype="float64").ravel()
    evidence: AspectEvidence | None = None
    for index, n_k in enumerate(looks, start=1):
        final = index == len(looks)
        evidence = evaluate_aspect(
            x[:n_k],
            scale=scale,
            threshold=threshold,
            alpha=alpha,
            n_aspects=n_aspects,
            final=final,
            sequential=sequential,
            report_bounds=report_bounds,
        )
        if evidence.decision != "undecided":
            return SequentialOutcome(evidence.decision, index, len(looks), min(n_k, x.size), evidence)
    assert evidence is not None, "no looks"
    return SequentialOutcome("undecided", len(looks), len(looks), min(looks[-1], x.size), evidence)


def loss_value(outcome: str | None) -> float:
    """Pairwise outcome *for the candidate* -> loss value (loss 1, tie 1/2, win 0; NaN when missing)."""
    return {"loss": 1.0, "tie": 0.5, "win": 0.0}.get(outcome or "", float("nan"))


def default_max_drop(scale_low: float, scale_high: float) -> float:
    """The default tolerance: 5 points on a 1-100 scale, the same share of other scales."""
    return round(0.05 * (scale_high - scale_low + 1.0), 6)
