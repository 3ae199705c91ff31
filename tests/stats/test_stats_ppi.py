"""PPI++ mean: equal to the reference implementation (ppi-python) on fixed inputs, and its documented properties.

``data/ppi_reference.json`` holds ppi-python 0.2.3's figures on the inputs of ``ppi_cases.py``, written by
``make_ppi_reference.py`` (ppi-python is not a dependency: it ships a top-level ``tests`` package that shadows this
project's).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from ppi_cases import CASES, FIXED_LAMBDAS, case_inputs

from judge_api.stats.ppi import (
    affine_to_scale,
    power_tuned_lambda,
    ppi_mean,
    ppi_mean_difference,
    ppi_mean_difference_active,
)

REFERENCE = json.loads((Path(__file__).with_name("data") / "ppi_reference.json").read_text())


def _biased_judge(seed: int, n: int, big_n: int, bias: float, noise: float) -> tuple[np.ndarray, ...]:
    return case_inputs({"seed": seed, "n": n, "big_n": big_n, "bias": bias, "noise": noise})


def test_the_reference_covers_every_case() -> None:
    assert [{k: c[k] for k in CASES[0]} for c in REFERENCE["cases"]] == CASES


@pytest.mark.parametrize("case", REFERENCE["cases"], ids=lambda c: f"seed{c['seed']}")
def test_equal_to_ppi_python_with_power_tuning(case: dict[str, Any]) -> None:
    y, yhat, unl = case_inputs(case)
    ours = ppi_mean(y, yhat, unl, ci=case["ci"], small_sample=False)
    assert ours.calibrated.estimate == pytest.approx(case["estimate"], abs=1e-9)
    assert [ours.calibrated.ci_low, ours.calibrated.ci_high] == pytest.approx(case["ppi_ci"], abs=1e-9)
    assert [ours.human_only.ci_low, ours.human_only.ci_high] == pytest.approx(case["classical_ci"], abs=1e-9)


@pytest.mark.parametrize("case", REFERENCE["cases"], ids=lambda c: f"seed{c['seed']}")
@pytest.mark.parametrize("lam", FIXED_LAMBDAS)
def test_fixed_lambda_equals_ppi_python(case: dict[str, Any], lam: float) -> None:
    y, yhat, unl = case_inputs(case)
    ours = ppi_mean(y, yhat, unl, ci=case["ci"], lam=lam, small_sample=False)
    expected = case["fixed_lambda_ci"][str(lam)]
    assert [ours.calibrated.ci_low, ours.calibrated.ci_high] == pytest.approx(expected, abs=1e-9)


def test_an_affine_change_of_the_judges_units_changes_nothing() -> None:
    y, yhat, unl = _biased_judge(11, 60, 500, 0.4, 0.3)
    base = ppi_mean(y, yhat, unl)
    # judge on 1..100 instead of the humans' units: the estimate and interval stay (lam absorbs the slope)
    scaled = ppi_mean(y, 50 * yhat + 1, 50 * unl + 1)
    assert scaled.calibrated.estimate == pytest.approx(base.calibrated.estimate, abs=1e-9)
    assert scaled.calibrated.ci_high - scaled.calibrated.ci_low == pytest.approx(
        base.calibrated.ci_high - base.calibrated.ci_low, abs=1e-9
    )


def test_a_good_judge_narrows_the_interval_and_a_useless_one_costs_nothing() -> None:
    y, yhat, unl = _biased_judge(5, 50, 1000, 0.5, 0.1)
    good = ppi_mean(y, yhat, unl)
    assert good.lam > 0.5
    width = good.calibrated.ci_high - good.calibrated.ci_low
    assert width < 0.5 * (good.human_only.ci_high - good.human_only.ci_low)
    assert good.effective_labels is not None and good.effective_labels > 4 * 50
    # the judge's bias of +0.5 cancels: the interval is about the humans' mean, not the judge's
    assert good.calibrated.ci_low <= float(np.mean(y)) + 0.1
    rng = np.random.default_rng(9)
    useless = ppi_mean(y, rng.normal(size=50), rng.normal(size=1000))
    assert useless.lam < 0.2
    assert useless.calibrated.se <= useless.human_only.se * 1.05


def test_constant_judge_or_no_unlabeled_item_falls_back_to_the_humans() -> None:
    y = np.array([1.0, 2.0, 0.0, 1.0, 2.0])
    const = ppi_mean(y, np.full(5, 70.0), np.full(20, 70.0))
    assert const.lam == 0.0
    assert const.calibrated.estimate == pytest.approx(float(y.mean()))
    none_unlabeled = ppi_mean(y, y + 1, np.array([]))
    assert none_unlabeled.lam == 0.0
    assert none_unlabeled.calibrated.estimate == none_unlabeled.human_only.estimate
    assert none_unlabeled.calibrated.se == pytest.approx(none_unlabeled.human_only.se, abs=1e-12)


@pytest.mark.parametrize(
    ("y", "yhat", "unl", "message"),
    [
        ([], [], [1.0], "no labeled item"),
        ([1.0, 2.0], [1.0], [1.0], "differ in length"),
        ([1.0, float("nan")], [1.0, 2.0], [1.0], "y holds a missing"),
    ],
)
def test_bad_input_is_refused(y: list[float], yhat: list[float], unl: list[float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ppi_mean(y, yhat, unl)


def test_lambda_is_clipped_to_the_unit_interval() -> None:
    y = np.linspace(0, 2, 30)
    assert power_tuned_lambda(y, y / 50, np.linspace(0, 0.04, 100)) == 1.0
    assert power_tuned_lambda(y, -y, -np.linspace(0, 2, 100)) == 0.0


def test_affine_map_between_stated_scales() -> None:
    mapped = affine_to_scale(np.array([1.0, 50.5, 100.0]), (1.0, 100.0), (0.0, 2.0))
    assert mapped.tolist() == pytest.approx([0.0, 1.0, 2.0])
    with pytest.raises(ValueError, match="empty"):
        affine_to_scale(np.array([1.0]), (5.0, 5.0), (0.0, 2.0))


def test_the_small_sample_correction_keeps_the_estimate_and_widens_the_interval() -> None:
    y, yhat, unl = _biased_judge(3, 12, 30, 2.0, 0.05)
    papers = ppi_mean(y, yhat, unl, small_sample=False)
    ours = ppi_mean(y, yhat, unl)
    assert ours.calibrated.estimate == papers.calibrated.estimate and ours.lam == papers.lam
    assert ours.calibrated.ci_low < papers.calibrated.ci_low and ours.calibrated.ci_high > papers.calibrated.ci_high
    human = np.asarray(y)
    half = 2.200985160082949 * float(np.std(human, ddof=1)) / np.sqrt(human.size)  # t(0.975, 11)
    assert ours.human_only.ci_high - ours.human_only.estimate == pytest.approx(half, abs=1e-9)


def test_a_tuned_lambda_counts_as_a_fitted_parameter_in_the_small_sample_interval() -> None:
    y, yhat, unl = _biased_judge(5, 20, 400, 0.3, 0.2)
    tuned = ppi_mean(y, yhat, unl)
    assert tuned.lam > 0
    fixed = ppi_mean(y, yhat, unl, lam=tuned.lam)  # the same lam given, not fitted: n - 1
    rect = np.asarray(y) - tuned.lam * np.asarray(yhat)
    imputed = float(np.var(tuned.lam * np.asarray(unl), ddof=1)) / len(unl)
    se2 = np.sqrt(imputed + float(np.var(rect, ddof=2)) / 20)
    se1 = np.sqrt(imputed + float(np.var(rect, ddof=1)) / 20)
    assert tuned.calibrated.se == pytest.approx(se2, rel=1e-12)
    assert fixed.calibrated.se == pytest.approx(se1, rel=1e-12)
    half = tuned.calibrated.ci_high - tuned.calibrated.estimate
    assert half == pytest.approx(2.10092204024096 * se2, rel=1e-9)  # t(0.975, 18)


def _two_sides(rng: np.random.Generator, big_n: int) -> tuple[np.ndarray, ...]:
    quality = rng.normal(1.0, 0.4, big_n)
    y_a = quality + rng.normal(0.0, 0.2, big_n)
    y_b = quality - 0.1 + rng.normal(0.0, 0.2, big_n)
    return y_a, quality + 0.3 + rng.normal(0.0, 0.1, big_n), y_b, quality + rng.normal(0.0, 0.1, big_n)


def test_the_paired_difference_is_ppi_on_the_per_item_differences() -> None:
    rng = np.random.default_rng(11)
    y_a, h_a, y_b, h_b = _two_sides(rng, 300)
    labeled = np.zeros(300, dtype=bool)
    labeled[rng.choice(300, 40, replace=False)] = True
    ours = ppi_mean_difference(y_a, h_a, labeled, y_b, h_b, labeled, lam=(0.7, 0.7))
    d, d_hat = y_a - y_b, h_a - h_b
    reference = ppi_mean(d[labeled], d_hat[labeled], d_hat[~labeled], lam=0.7)
    assert ours.paired and ours.n_labeled_both == 40
    for mine, theirs in ((ours.calibrated, reference.calibrated), (ours.human_only, reference.human_only)):
        assert mine.estimate == pytest.approx(theirs.estimate, abs=1e-12)
        assert mine.ci_low == pytest.approx(theirs.ci_low, abs=1e-12)
        assert mine.ci_high == pytest.approx(theirs.ci_high, abs=1e-12)


def test_the_two_sample_difference_covers_on_shared_items() -> None:
    """Each side labelled on its own uniform sample of the same items: the interval covers the difference of the
    human means at its level (400 repetitions, 90 % intervals), and the judge narrows it."""
    rng = np.random.default_rng(12)
    big_n, n, reps = 400, 30, 400
    hits = 0
    ratios = []
    for _ in range(reps):
        y_a, h_a, y_b, h_b = _two_sides(rng, big_n)
        lab_a = np.zeros(big_n, dtype=bool)
        lab_b = np.zeros(big_n, dtype=bool)
        lab_a[rng.choice(big_n, n, replace=False)] = True
        lab_b[rng.choice(big_n, n, replace=False)] = True
        est = ppi_mean_difference(y_a, h_a, lab_a, y_b, h_b, lab_b, ci=0.9)
        assert not est.paired
        truth = float(y_a.mean() - y_b.mean())
        hits += est.calibrated.ci_low <= truth <= est.calibrated.ci_high
        ratios.append(est.calibrated.se / est.human_only.se)
    assert 0.86 <= hits / reps <= 0.95
    assert float(np.median(ratios)) < 0.6


def test_a_difference_needs_two_labels_on_each_side() -> None:
    y = np.arange(10.0)
    one = np.zeros(10, dtype=bool)
    one[0] = True
    with pytest.raises(ValueError, match="at least 2 labeled items"):
        ppi_mean_difference(y, y, one, y, y, ~one)


def test_the_active_difference_is_unbiased_and_covers_under_unequal_probabilities() -> None:
    """Labels drawn with probabilities ten times higher on a fifth of the items, whose humans differ from the rest:
    the weighted estimate covers the difference of the human means (400 repetitions, 90 % intervals), where the
    unweighted two-sample one, taking the labels as uniform, is biased."""
    rng = np.random.default_rng(13)
    big_n, reps = 500, 400
    favoured = np.arange(big_n) < big_n // 5
    weight = np.where(favoured, 10.0, 1.0)
    pi = np.minimum(1.0, 60 * weight / weight.sum())
    hits, naive_hits = 0, 0
    for _ in range(reps):
        y_a, h_a, y_b, h_b = _two_sides(rng, big_n)
        y_b = y_b - 0.5 * favoured  # the favoured items are worse for b
        lab_a = rng.random(big_n) < pi
        lab_b = rng.random(big_n) < pi
        truth = 0.1 + 0.5 * favoured.mean()
        est = ppi_mean_difference_active(y_a, h_a, lab_a, pi, y_b, h_b, lab_b, pi, ci=0.9).calibrated
        hits += est.ci_low <= truth <= est.ci_high
        naive = ppi_mean_difference(y_a, h_a, lab_a, y_b, h_b, lab_b, ci=0.9).calibrated
        naive_hits += naive.ci_low <= truth <= naive.ci_high
    assert 0.86 <= hits / reps <= 0.96
    assert naive_hits / reps < 0.6
