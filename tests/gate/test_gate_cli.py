"""``dialogue-judge gate`` end to end, standalone (in-process, SQLite, no Redis) against the loopback judge simulator:
planted regressions of known size, the exit-code contract and its messages, the reports, early stopping, the
cache."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dialogue_judge.cli import app
from judge_simulator.process import SimulatorProcess

from .planting import Planted, judge_for, plant

pytestmark = pytest.mark.usefixtures("gate_env")
REPO = Path(__file__).resolve().parents[2]


def gate(*args: str | Path) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["gate", *map(str, args)])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


def last_line(text: str) -> str:
    return text.strip().splitlines()[-1]


def common(sim: SimulatorProcess, tmp_path: Path) -> list[str]:
    return ["--judge", judge_for(sim), "--cache-dir", str(tmp_path / "cache")]


# -- planted regressions ---------------------------------------------------------------------------------------------


def test_big_regression_fails_with_effect_size_ci_and_p(sim: SimulatorProcess, tmp_path: Path) -> None:
    data = plant(tmp_path / "big", 96, -15.0, seed=1)
    out = tmp_path / "out"
    code, stdout, stderr = gate(
        "-b",
        data.baseline,
        "-c",
        data.candidate,
        *common(sim, tmp_path),
        "--max-drop",
        "3",
        "--markdown",
        out / "gate.md",
        "--junit",
        out / "gate.xml",
        "--json",
        out / "gate.json",
    )
    assert code == 1, stderr
    headline = last_line(stderr)
    assert headline.startswith("FAIL: regression in consistency: mean drop ")
    assert " CI [" in headline and "above the allowed 3.00 (p = " in headline and "d_z = " in headline
    # Markdown on stdout and in the file: verdict, per-aspect table, worst items with the judge's explanation
    assert stdout.startswith("## ❌ dialogue-judge gate: regression")
    assert "| consistency | ❌ regression |" in stdout
    assert "### Worst regressed items: consistency" in stdout
    assert "loosely connected to the conversation" in stdout or "misses some chances" in stdout
    assert (out / "gate.md").read_text() == stdout.rstrip("\n") + "\n"
    report = json.loads((out / "gate.json").read_text())
    assert report["status"] == "regression" and report["exit_code"] == 1
    aspect = report["aspects"][0]
    assert aspect["verdict"] == "regression" and aspect["ci_low"] > 3.0 and aspect["p_value"] <= 0.05
    assert abs(aspect["estimate"] - data.true_drop) < 3.0  # the judged drop is the planted one (on the items used)
    assert aspect["worst"][0]["drop"] >= aspect["worst"][-1]["drop"] > 0
    root = ET.parse(out / "gate.xml").getroot()
    cases = root.findall("./testsuite/testcase")
    assert [c.get("name") for c in cases] == ["consistency"]
    failure = cases[0].find("failure")
    assert failure is not None and failure.get("message", "").startswith("regression in consistency: mean drop")
    assert root.get("failures") == "1" and root.get("errors") == "0"


def test_small_regression_is_caught_with_a_tight_tolerance(sim: SimulatorProcess, tmp_path: Path) -> None:
    # a valid test on the 1-100 scale needs ~200 items to put a 6-point drop above D = 3 (issue 41)
    data = plant(tmp_path / "small", 200, -6.0, seed=0)
    code, _, stderr = gate(
        "-b",
        data.baseline,
        "-c",
        data.responses,
        "--items",
        data.items,
        *common(sim, tmp_path),
        "--max-drop",
        "3",
        "--json",
        tmp_path / "small.json",
    )
    assert code == 1, stderr
    assert last_line(stderr).startswith("FAIL: regression in consistency: mean drop ")
    aspect = json.loads((tmp_path / "small.json").read_text())["aspects"][0]
    assert 3.0 < aspect["ci_low"] < aspect["estimate"] < 9.0


def test_no_change_passes(sim: SimulatorProcess, tmp_path: Path) -> None:
    data = plant(tmp_path / "same", 96, 0.0, seed=3)
    out = tmp_path / "out"
    code, stdout, stderr = gate(
        "-b",
        data.baseline,
        "-c",
        data.candidate,
        *common(sim, tmp_path),
        "--max-drop",
        "10",
        "--junit",
        out / "gate.xml",
        "--json",
        out / "gate.json",
    )
    assert code == 0, stderr
    assert last_line(stderr).startswith("PASS: no regression in consistency: mean drop ")
    assert last_line(stderr).endswith("below the allowed 10.00")
    assert stdout.startswith("## ✅ dialogue-judge gate: no regression")
    root = ET.parse(out / "gate.xml").getroot()
    case = root.find("./testsuite/testcase")
    assert case is not None and case.get("name") == "consistency" and len(case.findall("failure")) == 0
    assert root.get("failures") == "0" and root.get("errors") == "0"
    assert json.loads((out / "gate.json").read_text())["aspects"][0]["verdict"] == "no_regression"


def test_pairwise_big_regression_fails_and_no_change_passes(sim: SimulatorProcess, tmp_path: Path) -> None:
    worse = plant(tmp_path / "pw-worse", 64, -15.0, seed=4)
    code, stdout, stderr = gate(
        "-b",
        worse.baseline,
        "-c",
        worse.candidate,
        *common(sim, tmp_path),
        "--mode",
        "pairwise",
        "--max-loss-rate",
        "0.6",
        "--json",
        tmp_path / "pw.json",
    )
    assert code == 1, stderr
    assert last_line(stderr).startswith("FAIL: regression in overall: loss rate ")
    assert "losses" in last_line(stderr) and "ties" in last_line(stderr)
    report = json.loads((tmp_path / "pw.json").read_text())
    aspect = report["aspects"][0]
    assert report["rubric"] == "rsum-pairwise" and aspect["ci_low"] > 0.6 and aspect["losses"] > aspect["wins"]
    assert aspect["worst"] and aspect["worst"][0]["outcome"] == "loss"
    assert "| item | outcome | orders (ab / ba) |" in stdout
    same = plant(tmp_path / "pw-same", 64, 0.0, seed=5)
    code, _, stderr = gate(
        "-b",
        same.baseline,
        "-c",
        same.candidate,
        *common(sim, tmp_path),
        "--mode",
        "pairwise",
        "--max-loss-rate",
        "0.6",
    )
    assert code == 0, stderr
    assert last_line(stderr).startswith("PASS: no regression in overall: loss rate ")


def test_several_aspects_one_junit_case_each(sim: SimulatorProcess, tmp_path: Path) -> None:
    data = plant(tmp_path / "aspects", 48, -40.0, seed=16)
    code, stdout, stderr = gate(
        "-b",
        data.baseline,
        "-c",
        data.candidate,
        *common(sim, tmp_path),
        "--max-drop",
        "3",
        "--aspect",
        "consistency,coherence",
        "--junit",
        tmp_path / "a.xml",
    )
    assert code == 1, stderr
    assert last_line(stderr).startswith("FAIL: regression in ")
    cases = ET.parse(tmp_path / "a.xml").getroot().findall("./testsuite/testcase")
    assert [c.get("name") for c in cases] == ["consistency", "coherence"]
    assert cases[0].find("failure") is not None or cases[1].find("failure") is not None
    assert "| consistency |" in stdout and "| coherence |" in stdout


# -- exit code 2: could not decide or could not run ----------------------------------------------------------------


def test_undecided_when_the_items_run_out(sim: SimulatorProcess, tmp_path: Path) -> None:
    data = plant(tmp_path / "edge", 24, -3.0, seed=6)
    code, _, stderr = gate("-b", data.baseline, "-c", data.candidate, *common(sim, tmp_path), "--max-drop", "3")
    assert code == 2
    assert last_line(stderr).startswith("UNDECIDED: need more items or a larger --max-drop: consistency's mean drop ")
    assert "contains the allowed 3.00 (24 items)" in last_line(stderr)


def test_mismatched_items_exit_2_with_the_list(sim: SimulatorProcess, tmp_path: Path) -> None:
    data = plant(tmp_path / "mm", 12, 0.0)
    lines = data.candidate.read_text().splitlines()
    extra = json.loads(lines[0])
    extra["id"] = "item-999"
    data.candidate.write_text("\n".join([*lines[2:], json.dumps(extra)]) + "\n")
    code, stdout, stderr = gate(
        "-b", data.baseline, "-c", data.candidate, *common(sim, tmp_path), "--junit", tmp_path / "mm.xml"
    )
    assert code == 2
    assert last_line(stderr) == (
        "ERROR: baseline and candidate do not cover the same items: 2 only in the baseline "
        "(item-000, item-001); 1 only in the candidate (item-999)"
    )
    assert stdout.startswith("## ⚠️ dialogue-judge gate: could not run")
    error = ET.parse(tmp_path / "mm.xml").getroot().find("./testsuite/testcase/error")
    assert error is not None and error.get("message", "").startswith("ERROR: baseline and candidate")
    assert sim.stats()["total_calls"] == 0


def test_judge_unreachable_exit_2(tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    data = plant(tmp_path / "down", 40, 0.0)
    code, _, stderr = gate(
        "-b",
        data.baseline,
        "-c",
        data.candidate,
        "--cache-dir",
        tmp_path / "cache",
        "--judge",
        f"openai-compatible:sim-judge@http://127.0.0.1:{port}/v1",
        "--junit",
        tmp_path / "down.xml",
    )
    assert code == 2
    assert last_line(stderr).startswith("ERROR: the judge could not be reached: ")
    assert "connection_error" in last_line(stderr)
    cases = ET.parse(tmp_path / "down.xml").getroot().findall("./testsuite/testcase")
    assert [c.get("name") for c in cases] == ["consistency"]  # one test case per aspect, carrying the error
    error = cases[0].find("error")
    assert error is not None and error.get("message") == last_line(stderr)


def test_too_many_unparseable_exit_2(sim: SimulatorProcess, tmp_path: Path) -> None:
    sim.set_script({"faults": [{"kind": "malformed", "probability": 0.3, "text": "I would rather not say."}]})
    data = plant(tmp_path / "garbled", 60, 0.0, seed=7)
    code, _, stderr = gate("-b", data.baseline, "-c", data.candidate, *common(sim, tmp_path), "--max-drop", "3")
    assert code == 2
    assert last_line(stderr).startswith("ERROR: too many unparseable or failed judgments: ")
    assert "exceed the limit of 10%" in last_line(stderr)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--mode", "triple"], "ERROR: --mode must be single or pairwise (got 'triple')"),
        (
            ["--rubric", "rsum-pairwise"],
            "ERROR: rubric 'rsum-pairwise' is a pairwise rubric; use --mode pairwise or a single rubric",
        ),
        (
            ["--aspect", "humour"],
            "ERROR: rubric 'rsum-single' has no aspect 'humour' (has: engagingness, coherence, consistency)",
        ),
        (["--alpha", "1.5"], "ERROR: --alpha must lie strictly between 0 and 1 (got 1.5)"),
    ],
)
def test_bad_options_exit_2(sim: SimulatorProcess, tmp_path: Path, args: list[str], message: str) -> None:
    data = plant(tmp_path / "opts", 12, 0.0)
    code, _, stderr = gate("-b", data.baseline, "-c", data.candidate, *common(sim, tmp_path), *args)
    assert code == 2
    assert last_line(stderr) == message


def test_responses_without_context_exit_2(sim: SimulatorProcess, tmp_path: Path) -> None:
    data = plant(tmp_path / "noctx", 12, 0.0)
    code, _, stderr = gate("-b", data.responses, "-c", data.responses, *common(sim, tmp_path))
    assert code == 2
    assert last_line(stderr) == (
        "ERROR: responses files carry no dialogue context: give the items with --items ITEMS.jsonl"
    )


def test_budget_exhausted_before_a_decision_exit_2(
    sim: SimulatorProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A priced judge (openai:gpt-4o, served by the simulator) and a budget of a few calls."""
    monkeypatch.setenv("OPENAI_BASE_URL", sim.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    data = plant(tmp_path / "budget", 60, 0.0, seed=14)
    code, _, stderr = gate(
        "-b",
        data.baseline,
        "-c",
        data.candidate,
        "--judge",
        "openai:gpt-4o",
        "--cache-dir",
        tmp_path / "cache",
        "--max-drop",
        "3",
        "--budget",
        "0.004",
        "--json",
        tmp_path / "b.json",
    )
    assert code == 2, stderr
    assert last_line(stderr).startswith("UNDECIDED: the budget of $0.004 ran out after ")
    assert "before the gate could decide" in last_line(stderr)
    report = json.loads((tmp_path / "b.json").read_text())
    assert report["calls"]["budget_exhausted"] and report["calls"]["judged"] < report["calls"]["planned"]
    assert sim.stats()["total_calls"] < 40


def test_budget_over_an_unpriced_judge_exit_2_before_any_call(
    sim: SimulatorProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """openai:gpt-5.4 is not in the price table: its calls would count $0 and --budget could never stop them."""
    monkeypatch.setenv("OPENAI_BASE_URL", sim.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    sim.reset()
    data = plant(tmp_path / "unpriced", 12, 0.0, seed=15)
    args = ("-b", data.baseline, "-c", data.candidate, "--judge", "openai:gpt-5.4", "--cache-dir", tmp_path / "c")
    code, _, stderr = gate(*args, "--max-drop", "3", "--budget", "1")
    assert code == 2, stderr
    assert "--budget cannot be kept: judge 'openai:gpt-5.4' has no price in the price table" in stderr
    assert sim.stats()["total_calls"] == 0


# -- spending less ------------------------------------------------------------------------------------------------


def test_early_stop_saves_calls_and_decides_like_the_full_sample(sim: SimulatorProcess, tmp_path: Path) -> None:
    data = plant(tmp_path / "early", 160, -15.0, seed=8)
    code, stdout, stderr = gate(
        "-b",
        data.baseline,
        "-c",
        data.candidate,
        "--judge",
        judge_for(sim),
        "--no-cache",
        "--max-drop",
        "3",
        "--json",
        tmp_path / "seq.json",
    )
    assert code == 1, stderr
    seq = json.loads((tmp_path / "seq.json").read_text())
    calls_sequential = sim.stats()["total_calls"]
    sim.reset()
    code_full, _, _ = gate(
        "-b",
        data.baseline,
        "-c",
        data.candidate,
        "--judge",
        judge_for(sim),
        "--no-cache",
        "--max-drop",
        "3",
        "--no-sequential",
        "--json",
        tmp_path / "full.json",
    )
    full = json.loads((tmp_path / "full.json").read_text())
    calls_full = sim.stats()["total_calls"]
    print(
        f"\nshift -15 on 160 items: sequential judged {seq['calls']['judged']} of {seq['calls']['planned']} "
        f"({calls_sequential} provider calls), saved {seq['calls']['saved']}; full sample {calls_full} calls"
    )
    assert code_full == 1 and full["aspects"][0]["verdict"] == seq["aspects"][0]["verdict"] == "regression"
    assert seq["calls"]["saved"] > 0 and seq["calls"]["saved"] == seq["calls"]["planned"] - seq["calls"]["judged"]
    assert calls_sequential < calls_full
    assert seq["calls"]["saved"] >= 0.4 * seq["calls"]["planned"]
    assert f"The early stop saved **{seq['calls']['saved']} judge calls**" in stdout
    assert len(seq["calls"]["run_ids"]) == 1  # standalone: one run; the unjudged rest was cancelled


def test_rerunning_an_unchanged_gate_makes_no_provider_call(sim: SimulatorProcess, tmp_path: Path) -> None:
    data = plant(tmp_path / "rerun", 48, -40.0, seed=9)
    args: list[str | Path] = ["-b", data.baseline, "-c", data.candidate, *common(sim, tmp_path), "--max-drop", "3"]
    first_code, _, _ = gate(*args, "--json", tmp_path / "first.json")
    calls = sim.stats()["total_calls"]
    assert calls > 0
    second_code, second_out, _ = gate(*args, "--json", tmp_path / "second.json")
    assert sim.stats()["total_calls"] == calls  # the judge saw nothing new
    first = json.loads((tmp_path / "first.json").read_text())
    second = json.loads((tmp_path / "second.json").read_text())
    assert first_code == second_code == 1
    assert second["calls"]["provider_calls"] == 0 and second["calls"]["cached"] == second["calls"]["judged"] > 0
    assert first["aspects"][0]["estimate"] == second["aspects"][0]["estimate"]
    assert "0 provider calls" in second_out


def test_github_step_summary_is_appended(
    sim: SimulatorProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    summary = tmp_path / "step-summary.md"
    summary.write_text("# earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    data = plant(tmp_path / "gh", 32, 0.0, seed=10)
    code, stdout, _ = gate("-b", data.baseline, "-c", data.candidate, *common(sim, tmp_path), "--max-drop", "20")
    assert code == 0
    text = summary.read_text()
    assert text.startswith("# earlier step\n## ✅ dialogue-judge gate: no regression")
    assert stdout.strip() in text


def test_subprocess_exit_codes(sim: SimulatorProcess, tmp_path: Path) -> None:
    """The installed console script, as a CI runner calls it."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    exe = Path(sys.executable).parent / "dialogue-judge"
    worse = plant(tmp_path / "sp-worse", 48, -40.0, seed=11)
    proc = subprocess.run(
        [
            str(exe),
            "gate",
            "-b",
            str(worse.baseline),
            "-c",
            str(worse.candidate),
            *common(sim, tmp_path),
            "--max-drop",
            "3",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout.startswith("## ❌ dialogue-judge gate: regression")
    assert last_line(proc.stderr).startswith("FAIL: regression in consistency: mean drop ")
    proc = subprocess.run(
        [str(exe), "gate", "-b", str(worse.baseline), "-c", str(tmp_path / "missing.jsonl"), *common(sim, tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 2
    assert last_line(proc.stderr) == f"ERROR: {tmp_path / 'missing.jsonl'}: no such file"


def test_planted_fixture_sanity(tmp_path: Path) -> None:
    data: Planted = plant(tmp_path / "p", 200, -6.0, seed=0)
    assert 4.5 < data.true_drop < 7.5
    assert 70 < data.baseline_scores.mean() < 80


def test_example_workflow_uses_real_options() -> None:
    import shlex

    import typer.main
    import yaml

    workflow = yaml.safe_load((REPO / ".github/workflows/consistency-gate.example.yml").read_text())
    commands = [s["run"] for s in workflow["jobs"]["gate"]["steps"] if "dialogue-judge gate" in s.get("run", "")]
    assert len(commands) == 1
    words = shlex.split(commands[0])
    command = typer.main.get_command(app).commands["gate"]  # type: ignore[attr-defined]
    known = {opt for param in command.params for opt in [*param.opts, *param.secondary_opts]}
    used = {w for w in words if w.startswith("--")}
    assert used <= known, used - known
