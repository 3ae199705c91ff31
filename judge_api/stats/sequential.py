"""The anytime-valid betting confidence sequence for the mean of bounded values (pure numpy): the gate's early
stops (``dialogue_judge.gate.stats``, whose docstring explains the procedure) and the monitors' alert rules
(``judge_api.stats.alerts``) decide with it.

Waudby-Smith & Ramdas, "Estimating means of bounded random variables by betting" (JRSS-B 2023): hedged capital
process, predictable plug-in bets truncated at ``c / m`` with ``c = 3/4``, running intersection. By Ville's
inequality it covers the true mean at every sample size simultaneously with probability ``>= 1 - alpha``, so the
evidence may be looked at after every new value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike

GateMode = Literal["single", "pairwise"]

BET_TRUNCATION = 0.75
"""``c`` of the betting confidence sequence: bets are truncated at ``c / m`` (``c / (1 - m)``)."""
HEDGE = 0.5
"""Weight of the upward capital process in the hedged process (``theta``)."""


def _finite(values: ArrayLike) -> np.ndarray:
    x = np.asarray(values, dtype="float64").ravel()
    return x[np.isfinite(x)]


def _plugin_bets(x: np.ndarray, alpha: float) -> np.ndarray:
    """Predictable plug-in bets ``lambda_t`` (WSR 2023, eq. 26), computed from ``x_1 .. x_{t-1}`` only."""
    t = np.arange(1, x.size + 1, dtype="float64")
    mu_hat = (0.5 + np.cumsum(x)) / (t + 1.0)
    sigma2 = (0.25 + np.cumsum((x - mu_hat) ** 2)) / (t + 1.0)
    sigma2_prev = np.concatenate(([0.25], sigma2[:-1]))
    return np.sqrt(2.0 * math.log(2.0 / alpha) / (sigma2_prev * t * np.log1p(t)))


def _max_log_capital(x: np.ndarray, bets: np.ndarray, m: float) -> tuple[float, float]:
    """``max_s log K+_s(m)`` and ``max_s log K-_s(m)`` over the prefixes of ``x`` (running intersection)."""
    if x.size == 0:
        return 0.0, 0.0
    up = np.minimum(bets, BET_TRUNCATION / m) if m > 0 else bets
    down = np.minimum(bets, BET_TRUNCATION / (1.0 - m)) if m < 1 else bets
    log_up = np.cumsum(np.log1p(up * (x - m)))
    log_down = np.cumsum(np.log1p(-down * (x - m)))
    return float(max(0.0, log_up.max())), float(max(0.0, log_down.max()))


@dataclass(frozen=True)
class SequenceState:
    """The confidence sequence for a mean of values in [0, 1] after all the values seen so far."""

    n: int
    low: float
    high: float
    log_capital_up: float
    """``max_s log K+_s(threshold)``: evidence that the mean exceeds the threshold."""
    log_capital_down: float
    """``max_s log K-_s(threshold)``: evidence that the mean is below the threshold."""


def confidence_sequence(values: ArrayLike, alpha: float, threshold: float, *, bounds: bool = True) -> SequenceState:
    """Hedged-capital betting confidence sequence (level ``1 - alpha``) for the mean of values in [0, 1].

    ``low``/``high`` are the running-intersection bounds after the last value. ``K+_t(m)`` is non-increasing and
    ``K-_t(m)`` non-decreasing in ``m`` (the truncated bets keep that), so the sequence is an interval and its
    bounds are found by bisection (skipped with ``bounds=False``: the decision needs only the threshold).
    """
    x = _finite(values)
    if x.size and (x.min() < 0.0 or x.max() > 1.0):
        raise ValueError("the confidence sequence needs values in [0, 1]")
    bets = _plugin_bets(x, alpha)
    barrier = math.log(1.0 / alpha)
    log_theta_up, log_theta_down = math.log(HEDGE), math.log(1.0 - HEDGE)

    def rejected_up(m: float) -> bool:  # m is below the mean, credibly
        return _max_log_capital(x, bets, m)[0] + log_theta_up >= barrier

    def rejected_down(m: float) -> bool:  # m is above the mean, credibly
        return _max_log_capital(x, bets, m)[1] + log_theta_down >= barrier

    def bisect(predicate: Any, lo: float, hi: float, want_last_true: bool) -> float:
        # predicate is monotone on [lo, hi]; find its switching point
        for _ in range(48):
            mid = (lo + hi) / 2.0
            if predicate(mid) == want_last_true:
                lo = mid
            else:
                hi = mid
        return (lo + hi) / 2.0

    low, high = float("nan"), float("nan")
    if bounds:
        low, high = _bounds(x, rejected_up, rejected_down, bisect)
    up, down = _max_log_capital(x, bets, threshold)
    return SequenceState(int(x.size), low, high, up + log_theta_up, down + log_theta_down)


def _bounds(x: np.ndarray, rejected_up: Any, rejected_down: Any, bisect: Any) -> tuple[float, float]:
    low = 0.0
    if x.size and rejected_up(1e-12):
        low = bisect(rejected_up, 1e-12, 1.0 - 1e-12, True)
    high = 1.0
    if x.size and rejected_down(1.0 - 1e-12):
        high = bisect(lambda m: not rejected_down(m), 1e-12, 1.0 - 1e-12, True)
    return low, high


@dataclass(frozen=True)
class Scale:
    """Where the values of an aspect live: drops of a ``[low, high]`` score scale, or loss values in [0, 1]."""

    mode: GateMode
    low: float = 0.0
    high: float = 1.0

    @property
    def width(self) -> float:
        return self.high - self.low

    def to_unit(self, values: np.ndarray) -> np.ndarray:
        if self.mode == "pairwise":
            return values
        return (values + self.width) / (2.0 * self.width)

    def from_unit(self, value: float) -> float:
        if self.mode == "pairwise":
            return value
        return value * 2.0 * self.width - self.width

    def threshold_to_unit(self, threshold: float) -> float:
        return float(self.to_unit(np.asarray([threshold], dtype="float64"))[0])


def first_crossing(values: ArrayLike, alpha: float, threshold: float) -> int | None:
    """How many values (of ``values`` in [0, 1], in order) the sequence needs before it puts the mean above
    ``threshold`` at level ``1 - alpha`` (the count at the first look, after every value, where
    :func:`confidence_sequence` would find ``log_capital_up >= log(1/alpha)``); None if it never does. One pass:
    the bets are predictable, so the capital path is the same whether it is looked at once or after every value."""
    x = _finite(values)
    if x.size == 0:
        return None
    bets = _plugin_bets(x, alpha)
    up = np.minimum(bets, BET_TRUNCATION / threshold) if threshold > 0 else bets
    log_up = np.cumsum(np.log1p(up * (x - threshold))) + math.log(HEDGE)
    crossed = np.flatnonzero(log_up >= math.log(1.0 / alpha))
    return int(crossed[0]) + 1 if crossed.size else None


GRID = sorted({*np.round(np.linspace(0.01, 0.99, 99), 6).tolist(), *np.round(np.linspace(0.4, 0.6, 201), 6).tolist()})
"""Means tracked by a :class:`RunningSequence` for its interval (the threshold is always among them): every 0.01,
and every 0.001 within 0.1 of 1/2, where the compare rule's differences of no or a small change put the mean."""
UPDATE_CHUNK = 4096


@dataclass
class RunningSequence:
    """The betting confidence sequence kept as running sums (issue 36 finding 1): after :meth:`update` with values
    ``x_1 .. x_n`` in any number of calls, its capital at the threshold is exactly what :func:`confidence_sequence`
    finds over all of them, so a look never needs the values again (retention may delete them). Its interval is
    the same running intersection on the means of ``GRID``, rounded outwards to them (never narrower)."""

    alpha: float
    threshold: float
    grid: list[float]
    t: int = 0
    total: float = 0.0
    """``sum x_i``: the plug-in mean's numerator."""
    deviations: float = 0.0
    """``sum (x_i - mu_hat_i)^2``: the plug-in variance's numerator."""
    log_up: list[float] | None = None
    max_up: list[float] | None = None
    log_down: list[float] | None = None
    max_down: list[float] | None = None
    crossed_at: int | None = None
    """The value count at which the capital at the threshold first reached ``log(1/alpha)`` (see first_crossing)."""

    @classmethod
    def start(cls, alpha: float, threshold: float, *, bounds: bool = True) -> RunningSequence:
        grid = sorted({*(GRID if bounds else []), float(threshold)})
        zeros = [0.0] * len(grid)
        return cls(
            alpha, float(threshold), grid, log_up=zeros, max_up=list(zeros), log_down=list(zeros), max_down=list(zeros)
        )

    def update(self, values: ArrayLike) -> None:
        x = _finite(values)
        if x.size and (x.min() < 0.0 or x.max() > 1.0):
            raise ValueError("the confidence sequence needs values in [0, 1]")
        for start in range(0, x.size, UPDATE_CHUNK):
            self._update(x[start : start + UPDATE_CHUNK])

    def _update(self, x: np.ndarray) -> None:
        t = self.t + np.arange(1, x.size + 1, dtype="float64")
        mu_hat = (0.5 + self.total + np.cumsum(x)) / (t + 1.0)
        deviations = self.deviations + np.cumsum((x - mu_hat) ** 2)
        sigma2 = (0.25 + deviations) / (t + 1.0)
        before = 0.25 if self.t == 0 else (0.25 + self.deviations) / (self.t + 1.0)
        sigma2_prev = np.concatenate(([before], sigma2[:-1]))
        bets = np.sqrt(2.0 * math.log(2.0 / self.alpha) / (sigma2_prev * t * np.log1p(t)))[:, None]
        m = np.asarray(self.grid)[None, :]
        up = np.minimum(bets, np.where(m > 0, BET_TRUNCATION / np.maximum(m, 1e-300), np.inf))
        down = np.minimum(bets, np.where(m < 1, BET_TRUNCATION / np.maximum(1.0 - m, 1e-300), np.inf))
        path_up = np.asarray(self.log_up) + np.cumsum(np.log1p(up * (x[:, None] - m)), axis=0)
        path_down = np.asarray(self.log_down) + np.cumsum(np.log1p(-down * (x[:, None] - m)), axis=0)
        if self.crossed_at is None:
            at = path_up[:, self.grid.index(self.threshold)] + math.log(HEDGE) >= math.log(1.0 / self.alpha)
            hits = np.flatnonzero(at)
            self.crossed_at = self.t + int(hits[0]) + 1 if hits.size else None
        self.max_up = np.maximum(np.asarray(self.max_up), path_up.max(axis=0)).tolist()
        self.max_down = np.maximum(np.asarray(self.max_down), path_down.max(axis=0)).tolist()
        self.log_up, self.log_down = path_up[-1].tolist(), path_down[-1].tolist()
        self.t += int(x.size)
        self.total += float(x.sum())
        self.deviations = float(deviations[-1])

    def state(self) -> SequenceState:
        """As :func:`confidence_sequence` over every value so far (the bounds on the grid)."""
        assert self.max_up is not None and self.max_down is not None
        barrier = math.log(1.0 / self.alpha)
        up = np.asarray(self.max_up) + math.log(HEDGE)
        down = np.asarray(self.max_down) + math.log(1.0 - HEDGE)
        grid = np.asarray(self.grid)
        below = grid[up >= barrier]  # means the values are credibly above
        above = grid[down >= barrier]  # means the values are credibly below
        low = float(below.max()) if below.size else 0.0
        high = float(above.min()) if above.size else 1.0
        index = self.grid.index(self.threshold)
        return SequenceState(self.t, low, high, float(up[index]), float(down[index]))

    def as_dict(self) -> dict[str, Any]:
        """The fields as JSON-ready values (shallow: the lists are shared, not copied)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunningSequence:
        return cls(**data)
