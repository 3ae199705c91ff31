"""Alert validity under retention (issue 36 finding 1): how many monitors ever alarm when nothing changed, with the
verdicts of the last ``retention`` days kept, before and after the fix.

The issue's set-up: a version rule (v2 against v1, confidence 0.95), no true change (both score
``clip(round(N(72, 15^2)), 1, 100)``, as the simulator returns scripted scores), 300 sampled verdicts a day per
version, 200 days, one look a day, 100 monitors; retention off, 7, 30 and 90 days.

* **before**: the old evaluator, reconstructed: each look runs :func:`judge_api.stats.alerts.compare` on the
  verdicts still kept (the last ``retention`` days), so each look is a fresh test on a different stream.
* **after**: the service's evaluator now: :class:`judge_api.stats.alerts.CompareState`, the test kept as running
  state and given only the day's new verdicts; what retention deletes is never read again. (Here without the
  interval's grid, ``bounds=False``: the decision is the same, only faster.)

Both read the same simulated verdicts. The stated rate is ``1 - confidence`` = 5 % of monitors, for the monitor's
whole life.

Usage::

    python bench/bench_alert_retention.py                 # the issue's figures (100 monitors, 200 days)
    python bench/bench_alert_retention.py --monitors 200 --seed 7
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from judge_api.stats.alerts import CompareState, compare

LOW, HIGH, LEVEL, SD = 1.0, 100.0, 72.0, 15.0


def ever_alarmed_before(v1: np.ndarray, v2: np.ndarray, keep: int | None, confidence: float) -> bool:
    for day in range(v1.shape[0]):
        first = 0 if keep is None else max(0, day + 1 - keep)
        look = compare(
            v1[first : day + 1].ravel(),
            v2[first : day + 1].ravel(),
            low=LOW,
            high=HIGH,
            confidence=confidence,
            bounds=False,
        )
        if look.decision == "regression":
            return True
    return False


def ever_alarmed_after(v1: np.ndarray, v2: np.ndarray, confidence: float) -> bool:
    """The kept state: retention cannot change it (it reads each verdict once, when it arrives)."""
    state = CompareState.start(low=LOW, high=HIGH, confidence=confidence, bounds=False)
    for day in range(v1.shape[0]):
        state.add(v1[day], v2[day])
        if state.evidence().decision == "regression":
            return True
    return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--monitors", type=int, default=100)
    parser.add_argument("--days", type=int, default=200)
    parser.add_argument("--per-day", type=int, default=300)
    parser.add_argument("--confidence", type=float, default=0.95)
    parser.add_argument("--seed", type=int, default=2036)
    args = parser.parse_args()
    settings: list[int | None] = [None, 7, 30, 90]
    before = dict.fromkeys(settings, 0)
    after = 0
    rng = np.random.default_rng(args.seed)
    started = time.perf_counter()
    for _ in range(args.monitors):
        shape = (args.days, args.per_day)
        v1 = np.clip(np.round(rng.normal(LEVEL, SD, shape)), LOW, HIGH)
        v2 = np.clip(np.round(rng.normal(LEVEL, SD, shape)), LOW, HIGH)
        for keep in settings:
            before[keep] += ever_alarmed_before(v1, v2, keep, args.confidence)
        after += ever_alarmed_after(v1, v2, args.confidence)
    elapsed = time.perf_counter() - started
    print(
        f"monitors that ever alarmed with no true change, of {args.monitors} "
        f"({args.per_day} verdicts/day/version, {args.days} days, one look a day, confidence {args.confidence}, "
        f"stated rate {1 - args.confidence:.0%}; seed {args.seed}; {elapsed:.0f} s)"
    )
    print(f"{'retention':>12} | {'before (recompute from kept rows)':>34} | {'after (kept state)':>18}")
    for keep in settings:
        label = "none" if keep is None else f"{keep} days"
        print(f"{label:>12} | {before[keep]:>34} | {after:>18}")


if __name__ == "__main__":
    main()
