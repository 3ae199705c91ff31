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


# -- small n (issue 41): intervals that do not collapse, ranks only within connected comparisons -------------------


def _pairs(*matches: tuple[str, str, int, int, int]) -> pd.DataFrame:
    """(a, b, wins of a, ties, losses of a) per pair, one item per comparison, both orders agreeing."""
    rows = []
    for a, b, wins, ties, losses in matches:
        outcomes = ["win"] * wins + ["tie"] * ties + ["loss"] * losses
        for i, outcome in enumerate(outcomes):
            row = {"item_id": f"{a}-{b}-{i}", "mode": "pairwise", "system_a": a, "system_b": b}
            rows.append({**row, "aspect": "o", "judge": "j", "outcome": outcome, "status": "done"})
    return pd.DataFrame(rows)


def test_a_clean_sweep_of_five_items_has_no_upper_bound_and_a_wilson_lower_one() -> None:
    """A beats B on all 5 items: the bootstrap gave Elo [1208, 1208]; the Wilson interval is [0.566, 1.0]."""
    table = R.bradley_terry(_pairs(("A", "B", 5, 0, 0)), n_boot=200).set_index("system")
    a, b = table.loc["A"], table.loc["B"]
    assert pd.isna(a["elo_ci_high"]) and a["ci_unbounded"] == "high"  # null in the report JSON
    assert pd.isna(b["elo_ci_low"]) and b["ci_unbounded"] == "low"
    wilson_low = 0.5655  # Wilson 95% lower bound of 5/5
    assert a["strength_ci_low"] == pytest.approx(np.log(wilson_low / (1 - wilson_low)) / 2, abs=1e-3)
    assert a["elo_ci_low"] < a["elo"]


def test_twenty_ties_get_an_interval_of_positive_width() -> None:
    """All ties over 20 items: [1000, 1000] before; the Wilson interval of a 0.5 win rate over 20 is [0.30, 0.70]."""
    table = R.bradley_terry(_pairs(("A", "B", 0, 20, 0)), n_boot=200).set_index("system")
    a = table.loc["A"]
    assert a["elo"] == pytest.approx(1000.0)
    assert a["elo_ci_low"] < 950 and a["elo_ci_high"] > 1050 and a["ci_unbounded"] is None


def test_systems_never_compared_are_not_ranked_against_each_other() -> None:
    """A beat B 10/10, C beat D 6/10, no cross comparisons: A was rank 1 and C rank 2 only through the prior."""
    table = R.bradley_terry(_pairs(("A", "B", 10, 0, 0), ("C", "D", 6, 0, 4)), n_boot=200).set_index("system")
    assert table.loc[["A", "B", "C", "D"], "component"].tolist() == [1, 1, 2, 2]
    assert table.loc[["A", "B", "C", "D"], "rank"].tolist() == [1, 2, 1, 2]
    assert table.loc["A", "not_compared_with"] == ["C", "D"] and table.loc["C", "not_compared_with"] == ["A", "B"]
    separate = R.bradley_terry(_pairs(("C", "D", 6, 0, 4)), n_boot=200).set_index("system")
    assert table.loc["C", "strength"] == pytest.approx(separate.loc["C", "strength"])


def test_the_report_table_shows_groups_unbounded_sides_and_missing_comparisons() -> None:
    from judge_api.stats.render import report_to_table

    table = R.bradley_terry(_pairs(("A", "B", 5, 0, 0), ("C", "D", 3, 0, 2)), n_boot=50)
    records = [{k: (None if not isinstance(v, list) and pd.isna(v) else v) for k, v in r.items()}
               for r in table.to_dict(orient="records")]  # fmt: skip
    text = report_to_table({"ranking": records})
    assert "never compared with" in text and "C, D" in text and "A, B" in text
    assert "+inf]" in text and "[-inf," in text


def test_the_multinomial_draw_over_item_patterns_moves_the_intervals_within_their_monte_carlo_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 39: with many items the resample draws multinomial counts over the items' distinct outcome patterns
    instead of one index per item and replicate. Same law, another draw: the point estimates are unchanged and each
    interval's ends move by less than 0.15 of its width (the Monte Carlo error of a 2.5 % / 97.5 % percentile of
    1,000 replicates is ~0.02 widths; 0.15 is ~5 standard errors of the difference of two draws)."""
    frame = _planted_frame(n_items=3000, seed=7)
    combined = frame.assign(order="ab")
    seen: list[int] = []
    real = R.resampled_sums

    def spy(rows: np.ndarray, n_boot: int, rng: np.random.Generator):
        seen.append(int(np.unique(rows, axis=0).shape[0]))
        return real(rows, n_boot, rng)

    monkeypatch.setattr(R, "resampled_sums", spy)
    new = R.bradley_terry(combined, n_boot=1000, seed=0)
    assert seen and seen[0] * 4 <= 3000  # the items fall into few patterns: the multinomial path was taken

    def index_draw(rows: np.ndarray, n_boot: int, rng: np.random.Generator):
        for counts in R.resample_counts(rows.shape[0], n_boot, rng):
            yield counts @ rows

    monkeypatch.setattr(R, "resampled_sums", index_draw)
    old = R.bradley_terry(combined, n_boot=1000, seed=0)
    assert new["system"].tolist() == old["system"].tolist()
    np.testing.assert_array_equal(new["strength"], old["strength"])
    width = (old["strength_ci_high"] - old["strength_ci_low"]).to_numpy()
    assert (width > 0).all()
    for end in ("strength_ci_low", "strength_ci_high"):
        moved = np.abs(new[end].to_numpy() - old[end].to_numpy())
        assert (moved <= 0.15 * width).all(), (end, moved / width)
    assert not np.array_equal(new["strength_ci_low"], old["strength_ci_low"])  # another draw indeed
