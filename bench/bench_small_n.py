"""Small-n battery (issue 41): do the report's intervals and the gate keep their promises at n = 5..30?

Distributions on the 1-100 rubric scale: normal, skewed, two-point, discrete in steps of 10, all-equal; n in
{5, 10, 20, 30}; ``--reps`` repetitions each (default 2,000). Prints, per distribution and n:

* coverage of the report's score interval (``bootstrap.mean_interval``, target >= 0.93 at nominal 0.95 for
  n >= 10) and, for comparison, of the percentile bootstrap it replaced; the share of intervals that carry a
  ``ci_warning`` or are null;
* coverage of the paired-difference interval under no true difference (both systems drawn from the same
  distribution), i.e. 1 - the rate at which it excludes 0;
* the gate's false-FAIL and false-PASS rates with the true mean drop exactly at the tolerance (target <= 2.5 %), for
  the gate's final test and, for comparison, the t test with a floored SD that it replaced;
* the gate's power on a clear regression (mean drop 30 against a tolerance of 5).

Run: ``PYTHONPATH=. python bench/bench_small_n.py [--reps 2000] [--n-boot 1000]`` (a few minutes on one core).
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable

import numpy as np
from scipy import stats as sps

from dialogue_judge.gate import stats as gs
from judge_api.stats.bootstrap import bootstrap_means, mean_interval, percentile_ci

NS = (5, 10, 20, 30)
LOW, HIGH = 1.0, 100.0
TOLERANCE = 5.0
SCALE = gs.Scale("single", LOW, HIGH)
Sampler = Callable[[np.random.Generator, tuple[int, ...]], np.ndarray]

SCORES: dict[str, Sampler] = {
    "normal N(70, 12)": lambda r, s: np.clip(np.round(r.normal(70, 12, s)), LOW, HIGH),
    "skewed 100 - 99 Beta(0.5, 5)": lambda r, s: np.clip(np.round(100 - 99 * r.beta(0.5, 5, s)), LOW, HIGH),
    "two-point 80 (0.8) / 60": lambda r, s: np.where(r.random(s) < 0.8, 80.0, 60.0),
    "steps of 10": lambda r, s: r.choice(
        np.arange(10.0, 101.0, 10.0), size=s, p=np.array([1, 1, 2, 3, 5, 8, 12, 10, 6, 2]) / 50
    ),
    "all equal 80": lambda r, s: np.full(s, 80.0),
}

# drops (baseline - candidate) whose true mean is exactly the tolerance D = 5
DROPS_AT_TOLERANCE: dict[str, Sampler] = {
    "normal N(5, 10)": lambda r, s: r.normal(5.0, 10.0, s),
    "skewed: 0 (95%) or 99": lambda r, s: np.where(r.random(s) < 5.0 / 99.0, 99.0, 0.0),
    "two-point +10 (87.5%) / -30": lambda r, s: np.where(r.random(s) < 0.875, 10.0, -30.0),
    "steps of 10: 0 or 10": lambda r, s: 10.0 * (r.random(s) < 0.5),
    "all equal 5": lambda r, s: np.full(s, 5.0),
}
CLEAR_REGRESSION: Sampler = lambda r, s: np.clip(np.round(r.normal(30.0, 10.0, s)), -99, 99)  # noqa: E731


def true_mean(sampler: Sampler) -> float:
    return float(sampler(np.random.default_rng(12345), (2_000_000,)).mean())


def covered(low: float | None, high: float | None, value: float) -> bool:
    return low is not None and high is not None and low - 1e-9 <= value <= high + 1e-9


def interval_battery(reps: int, n_boot: int) -> None:
    print(f"\n== score intervals (nominal 0.95; {reps} repetitions; n_boot {n_boot}) ==")
    header = f"{'distribution':32s} {'n':>3s} {'cover':>6s} {'pctl':>6s} {'warn':>5s} {'null':>5s} {'width':>7s}"
    header += f" | {'paired cover':>12s} {'pctl':>6s} {'warn':>5s} {'null':>5s}"
    print(header)
    for name, sampler in SCORES.items():
        mu = true_mean(sampler)
        for n in NS:
            rng = np.random.default_rng(n)
            draws = sampler(rng, (reps, n))
            other = sampler(rng, (reps, n))
            cover = pct = warn = null = 0
            widths = []
            p_cover = p_pct = p_warn = p_null = 0
            for k in range(reps):
                interval = mean_interval(draws[k], n_boot=n_boot, rng=rng, bounds=(LOW, HIGH))
                cover += covered(interval.low, interval.high, mu)
                warn += interval.warning is not None
                null += interval.low is None
                if interval.low is not None and interval.high is not None:
                    widths.append(interval.high - interval.low)
                pct += covered(*percentile_ci(bootstrap_means(draws[k], n_boot, rng)), mu)
                diff = draws[k] - other[k]
                width = HIGH - LOW
                paired = mean_interval(diff, n_boot=n_boot, rng=rng, bounds=(-width, width), what="differences")
                p_cover += covered(paired.low, paired.high, 0.0)
                p_warn += paired.warning is not None
                p_null += paired.low is None
                p_pct += covered(*percentile_ci(bootstrap_means(diff, n_boot, rng)), 0.0)
            line = f"{name:32s} {n:3d} {cover / reps:6.3f} {pct / reps:6.3f} {warn / reps:5.2f} {null / reps:5.2f}"
            line += f" {np.mean(widths) if widths else float('nan'):7.2f}"
            line += f" | {p_cover / reps:12.3f} {p_pct / reps:6.3f} {p_warn / reps:5.2f} {p_null / reps:5.2f}"
            print(line)


def old_t_decision(drops: np.ndarray, alpha_final: float) -> str:
    """The final test before issue 41: Student t, SD floored at 1% of the scale width (from 5 items)."""
    n = drops.size
    if n < gs.MIN_ITEMS_FINAL_TEST:
        return "undecided"
    sd = max(float(drops.std(ddof=1)), 0.01 * SCALE.width)
    se = sd / math.sqrt(n)
    t_crit = float(sps.t.ppf(1.0 - alpha_final / 2.0, n - 1))
    mean = float(drops.mean())
    if mean - t_crit * se > TOLERANCE:
        return "regression"
    if mean + t_crit * se < TOLERANCE:
        return "no_regression"
    return "undecided"


def old_gate(drops: np.ndarray) -> str:
    """The gate before issue 41: the same confidence sequence at the early looks, the old t test at the last."""
    looks = gs.look_schedule(drops.size)
    for index, n_k in enumerate(looks, start=1):
        if index < len(looks):
            early = gs.evaluate_aspect(
                drops[:n_k], scale=SCALE, threshold=TOLERANCE, alpha=0.05, final=False, report_bounds=False
            )
            if early.decision != "undecided":
                return early.decision
    return old_t_decision(drops, 0.025)


def gate_battery(reps: int) -> None:
    print(f"\n== gate, 1-100 scale, --max-drop 5, alpha 0.05, default looks ({reps} repetitions) ==")
    print("true mean drop exactly at the tolerance: any decision is an error (target <= 0.025 each)")
    print(f"{'drops':32s} {'n':>3s} {'false FAIL':>10s} {'false PASS':>10s} | {'before: FAIL':>12s} {'PASS':>6s}")
    for name, sampler in DROPS_AT_TOLERANCE.items():
        for n in NS:
            draws = sampler(np.random.default_rng(100 + n), (reps, n))
            now = [
                gs.sequential_decision(
                    row, scale=SCALE, threshold=TOLERANCE, alpha=0.05, looks=gs.look_schedule(n)
                ).decision
                for row in draws
            ]
            before = [old_gate(row) for row in draws]
            print(
                f"{name:32s} {n:3d} {now.count('regression') / reps:10.4f} {now.count('no_regression') / reps:10.4f}"
                f" | {before.count('regression') / reps:12.4f} {before.count('no_regression') / reps:6.4f}"
            )
    print("\npower: drops ~ N(30, 10) (a clear regression), --max-drop 5")
    print(f"{'n':>3s} {'FAIL':>6s} | {'before':>6s}")
    for n in (*NS, 40, 60):
        draws = CLEAR_REGRESSION(np.random.default_rng(200 + n), (reps, n))
        outcomes = [
            gs.sequential_decision(row, scale=SCALE, threshold=TOLERANCE, alpha=0.05, looks=gs.look_schedule(n))
            for row in draws
        ]
        before = [old_gate(row) for row in draws]
        rate = sum(o.decision == "regression" for o in outcomes) / reps
        print(f"{n:3d} {rate:6.3f} | {before.count('regression') / reps:6.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=2000)
    parser.add_argument("--n-boot", type=int, default=1000)
    args = parser.parse_args()
    started = time.perf_counter()
    gate_battery(args.reps)
    interval_battery(args.reps, args.n_boot)
    print(f"\n{time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
