"""Pairwise preferences: order combination, rates, Wilson CI, orientation."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import pytest

from judge_api.stats import preferences as P


def pairwise(rows: Sequence[tuple[str, str, str | None, float | None]], a: str = "x", b: str = "y") -> pd.DataFrame:
    """(item, order, outcome, preference) rows of one pair / aspect / judge; status done unless outcome None."""
    return pd.DataFrame(
        {
            "item_id": [r[0] for r in rows],
            "mode": "pairwise",
            "system_a": a,
            "system_b": b,
            "aspect": "overall",
            "judge": "openai:gpt-4o",
            "order": [r[1] for r in rows],
            "outcome": [r[2] for r in rows],
            "preference": [np.nan if r[3] is None else r[3] for r in rows],
            "status": ["done" if r[2] is not None else "failed" for r in rows],
        }
    )


@pytest.mark.parametrize(
    ("orders", "outcome", "inconsistent", "n_orders"),
    [
        ([("ab", "win"), ("ba", "win")], "win", False, 2),
        ([("ab", "loss"), ("ba", "loss")], "loss", False, 2),
        ([("ab", "tie"), ("ba", "tie")], "tie", False, 2),
        ([("ab", "win"), ("ba", "loss")], "tie", True, 2),
        ([("ab", "win"), ("ba", "tie")], "tie", True, 2),
        ([("ab", "loss")], "loss", False, 1),
        ([("ba", "win")], "win", False, 1),
        ([("ab", "win"), ("ab", "win"), ("ab", "loss"), ("ba", "win")], "win", False, 2),  # majority of samples
        ([("ab", "win"), ("ab", "loss"), ("ba", "win")], "tie", True, 2),  # drawn samples -> tie
        ([("ab", "win"), ("ba", None)], "win", False, 1),  # failed order falls back to single order
    ],
)
def test_combine_orders(orders: list[tuple[str, str | None]], outcome: str, inconsistent: bool, n_orders: int) -> None:
    df = pairwise([("i", o, out, None) for o, out in orders])
    c = P.combine_orders(df)
    assert len(c) == 1
    r = c.iloc[0]
    assert (r["outcome"], bool(r["inconsistent"]), r["n_orders"]) == (outcome, inconsistent, n_orders)


def test_combined_preference_is_the_mean_of_the_orders() -> None:
    df = pairwise([("i", "ab", "win", 2.0), ("i", "ba", "tie", 1.0), ("k", "ab", "loss", -2.0)])
    c = P.combine_orders(df).set_index("item_id")
    assert c.loc["i", "preference"] == 1.5
    assert c.loc["k", "preference"] == -2.0


def test_paper_figure_482_wins_119_losses() -> None:
    r = P.outcome_rates(482, 399, 119)
    assert (r["n"], r["wins"], r["ties"], r["losses"]) == (1000, 482, 399, 119)
    assert round(r["win_rate_pct"], 1) == 48.2 and r["win_rate_pct"] == pytest.approx(48.2)
    assert round(r["loss_rate_pct"], 1) == 11.9 and r["loss_rate_pct"] == pytest.approx(11.9)
    assert r["win_rate"] == pytest.approx((482 + 399 / 2) / 1000)
    assert r["win_rate_ci_low"] < r["win_rate"] < r["win_rate_ci_high"]


def test_paper_figure_from_a_judgments_frame() -> None:
    rows = []
    for i in range(1000):
        outcome = "win" if i < 482 else ("loss" if i < 482 + 119 else "tie")
        rows.append((str(i), "ab", outcome, None))
    summary = P.preference_summary(pairwise(rows, a="Rsum", b="MemoryBank"))
    r = summary.iloc[0]
    assert (r["system_a"], r["system_b"], r["n"], r["wins"], r["losses"]) == ("Rsum", "MemoryBank", 1000, 482, 119)
    assert r["win_rate_pct"] == pytest.approx(48.2) and r["loss_rate_pct"] == pytest.approx(11.9)
    assert r["n_single_order"] == 1000


def test_wilson_interval_known_values() -> None:
    lo, hi = P.wilson_interval(50, 100)
    assert float(lo) == pytest.approx(0.4038, abs=1e-4) and float(hi) == pytest.approx(0.5962, abs=1e-4)
    lo0, hi0 = P.wilson_interval(0, 10)
    assert float(lo0) == 0.0 and float(hi0) == pytest.approx(0.2775, abs=1e-4)
    lon, hin = P.wilson_interval(0, 0)
    assert np.isnan(lon) and np.isnan(hin)


def test_summary_splits_real_and_inconsistent_ties_and_counts_failures() -> None:
    df = pairwise(
        [
            ("1", "ab", "win", 2.0),
            ("1", "ba", "win", 2.0),
            ("2", "ab", "win", 2.0),
            ("2", "ba", "loss", -2.0),  # inconsistent -> tie
            ("3", "ab", "tie", 0.0),
            ("3", "ba", "tie", 1.0),  # real tie, mean preference 0.5
            ("4", "ab", "loss", -2.0),
            ("4", "ba", "loss", -1.0),
            ("5", "ab", None, None),  # failed
        ]
    )
    df.loc[8, "status"] = "unparseable"
    r = P.preference_summary(df).iloc[0]
    assert (r["n"], r["wins"], r["ties"], r["ties_real"], r["ties_inconsistent"], r["losses"]) == (4, 1, 2, 1, 1, 1)
    assert (r["n_total"], r["n_done"], r["n_unparseable"]) == (9, 8, 1)
    assert r["win_rate_pct"] == 25.0 and r["tie_rate_pct"] == 50.0 and r["loss_rate_pct"] == 25.0
    assert r["win_rate"] == 0.5
    assert r["preference_distribution"] == {"-1.5": 1, "0": 1, "+0.5": 1, "+2": 1}
    assert r["mean_preference"] == pytest.approx((2 + 0 + 0.5 - 1.5) / 4)


def test_orient_pair_swaps_the_sides() -> None:
    r = P.preference_summary(
        pairwise([("1", "ab", "win", 2.0), ("2", "ab", "win", 2.0), ("3", "ab", "loss", -1.0), ("4", "ab", "tie", 0.0)])
    ).iloc[0]
    entry = r.to_dict()
    flipped = P.orient_pair(entry, "y")
    assert (flipped["system_a"], flipped["system_b"]) == ("y", "x")
    assert (flipped["wins"], flipped["losses"], flipped["ties"]) == (entry["losses"], entry["wins"], entry["ties"])
    assert flipped["win_rate_pct"] == entry["loss_rate_pct"]
    assert flipped["win_rate"] == pytest.approx(1 - entry["win_rate"])
    assert flipped["win_rate_ci_low"] == pytest.approx(1 - entry["win_rate_ci_high"])
    assert flipped["preference_distribution"] == {"-2": 2, "0": 1, "+1": 1}
    assert P.orient_pair(entry, "x") == entry
    with pytest.raises(ValueError, match="not one of the pair"):
        P.orient_pair(entry, "z")


def test_orient_combined_swaps_orders_too() -> None:
    c = P.combine_orders(pairwise([("1", "ab", "win", 2.0), ("1", "ba", "tie", 0.0)]))
    o = P.orient_combined(c, "y").iloc[0]
    assert (o["system_a"], o["outcome"], o["outcome_ab"], o["outcome_ba"]) == ("y", "tie", "tie", "loss")
    assert o["preference"] == -1.0


def test_empty_and_failed_only() -> None:
    assert P.combine_orders(pairwise([])).empty
    assert P.preference_summary(pairwise([])).empty
    r = P.preference_summary(pairwise([("1", "ab", None, None)])).iloc[0]
    assert r["n"] == 0 and r["n_failed"] == 1
    assert np.isnan(r["win_rate"]) and r["preference_distribution"] == {}
    assert P.outcome_rates(0, 0, 0)["win_rate_pct"] is None
