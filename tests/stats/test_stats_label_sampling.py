"""Label queues: seeded draws with the inclusion probabilities the calibrated estimate weights by."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from judge_api.stats.label_sampling import ACTIVE_FLOOR, draw, eligible_items, item_uncertainty
from judge_api.stats.ppi import ppi_mean_active

ITEMS = [f"i{k:03d}" for k in range(200)]


def test_uniform_draw_is_seeded_without_replacement_with_n_over_N() -> None:
    first = draw(ITEMS, 30, "uniform", seed=5)
    assert first == draw(ITEMS, 30, "uniform", seed=5)
    assert first.item_ids != draw(ITEMS, 30, "uniform", seed=6).item_ids
    assert len(set(first.item_ids)) == 30
    assert set(first.inclusion.values()) == {30 / 200} and set(first.inclusion) == set(ITEMS)


def test_active_probabilities_add_up_to_n_follow_the_uncertainty_and_respect_floor_and_cap() -> None:
    uncertainty = np.r_[np.full(20, 5.0), np.full(180, 0.25)]
    result = draw(ITEMS, 40, "active", seed=1, uncertainty=uncertainty)
    pi = np.array([result.inclusion[i] for i in ITEMS])
    assert pi.sum() == pytest.approx(40, abs=1e-9)
    assert pi.max() <= 1.0 and pi.min() >= ACTIVE_FLOOR * 40 / 200 - 1e-12
    assert pi[:20].min() > pi[20:].max()
    assert np.all(pi[:20] == 1.0)  # the most uncertain items are capped at certainty
    sizes = [len(draw(ITEMS, 40, "active", seed=s, uncertainty=uncertainty).item_ids) for s in range(300)]
    assert abs(float(np.mean(sizes)) - 40) < 1.0  # Poisson sampling: n in expectation


@pytest.mark.parametrize(
    ("n", "strategy", "uncertainty", "message"),
    [
        (0, "uniform", None, "n must be between 1 and the 200"),
        (201, "uniform", None, "n must be between 1 and the 200"),
        (10, "stratified", None, "strategy must be one of"),
        (10, "active", np.zeros(200), "positive, finite uncertainty"),
        (10, "active", np.ones(3), "positive, finite uncertainty"),
    ],
)
def test_bad_draws_are_refused(n: int, strategy: str, uncertainty: np.ndarray | None, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        draw(ITEMS, n, strategy, seed=0, uncertainty=uncertainty)


def test_active_estimate_is_unbiased_whatever_the_probabilities() -> None:
    rng = np.random.default_rng(0)
    estimates, hits = [], 0
    uncertainty = np.r_[np.full(50, 3.0), np.full(150, 0.3)]
    for rep in range(400):
        human = rng.normal(1.0, 0.5, 200)
        judge = human + np.where(np.arange(200) < 50, rng.normal(0.5, 1.0, 200), 0.2)  # errors on the first 50
        result = draw(ITEMS, 40, "active", seed=rep, uncertainty=uncertainty)
        labeled = np.isin(ITEMS, result.item_ids)
        pi = np.array([result.inclusion[i] for i in ITEMS])
        est = ppi_mean_active(np.where(labeled, human, np.nan), judge, labeled, pi)
        estimates.append(est.calibrated.estimate - human.mean())
        hits += est.calibrated.ci_low <= 1.0 <= est.calibrated.ci_high
    assert abs(float(np.mean(estimates))) < 0.01
    assert hits / 400 > 0.92


def test_uncertainty_is_the_spread_of_an_items_judge_scores() -> None:
    rows = (
        [
            {
                "item_id": "a",
                "mode": "single",
                "system_a": "s",
                "aspect": "x",
                "judge": j,
                "status": "done",
                "score": score,
                "scale_min": 1.0,
                "scale_max": 101.0,
            }
            for j, score in (("j1", 10.0), ("j2", 90.0))
        ]
        + [
            {
                "item_id": "b",
                "mode": "single",
                "system_a": "s",
                "aspect": "x",
                "judge": j,
                "status": "done",
                "score": 50.0,
                "scale_min": 1.0,
                "scale_max": 101.0,
            }
            for j in ("j1", "j2")
        ]
        + [{"item_id": "c", "mode": "single", "system_a": "s", "aspect": "x", "judge": "j1", "status": "failed"}]
    )
    frame = pd.DataFrame(rows)
    assert eligible_items(frame) == ["a", "b"]
    spread = item_uncertainty(frame, ["a", "b"])
    assert spread[1] == pytest.approx(0.25) and spread[0] == pytest.approx(0.25 + 0.4)
