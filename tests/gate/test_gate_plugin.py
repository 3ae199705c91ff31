"""The pytest plugin as a team would use it: a separate pytest session (subprocess) whose test file calls
``assert_consistent`` and the ``dialogue_judge_gate`` fixture; the plugin is found through its ``pytest11`` entry
point."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from judge_simulator.process import SimulatorProcess

from .planting import judge_for, plant

REPO = Path(__file__).resolve().parents[2]

TEAM_TESTS = """
import json
import os
from pathlib import Path

import pytest

from dialogue_judge.pytest_plugin import GateInconclusive, assert_consistent

DATA = Path(__file__).parent / "data"


def responses(name):
    lines = (DATA / name).read_text().splitlines()
    return {json.loads(line)["id"]: json.loads(line)["response"] for line in lines}


def test_unchanged_bot_passes(dialogue_judge_gate):
    result = dialogue_judge_gate.assert_consistent(responses("same.jsonl"), baseline=DATA / "baseline.jsonl",
                                                   items=DATA / "items.jsonl", max_drop=20.0)
    assert result.status == "pass" and result.exit_code == 0


def test_regressed_bot_fails(dialogue_judge_gate):
    dialogue_judge_gate.assert_consistent(responses("worse.jsonl"), baseline=DATA / "baseline.jsonl",
                                          items=DATA / "items.jsonl", max_drop=3.0)


def test_mismatched_items_are_inconclusive():
    with pytest.raises(GateInconclusive, match="do not cover the same items"):
        assert_consistent({"item-x": "hello"}, baseline=DATA / "baseline.jsonl", items=DATA / "items.jsonl",
                          judge=os.environ["TEAM_JUDGE"])
"""


def test_plugin_in_a_team_test_suite(tmp_path: Path, sim: SimulatorProcess) -> None:
    same = plant(tmp_path / "same", 48, 0.0, seed=13)
    worse = plant(tmp_path / "worse", 48, -40.0, seed=13)
    assert same.baseline.read_text() == worse.baseline.read_text()
    suite = tmp_path / "team"
    data = suite / "data"
    data.mkdir(parents=True)
    (data / "baseline.jsonl").write_text(same.baseline.read_text())
    (data / "items.jsonl").write_text(same.items.read_text())
    (data / "same.jsonl").write_text(same.responses.read_text())
    (data / "worse.jsonl").write_text(worse.responses.read_text())
    (suite / "test_bot.py").write_text(textwrap.dedent(TEAM_TESTS))
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "DJ_HOME": str(tmp_path / "home"),
        "XDG_CACHE_HOME": str(tmp_path / "xdg"),
        "TEAM_JUDGE": judge_for(sim),
    }
    env.pop("REDIS_URL", None)
    env.pop("DATABASE_URL", None)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-q",
            "-rf",
            "--rootdir",
            str(suite),
            str(suite / "test_bot.py"),
            "--dj-judge",
            judge_for(sim),
            "--dj-cache-dir",
            str(tmp_path / "cache"),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=suite,
        timeout=300,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 1, output
    assert "1 failed, 2 passed" in output
    assert "FAILED test_bot.py::test_regressed_bot_fails - AssertionError" in output
    assert "AssertionError: ## ❌ dialogue-judge gate: regression" in output  # the Markdown summary is the message
    assert "FAIL: regression in consistency: mean drop" in output
    assert "### Worst regressed items: consistency" in output
    assert (tmp_path / "cache" / "gate.db").is_file()  # --dj-cache-dir reached the gate


def test_plugin_imports_nothing_heavy() -> None:
    code = (
        "import sys, dialogue_judge.pytest_plugin; "
        "print([m for m in ('numpy', 'pandas', 'scipy', 'sqlalchemy', 'openai', 'anthropic', 'judge_api', "
        "'workers', 'dialogue_judge.gate') if m in sys.modules])"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert json.loads(proc.stdout.replace("'", '"')) == []


def test_plugin_is_registered_through_the_entry_point() -> None:
    from importlib.metadata import entry_points

    plugins = {ep.name: ep.value for ep in entry_points(group="pytest11")}
    assert plugins.get("dialogue_judge") == "dialogue_judge.pytest_plugin"
