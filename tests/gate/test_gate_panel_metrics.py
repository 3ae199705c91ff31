"""The gate on a judge panel (``--judge`` repeated) and on reference metrics (``--metric f1``, no judge)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dialogue_judge.cli import app
from dialogue_judge.gate import GateConfig, run_gate
from dialogue_judge.gate.decision import GateDecider
from dialogue_judge.gate.stats import Scale
from judge_simulator.process import SimulatorProcess

from .planting import context

pytestmark = pytest.mark.usefixtures("gate_env")


def write(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_panel_scores_aggregate_each_judges_samples_then_the_judges() -> None:
    rows = [
        {
            "item_id": "i",
            "mode": "single",
            "system_a": "candidate",
            "aspect": "c",
            "judge": j,
            "status": "done",
            "score": s,
        }
        for j, s in (("a", 10), ("a", 20), ("b", 60), ("c", 90))
    ]
    decider = GateDecider(
        mode="single",
        aspects=["c"],
        threshold=5,
        alpha=0.05,
        scale=Scale("single", 1, 100),
        sequential=False,
        max_failed=0.1,
    )
    assert decider.scores(rows, "c") == {("i", "candidate"): pytest.approx((15 + 60 + 90) / 3)}
    decider.panel_aggregate = "median"
    assert decider.scores(rows, "c") == {("i", "candidate"): 60.0}


def test_panel_outcome_is_the_majority_of_the_judges() -> None:
    def row(judge: str, order: str, outcome: str) -> dict:
        return {
            "item_id": "i",
            "mode": "pairwise",
            "system_a": "candidate",
            "system_b": "baseline",
            "aspect": "c",
            "judge": judge,
            "order": order,
            "status": "done",
            "outcome": outcome,
            "sample_index": 0,
        }

    rows = [
        row("a", "ab", "loss"),
        row("a", "ba", "loss"),
        row("b", "ab", "loss"),
        row("b", "ba", "loss"),
        row("c", "ab", "win"),
        row("c", "ba", "win"),
    ]
    outcome = GateDecider.outcomes(rows)[("c", "i")]
    assert outcome["outcome"] == "loss" and outcome["judges"] == {"a": "loss", "b": "loss", "c": "win"}
    split = GateDecider.outcomes(rows[:2] + rows[4:])[("c", "i")]
    assert split["outcome"] == "tie"
    # issue 28.4: a panel of three needs two verdicts, and a 1-1 split with the third judge missing is no verdict
    assert GateDecider.outcomes(rows, 3)[("c", "i")]["outcome"] == "loss"
    assert ("c", "i") not in GateDecider.outcomes(rows[:2], 3)
    assert ("c", "i") not in GateDecider.outcomes(rows[:2] + rows[4:], 3)
    assert GateDecider.outcomes(rows[:4], 3)[("c", "i")]["outcome"] == "loss"


def test_panel_scores_need_a_majority_of_the_judges() -> None:
    def row(item: str, judge: str, score: float) -> dict:
        return {
            "item_id": item,
            "mode": "single",
            "system_a": "candidate",
            "aspect": "c",
            "judge": judge,
            "status": "done",
            "score": score,
        }

    rows = [row("i1", "a", 10), row("i1", "b", 30), row("i2", "a", 50)]
    rows.append({**row("i2", "b", 0), "status": "failed", "score": None})
    decider = GateDecider(
        mode="single",
        aspects=["c"],
        threshold=5,
        alpha=0.05,
        scale=Scale("single", 1, 100),
        sequential=False,
        max_failed=0.5,
        n_judges=3,
    )
    # i2 has one verdict of three judges: not the panel's score (before: judge a's 50)
    assert decider.scores(rows, "c") == {("i1", "candidate"): 20.0}
    drops = decider.drops(rows, ["i1", "i2"], "c")[1]
    assert drops[0] == 20.0 and drops[1] != drops[1]  # NaN: left out of the paired test


def test_gate_on_a_two_judge_panel(sim: SimulatorProcess, tmp_path: Path) -> None:
    """judge-a sees the candidate 79 points worse, judge-b sees no change: the panel mean drop is 39.5 > 5."""
    n = 60
    rules = [
        {"name": "a-base", "model": "^judge-a$", "match": "BASE-REPLY", "score": 80},
        {"name": "a-cand", "model": "^judge-a$", "match": "CAND-REPLY", "score": 1},
        {"name": "b-any", "model": "^judge-b$", "score": 75},
    ]
    sim.set_script({"rules": rules})
    baseline = write(tmp_path / "b.jsonl", [{**context(i), "candidates": {"v1": f"BASE-REPLY {i}"}} for i in range(n)])
    candidate = write(tmp_path / "c.jsonl", [{**context(i), "candidates": {"v2": f"CAND-REPLY {i}"}} for i in range(n)])
    judges = [f"openai-compatible:judge-a@{sim.base_url}", f"openai-compatible:judge-b@{sim.base_url}"]
    result = run_gate(GateConfig(baseline=baseline, candidate=candidate, judge=judges, sequential=False))
    assert result.status == "regression", result.headline
    (aspect,) = result.aspects
    assert aspect.estimate == pytest.approx(39.5)
    assert result.judge.startswith("panel (mean of openai-compatible:judge-a@")
    assert sim.stats()["total_calls"] == 2 * 2 * n  # both judges, both sides
    # each judge alone decides differently: the panel is what the gate gated on
    alone = run_gate(
        GateConfig(baseline=baseline, candidate=candidate, judge=judges[1], sequential=False, max_drop=10.0)
    )
    assert alone.status == "pass" and alone.aspects[0].estimate == pytest.approx(0.0)


def test_gate_on_f1_needs_no_judge(sim: SimulatorProcess, tmp_path: Path) -> None:
    n = 30
    references = [f"My beagle Rex is {i % 7 + 1} years old and loves the park." for i in range(n)]
    items = [{**context(i), "reference": references[i]} for i in range(n)]
    same = write(tmp_path / "same.jsonl", [{**items[i], "candidates": {"v1": references[i]}} for i in range(n)])
    worse = write(
        tmp_path / "worse.jsonl", [{**items[i], "candidates": {"v2": "Cats swim, mostly."}} for i in range(n)]
    )
    result = run_gate(GateConfig(baseline=same, candidate=worse, metrics=["f1", "bleu-2"]))
    assert result.status == "regression" and [a.aspect for a in result.aspects] == ["f1", "bleu-2"]
    f1 = result.aspects[0]
    assert f1.estimate == pytest.approx(1.0) and f1.baseline_mean == pytest.approx(1.0)
    assert result.judge == "reference" and result.calls.judged == 0 and sim.stats()["total_calls"] == 0

    unchanged = run_gate(
        GateConfig(baseline=same, candidate=same, metrics=["f1"], candidate_system="v1", max_drop=0.25)
    )
    assert unchanged.status == "pass" and unchanged.aspects[0].estimate == 0.0

    bare = write(tmp_path / "bare.jsonl", [{**context(i), "candidates": {"v1": "x"}} for i in range(n)])
    missing = run_gate(GateConfig(baseline=bare, candidate=bare, metrics=["f1"]))
    assert missing.status == "error" and "needs a reference in every item: 30 have none" in missing.headline


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--metric", "rouge"], "is not a reference metric"),
        (["--metric", "f1", "--judge", "openai:gpt-4o"], "not both"),
        ([], "--judge is required"),
        (["--judge", "openai:gpt-4o", "--judge", "openai:gpt-4o-mini", "--panel-aggregate", "max"], "mean or median"),
    ],
)
def test_cli_bad_panel_and_metric_options(tmp_path: Path, args: list[str], message: str) -> None:
    side = write(tmp_path / "s.jsonl", [{**context(0), "candidates": {"v1": "x"}}])
    result = CliRunner().invoke(app, ["gate", "--baseline", str(side), "--candidate", str(side), *args])
    assert result.exit_code == 2 and message in result.output
