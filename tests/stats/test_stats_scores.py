"""Single-mode score statistics: summaries, sample averaging, status counts, paired tests, paper table."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import pytest

from judge_api.stats import scores as S


def single(rows: Sequence[tuple[str, str, str, str, float | None, str, int]]) -> pd.DataFrame:
    """(item, system, aspect, judge, score, status, sample_index) rows on a 1-100 scale."""
    return pd.DataFrame(
        {
            "item_id": [r[0] for r in rows],
            "mode": "single",
            "system_a": [r[1] for r in rows],
            "aspect": [r[2] for r in rows],
            "judge": [r[3] for r in rows],
            "score": [np.nan if r[4] is None else r[4] for r in rows],
            "status": [r[5] for r in rows],
            "sample_index": [r[6] for r in rows],
            "scale_min": 1.0,
            "scale_max": 100.0,
        }
    )


def test_summary_statistics_and_status_counts() -> None:
    df = single(
        [
            ("1", "x", "coherence", "j", 60, "done", 0),
            ("2", "x", "coherence", "j", 70, "done", 0),
            ("3", "x", "coherence", "j", 80, "done", 0),
            ("4", "x", "coherence", "j", 90, "done", 0),
            ("5", "x", "coherence", "j", None, "failed", 0),
            ("6", "x", "coherence", "j", None, "unparseable", 0),
            ("7", "x", "coherence", "j", None, "pending", 0),
            ("8", "x", "coherence", "j", None, "running", 0),
            ("9", "x", "coherence", "j", None, "cancelled", 0),
        ]
    )
    out = S.score_summary(df, n_boot=500, seed=1)
    assert len(out) == 1
    r = out.iloc[0]
    assert (r["n"], r["mean"], r["median"]) == (4, 75.0, 75.0)
    assert r["std"] == pytest.approx(np.std([60, 70, 80, 90], ddof=1))
    t_half_width = 3.182 * np.std([60, 70, 80, 90], ddof=1) / 2  # Student t, 3 degrees of freedom
    assert r["ci_low"] <= 75 - t_half_width and 75 + t_half_width <= r["ci_high"] <= 100
    assert r["ci_warning"] == "only 4 items: the interval may cover less than 95% on skewed scores"
    counts = (r["n_total"], r["n_done"], r["n_failed"], r["n_unparseable"], r["n_pending"], r["n_cancelled"])
    assert counts == (9, 4, 1, 1, 2, 1)
    assert r["histogram"]["counts"] == [0, 0, 0, 0, 0, 1, 1, 1, 1, 0]
    assert r["histogram"]["edges"][0] == 1.0 and r["histogram"]["edges"][-1] == 100.0


def test_self_consistency_samples_are_averaged_per_item_first() -> None:
    df = single(
        [
            ("1", "x", "c", "j", 10, "done", 0),
            ("1", "x", "c", "j", 30, "done", 1),
            ("1", "x", "c", "j", None, "failed", 2),
            ("2", "x", "c", "j", 50, "done", 0),
        ]
    )
    items = S.item_scores(df)
    assert sorted(items["score"].tolist()) == [20.0, 50.0]
    assert items.set_index("item_id").loc["1", "n_samples"] == 2
    r = S.score_summary(df, n_boot=100).iloc[0]
    assert r["n"] == 2 and r["mean"] == 35.0
    assert r["n_total"] == 4 and r["n_failed"] == 1


def test_group_with_only_failed_judgments_is_kept_with_n_zero() -> None:
    df = single([("1", "x", "c", "j", None, "failed", 0), ("1", "y", "c", "j", 40, "done", 0)])
    out = S.score_summary(df, n_boot=50).set_index("system")
    assert out.loc["x", "n"] == 0 and np.isnan(out.loc["x", "mean"])
    assert out.loc["x", "n_failed"] == 1
    assert out.loc["y", "n"] == 1 and out.loc["y", "mean"] == 40.0


@pytest.mark.parametrize(
    ("lo", "hi", "n_bins", "per_value"),
    [(1, 10, 10, True), (0, 2, 3, True), (1, 100, 10, False), (1, 5, 5, True)],
)
def test_histogram_edges(lo: float, hi: float, n_bins: int, per_value: bool) -> None:
    edges, pv = S.histogram_edges(lo, hi, 10)
    assert pv is per_value
    assert len(edges) == n_bins + 1


def test_small_integer_scale_gets_one_bin_per_value() -> None:
    df = single([(str(i), "x", "c", "j", v, "done", 0) for i, v in enumerate([0, 1, 1, 2, 2, 2])])
    df["scale_min"], df["scale_max"] = 0.0, 2.0
    h = S.score_summary(df, n_boot=10).iloc[0]["histogram"]
    assert h["values"] == [0.0, 1.0, 2.0]
    assert h["counts"] == [1, 2, 3]


def _paired_frame(shift: float, n: int = 200, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    base = rng.normal(60, 10, n)
    rows = []
    for i in range(n):
        rows.append((str(i), "x", "c", "j", float(np.round(base[i] + shift + rng.normal(0, 5))), "done", 0))
        rows.append((str(i), "y", "c", "j", float(np.round(base[i])), "done", 0))
    return single(rows)


def test_paired_comparison_recovers_a_planted_shift() -> None:
    res = S.paired_comparison(_paired_frame(4.0), "x", "y", "c", "j", n_boot=2000, seed=3)
    assert res["n_pairs"] == 200
    assert res["ci_low"] < 4.0 < res["ci_high"]
    assert res["mean_diff"] == pytest.approx(4.0, abs=1.0)
    assert res["p_value"] < 0.05
    assert res["n_x_better"] > res["n_y_better"]


def test_paired_comparison_only_uses_items_both_systems_have() -> None:
    df = pd.concat(
        [
            _paired_frame(0.0, n=20),
            single([("extra", "x", "c", "j", 99, "done", 0), ("miss", "y", "c", "j", None, "failed", 0)]),
        ]
    )
    res = S.paired_comparison(df, "x", "y", "c", "j", n_boot=100)
    assert (res["n_pairs"], res["n_x_only"], res["n_y_only"]) == (20, 1, 0)


def test_identical_systems_give_p_one_and_zero_diff() -> None:
    rows = []
    for i in range(10):
        rows += [(str(i), "x", "c", "j", 50 + i, "done", 0), (str(i), "y", "c", "j", 50 + i, "done", 0)]
    res = S.paired_comparison(single(rows), "x", "y", "c", "j", n_boot=100)
    assert res["p_value"] == 1.0
    assert res["mean_diff"] == 0.0 and res["ci_low"] < 0.0 < res["ci_high"]
    assert res["ci_warning"].startswith("all 10 differences equal")
    assert S.wilcoxon_p(np.zeros(5)) == 1.0
    assert S.wilcoxon_p(np.array([])) is None


def test_paired_comparisons_covers_every_pair_per_aspect_and_judge() -> None:
    rows = []
    for i in range(5):
        for sysname in ("a", "b", "c"):
            for judge in ("j1", "j2"):
                rows.append((str(i), sysname, "coherence", judge, 50 + i, "done", 0))
    out = S.paired_comparisons(single(rows), n_boot=50)
    assert len(out) == 3 * 2
    assert set(zip(out["system_x"], out["system_y"], strict=True)) == {("a", "b"), ("a", "c"), ("b", "c")}


def test_paper_table_reproduces_the_published_chatgpt_row() -> None:
    # ChatGPT on MSC (Wang et al.): Engagingness 75.48, Coherence 75.00, Consistency 75.48, Average 75.32.
    rows = []
    for aspect, target in (("engagingness", 75.48), ("coherence", 75.00), ("consistency", 75.48)):
        rows.append(("1", "ChatGPT", aspect, "gpt-4", target - 1.0, "done", 0))
        rows.append(("2", "ChatGPT", aspect, "gpt-4", target + 1.0, "done", 0))
    table = S.paper_table(single(rows))
    assert list(table.columns) == ["judge", "system", "engagingness", "coherence", "consistency", "average", "n_items"]
    r = table.iloc[0]
    assert r["engagingness"] == pytest.approx(75.48)
    assert r["coherence"] == pytest.approx(75.00)
    assert round(r["average"], 2) == 75.32


def test_empty_and_all_failed_frames() -> None:
    assert S.score_summary(single([]), n_boot=10).empty
    assert S.paired_comparisons(single([]), n_boot=10).empty
    assert S.paper_table(single([])).empty
    failed = single([("1", "x", "c", "j", None, "failed", 0)])
    assert S.paired_comparisons(failed).empty
    assert S.paper_table(failed).empty
    res = S.paired_comparison(failed, "x", "y", "c", "j")
    assert res["n_pairs"] == 0 and res["p_value"] is None


# -- small n (issue 41): intervals that keep their level, and say when they cannot -------------------------------


def test_one_item_gets_no_interval_and_a_warning() -> None:
    """One item, A = 80 and B = 60: the percentile bootstrap gave [80, 80] and a paired [20, 20] next to p = 1.0."""
    df = single([("1", "A", "c", "j", 80, "done", 0), ("1", "B", "c", "j", 60, "done", 0)])
    scores = S.score_summary(df, n_boot=200).set_index("system")
    assert scores.loc["A", "ci_low"] is None and scores.loc["A", "ci_high"] is None
    assert scores.loc["A", "ci_warning"] == "1 item: no interval of the mean of scores"
    pair = S.paired_comparison(df, "A", "B", "c", "j", n_boot=200)
    assert (pair["mean_diff"], pair["ci_low"], pair["ci_high"], pair["p_value"]) == (20.0, None, None, 1.0)
    assert pair["ci_warning"] == "1 item: no interval of the mean of differences"


def test_thirty_equal_scores_get_the_scale_worst_case_not_a_point() -> None:
    """30 items all 80: [80, 80] before. A value at the scale's end unseen in 30 items is still 2.5% likely at
    a share of 1 - 0.025 ** (1 / 30) = 11.6%, so the mean may lie in about [70.8, 82.3]."""
    df = single([(str(i), "A", "c", "j", 80, "done", 0) for i in range(30)])
    r = S.score_summary(df, n_boot=200).iloc[0]
    share = 1 - 0.025 ** (1 / 30)
    assert r["ci_low"] == pytest.approx(80 - 79 * share) and r["ci_high"] == pytest.approx(80 + 20 * share)
    assert r["ci_warning"] == "all 30 scores equal: no sampling interval; the scale's worst case for 30 items"


def test_five_pairs_differing_by_ten_do_not_get_a_zero_width_interval() -> None:
    """Five pairs each differing by 10: CI [10, 10] next to Wilcoxon p = 0.0625. The honest interval contains 0."""
    rows = []
    for i in range(5):
        rows += [(str(i), "A", "c", "j", 70, "done", 0), (str(i), "B", "c", "j", 60, "done", 0)]
    pair = S.paired_comparison(single(rows), "A", "B", "c", "j", n_boot=200)
    assert pair["mean_diff"] == 10.0 and pair["p_value"] == pytest.approx(0.0625)
    assert pair["ci_low"] < 0.0 < 10.0 < pair["ci_high"] <= 99.0
    assert pair["ci_warning"].startswith("all 5 differences equal")


def test_interval_of_ten_normal_scores_is_at_least_the_student_t_interval() -> None:
    x = np.round(np.random.default_rng(4).normal(70, 12, 10))
    df = single([(str(i), "A", "c", "j", float(v), "done", 0) for i, v in enumerate(x)])
    r = S.score_summary(df, n_boot=500).iloc[0]
    half = 2.262 * x.std(ddof=1) / np.sqrt(10)
    assert r["ci_low"] <= x.mean() - half + 1e-9 and r["ci_high"] >= x.mean() + half - 1e-9
    assert r["ci_warning"] is None


def test_paper_table_compares_systems_on_the_items_they_share() -> None:
    """A judged on 10 items (mean 60), B only on the 5 it did not fail (mean 70): B was put above A, while on the
    5 shared items A beats B by 10 on every one."""
    rows: list[tuple[str, str, str, str, float | None, str, int]] = [
        (str(i), "A", "coherence", "j", 80 if i < 5 else 40, "done", 0) for i in range(10)
    ]
    rows += [(str(i), "B", "coherence", "j", 70, "done", 0) for i in range(5)]
    rows += [(str(i), "B", "coherence", "j", None, "failed", 0) for i in range(5, 10)]
    df = single(rows)
    table = S.paper_table(df).set_index("system")
    assert table.loc["A", "coherence"] == 80.0 and table.loc["B", "coherence"] == 70.0
    counts = S.paper_cell_counts(S.item_scores(df)).set_index("system")
    assert counts.loc["A", "n"] == counts.loc["B", "n"] == 5 and counts["shared"].all()


def test_paper_table_cells_carry_their_n_and_say_when_items_are_not_shared() -> None:
    """References on 4 of 10 items: F1 was averaged over 4 items under a row saying 10, with no n shown."""
    from judge_api.stats.render import report_to_table
    from judge_api.stats.report import build_report

    rows: list[tuple[str, str, str, str, float | None, str, int]] = [
        (str(i), "A", "coherence", "j", 70, "done", 0) for i in range(10)
    ]
    rows += [(str(i), "A", "f1", "reference", 0.5, "done", 0) for i in range(4)]
    rows += [(str(i), "B", "coherence", "j", 60, "done", 0) for i in range(10, 13)]  # no item shared with A
    df = single(rows)
    df.loc[df["judge"] == "reference", ["scale_min", "scale_max"]] = (0.0, 1.0)
    section = build_report(df, n_boot=20)["paper_table"]
    a = next(r for r in section["rows"] if r["system"] == "A")
    assert a["n_items"] == 10 and a["metrics_n"] == {"f1": 4} and a["n"] == {"coherence": 10}
    assert a["shared"]["coherence"] is False and section["compared_on"].startswith("each system's own items")
    text = report_to_table(build_report(df, n_boot=20))
    assert "0.500 (4)" in text and "70.00 (10, not shared)" in text


def test_equal_scores_without_a_scale_get_no_interval_rather_than_a_point() -> None:
    df = single([(str(i), "A", "c", "j", 80, "done", 0) for i in range(12)])
    df["scale_min"], df["scale_max"] = np.nan, np.nan
    r = S.score_summary(df, n_boot=100).iloc[0]
    assert pd.isna(r["ci_low"]) and pd.isna(r["ci_high"])
    assert r["ci_warning"] == "all 12 scores equal: no sampling interval"
