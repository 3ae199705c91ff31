"""The report's calibrated section: a judge that overrates one system, corrected by a sample of human labels."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd
import pytest

from judge_api.stats.calibrated import MIN_LABELS, calibrated_section
from judge_api.stats.ppi import ppi_mean
from judge_api.stats.preferences import combine_orders
from judge_api.stats.report import build_report
from judge_api.stats.scores import item_scores

HUMAN_MEAN = {"v1": 1.0, "v2": 1.2, "v3": 1.4}  # on the humans' 0-2 scale
JUDGE_OVERRATES = {"v1": 30.0, "v2": 0.0, "v3": 0.0}  # points on the judge's 1-100 scale


def _run(n_items: int, n_labeled: int, seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    rng = np.random.default_rng(seed)
    judgments, ratings = [], []
    labeled = rng.choice(n_items, size=n_labeled, replace=False)  # a rater rates every candidate of an item
    for system, mean in HUMAN_MEAN.items():
        truth = np.clip(rng.normal(mean, 0.35, n_items), 0.0, 2.0)
        judge = np.clip(1 + 49.5 * truth + JUDGE_OVERRATES[system] + rng.normal(0, 6, n_items), 1, 100)
        for i in range(n_items):
            judgments.append(
                {
                    "item_id": f"i{i}",
                    "mode": "single",
                    "system_a": system,
                    "aspect": "consistency",
                    "judge": "sim:overrater",
                    "status": "done",
                    "score": float(np.round(judge[i])),
                    "scale_min": 1.0,
                    "scale_max": 100.0,
                    "cost_usd": 0.001,
                }
            )
        for i in labeled:
            ratings.append(
                {
                    "item_id": f"i{i}",
                    "system": system,
                    "aspect": "consistency",
                    "rater": "h1",
                    "kind": "score",
                    "value": float(truth[i]),
                    "scale_min": 0.0,
                    "scale_max": 2.0,
                }
            )
    return pd.DataFrame(judgments), pd.DataFrame(ratings)


@pytest.fixture(scope="module")
def overrater() -> tuple[dict[str, Any], pd.DataFrame, pd.DataFrame]:
    judgments, ratings = _run(400, 60)
    return build_report(judgments, ratings, n_boot=50), judgments, ratings


def test_calibrated_ranking_follows_the_humans_where_the_judges_does_not(overrater: Any) -> None:
    report, _, _ = overrater
    judge_only = {r["system"]: r["mean"] for r in report["scores"] if r["judge"] == "sim:overrater"}
    assert max(judge_only, key=judge_only.__getitem__) == "v1"  # the judge's own numbers put v1 first
    ranking = [r["system"] for r in report["calibrated"]["ranking"]]
    assert ranking == ["v3", "v2", "v1"]
    by_system = {r["system"]: r for r in report["calibrated"]["scores"]}
    for system, mean in HUMAN_MEAN.items():
        row = by_system[system]
        assert row["ci_low"] - 0.1 < mean < row["ci_high"] + 0.1
        assert row["human_scale"] == [0.0, 2.0] and row["n_labeled"] == 60 and row["n_judged"] == 400
        assert row["ci_high"] - row["ci_low"] < row["human_only"]["ci_high"] - row["human_only"]["ci_low"]
        assert row["effective_labels"] > 60
    v3 = next(r for r in report["calibrated"]["ranking"] if r["system"] == "v3")
    assert "v1" in v3["better_than"]
    json.dumps(report["calibrated"], allow_nan=False)


def test_each_row_equals_the_estimator_on_the_humans_scale(overrater: Any) -> None:
    report, judgments, ratings = overrater
    row = next(r for r in report["calibrated"]["scores"] if r["system"] == "v2")
    j = judgments[judgments["system_a"] == "v2"].set_index("item_id")
    h = ratings[ratings["system"] == "v2"].set_index("item_id")["value"]
    mapped = (j["score"] - 1.0) * 2.0 / 99.0
    labeled = j.index.isin(h.index)
    expected = ppi_mean(h.reindex(j.index[labeled]).to_numpy(), mapped[labeled].to_numpy(), mapped[~labeled].to_numpy())
    assert row["estimate"] == pytest.approx(expected.calibrated.estimate, abs=1e-12)
    assert row["ci_low"] == pytest.approx(expected.calibrated.ci_low, abs=1e-12)
    assert row["lambda"] == pytest.approx(expected.lam, abs=1e-12)


def test_differences_and_judges_table(overrater: Any) -> None:
    report, _, _ = overrater
    diff = next(d for d in report["calibrated"]["differences"] if (d["system_a"], d["system_b"]) == ("v1", "v3"))
    assert diff["ci_high"] < 0  # v1 is worse than v3 for the humans, though the judge scores it higher
    judges = report["calibrated"]["judges"]
    assert judges[0]["judge"] == "sim:overrater" and judges[0]["bias"] > 0
    assert judges[0]["usd_per_1k"] == pytest.approx(1.0)
    assert report["calibrated"]["labels_outside_queue"] == 180
    assert "uniform random sample" in report["calibrated"]["notes"][0]


def test_too_few_labels_gives_a_null_row_with_the_count_it_needs() -> None:
    judgments, ratings = _run(50, MIN_LABELS - 1)
    section = build_report(judgments, ratings, n_boot=20)["calibrated"]
    for row in section["scores"]:
        assert row["estimate"] is None and row["ci_low"] is None and row["lambda"] is None
        assert f"needs at least {MIN_LABELS} (1 more)" in row["note"]
    assert section["ranking"] == []


def test_no_ratings_means_no_section() -> None:
    judgments, _ = _run(20, 0)
    assert build_report(judgments, n_boot=20)["calibrated"] is None


def test_ratings_with_two_scales_for_one_aspect_get_a_note_not_a_number() -> None:
    judgments, ratings = _run(60, 20)
    ratings.loc[ratings.index[:5], "scale_max"] = 10.0
    section = build_report(judgments, ratings, n_boot=20)["calibrated"]
    assert all(r["estimate"] is None and "more than one scale" in r["note"] for r in section["scores"])


def test_pairwise_win_rates_are_calibrated_against_human_votes() -> None:
    rng = np.random.default_rng(3)
    rows, votes = [], []
    for i in range(300):
        human_prefers_b = rng.random() < 0.7  # people prefer v2 on 70 % of items
        judge_says_a = rng.random() < (0.8 if not human_prefers_b else 0.5)  # the judge leans to v1
        for order in ("ab", "ba"):
            rows.append(
                {
                    "item_id": f"i{i}",
                    "mode": "pairwise",
                    "system_a": "v1",
                    "system_b": "v2",
                    "aspect": "overall",
                    "judge": "sim:j",
                    "status": "done",
                    "order": order,
                    "outcome": "win" if judge_says_a else "loss",
                }
            )
        if i < 80:
            votes.append(
                {
                    "item_id": f"i{i}",
                    "system": "v2",
                    "system_b": "v1",
                    "aspect": "overall",
                    "rater": "h",
                    "kind": "preference",
                    "value": 1.0 if human_prefers_b else -1.0,
                    "scale_min": -1.0,
                    "scale_max": 1.0,
                }
            )
    df, ratings = pd.DataFrame(rows), pd.DataFrame(votes)
    section = calibrated_section(
        df.assign(score=np.nan), ratings, items=item_scores(df), combined=combine_orders(df), ci=0.95
    )
    assert section is not None
    (row,) = section["win_rates"]
    assert (row["system_a"], row["system_b"]) == ("v1", "v2")
    assert row["n_labeled"] == 80 and row["n_judged"] == 300
    assert row["ci_low"] < 0.3 < row["ci_high"]  # v1's win share for people is about 0.3; the judge says ~0.6


def test_markdown_shows_the_three_intervals_side_by_side(overrater: Any) -> None:
    from judge_api.stats.render import report_to_markdown, report_to_table

    report, _, _ = overrater
    md = report_to_markdown(report)
    assert "## Calibrated to people (PPI++)" in md
    row = next(line for line in md.splitlines() if line.startswith("| v1 | consistency | sim:overrater | 0.0-2.0"))
    v1 = next(r for r in report["calibrated"]["scores"] if r["system"] == "v1")
    assert f"{v1['estimate']:.3f} [{v1['ci_low']:.3f}, {v1['ci_high']:.3f}]" in row
    assert "Which judge to trust, per dollar" in report_to_table(report)
    plain_without = report_to_markdown({**report, "calibrated": None})
    assert "Calibrated" not in plain_without


def _constant_judge_run(n_items: int, label_values: list[float]) -> tuple[pd.DataFrame, pd.DataFrame]:
    judgments = [
        {
            "item_id": f"i{i}",
            "mode": "single",
            "system_a": "v1",
            "aspect": "consistency",
            "judge": "sim:constant",
            "status": "done",
            "score": 50.0,
            "scale_min": 1.0,
            "scale_max": 100.0,
            "cost_usd": 0.001,
        }
        for i in range(n_items)
    ]
    ratings = [
        {
            "item_id": f"i{i}",
            "system": "v1",
            "aspect": "consistency",
            "rater": "h1",
            "kind": "score",
            "value": value,
            "scale_min": 1.0,
            "scale_max": 5.0,
        }
        for i, value in enumerate(label_values)
    ]
    return pd.DataFrame(judgments), pd.DataFrame(ratings)


def test_equal_labels_and_a_constant_judge_give_no_zero_width_interval() -> None:
    """Issue 41 review: 10 labels all 5 (1-5) and a judge that always says 50 gave the interval [5, 5]; with humans
    giving 5 nine times in ten and 4 otherwise, that happens 35% of the time (coverage 0.65 at n = 10)."""
    judgments, ratings = _constant_judge_run(200, [5.0] * 10)
    report = build_report(judgments, ratings, n_boot=50)
    row = report["calibrated"]["scores"][0]
    assert row["estimate"] == pytest.approx(5.0)
    assert row["ci_low"] < 4.9 and row["ci_high"] == pytest.approx(5.0)
    human = row["human_only"]
    assert human["ci_low"] < 4.9
    json.dumps(report, allow_nan=False)


def test_calibrated_coverage_with_few_skewed_labels_and_a_constant_judge() -> None:
    rng = np.random.default_rng(41)
    reps, n, covered = 2000, 10, 0
    for _ in range(reps):
        y = np.where(rng.random(n) < 0.9, 5.0, 4.0)
        est = ppi_mean(y, np.full(n, 3.0), np.full(200, 3.0), bounds=(1.0, 5.0))
        covered += est.calibrated.ci_low <= 4.9 <= est.calibrated.ci_high
    assert covered / reps >= 0.93


def test_an_active_queue_with_a_stray_label_stays_weighted_and_covers() -> None:
    """Issue 37 review: one label outside an active queue switched the whole run to the uniform assumption, so the
    queue's labels (drawn ten times as often on the hard fifth of the items, which people rate low) counted as a
    uniform sample: the estimate leaned to the hard items and the interval missed. Now the drawn labels stay
    inverse-probability weighted and the stray one is left out of the rows, with a note. (Measured over 1,000
    draws: coverage 0.000 and a mean error of -0.50 before, 0.921 and +0.005 after.)"""
    from judge_api.stats.calibrated import Design
    from judge_api.stats.label_sampling import draw

    n_items, reps = 300, 40
    rng = np.random.default_rng(37)
    hard = np.arange(n_items) < n_items // 5
    ids = [f"i{i}" for i in range(n_items)]
    covered, errors = 0, []
    for rep in range(reps):
        truth = np.clip(np.round(np.where(hard, 0.5, 1.5) + rng.normal(0, 0.2, n_items), 1), 0.0, 2.0)
        judgments = pd.DataFrame(
            {
                "item_id": ids,
                "mode": "single",
                "system_a": "v1",
                "aspect": "consistency",
                "judge": "sim:noisy",
                "status": "done",
                "score": np.round(rng.uniform(1, 100, n_items)),  # a judge that says nothing
                "scale_min": 1.0,
                "scale_max": 100.0,
                "cost_usd": 0.001,
            }
        )
        queue = draw(ids, 40, "active", rep, np.where(hard, 1.0, 0.1))
        stray = next(i for i in ids[n_items // 5 :] if i not in queue.item_ids)
        rated = [*queue.item_ids, stray]
        ratings = pd.DataFrame(
            {
                "item_id": rated,
                "system": "v1",
                "aspect": "consistency",
                "rater": "h1",
                "kind": "score",
                "value": [float(truth[ids.index(i)]) for i in rated],
                "scale_min": 0.0,
                "scale_max": 2.0,
            }
        )
        section = calibrated_section(
            judgments,
            ratings,
            items=item_scores(judgments),
            combined=combine_orders(judgments),
            design=Design("active", frozenset(queue.item_ids), queue.inclusion),
        )
        assert section is not None and section["labels_outside_queue"] == 1
        assert section["design"].startswith("label queue (active)")
        assert "leave those out" in section["notes"][0]
        (row,) = section["scores"]
        covered += row["ci_low"] <= float(truth.mean()) <= row["ci_high"]
        errors.append(row["estimate"] - float(truth.mean()))
    assert abs(float(np.mean(errors))) < 0.1
    assert covered / reps >= 0.8


def test_the_panel_costs_what_its_members_cost() -> None:
    """Issue 37 review: the panel's rows carry no cost, so the judges table called the panel free (0 USD per 1,000)
    and ranked it first by effective labels per dollar, above members that cost 1 and 10 USD per 1,000."""
    from judge_api.stats.report import calibrated_report

    rng = np.random.default_rng(0)
    n_items = 200
    truth = np.clip(rng.normal(1.0, 0.4, n_items), 0.0, 2.0)
    rows = []
    for judge, noise, cost in (("a:cheap", 10.0, 0.001), ("b:dear", 5.0, 0.01)):
        scores = np.clip(np.round(1 + 49.5 * truth + rng.normal(0, noise, n_items)), 1, 100)
        rows += [
            {
                "item_id": f"i{i}",
                "mode": "single",
                "system_a": "v1",
                "aspect": "consistency",
                "judge": judge,
                "status": "done",
                "score": float(scores[i]),
                "scale_min": 1.0,
                "scale_max": 100.0,
                "cost_usd": cost,
            }
            for i in range(n_items)
        ]
    ratings = pd.DataFrame(
        {
            "item_id": [f"i{i}" for i in range(40)],
            "system": "v1",
            "aspect": "consistency",
            "rater": "h1",
            "kind": "score",
            "value": truth[:40],
            "scale_min": 0.0,
            "scale_max": 2.0,
        }
    )
    section = calibrated_report(pd.DataFrame(rows), ratings, panel={"judges": ["a:cheap", "b:dear"]})
    assert section is not None
    by_judge = {r["judge"]: r for r in section["judges"]}
    assert by_judge["panel"]["usd_per_1k"] == pytest.approx(11.0)
    assert by_judge["panel"]["effective_labels_per_usd"] == pytest.approx(by_judge["panel"]["effective_labels"] / 2.2)
    per_usd = [r["effective_labels_per_usd"] for r in section["judges"]]
    assert per_usd == sorted(per_usd, reverse=True)
    report = build_report(pd.DataFrame(rows), ratings, n_boot=20, panel={"judges": ["a:cheap", "b:dear"]})
    assert report["calibrated"]["judges"] == section["judges"]
