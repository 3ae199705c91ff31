"""Adaptive self-consistency: when another sample is drawn."""

from __future__ import annotations

import pytest

from judge_api.adaptive.sampling import SamplingRule, more_samples, rule_for, usage

RSUM = {"2": "win", "1": "tie", "0": "tie", "-1": "tie", "-2": "loss"}
PAIRWISE = rule_for("pairwise", max_samples=5, verdict_levels=[2, 1, -1, -2], outcome_map=RSUM)
ABC = rule_for("pairwise", max_samples=4, verdict_levels=[2, 0, -2], outcome_map={"2": "win", "0": "tie", "-2": "loss"})
SINGLE = rule_for("single", max_samples=5, scale=(1, 100))
PASS_MARK = rule_for("single", max_samples=5, scale=(1, 100), boundaries=[60])


@pytest.mark.parametrize(
    ("rule", "values", "n_rows", "more"),
    [
        # pairwise: a clear first verdict is enough, a hedged one asks for a second
        (PAIRWISE, [2], 1, False),
        (PAIRWISE, [-2], 1, False),
        (PAIRWISE, [1], 1, True),
        (ABC, [0], 1, True),
        (ABC, [-2], 1, False),
        # two agreeing outcomes settle it (slightly better twice is a tie twice)
        (PAIRWISE, [1, 1], 2, False),
        (PAIRWISE, [1, -1], 2, False),
        (PAIRWISE, [2, 1], 2, True),
        (PAIRWISE, [2, 1, 2], 3, True),
        (PAIRWISE, [2, 1, 2, 2], 4, False),
        (PAIRWISE, [2, -2, 1, 2], 4, True),
        (PAIRWISE, [2, -2, 1, -2], 5, False),  # the maximum
        (ABC, [2, -2, 2], 3, True),
        (ABC, [2, -2, 2, 0], 4, False),
        # failed samples count against the maximum but carry nothing
        (PAIRWISE, [], 1, True),
        (PAIRWISE, [1], 5, False),
        # single: one score cannot disagree with itself (two by default); two within 5 % of the scale settle it
        (SINGLE, [70], 1, True),
        (SINGLE, [70, 73], 2, False),
        (SINGLE, [70, 82], 2, True),
        (SINGLE, [70, 82, 76, 75, 74], 5, False),
        (SINGLE, [70, 82, 76, 75], 4, False),
        (SINGLE, [40, 90, 60, 20], 4, True),
        # a pass mark at 60: a score close to it wants more evidence, a far one does not
        (PASS_MARK, [62, 62], 2, True),
        (PASS_MARK, [62, 64], 2, True),
        (PASS_MARK, [62, 62, 62, 62], 4, True),
        (PASS_MARK, [66, 66], 2, False),
        (PASS_MARK, [85, 87], 2, False),
    ],
)
def test_more_samples(rule: SamplingRule, values: list[float], n_rows: int, more: bool) -> None:
    assert more_samples(rule, n_rows, values) is more


def test_near_a_boundary_with_one_sample() -> None:
    rule = rule_for("single", max_samples=3, min_samples=1, scale=(0, 10), boundaries=[5])
    assert rule.margin == pytest.approx(0.5)
    assert more_samples(rule, 1, [5.3]) and not more_samples(rule, 1, [8.0])


def test_usage_and_saving() -> None:
    use = usage([1, 1, 2, 1, 5], fixed=5)
    assert (use.judgments, use.samples, use.histogram) == (5, 10, {1: 3, 2: 1, 5: 1})
    assert use.saving == pytest.approx(1 - 10 / 25)
    assert usage([], fixed=3).saving == 0.0
