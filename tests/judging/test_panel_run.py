"""A two-judge run on the simulator: the report's panel pseudo-judge and inter-judge alpha equal the values
computed by hand (the same planted scores as tests/stats/test_stats_panel.py)."""

from __future__ import annotations

from fractions import Fraction

import pytest

from judge_api import repository
from judge_api.db import session_scope
from judge_api.planning import panel_settings
from judge_api.stats.report import build_report

from .harness import Harness, dialogue_item

A = {("i1", "x"): 80, ("i1", "y"): 40, ("i2", "x"): 70, ("i2", "y"): 50, ("i3", "x"): 90, ("i3", "y"): 30}
B = {("i1", "x"): 60, ("i1", "y"): 40, ("i2", "x"): 90, ("i2", "y"): 30, ("i3", "x"): 70, ("i3", "y"): 50}
# by hand: the panel mean per unit, and Krippendorff's interval alpha = 20/31 (derivation in test_stats_panel.py)
PANEL_MEAN = {("i1", "x"): 70, ("i1", "y"): 40, ("i2", "x"): 80, ("i2", "y"): 40, ("i3", "x"): 80, ("i3", "y"): 40}
ALPHA = Fraction(20, 31)


def test_two_judge_panel_and_alpha(harness: Harness) -> None:
    rules = [
        {"name": f"{model}-{item}{system}", "model": f"^{model}$", "match": f"UNIT-{item}{system}\\b", "score": score}
        for model, scores in (("judge-a", A), ("judge-b", B))
        for (item, system), score in scores.items()
    ]
    harness.sim.set_script({"rules": rules})
    judges = [harness.judge("openai-compatible", "judge-a"), harness.judge("openai-compatible", "judge-b")]
    items = [dialogue_item(i, {s: f"Reply UNIT-{i}{s} about Rex." for s in ("x", "y")}) for i in ("i1", "i2", "i3")]
    run_id = harness.run(
        items=items, rubrics=["rsum-single"], judges=judges, aspects=["consistency"], panel={"aggregate": "mean"}
    )
    rows = harness.rows(run_id)
    assert len(rows) == 12 and all(r.status == "done" for r in rows)
    with session_scope() as session:
        frame = repository.judgments_frame(session, run_id)
        run = repository.get_run(session, run_id)
        assert run is not None
        panel = panel_settings(run.config)
    report = build_report(frame, n_boot=100, panel=panel)

    assert report["panel"]["members"] == sorted(judges) and report["panel"]["aggregate"] == "mean"
    (alpha,) = report["panel"]["inter_judge"]["scores"]
    assert alpha["alpha_interval"] == pytest.approx(float(ALPHA), abs=1e-12)
    means = {(r["system"], r["judge"]): r["mean"] for r in report["scores"]}
    for system in ("x", "y"):
        hand = sum(v for (_, s), v in PANEL_MEAN.items() if s == system) / 3
        assert means[system, "panel"] == pytest.approx(hand)
    paper = {(r["judge"], r["system"]): r["values"]["consistency"] for r in report["paper_table"]["rows"]}
    assert paper["panel", "x"] == pytest.approx(230 / 3) and paper["panel", "y"] == pytest.approx(40)
    # the median of two members is their mean; a report may name its own members and aggregate
    median = build_report(frame, n_boot=10, panel=panel_settings(run.config, None, "median"))
    assert {r["judge"]: r["mean"] for r in median["scores"] if r["system"] == "y"}["panel"] == pytest.approx(40)


def test_three_judge_panel_quorum_and_coverage(harness: Harness) -> None:
    """Issue 28.4 on a real run: judge-c answers only item i1 and judge-b not (i3, y) (their other replies are
    unparseable), so (i3, y) was judged by 1 of 3 members: below the default quorum (2 of 3) it is no panel verdict,
    and the report says the panel covers 5 of 6 units. A run configured with quorum 1 takes judge-a's score."""
    scores = {"judge-a": A, "judge-b": B, "judge-c": {k: 10 for k in A if k[0] == "i1"}}
    rules: list[dict[str, object]] = []
    for model, table in scores.items():
        for item, system in A:
            rule = {"name": f"{model}-{item}{system}", "model": f"^{model}$", "match": f"UNIT-{item}{system}\\b"}
            answered = (item, system) in table and not (model == "judge-b" and (item, system) == ("i3", "y"))
            rules.append({**rule, "score": table[item, system]} if answered else {**rule, "reply": "I cannot say."})
    harness.sim.set_script({"rules": rules})
    judges = [harness.judge("openai-compatible", m) for m in scores]
    items = [dialogue_item(i, {s: f"Reply UNIT-{i}{s} about Rex." for s in ("x", "y")}) for i in ("i1", "i2", "i3")]
    for quorum in (None, 1):
        run_id = harness.run(
            items=items, rubrics=["rsum-single"], judges=judges, aspects=["consistency"], panel={"quorum": quorum}
        )
        with session_scope() as session:
            frame = repository.judgments_frame(session, run_id)
            run = repository.get_run(session, run_id)
            assert run is not None
            panel = panel_settings(run.config)
        assert sorted(frame["status"]) == ["done"] * 13 + ["unparseable"] * 5  # 6 + 5 + 2 done
        report = build_report(frame, n_boot=50, panel=panel)
        coverage = report["panel"]["coverage"]
        scores_y = {r["judge"]: r for r in report["scores"] if r["system"] == "y"}
        if quorum is None:
            assert report["panel"]["quorum"] == 2 and coverage["quorum_rule"] == "majority"
            assert (coverage["n_units"], coverage["n_verdicts"], coverage["n_below_quorum"]) == (6, 5, 1)
            assert scores_y["panel"]["n"] == 2  # (i3, y) is left out of the panel's scores
            assert scores_y["panel"]["mean"] == pytest.approx(((40 + 40 + 10) / 3 + (50 + 30) / 2) / 2)
        else:
            assert report["panel"]["quorum"] == 1 and coverage["n_verdicts"] == 6 and coverage["coverage"] == 1.0
            assert scores_y["panel"]["n"] == 3
