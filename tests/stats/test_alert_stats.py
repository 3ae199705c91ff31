"""The statistics of monitor alert rules (judge_api/stats/alerts.py): the compare rule's false-alarm rate when
nothing changed is at most 1 - confidence however often it is looked at (measured by simulation, not assumed), it
detects a drop, it uses the gate's confidence sequence (one-pass crossing = looking after every verdict), and the
floor rule is a plain threshold over at least min_n verdicts."""

from __future__ import annotations

import math

import numpy as np
import pytest

from judge_api.stats import alerts
from judge_api.stats.sequential import Scale, confidence_sequence, first_crossing

SCALE = Scale("single", 1, 100)


def scores(rng: np.random.Generator, n: int, mean: float) -> np.ndarray:
    return np.clip(np.round(rng.normal(mean, 15.0, n)), 1, 100)


def test_first_crossing_equals_looking_after_every_verdict() -> None:
    rng = np.random.default_rng(3)
    diffs = alerts.paired_differences(scores(rng, 400, 70), scores(rng, 400, 64))
    unit, threshold, alpha = SCALE.to_unit(diffs), SCALE.threshold_to_unit(0.0), 0.05
    k = first_crossing(unit, alpha, threshold)
    assert k is not None
    looks = [confidence_sequence(unit[:n], alpha, threshold, bounds=False).log_capital_up for n in range(1, k + 1)]
    crossed = [n + 1 for n, log_k in enumerate(looks) if log_k >= math.log(1 / alpha)]
    assert crossed[0] == k


@pytest.mark.parametrize("confidence", [0.9, 0.95])
def test_no_change_false_alarms_stay_below_the_stated_rate_with_continuous_looks(confidence: float) -> None:
    rng = np.random.default_rng(11)
    alpha, replicates, n = 1 - confidence, 400, 3000
    alarms = 0
    for _ in range(replicates):
        diffs = alerts.paired_differences(scores(rng, n, 72), scores(rng, n, 72))
        alarms += first_crossing(SCALE.to_unit(diffs), alpha, SCALE.threshold_to_unit(0.0)) is not None
    # binomial upper 99.9% slack above alpha: a procedure at alpha passes, one at 2 alpha does not
    assert alarms / replicates <= alpha + 3.1 * math.sqrt(alpha * (1 - alpha) / replicates), alarms


def test_a_five_point_drop_is_detected_and_a_rise_is_not_a_regression() -> None:
    rng = np.random.default_rng(5)
    dropped = alerts.compare(scores(rng, 1500, 70), scores(rng, 1500, 65), low=1, high=100, confidence=0.95)
    assert dropped.decision == "regression"
    assert dropped.ci_low is not None and dropped.ci_low > 0 and dropped.difference is not None
    assert 3 < dropped.difference < 7 and dropped.p_value is not None and dropped.p_value < 0.05
    risen = alerts.compare(scores(rng, 1500, 65), scores(rng, 1500, 70), low=1, high=100, confidence=0.95)
    assert risen.decision == "undecided"
    # a margin of 10 points tolerates the 5-point drop
    tolerated = alerts.compare(
        scores(rng, 1500, 70), scores(rng, 1500, 65), low=1, high=100, confidence=0.95, margin=10
    )
    assert tolerated.decision == "undecided"


def test_higher_is_worse_and_blocks() -> None:
    base, cand = np.array([0.1, 0.2, 0.3, 0.5]), np.array([0.4, 0.4])
    assert list(alerts.paired_differences(base, cand, higher_is_worse=True)) == pytest.approx([0.3, 0.2])
    assert list(alerts.paired_differences(base, cand, block=2)) == pytest.approx([0.15 - 0.4, 0.4 - 0.4])
    assert list(alerts.blocks([1, 2, 3, 4, 5], 2)) == [1.5, 3.5]
    rng = np.random.default_rng(2)
    worse = alerts.compare(
        rng.uniform(0, 0.2, 800), rng.uniform(0.2, 0.5, 800), low=0, high=1, confidence=0.95, higher_is_worse=True
    )
    assert worse.decision == "regression" and worse.n == 800


def test_floor_rule() -> None:
    assert alerts.floor([50.0] * 199, below=60, min_n=200).decision == "insufficient"
    breach = alerts.floor([50.0] * 200, below=60, min_n=200)
    assert breach.decision == "breach" and breach.n == 200 and breach.mean == 50.0
    assert alerts.floor([61.0] * 300, below=60, min_n=200).decision == "ok"
    assert alerts.floor([], below=60, min_n=1).decision == "insufficient"


def test_the_kept_state_fed_in_pieces_is_the_test_over_every_verdict() -> None:
    """Issue 36 finding 1: CompareState, given the verdicts a few at a time and stored as JSON between looks, finds
    what compare() finds over all of them (the same capital, decision and crossing; its interval on the grid,
    never narrower)."""
    import json

    rng = np.random.default_rng(5)
    baseline, candidate = scores(rng, 3000, 72), scores(rng, 2500, 70)
    state = alerts.CompareState.start(low=1, high=100, confidence=0.95)
    b = c = 0
    while b < baseline.size or c < candidate.size:
        nb, nc = int(rng.integers(0, 200)), int(rng.integers(0, 200))
        state.add(baseline[b : b + nb], candidate[c : c + nc])
        b, c = b + nb, c + nc
        state = alerts.CompareState.from_dict(json.loads(json.dumps(state.as_dict())))
    kept, whole = state.evidence(), alerts.compare(baseline, candidate, low=1, high=100, confidence=0.95)
    assert (
        (kept.decision, kept.n, kept.decided_at)
        == (whole.decision, whole.n, whole.decided_at)
        == (
            "regression",
            2500,
            whole.decided_at,
        )
    )
    assert kept.p_value == pytest.approx(whole.p_value, rel=1e-9)
    assert kept.difference == pytest.approx(whole.difference)
    assert kept.baseline_mean == pytest.approx(whole.baseline_mean)
    assert whole.ci_low is not None and whole.ci_high is not None and kept.ci_low is not None
    assert kept.ci_high is not None
    assert kept.ci_low <= whole.ci_low <= whole.ci_high <= kept.ci_high
    assert whole.ci_low - kept.ci_low < 0.25 and kept.ci_high - whole.ci_high < 0.25
