"""Agreement statistics: kappa, FastChat S1/S2 pairing rules, score correlations, QWK, alpha."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from judge_api.stats import agreement as A


def votes(rows: list[tuple[str, str, str, str, float]], aspect: str = "overall") -> pd.DataFrame:
    """(item, system, system_b, rater, value) preference votes."""
    return pd.DataFrame(
        {
            "item_id": [r[0] for r in rows],
            "system": [r[1] for r in rows],
            "system_b": [r[2] for r in rows],
            "aspect": aspect,
            "rater": [r[3] for r in rows],
            "kind": "preference",
            "value": [r[4] for r in rows],
        }
    )


def _hand_kappa(m: np.ndarray, weights: str | None) -> float:
    """Textbook weighted kappa with explicit loops (independent of the vectorised code)."""
    k = m.shape[0]
    n = m.sum()
    rows, cols = m.sum(axis=1), m.sum(axis=0)
    num = den = 0.0
    for i in range(k):
        for j in range(k):
            w = float(i != j) if weights is None else float((i - j) ** 2)
            num += w * m[i, j] / n
            den += w * rows[i] * cols[j] / n**2
    return 1 - num / den


def test_cohen_kappa_known_confusion_matrix() -> None:
    m = np.array([[20, 5], [10, 15]])  # p_o = .7, p_e = .5 -> kappa = .4
    assert A.cohen_kappa(m) == pytest.approx(0.4)
    m3 = np.array([[10, 2, 1], [3, 8, 4], [0, 2, 12]])
    assert A.cohen_kappa(m3) == pytest.approx(_hand_kappa(m3, None))
    assert A.cohen_kappa(m3, "quadratic") == pytest.approx(_hand_kappa(m3, "quadratic"))
    assert A.cohen_kappa(np.zeros((3, 3))) is None
    assert A.cohen_kappa(np.array([[5, 0], [0, 0]])) is None  # no expected disagreement


def test_quadratic_weighted_kappa_from_category_arrays() -> None:
    a = np.array([0, 1, 2, 3, 4, 4, 2, 1])
    assert A.quadratic_weighted_kappa(a, a, 5) == pytest.approx(1.0)
    b = np.array([0, 2, 2, 3, 3, 4, 1, 1])
    m = np.zeros((5, 5))
    for x, y in zip(a, b, strict=True):
        m[x, y] += 1
    assert A.quadratic_weighted_kappa(a, b, 5) == pytest.approx(_hand_kappa(m, "quadratic"))


@pytest.mark.parametrize(
    ("value", "lo", "hi", "expected"),
    [
        (1, 1, 100, 0),
        (20.8, 1, 100, 1),
        (20.7, 1, 100, 0),
        (50, 1, 100, 2),
        (100, 1, 100, 4),
        (0, 0, 2, 0),
        (1, 0, 2, 2),
        (2, 0, 2, 4),
        (1.5, 0, 2, 3),
    ],
)
def test_common_scale_bins(value: float, lo: float, hi: float, expected: int) -> None:
    assert A.to_bins(value, lo, hi, 5) == expected


def test_human_pairs_follow_fastchat() -> None:
    # One key with 4 votes, oriented both ways: a wins (x2, once written as system_b losing), tie, b wins.
    v = votes(
        [
            ("q1", "a", "b", "expert_1", 1),
            ("q1", "b", "a", "expert_2", -1),  # same verdict as expert_1 after orientation
            ("q1", "a", "b", "expert_3", 0),
            ("q1", "a", "b", "expert_4", -1),
            ("q2", "a", "b", "expert_1", 1),  # a lone vote makes no pair
        ]
    )
    r = A.human_human_agreement(v)
    # 6 pairs; agreeing: (1,2) only.  S2 drops pairs with the tie: 3 pairs, 1 agrees.
    assert r["s1"] == {"agree": 1, "total": 6, "rate": pytest.approx(1 / 6)}
    assert (r["s2"]["agree"], r["s2"]["total"]) == (1, 3)
    assert r["n_keys"] == 1


def test_distinct_raters_option_drops_same_rater_pairs() -> None:
    v = votes([("q", "a", "b", "expert_1", 1), ("q", "a", "b", "expert_1", 1), ("q", "a", "b", "expert_2", 1)])
    assert A.human_human_agreement(v)["s1"]["total"] == 3
    r = A.human_human_agreement(v, distinct_raters=True)
    assert (r["s1"]["agree"], r["s1"]["total"]) == (2, 2)


def test_judge_vs_human_orients_both_sides() -> None:
    judge = votes([("q1", "b", "a", "gpt4", -1), ("q2", "a", "b", "gpt4", 0), ("q3", "a", "b", "gpt4", 1)])
    human = votes(
        [
            ("q1", "a", "b", "expert_1", 1),  # agrees (judge said a wins, written from b's side)
            ("q1", "a", "b", "expert_2", -1),  # disagrees
            ("q2", "b", "a", "expert_1", 0),  # tie vs tie: agrees in S1, dropped in S2
            ("q4", "a", "b", "expert_1", 1),  # judge never voted on q4
        ]
    )
    r = A.judge_human_agreement(judge, human)
    assert (r["s1"]["agree"], r["s1"]["total"]) == (2, 3)
    assert (r["s2"]["agree"], r["s2"]["total"]) == (1, 2)
    assert r["confusion"]["judge_by_human"] == [[0, 0, 0], [0, 1, 0], [1, 0, 1]]
    assert r["kappa_s1"] == pytest.approx(A.cohen_kappa(np.array(r["confusion"]["judge_by_human"])))


def test_inconsistent_judge_tie_counts_as_tie() -> None:
    j = pd.DataFrame(
        {
            "item_id": ["q"] * 2,
            "mode": "pairwise",
            "system_a": "a",
            "system_b": "b",
            "aspect": "overall",
            "judge": "j",
            "order": ["ab", "ba"],
            "outcome": ["win", "loss"],
            "status": "done",
        }
    )
    jv = A.votes_from_judgments(j)
    assert jv["value"].tolist() == [0.0] and jv["tie_inconsistent"].tolist() == [True]
    human = votes([("q", "a", "b", "expert_1", 0)])
    assert A.judge_human_agreement(jv, human)["s1"]["agree"] == 1


def _score_frames(noise: float, seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Judge scores (1-100) and three human raters (0-2) driven by one latent quality."""
    rng = np.random.default_rng(seed)
    systems = {"s1": 0.8, "s2": 0.0, "s3": -0.8}
    jrows, hrows = [], []
    for i in range(60):
        for sysname, q in systems.items():
            latent = q + rng.normal(0, 0.6)
            jrows.append(
                {
                    "item_id": f"i{i}",
                    "mode": "single",
                    "system_a": sysname,
                    "aspect": "coherence",
                    "judge": "j",
                    "status": "done",
                    "score": float(np.clip(np.round(50 + 25 * latent), 1, 100)),
                    "scale_min": 1.0,
                    "scale_max": 100.0,
                }
            )
            for rater in ("crowd-1", "crowd-2", "crowd-3"):
                h = float(np.clip(np.round(1 + latent + rng.normal(0, noise)), 0, 2))
                hrows.append(
                    {
                        "item_id": f"i{i}",
                        "system": sysname,
                        "aspect": "coherence",
                        "rater": rater,
                        "kind": "score",
                        "value": h,
                        "scale_min": 0.0,
                        "scale_max": 2.0,
                    }
                )
    return pd.DataFrame(jrows), pd.DataFrame(hrows)


def test_score_agreement_on_planted_data() -> None:
    judgments, ratings = _score_frames(noise=0.3)
    out = A.score_agreement(judgments, ratings)
    assert len(out) == 1
    r = out.iloc[0]
    assert r["n"] == 180 and r["n_human_raters"] == 3 and r["n_systems"] == 3
    for name in ("spearman", "kendall", "pearson"):
        assert r[name] > 0.5 and r[f"{name}_p"] < 1e-6
    assert r["qwk"] > 0.4
    assert r["system_spearman"] == pytest.approx(1.0) and r["system_kendall"] == pytest.approx(1.0)


def test_score_alpha_humans_and_all_raters() -> None:
    judgments, ratings = _score_frames(noise=0.3)
    noisy_j, noisy_r = _score_frames(noise=3.0)
    good = A.score_alpha(judgments, ratings).iloc[0]
    bad = A.score_alpha(noisy_j, noisy_r).iloc[0]
    assert (good["n_units"], good["n_raters_human"], good["n_judges"]) == (180, 3, 1)
    assert good["alpha_interval_humans"] > bad["alpha_interval_humans"]
    assert good["alpha_ordinal_humans"] > bad["alpha_ordinal_humans"]
    assert good["alpha_interval_all"] is not None and good["alpha_interval_all"] > 0.3


def test_correlations_degenerate_inputs() -> None:
    assert A.correlations([1, 2], [1, 2])["spearman"] is None  # n < 3
    assert A.correlations([1, 1, 1], [1, 2, 3])["pearson"] is None  # constant
    c = A.correlations([1, 2, 3, 4], [2, 4, 6, 8])
    assert c["pearson"] == pytest.approx(1.0) and c["kendall"] == pytest.approx(1.0)


def test_no_human_data() -> None:
    judgments, _ = _score_frames(noise=0.3)
    assert A.score_agreement(judgments, None).empty
    assert A.score_alpha(judgments, None).empty
    assert A.preference_agreement(judgments, None) == {"judge_vs_human": [], "human_vs_human": []}


# -- small n (issue 41): exact / permutation correlation p-values --------------------------------------------------


def test_three_systems_in_perfect_order_get_the_exact_p_not_zero() -> None:
    """system_spearman_p was 0.0 for three systems in perfect order; 2 of the 3! orderings are as extreme."""
    out = A.correlations([55.0, 60.0, 71.0], [2.0, 3.5, 4.0])
    assert out["spearman_p"] == pytest.approx(1 / 3) and out["kendall_p"] == pytest.approx(1 / 3)
    assert out["pearson_p"] is not None and out["pearson_p"] >= 1 / 3 - 1e-9


def test_five_pairs_in_perfect_order_get_the_exact_spearman_p() -> None:
    """spearman_p was 1.4e-24 for n = 5 in perfect order; exactly 2 of the 5! orderings reach |rho| = 1."""
    out = A.correlations([1.0, 2.0, 3.0, 4.0, 5.0], [10.0, 20.0, 25.0, 40.0, 41.0])
    assert out["spearman"] == pytest.approx(1.0) and out["spearman_p"] == pytest.approx(2 / 120)


def test_permutation_p_is_seeded_and_close_to_the_t_approximation_at_moderate_n() -> None:
    rng = np.random.default_rng(5)
    x = rng.normal(size=25)
    y = x + rng.normal(scale=2.0, size=25)
    first, second = A.correlations(x, y), A.correlations(x, y)
    assert first == second
    t_approx = sps.spearmanr(x, y).pvalue
    assert first["spearman_p"] == pytest.approx(t_approx, abs=0.03)


def test_kendall_p_with_ties_at_small_n_is_a_permutation_p_value() -> None:
    """Issue 41 review: with ties scipy's Kendall p is asymptotic: [1, 1, 2, 2] against itself gave 0.083 (the
    exact permutation p is 1/3, as Spearman's), [1, 1, 1, 2] against 1..4 gave 0.18 (exact: 1/2)."""
    from judge_api.stats.agreement import correlations

    out = correlations([1, 1, 2, 2], [1, 1, 2, 2])
    assert out["kendall_p"] == pytest.approx(1 / 3)
    assert correlations([1, 1, 1, 2], [1, 2, 3, 4])["kendall_p"] == pytest.approx(0.5)
    rng = np.random.default_rng(41)
    x, y = rng.integers(1, 4, 20).astype(float), rng.integers(1, 4, 20).astype(float)
    tau = correlations(x, y)
    assert 0.0 < tau["kendall_p"] <= 1.0 and tau["kendall"] == pytest.approx(sps.kendalltau(x, y).statistic)
