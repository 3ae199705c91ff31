"""Bias diagnostics and flags."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from judge_api.stats import bias as B
from judge_api.stats.preferences import combine_orders


def pair_rows(n: int, *, first_wins: float, flip_every: int = 0, longer_wins: bool | None = None) -> pd.DataFrame:
    """Pairwise order rows: in order ab, a wins with prob first_wins; in order ba, b (shown first) does."""
    rng = np.random.default_rng(0)
    rows = []
    for i in range(n):
        la, lb = (900, 300) if i % 2 == 0 else (300, 900)
        for order in ("ab", "ba"):
            if longer_wins is not None:
                a_better = (la > lb) == longer_wins
                outcome = "win" if a_better else "loss"
            else:
                first = rng.random() < first_wins
                outcome = ("win" if first else "loss") if order == "ab" else ("loss" if first else "win")
            if flip_every and i % flip_every == 0 and order == "ba":
                outcome = {"win": "loss", "loss": "win"}[outcome] if outcome != "tie" else "win"
            rows.append(
                {
                    "item_id": f"i{i}",
                    "mode": "pairwise",
                    "system_a": "x",
                    "system_b": "y",
                    "aspect": "o",
                    "judge": "openai:gpt-4o",
                    "order": order,
                    "outcome": outcome,
                    "status": "done",
                    "len_a": la,
                    "len_b": lb,
                }
            )
    return pd.DataFrame(rows)


def test_position_bias_is_measured_and_flagged() -> None:
    df = pair_rows(300, first_wins=0.8)
    rep = B.bias_report(df)
    pos = rep["per_judge"]["openai:gpt-4o"]["position"]
    assert pos["n"] == 600
    assert pos["p_first_wins"] == pytest.approx(0.8, abs=0.05)
    names = [f["name"] for f in rep["flags"]]
    assert "position_bias" in names
    flag = next(f for f in rep["flags"] if f["name"] == "position_bias")
    assert set(flag) == {"name", "value", "threshold", "message"}
    assert flag["threshold"] == 0.1 and "openai:gpt-4o" in flag["message"]


def test_unbiased_judge_is_not_flagged() -> None:
    rep = B.bias_report(pair_rows(400, first_wins=0.5))
    assert rep["per_judge"]["openai:gpt-4o"]["position"]["p_first_wins"] == pytest.approx(0.5, abs=0.06)
    assert "position_bias" not in [f["name"] for f in rep["flags"]]


def test_swap_flip_rate_counts_disagreeing_orders() -> None:
    # Outcomes follow length only, so both orders agree except on every 4th item, flipped in order ba.
    df = pair_rows(100, first_wins=0.5, longer_wins=True, flip_every=4)
    swap = B.bias_report(df)["per_judge"]["openai:gpt-4o"]["swap"]
    assert (swap["n"], swap["flips"]) == (100, 25)
    assert swap["rate"] == 0.25


def test_length_bias_longer_always_wins() -> None:
    rep = B.bias_report(pair_rows(50, first_wins=0.5, longer_wins=True))
    length = rep["per_judge"]["openai:gpt-4o"]["length"]
    assert (length["n_pairs"], length["p_longer_wins"]) == (50, 1.0)
    assert "length_bias" in [f["name"] for f in rep["flags"]]
    rep_short = B.bias_report(pair_rows(50, first_wins=0.5, longer_wins=False))
    assert rep_short["per_judge"]["openai:gpt-4o"]["length"]["p_longer_wins"] == 0.0


def single_rows(
    scores: list[float],
    *,
    systems: list[str] | None = None,
    lengths: list[float] | None = None,
    statuses: list[str] | None = None,
    judge: str = "openai:gpt-4o",
) -> pd.DataFrame:
    n = len(scores)
    return pd.DataFrame(
        {
            "item_id": [f"i{i}" for i in range(n)],
            "mode": "single",
            "system_a": systems or ["llama-3"] * n,
            "aspect": "coherence",
            "judge": judge,
            "status": statuses or ["done"] * n,
            "score": scores,
            "scale_min": 1.0,
            "scale_max": 10.0,
            "len_a": lengths if lengths is not None else np.nan,
        }
    )


def test_score_distribution_use() -> None:
    use = B.score_distribution_use(single_rows([7, 7, 8, 8, 8, 9]))["openai:gpt-4o"]
    assert (use["n_scale_points"], use["n_distinct"]) == (10, 3)
    assert use["distinct_fraction"] == 0.3
    assert (use["min"], use["max"]) == (7.0, 9.0)
    p = np.array([2, 3, 1]) / 6
    assert use["entropy_norm"] == pytest.approx(-(p * np.log(p)).sum() / np.log(10))
    assert use["iqr"] == pytest.approx(np.quantile([7, 7, 8, 8, 8, 9], 0.75) - np.quantile([7, 7, 8, 8, 8, 9], 0.25))
    uniform = B.score_distribution_use(single_rows(list(range(1, 11))))["openai:gpt-4o"]
    assert uniform["entropy_norm"] == pytest.approx(1.0) and uniform["distinct_fraction"] == 1.0
    # one score used throughout: entropy 0, printed "0.000", not "-0.000" (the demo's smoke judge does this)
    constant = B.score_distribution_use(single_rows([1, 1, 1]))["openai:gpt-4o"]["entropy_norm"]
    assert constant == 0.0 and math.copysign(1.0, constant) == 1.0 and f"{constant:.3f}" == "0.000"


def test_score_length_correlation() -> None:
    lengths = [100.0 * i for i in range(1, 31)]
    scores = [float(min(10, 1 + i // 3)) for i in range(30)]
    length = B.length_bias(combine_orders(single_rows(scores)), single_rows(scores, lengths=lengths))
    assert length["openai:gpt-4o"]["score_length_spearman"] > 0.9
    assert length["openai:gpt-4o"]["n_scores"] == 30


def test_failure_and_unparseable_rates_exclude_pending_and_cancelled() -> None:
    statuses = ["done"] * 16 + ["failed"] * 2 + ["unparseable"] * 2 + ["pending"] * 5 + ["cancelled"] * 3
    scores = [5.0] * 16 + [np.nan] * 12
    rep = B.bias_report(single_rows(scores, statuses=statuses), thresholds=B.BiasThresholds(min_n=10))
    fail = rep["per_judge"]["openai:gpt-4o"]["failures"]
    assert (fail["n_total"], fail["n_finished"]) == (28, 20)
    assert fail["failure_rate"] == 0.1 and fail["unparseable_rate"] == 0.1
    assert {"failure_rate", "unparseable_rate"} <= {f["name"] for f in rep["flags"]}
    # The default min_n (20) is met exactly here; a larger one silences the flags.
    quiet = B.bias_report(single_rows(scores, statuses=statuses), thresholds=B.BiasThresholds(min_n=50))
    assert quiet["flags"] == []


@pytest.mark.parametrize(
    ("name", "family"),
    [
        ("openai:gpt-4o", "openai"),
        ("gpt-4o-mini", "openai"),
        ("ChatGPT-Rsum", "openai"),
        ("anthropic:claude-3-5-sonnet", "anthropic"),
        ("ollama:llama3.1:8b", "meta"),
        ("vllm:Qwen/Qwen2.5-7B-Instruct", "qwen"),
        ("local:smollm2-360m", "huggingface"),
        ("mistral-7b", "mistral"),
        ("gemma-2-9b", "google"),
        ("my-own-bot", None),
        ("", None),
    ],
)
def test_model_family(name: str, family: str | None) -> None:
    assert B.model_family(name) == family


def test_custom_family_map() -> None:
    assert B.model_family("acme:roadrunner-7b", {"roadrunner": "acme"}) == "acme"
    assert B.model_family("openai:gpt-4o", {"roadrunner": "acme"}) is None


def test_self_preference_single_mode() -> None:
    systems = ["gpt-4o-mini"] * 30 + ["llama-3"] * 30
    scores = [9.0] * 30 + [6.0] * 30
    rep = B.bias_report(single_rows(scores, systems=systems))
    sp = rep["per_judge"]["openai:gpt-4o"]["self_preference"]
    assert sp["judge_family"] == "openai" and sp["same_family_systems"] == ["gpt-4o-mini"]
    assert (sp["mean_same"], sp["mean_other"], sp["score_diff"]) == (9.0, 6.0, 3.0)
    assert sp["score_diff_scaled"] == pytest.approx(3 / 9)
    assert "self_preference_score" in [f["name"] for f in rep["flags"]]


def test_self_preference_pairwise_mode() -> None:
    rows = []
    for i in range(40):
        a, b = ("gpt-4o-mini", "llama-3") if i % 2 else ("llama-3", "gpt-4o-mini")
        outcome = "win" if a == "gpt-4o-mini" else "loss"  # the gpt system always wins
        rows.append(
            {
                "item_id": f"i{i}",
                "mode": "pairwise",
                "system_a": a,
                "system_b": b,
                "aspect": "o",
                "judge": "openai:gpt-4o",
                "order": "ab",
                "outcome": outcome,
                "status": "done",
            }
        )
    rep = B.bias_report(pd.DataFrame(rows))
    sp = rep["per_judge"]["openai:gpt-4o"]["self_preference"]
    assert (sp["n_pairwise"], sp["win_rate_same"]) == (40, 1.0)
    assert "self_preference_win_rate" in [f["name"] for f in rep["flags"]]


def test_thresholds_are_configurable_and_validated() -> None:
    df = pair_rows(300, first_wins=0.8)
    rep = B.bias_report(df, thresholds=B.BiasThresholds(position_bias_max_deviation=0.4))
    assert "position_bias" not in [f["name"] for f in rep["flags"]]
    assert rep["thresholds"]["position_bias_max_deviation"] == 0.4
    with pytest.raises(ValueError, match=r"swap_flip_rate_max: must be within \[0, 1\], got 2.0"):
        B.BiasThresholds(swap_flip_rate_max=2.0)
    with pytest.raises(ValueError, match="min_n: must be >= 1"):
        B.BiasThresholds(min_n=0)
    with pytest.raises(ValueError, match="min_n: must be an integer"):
        B.BiasThresholds(min_n=2.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="failure_rate_max: must be a number"):
        B.BiasThresholds(failure_rate_max="0.1")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="length_win_rate_max"):
        B.BiasThresholds(length_win_rate_max=float("nan"))


def test_empty_frame_has_no_figures_and_no_flags() -> None:
    rep = B.bias_report(single_rows([]))
    assert rep["per_judge"] == {} and rep["flags"] == []


def length_flags(rep: dict) -> list[dict]:
    return [f for f in rep["flags"] if f["name"] == "length_score_correlation"]


def test_a_planted_length_score_correlation_is_flagged_and_explained() -> None:
    """Issue 27.7: on a single-mode run score and length correlated at rho = 0.84 and the report said "No bias
    flags". A correlation above the threshold with at least min_n scores is flagged, saying what it means."""
    rng = np.random.default_rng(27)
    lengths = rng.uniform(50, 800, 40)
    scores = np.clip(np.round(10 + lengths / 10 + rng.normal(0, 8, 40)), 1, 100)  # score follows length
    rep = B.bias_report(single_rows(list(scores), lengths=list(lengths)))
    rho = rep["per_judge"]["openai:gpt-4o"]["length"]["score_length_spearman"]
    assert rho > 0.8
    (flag,) = length_flags(rep)
    assert flag["value"] == pytest.approx(rho) and flag["threshold"] == 0.5
    assert "reward length" in flag["message"] and "AlpacaEval" in flag["message"] and "40 scores" in flag["message"]
    # a judge that rewards brevity is flagged too
    (short,) = length_flags(B.bias_report(single_rows(list(scores), lengths=list(-lengths + 900))))
    assert short["value"] < -0.8 and "reward brevity" in short["message"]


def test_no_length_score_correlation_is_not_flagged() -> None:
    rng = np.random.default_rng(7)
    lengths = rng.uniform(50, 800, 40)
    scores = rng.integers(1, 101, 40).astype(float)  # independent of length
    rep = B.bias_report(single_rows(list(scores), lengths=list(lengths)))
    assert abs(rep["per_judge"]["openai:gpt-4o"]["length"]["score_length_spearman"]) < 0.3
    assert length_flags(rep) == []


def test_a_length_score_correlation_on_too_few_scores_is_not_flagged() -> None:
    lengths = [100.0 * i for i in range(1, 11)]
    scores = [float(i) for i in range(1, 11)]  # rho = 1, but only 10 scores
    assert length_flags(B.bias_report(single_rows(scores, lengths=lengths))) == []
    assert length_flags(B.bias_report(single_rows(scores, lengths=lengths), thresholds=B.BiasThresholds(min_n=10)))
