"""``dialogue-judge gate --rubric fact-check --metric contradiction_rate`` against the simulator: the judge labels each
response's facts (``<<f:ID=L>>`` markers plant the labels), the gate tests the increase of the per-response
contradiction rate with the same sequential decision: a planted increase fails (exit 1), none passes (exit 0), bad
combinations are exit 2 with the reason."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dialogue_judge.cli import app
from judge_simulator.process import SimulatorProcess

from .planting import context, judge_for

pytestmark = pytest.mark.usefixtures("gate_env")


def gate(*args: str | Path) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["gate", *map(str, args)])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


def write(folder: Path, n: int, contradicted: set[int]) -> tuple[Path, Path]:
    """Baseline: every response keeps both facts (user.1, bot.1); candidate: the same, except that the items in
    ``contradicted`` contradict the user's dog (contradiction rate 1/2 there, 0 elsewhere)."""
    folder.mkdir(parents=True, exist_ok=True)
    baseline, candidate = folder / "baseline.jsonl", folder / "candidate.jsonl"
    with baseline.open("w") as fb, candidate.open("w") as fc:
        for i in range(n):
            ctx = context(i)
            old = "Of course, your beagle Rex <<f:user.1=s>> is a good boy. I love animals <<f:bot.1=s>>."
            new = (
                "Your cat Rex <<f:user.1=c>> sounds lovely. I love animals <<f:bot.1=s>>."
                if i in contradicted
                else "Sure, Rex the beagle <<f:user.1=s>>! I love animals <<f:bot.1=s>>."
            )
            fb.write(json.dumps({**ctx, "candidates": {"v1": old}}) + "\n")
            fc.write(json.dumps({**ctx, "candidates": {"v2": new}}) + "\n")
    return baseline, candidate


def test_planted_increase_in_contradictions_fails(sim: SimulatorProcess, tmp_path: Path) -> None:
    n = 40
    baseline, candidate = write(tmp_path / "up", n, set(range(0, n, 2)))  # half the items: rate 0 -> 0.5
    out = tmp_path / "gate.json"
    code, stdout, stderr = gate(
        "-b", baseline, "-c", candidate, "--judge", judge_for(sim), "--rubric", "fact-check",
        "--metric", "contradiction_rate", "--cache-dir", tmp_path / "cache", "--json", out,
    )  # fmt: skip
    assert code == 1, stderr
    headline = stderr.strip().splitlines()[-1]
    assert headline.startswith("FAIL: regression in contradiction_rate: mean increase ")
    assert "above the allowed 0.05" in headline
    report = json.loads(out.read_text())
    assert report["rubric"] == "fact-check" and report["threshold_name"] == "max_increase"
    aspect = report["aspects"][0]
    assert aspect["aspect"] == "contradiction_rate" and aspect["change"] == "increase"
    assert aspect["verdict"] == "regression" and aspect["ci_low"] > 0.05
    # every item judged so far: baseline rate 0, candidate rate 0.5 on even items: the exact planted means
    judged = aspect["n"]
    assert aspect["baseline_mean"] == 0.0
    assert aspect["estimate"] == pytest.approx(aspect["candidate_mean"])
    assert 0.0 < aspect["candidate_mean"] <= 0.5 and judged >= 2
    assert {w["drop"] for w in aspect["worst"]} == {0.5}
    assert "| contradiction_rate | ❌ regression |" in stdout
    assert "| item | baseline | candidate | increase |" in stdout
    assert "mean contradiction_rate baseline → candidate" in stdout and " | 0.000 → " in stdout


def test_no_increase_passes(sim: SimulatorProcess, tmp_path: Path) -> None:
    n = 40
    baseline, candidate = write(tmp_path / "same", n, set())
    out = tmp_path / "gate.json"
    code, _, stderr = gate(
        "-b", baseline, "-c", candidate, "--judge", judge_for(sim), "--metric", "contradiction_rate",
        "--cache-dir", tmp_path / "cache", "--json", out, "--no-sequential", "--max-drop", "0.3",
    )  # fmt: skip
    assert code == 0, stderr
    assert stderr.strip().splitlines()[-1].startswith("PASS: no regression in contradiction_rate: mean increase 0.00")
    aspect = json.loads(out.read_text())["aspects"][0]
    assert aspect["n"] == n and aspect["baseline_mean"] == aspect["candidate_mean"] == 0.0
    assert aspect["estimate"] == 0.0 and aspect["ci_high"] < 0.3


def test_responses_that_address_no_fact_are_gated_with_score_na(sim: SimulatorProcess, tmp_path: Path) -> None:
    """Issue 28.5: a candidate that answers "tell me more!" addresses no fact: its fact-check judgments are done
    with score n/a, not failed or unparseable (the gate runs and counts no failure), and contradict nothing."""
    n = 20
    baseline, candidate = write(tmp_path / "na", n, set())
    candidate.write_text(
        "".join(
            json.dumps({**context(i), "candidates": {"v2": "That's interesting, tell me more!"}}) + "\n"
            for i in range(n)
        )
    )
    out = tmp_path / "gate.json"
    code, _, stderr = gate(
        "-b", baseline, "-c", candidate, "--judge", judge_for(sim), "--metric", "contradiction_rate",
        "--cache-dir", tmp_path / "cache", "--json", out, "--no-sequential", "--max-drop", "0.3",
    )  # fmt: skip
    assert code == 0, stderr
    report = json.loads(out.read_text())
    aspect = report["aspects"][0]
    assert aspect["n"] == n and aspect["candidate_mean"] == 0.0, aspect
    assert aspect["n_failed"] == aspect["n_unparseable"] == 0


def test_sequential_gate_stops_early_on_a_big_increase(sim: SimulatorProcess, tmp_path: Path) -> None:
    n = 200
    baseline, candidate = write(tmp_path / "big", n, set(range(n)))  # every item: rate 0 -> 0.5
    out = tmp_path / "gate.json"
    code, _, stderr = gate(
        "-b", baseline, "-c", candidate, "--judge", judge_for(sim), "--metric", "contradiction_rate",
        "--cache-dir", tmp_path / "cache", "--json", out,
    )  # fmt: skip
    assert code == 1, stderr
    report = json.loads(out.read_text())
    aspect = report["aspects"][0]
    assert aspect["decided_by"] == "confidence sequence"
    assert aspect["estimate"] == pytest.approx(0.5) and aspect["n"] < n
    assert report["calls"]["saved"] > 0


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--metric", "contradiction_rate"], "needs a judge to label the facts"),
        (["--metric", "contradiction_rate", "--metric", "f1", "--judge", "JUDGE"], "give it alone"),
        (["--metric", "contradiction_rate", "--judge", "JUDGE", "--rubric", "rsum-single"], "needs a fact-check"),
        (["--metric", "contradiction_rate", "--judge", "JUDGE", "--mode", "pairwise"], "use --mode single"),
        (["--metric", "contradiction_rate", "--judge", "JUDGE", "--max-drop", "5"], "between 0 and 1"),
        (["--metric", "contradictions"], "is not a reference metric or fact figure"),
    ],
)
def test_bad_combinations_exit_2(sim: SimulatorProcess, tmp_path: Path, extra: list[str], message: str) -> None:
    baseline, candidate = write(tmp_path / "bad", 4, set())
    args = [judge_for(sim) if a == "JUDGE" else a for a in extra]
    code, _, stderr = gate("-b", baseline, "-c", candidate, "--cache-dir", tmp_path / "cache", *args)
    assert code == 2
    assert message in stderr, stderr
