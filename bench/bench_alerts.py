"""Alert validity: how often a monitor's compare rule fires when nothing changed, and how many verdicts it needs to
fire on a real drop (issue 25, Benchmarks).

Scripted scores: a response of a version at level ``L`` gets the score ``clip(round(N(L, 15^2)), 1, 100)`` planted
as the simulator's ``<<q=NN>>`` marker, which the simulator judge returns exactly (``judge_simulator.behaviour``);
so the verdict stream the service decides on is this score stream, and the simulation runs the rule's statistics
(``judge_api.stats.alerts``: arrival-order pairs, the gate's betting confidence sequence) on it directly, looking
after every verdict (one pass: ``judge_api.stats.sequential.first_crossing``). ``--e2e`` adds one end-to-end check:
a planted-drop monitor through the real stack (API, Celery worker, Redis, SQLite, the simulator) fires at the pair
count the offline replay of the same scores predicts.

Part 1, no true change, 200 simulated days (``--per-day`` sampled verdicts per version per day, both versions
live at once), ``--replications`` monitors:

* the version rule (v2 vs v1, one anytime-valid test over the 200 days): share of monitors that ever alarmed,
  against the stated rate 1 - confidence;
* the time rule (last 24 h vs the 7 days before: one test per UTC day, the baseline averaged in blocks of 7):
  share of days with a false alarm, against 1 - confidence per day, and the share of monitors with at least one
  false alarm over the 193 tested days (the per-day bound says nothing about it: it grows with the days).

Part 2, a planted drop of 5 points (v1 at 75, v2 at 70): the verdicts until the version rule fires (median and
quartiles over the replications), as candidate verdicts (= pairs) and as verdicts of both versions.

Usage::

    python bench/bench_alerts.py                       # 200 replications, confidence 0.95
    python bench/bench_alerts.py --replications 500 --confidence 0.9
    python bench/bench_alerts.py --e2e                 # plus the end-to-end check (needs Redis)
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from judge_api.stats.alerts import paired_differences
from judge_api.stats.sequential import Scale, first_crossing

SCALE = Scale("single", 1, 100)
SD = 15.0
DAYS = 200


def scores(rng: np.random.Generator, n: int, level: float) -> np.ndarray:
    return np.clip(np.round(rng.normal(level, SD, n)), 1, 100)


def fires_at(baseline: np.ndarray, candidate: np.ndarray, alpha: float, block: int = 1) -> int | None:
    diffs = paired_differences(baseline, candidate, block=block)
    return first_crossing(SCALE.to_unit(diffs), alpha, SCALE.threshold_to_unit(0.0))


def no_change(rng: np.random.Generator, replications: int, per_day: int, alpha: float) -> dict[str, float]:
    ever = time_ever = 0
    alarm_days = tested_days = 0
    for _ in range(replications):
        v1 = scores(rng, DAYS * per_day, 72.0)
        v2 = scores(rng, DAYS * per_day, 72.0)
        ever += fires_at(v1, v2, alpha) is not None
        # the time rule on the same traffic (v2's stream): each day against the 7 days before it
        days = v2.reshape(DAYS, per_day)
        monitor_alarm_days = 0
        for day in range(7, DAYS):
            baseline = days[day - 7 : day].ravel()
            baseline = baseline[rng.permutation(baseline.size)]
            monitor_alarm_days += fires_at(baseline, days[day], alpha, block=7) is not None
            tested_days += 1
        alarm_days += monitor_alarm_days
        time_ever += monitor_alarm_days > 0
    return {
        "version_rule": ever / replications,
        "time_rule_per_day": alarm_days / tested_days,
        "days": tested_days,
        # the time rule's guarantee is per day: over the 193 tested days a monitor can alarm on any of them
        "time_rule_any_day": time_ever / replications,
    }


def planted_drop(rng: np.random.Generator, replications: int, alpha: float, drop: float) -> list[float]:
    needed: list[float] = []
    for _ in range(replications):
        n = 20_000
        at = fires_at(scores(rng, n, 75.0), scores(rng, n, 75.0 - drop), alpha)
        needed.append(float(at) if at is not None else math.inf)
    return needed


def e2e_check(alpha: float, drop: float, seed: int) -> tuple[int, int, float]:
    """One planted-drop monitor through the real stack; (pairs the replay predicts, pairs in the alert, seconds)."""
    import tempfile
    from pathlib import Path

    import httpx

    from dialogue_judge.testing import LiveService, OwnRedis
    from judge_simulator.process import SimulatorProcess

    rng = np.random.default_rng(seed)
    n = 400
    v1, v2 = scores(rng, n, 75.0), scores(rng, n, 75.0 - drop)
    predicted = fires_at(v1, v2, alpha)
    if predicted is None:
        raise SystemExit("this seed's scores never fire; pick another --seed")
    take = predicted + 10
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp, SimulatorProcess() as sim:
        redis = OwnRedis(Path(tmp) / "redis")
        redis.start()
        service = LiveService(redis.url, f"sqlite:///{tmp}/bench.db", Path(tmp) / "svc")
        try:
            service.start_api()
            service.start_worker()
            api = service.api_url
            body = {
                "name": "bench",
                "rubrics": ["rsum-single"],
                "judges": [f"openai-compatible:sim-judge@{sim.base_url}"],
                "aspects": ["consistency"],
                "sample_rate": 1.0,
                "alerts": [
                    {
                        "name": "v",
                        "compare": {"by": "version", "baseline": "v1", "candidate": "v2"},
                        "aspect": "consistency",
                        "confidence": 1 - alpha,
                    }
                ],
            }
            monitor = httpx.post(f"{api}/v1/monitors", json=body, timeout=60).json()
            responses = []
            for i in range(take):  # arrival order: v1, v2, v1, v2 ... as the replay pairs them
                for version, value in (("v1", v1[i]), ("v2", v2[i])):
                    responses.append(
                        {
                            "id": f"{version}-{i}",
                            "dialogue": [{"speaker": "user", "text": f"Remember my dog Rex {i}?"}],
                            "response": f"Rex {i}. <<q={int(value)}>>",
                            "system": "bot",
                            "version": version,
                        }
                    )
            for start in range(0, len(responses), 100):  # one batch at a time keeps the judgment order
                httpx.post(
                    f"{api}/v1/monitors/{monitor['id']}/responses", json=responses[start : start + 100], timeout=60
                ).raise_for_status()
            deadline = time.monotonic() + 300
            alerts: list[dict[str, object]] = []
            while time.monotonic() < deadline and not alerts:
                alerts = httpx.get(f"{api}/v1/monitors/{monitor['id']}/alerts", timeout=30).json()["items"]
                time.sleep(0.5)
            if not alerts:
                raise SystemExit("the service opened no alert")
            evidence = alerts[0]["evidence"]
            assert isinstance(evidence, dict)
            return predicted, int(evidence["decided_at"]), time.perf_counter() - started
        finally:
            service.stop()
            redis.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--replications", type=int, default=200)
    parser.add_argument("--per-day", type=int, default=300, help="sampled verdicts per version per day")
    parser.add_argument("--confidence", type=float, default=0.95)
    parser.add_argument("--drop", type=float, default=5.0)
    parser.add_argument("--seed", type=int, default=2025)
    parser.add_argument("--e2e", action="store_true", help="also run one planted-drop monitor through the service")
    args = parser.parse_args()
    alpha = 1.0 - args.confidence
    rng = np.random.default_rng(args.seed)
    clock = time.perf_counter()
    quiet = no_change(rng, args.replications, args.per_day, alpha)
    print(
        f"no true change, {DAYS} simulated days, {args.per_day} verdicts per version per day, "
        f"{args.replications} monitors, stated false-alarm rate {alpha:.3f}:"
    )
    print(f"  version rule (v2 vs v1, one test over {DAYS} days): alarmed in {quiet['version_rule']:.3%} of monitors")
    print(
        f"  time rule (24h vs 7d, one test per day): false alarm on {quiet['time_rule_per_day']:.3%} of "
        f"{int(quiet['days'])} monitor-days; {quiet['time_rule_any_day']:.1%} of monitors had at least one false "
        f"alarm in the {DAYS - 7} tested days (the bound is per day, not per monitor)"
    )
    needed = np.array(planted_drop(rng, args.replications, alpha, args.drop))
    fired = needed[np.isfinite(needed)]
    q1, median, q3 = np.percentile(fired, [25, 50, 75]) if fired.size else (math.nan,) * 3
    print(
        f"planted drop of {args.drop:g} points (v1 75 -> v2 {75 - args.drop:g}, judge sd {SD:g}), "
        f"{args.replications} monitors, {fired.size} fired within 20,000 pairs:"
    )
    print(
        f"  verdicts until the alert fires: median {median:.0f} candidate verdicts (= pairs; {2 * median:.0f} "
        f"verdicts of both versions), quartiles {q1:.0f}-{q3:.0f}"
    )
    print(f"  ({time.perf_counter() - clock:.1f} s)")
    if args.e2e:
        predicted, seen, seconds = e2e_check(alpha, args.drop, args.seed)
        verdict = "equal" if predicted == seen else "DIFFERENT"
        print(
            f"end-to-end: the replay predicts the alert at {predicted} pairs; the service fired at {seen} ({verdict}; "
            f"{seconds:.0f} s)"
        )


if __name__ == "__main__":
    main()
