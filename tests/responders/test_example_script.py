"""examples/msc_memory_strategies.py, the one-command end to end (MSC session 5 -> three memory strategies ->
judged -> report -> memory audit), run as a user runs it, with the judge simulator standing in for the chat model
and the judge so that it takes seconds (the embedded SmolLM2 run is the documented default)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from judge_simulator.process import SimulatorProcess

pytestmark = [pytest.mark.e2e]
ROOT = Path(__file__).resolve().parents[2]


def test_the_msc_strategies_example_runs_end_to_end(sim: SimulatorProcess, shared_dir: Path, tmp_path: Path) -> None:
    sim.set_script(
        {
            "rules": [
                {"name": "memory", "match": "store and update a memory", "reply": "User goes to the gym."},
                {"name": "answer", "match": r"The response to user is:|\[Current Context\]", "reply": "Good luck!"},
                {"name": "judge", "match": r"\[\[\s*score\s*\]\]", "kind": "single", "score": 70},
            ]
        }
    )
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DATABASE_URL")}
    env["PYTHONPATH"] = str(ROOT)
    model = f"openai-compatible:sim-chat@{sim.base_url}"
    judge = f"openai-compatible:sim-judge@{sim.base_url}"
    out = tmp_path / "out"
    command = [sys.executable, str(ROOT / "examples" / "msc_memory_strategies.py"), "--items", "2"]
    command += ["--model", model, "--judge", judge, "--out", str(out)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "generated 6, reused 0, failed 0" in done.stderr
    for system in ("current-session", "gold-memory", "rsum"):
        assert any(line.startswith(system) and " consistency " in line for line in done.stdout.splitlines())
    assert "Generated memory against MSC's gold personas" in done.stdout
    rows = [json.loads(line) for line in (out / "candidates.jsonl").read_text().splitlines()]
    assert [r["id"] for r in rows] == ["msc-s5.t1", "msc-s5.t3"]
    assert {r["meta"]["generation"]["rsum"]["memory"] for r in rows} == {"User goes to the gym."}
    # the four earlier sessions' memory iterations were asked once for both items
    assert sum(r["rule"] == "memory" for r in sim.requests(200)) == 4

    again = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "generated 0, reused 6, failed 0" in again.stderr  # resumable: nothing asked again
