"""PPI++ mean: equal to the reference implementation (ppi-python) on fixed inputs, and its documented properties."""

from __future__ import annotations

import numpy as np
import pytest

from judge_api.stats.ppi import affine_to_scale, power_tuned_lambda, ppi_mean

ppi_py = pytest.importorskip("ppi_py", reason="ppi-python is the test oracle (dev extra)")


def _biased_judge(seed: int, n: int, big_n: int, bias: float, noise: float) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    truth = rng.normal(1.0, 0.5, n + big_n)
    judge = truth + bias + rng.normal(0.0, noise, n + big_n)
    return truth[:n], judge[:n], judge[n:]


CASES = [
    # seed, n, N, bias, noise, ci
    (0, 50, 400, 0.3, 0.2, 0.95),
    (1, 20, 1000, -0.5, 0.6, 0.90),
    (2, 100, 100, 0.0, 1.5, 0.99),
    (3, 12, 30, 2.0, 0.05, 0.95),
]


@pytest.mark.parametrize(("seed", "n", "big_n", "bias", "noise", "ci"), CASES)
def test_equal_to_ppi_python_with_power_tuning(
    seed: int, n: int, big_n: int, bias: float, noise: float, ci: float
) -> None:
    y, yhat, unl = _biased_judge(seed, n, big_n, bias, noise)
    ours = ppi_mean(y, yhat, unl, ci=ci)
    point = float(np.asarray(ppi_py.ppi_mean_pointestimate(y, yhat, unl)).reshape(-1)[0])
    low, high = (float(np.asarray(v).reshape(-1)[0]) for v in ppi_py.ppi_mean_ci(y, yhat, unl, alpha=1 - ci))
    assert ours.calibrated.estimate == pytest.approx(point, abs=1e-9)
    assert ours.calibrated.ci_low == pytest.approx(low, abs=1e-9)
    assert ours.calibrated.ci_high == pytest.approx(high, abs=1e-9)
    c_low, c_high = (float(np.asarray(v).reshape(-1)[0]) for v in ppi_py.classical_mean_ci(y, alpha=1 - ci))
    assert ours.human_only.ci_low == pytest.approx(c_low, abs=1e-9)
    assert ours.human_only.ci_high == pytest.approx(c_high, abs=1e-9)


@pytest.mark.parametrize("lam", [0.0, 0.4, 1.0])
def test_fixed_lambda_equals_ppi_python(lam: float) -> None:
    y, yhat, unl = _biased_judge(7, 40, 300, 0.2, 0.3)
    ours = ppi_mean(y, yhat, unl, ci=0.95, lam=lam)
    low, high = (float(np.asarray(v).reshape(-1)[0]) for v in ppi_py.ppi_mean_ci(y, yhat, unl, alpha=0.05, lam=lam))
    assert (ours.calibrated.ci_low, ours.calibrated.ci_high) == pytest.approx((low, high), abs=1e-9)


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
