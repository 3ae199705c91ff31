"""Bradley-Terry ranking."""

from __future__ import annotations

from itertools import combinations

import numpy as np
import pandas as pd
import pytest

from judge_api.stats import ranking as R

PLANTED = {"alpha": 1.2, "beta": 0.4, "gamma": -0.3, "delta": -1.3}


def _planted_frame(n_items: int = 150, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for item in range(n_items):
        for a, b in combinations(PLANTED, 2):
            p = 1.0 / (1.0 + np.exp(-(PLANTED[a] - PLANTED[b])))
            u = rng.random()
            outcome = "win" if u < 0.9 * p else ("tie" if u < 0.9 * p + 0.1 else "loss")
            rows.append(
                {
                    "item_id": f"i{item}",
                    "mode": "pairwise",
                    "system_a": a,
                    "system_b": b,
                    "aspect": "overall",
                    "judge": "j",
                    "order": "ab",
                    "outcome": outcome,
                    "status": "done",
                }
            )
    return pd.DataFrame(rows)


def test_recovers_the_planted_order_with_ci() -> None:
    table = R.bradley_terry(_planted_frame(), n_boot=300, seed=0)
    assert table["system"].tolist() == ["alpha", "beta", "gamma", "delta"]
    assert table["rank"].tolist() == [1, 2, 3, 4]
    for r in table.itertuples():
        assert r.strength_ci_low < r.strength < r.strength_ci_high
        assert r.elo == pytest.approx(400 * r.strength / np.log(10) + 1000)
    assert table["strength"].sum() == pytest.approx(0.0, abs=1e-9)
    # Strength gaps match the planted log-odds gaps (the tie share shrinks them a little).
    gap = table["strength"].iloc[0] - table["strength"].iloc[-1]
    assert gap == pytest.approx(PLANTED["alpha"] - PLANTED["delta"], rel=0.25)
    assert (table["n_comparisons"] == 150 * 3).all()


def test_two_systems_closed_form() -> None:
    # With no prior the MLE satisfies p1 / p2 = w12 / w21.
    wins = np.array([[0.0, 30.0], [10.0, 0.0]])
    s = R.fit_bradley_terry(wins, prior=0.0)
    assert s[0] - s[1] == pytest.approx(np.log(3.0), abs=1e-8)


def test_stacked_replicates_match_single_fits() -> None:
    w = np.random.default_rng(1).integers(1, 20, (5, 3, 3)).astype(float)
    stacked = R.fit_bradley_terry(w)
    for b in range(5):
        assert np.allclose(stacked[b], R.fit_bradley_terry(w[b]), atol=1e-8)


def test_a_system_that_wins_everything_stays_finite() -> None:
    rows = [
        {
            "item_id": str(i),
            "mode": "pairwise",
            "system_a": "top",
            "system_b": "bottom",
            "aspect": "o",
            "judge": "j",
            "outcome": "win",
            "status": "done",
        }
        for i in range(20)
    ]
    table = R.bradley_terry(pd.DataFrame(rows), n_boot=50)
    assert np.isfinite(table["strength"]).all()
    assert table.set_index("system").loc["top", "rank"] == 1


def test_deterministic_for_a_seed_and_empty_input() -> None:
    df = _planted_frame(30)
    a = R.bradley_terry(df, n_boot=100, seed=5)
    b = R.bradley_terry(df, n_boot=100, seed=5)
    pd.testing.assert_frame_equal(a, b)
    empty = R.bradley_terry(df.iloc[:0])
    assert empty.empty and list(empty.columns) == R.RANKING_COLUMNS
