"""Judge panels: the panel pseudo-judge's aggregates, inter-judge agreement, judges and judge sets vs humans."""

from __future__ import annotations

from fractions import Fraction

import pandas as pd
import pytest

from judge_api.stats.panel import (
    inter_judge_agreement,
    judges_vs_humans,
    panel_coverage,
    panel_rows,
    with_panel,
)
from judge_api.stats.render import report_to_markdown, report_to_table
from judge_api.stats.report import build_report

# item scores of two judges on a 1-100 scale (consistency); the panel mean is their average per (item, system)
A = {("i1", "x"): 80, ("i1", "y"): 40, ("i2", "x"): 70, ("i2", "y"): 50, ("i3", "x"): 90, ("i3", "y"): 30}
B = {("i1", "x"): 60, ("i1", "y"): 40, ("i2", "x"): 90, ("i2", "y"): 30, ("i3", "x"): 70, ("i3", "y"): 50}
PANEL_MEAN = {("i1", "x"): 70, ("i1", "y"): 40, ("i2", "x"): 80, ("i2", "y"): 40, ("i3", "x"): 80, ("i3", "y"): 40}
# Krippendorff's interval alpha (invariant to the linear map to [0, 1]), by hand: 12 values, sum 700, sum of squares
# 46000 -> SS_total = 46000 - 700^2/12 = 15500/3; each unit has two values, so sum_u sum_pairs o (c-k)^2 =
# 2 * sum_u (a-b)^2 = 2 * (400+0+400+400+400+400) = 4000 and alpha = 1 - (n-1) * 4000 / (2 n SS_total)
# = 1 - 11 * 4000 / (24 * 15500/3) = 1 - 44000/124000 = 20/31.
ALPHA = Fraction(20, 31)


def single_frame(costs: dict[str, float] | None = None) -> pd.DataFrame:
    rows = []
    for judge, scores in (("judge-a", A), ("judge-b", B)):
        for (item, system), score in scores.items():
            rows.append(
                {
                    "item_id": item,
                    "mode": "single",
                    "system_a": system,
                    "aspect": "consistency",
                    "judge": judge,
                    "status": "done",
                    "score": score,
                    "scale_min": 1,
                    "scale_max": 100,
                    "cost_usd": (costs or {}).get(judge, 0.0),
                }
            )
    return pd.DataFrame(rows)


def pair_row(item: str, judge: str, order: str, outcome: str) -> dict[str, object]:
    return {
        "item_id": item,
        "mode": "pairwise",
        "system_a": "x",
        "system_b": "y",
        "aspect": "overall",
        "judge": judge,
        "order": order,
        "status": "done",
        "outcome": outcome,
    }


def test_panel_mean_and_median_per_item() -> None:
    rows = panel_rows(single_frame(), ["judge-a", "judge-b"], "mean")
    got = {(r.item_id, r.system_a): r.score for r in rows.itertuples()}
    assert got == PANEL_MEAN
    assert set(rows["judge"]) == {"panel"} and set(rows["status"]) == {"done"}
    assert (rows["scale_min"] == 1).all() and (rows["scale_max"] == 100).all()
    # the median of two values is their mean; with a third judge it is the middle one
    third = single_frame().query("judge == 'judge-a'").assign(judge="judge-c", score=10)
    median = panel_rows(pd.concat([single_frame(), third]), ["judge-a", "judge-b", "judge-c"], "median")
    assert {(r.item_id, r.system_a): r.score for r in median.itertuples()} == {k: min(A[k], B[k]) for k in A}


def test_panel_members_on_different_scales_are_put_on_0_1() -> None:
    frame = single_frame()
    frame.loc[frame["judge"] == "judge-b", ["score", "scale_min", "scale_max"]] = [5, 1, 9]
    rows = panel_rows(frame, ["judge-a", "judge-b"])
    i1x = rows[(rows["item_id"] == "i1") & (rows["system_a"] == "x")].iloc[0]
    assert i1x["score"] == pytest.approx(((80 - 1) / 99 + 0.5) / 2)
    assert (i1x["scale_min"], i1x["scale_max"]) == (0.0, 1.0)


def test_inter_judge_alpha_is_the_hand_computed_value() -> None:
    agreement = inter_judge_agreement(single_frame(), ["judge-a", "judge-b"])
    (scores,) = agreement["scores"]
    assert scores["n_units"] == 6 and scores["n_judges"] == 2
    assert scores["alpha_interval"] == pytest.approx(float(ALPHA), abs=1e-12)
    (pair,) = scores["pairs"]
    # Spearman by hand: ranks A 5,2,4,3,6,1 and B 4,2,6,1,5,3 (units i1x i1y i2x i2y i3x i3y, no ties);
    # sum d^2 = 1+0+4+4+1+4 = 14, rho = 1 - 6*14 / (6*35) = 0.6
    assert pair["n"] == 6 and pair["spearman"] == pytest.approx(0.6)


def test_pairwise_majority_of_order_combined_outcomes() -> None:
    rows = [
        # item p1: a win, b win, c loss -> panel win
        pair_row("p1", "judge-a", "ab", "win"),
        pair_row("p1", "judge-a", "ba", "win"),
        pair_row("p1", "judge-b", "ab", "win"),
        pair_row("p1", "judge-b", "ba", "win"),
        pair_row("p1", "judge-c", "ab", "loss"),
        pair_row("p1", "judge-c", "ba", "loss"),
        # item p2: a win, b tie (its orders disagree: an inconsistent tie), c loss -> 0 -> panel tie
        pair_row("p2", "judge-a", "ab", "win"),
        pair_row("p2", "judge-a", "ba", "win"),
        pair_row("p2", "judge-b", "ab", "win"),
        pair_row("p2", "judge-b", "ba", "loss"),
        pair_row("p2", "judge-c", "ab", "loss"),
        pair_row("p2", "judge-c", "ba", "loss"),
        # item p3: judge-b (one order) and judge-c judged it, both a loss: 2 of 3 members, the quorum
        pair_row("p3", "judge-b", "ab", "loss"),
        pair_row("p3", "judge-c", "ab", "loss"),
        pair_row("p3", "judge-c", "ba", "loss"),
    ]
    panel = panel_rows(pd.DataFrame(rows), ["judge-a", "judge-b", "judge-c"])
    assert dict(zip(panel["item_id"], panel["outcome"], strict=True)) == {"p1": "win", "p2": "tie", "p3": "loss"}
    assert list(panel["preference"]) == [2.0, 0.0, -2.0]
    agreement = inter_judge_agreement(pd.DataFrame(rows), ["judge-a", "judge-b", "judge-c"])
    (prefs,) = agreement["preferences"]
    pairs = {(p["judge_a"], p["judge_b"]): p for p in prefs["pairs"]}
    assert pairs["judge-a", "judge-b"]["n"] == 2 and pairs["judge-a", "judge-b"]["agreement"] == 0.5
    assert pairs["judge-a", "judge-c"]["agreement"] == 0.0


def test_judges_vs_humans_with_cost_and_judge_sets() -> None:
    frame = single_frame({"judge-a": 0.01, "judge-b": 0.002})
    # the humans agree with the panel mean's order exactly, less with each judge alone
    ratings = pd.DataFrame(
        [
            {
                "item_id": i,
                "system": s,
                "aspect": "consistency",
                "rater": "h1",
                "kind": "score",
                "value": v,
                "scale_min": 1,
                "scale_max": 100,
            }
            for (i, s), v in {
                ("i1", "x"): 60,
                ("i1", "y"): 20,
                ("i2", "x"): 80,
                ("i2", "y"): 25,
                ("i3", "x"): 90,
                ("i3", "y"): 30,
            }.items()
        ]
    )
    result = judges_vs_humans(frame, ratings, ["judge-a", "judge-b"])
    matrix = {r["judge"]: r for r in result["matrix"]}
    assert set(matrix) == {"judge-a", "judge-b", "panel"}
    assert matrix["judge-a"]["cost_usd"] == pytest.approx(0.06) and matrix["judge-b"]["cost_usd"] == pytest.approx(
        0.012
    )
    assert matrix["panel"]["cost_usd"] == pytest.approx(0.072) == result["panel_cost_usd"]
    assert matrix["panel"]["spearman"] > max(matrix["judge-a"]["spearman"], matrix["judge-b"]["spearman"])
    sets = result["sets"]
    assert [r["judges"] for r in sets] == [["judge-b"], ["judge-a"], ["judge-a", "judge-b"]]  # cheapest first
    assert sets[2]["spearman"] == matrix["panel"]["spearman"]


def test_report_shows_panel_and_inter_judge_agreement() -> None:
    report = build_report(single_frame(), n_boot=50)
    panel = report["panel"]
    assert panel["members"] == ["judge-a", "judge-b"] and panel["aggregate"] == "mean"
    assert panel["inter_judge"]["scores"][0]["alpha_interval"] == pytest.approx(float(ALPHA))
    means = {(r["system"], r["judge"]): r["mean"] for r in report["scores"]}
    assert means["x", "panel"] == pytest.approx(230 / 3) and means["y", "panel"] == pytest.approx(40)
    assert "judge-a ~ judge-b" in report_to_markdown(report)
    assert "panel" not in report["bias"]["per_judge"]
    full, rows = with_panel(single_frame(), ["judge-a", "judge-b"])
    assert len(full) == 12 + 6 and len(rows) == 6


# --- quorum (issue 28.4) ------------------------------------------------------------------------------------------
THREE = ["judge-a", "judge-b", "judge-c"]


def three_judge_frame() -> pd.DataFrame:
    """judge-a and judge-b score every (item, system); judge-c only i1 (it failed on the others); on (i3, y)
    judge-b failed too, so judge-a alone scored it."""
    frame = single_frame()
    third = frame[(frame["judge"] == "judge-a")].assign(judge="judge-c", score=10)
    third.loc[third["item_id"] != "i1", ["status", "score"]] = ["failed", None]
    frame.loc[(frame["judge"] == "judge-b") & (frame["item_id"] == "i3") & (frame["system_a"] == "y"), "status"] = (
        "failed"
    )
    return pd.concat([frame, third], ignore_index=True)


def test_a_unit_judged_by_one_of_three_members_is_not_a_panel_verdict() -> None:
    rows = panel_rows(three_judge_frame(), THREE, "mean")
    got = {(r.item_id, r.system_a): r.score for r in rows.itertuples()}
    # (i3, y): only judge-a (1 of 3) -> below the default quorum (2 of 3): no panel verdict, not judge-a's 30
    assert ("i3", "y") not in got
    assert got["i1", "x"] == pytest.approx((80 + 60 + 10) / 3) and got["i2", "x"] == pytest.approx(80)
    assert len(got) == 5
    # a configured quorum of 1 takes judge-a's score; a quorum of 3 keeps only item i1
    one = panel_rows(three_judge_frame(), THREE, "mean", quorum=1)
    assert {(r.item_id, r.system_a): r.score for r in one.itertuples()}["i3", "y"] == 30
    assert set(panel_rows(three_judge_frame(), THREE, quorum=3)["item_id"]) == {"i1"}


def test_pairwise_quorum_and_an_even_split_with_a_member_missing() -> None:
    rows = []
    for item, votes in {
        "q1": {"judge-a": "win"},  # 1 of 3: below the quorum
        "q2": {"judge-a": "win", "judge-b": "loss"},  # 2 of 3 split evenly, judge-c missing: not a tie
        "q3": {"judge-a": "win", "judge-b": "tie"},  # 2 of 3, sum +1: a win
        "q4": {"judge-a": "tie", "judge-b": "tie"},  # 2 of 3 agreeing on a tie: a tie
    }.items():
        for judge, outcome in votes.items():
            rows += [pair_row(item, judge, order, outcome) for order in ("ab", "ba")]
    # judge-c was asked and failed on every item
    rows += [
        {**pair_row(item, "judge-c", "ab", "win"), "status": "failed", "outcome": None}
        for item in ["q1", "q2", "q3", "q4"]
    ]
    frame = pd.DataFrame(rows)
    panel = panel_rows(frame, THREE)
    assert dict(zip(panel["item_id"], panel["outcome"], strict=True)) == {"q3": "win", "q4": "tie"}
    coverage = panel_coverage(frame, THREE)
    assert coverage["quorum"] == 2 and coverage["quorum_rule"] == "majority"
    (row,) = coverage["by_aspect"]
    assert (row["n_units"], row["n_verdicts"], row["n_below_quorum"], row["n_split"]) == (4, 2, 1, 1)
    assert row["coverage"] == 0.5 and coverage["coverage"] == 0.5
    # all members present and split evenly is the configured rule's tie
    full = [pair_row("q5", j, o, v) for j, v in (("judge-a", "win"), ("judge-b", "loss")) for o in ("ab", "ba")]
    assert list(panel_rows(pd.DataFrame(full), ["judge-a", "judge-b"])["outcome"]) == ["tie"]


def test_report_shows_coverage_and_uses_only_quorate_units() -> None:
    report = build_report(three_judge_frame(), n_boot=50)
    panel = report["panel"]
    assert panel["members"] == THREE and panel["quorum"] == 2
    coverage = panel["coverage"]
    assert (coverage["n_units"], coverage["n_verdicts"], coverage["n_below_quorum"]) == (6, 5, 1)
    assert coverage["coverage"] == pytest.approx(5 / 6)
    scores = {(r["system"], r["judge"]): r for r in report["scores"]}
    # the panel's y scores stand on i1 and i2 only: (i3, y) is below the quorum
    assert scores["y", "panel"]["n"] == 2
    assert scores["y", "panel"]["mean"] == pytest.approx(((40 + 40 + 10) / 3 + 40) / 2)
    paired = {(r["judge"], r["system_x"], r["system_y"]): r for r in report["paired"]}
    assert paired["panel", "x", "y"]["n_pairs"] == 2
    for text in (report_to_markdown(report), report_to_table(report)):
        assert "quorum 2 of 3" in text and "coverage 5/6 units (83.3 %)" in text
        assert "panel (coverage 5/6 units (83.3 %))" in text
    configured = build_report(three_judge_frame(), n_boot=50, panel={"quorum": 1})
    assert configured["panel"]["quorum"] == 1 and configured["panel"]["coverage"]["coverage"] == 1.0
    assert configured["panel"]["coverage"]["quorum_rule"] == "configured"
