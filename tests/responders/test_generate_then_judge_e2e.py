"""Generated candidates go through the real service: `dialogue-judge generate` (a memory strategy on the simulator
as chat model, plus a system that fails on one item), then `dialogue-judge submit --wait` to a live API and Celery
worker judging with the simulator. The failed generation is recorded in the item and the run completes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dialogue_judge.testing import LiveService
from judge_simulator.process import SimulatorProcess

pytestmark = [pytest.mark.e2e]
ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "dialogue_judge.cli"]


def test_generated_candidates_with_a_failure_are_judged_to_completion(
    sim: SimulatorProcess, redis_url: str, sqlite_url: str, tmp_path: Path
) -> None:
    sim.set_script(
        {
            "rules": [
                {"name": "answer", "match": r"Dialog context:", "reply": "You told me you have two cats. <<q=80>>"},
                {"name": "judge", "match": r"\[\[\s*score\s*\]\]", "kind": "single"},
            ]
        }
    )
    bot = tmp_path / "bots" / "flaky_bot.py"
    bot.parent.mkdir()
    bot.write_text(
        "def reply(item):\n"
        "    if item['id'] == 'i1':\n"
        "        raise ValueError('model not loaded')\n"
        "    return 'Two cats, I think. <<q=40>>'\n"
    )
    items = tmp_path / "items.jsonl"
    rows = [
        {
            "id": f"i{i}",
            "dialogue": [
                {"speaker": "user", "text": "I have two cats.", "session": 1},
                {"speaker": "bot", "text": "Nice!", "session": 1},
                {"speaker": "user", "text": "How many cats do I have?", "session": 2},
            ],
            "persona": {"user": ["I have two cats."]},
            "reference": "You have two cats.",
            "candidates": {},
        }
        for i in range(3)
    ]
    items.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "candidates.jsonl"
    env = {"PYTHONPATH": f"{ROOT}:{bot.parent}", "PATH": "/usr/bin:/bin", "DJ_HOME": str(tmp_path / "home")}
    generated = subprocess.run(
        [
            *CLI,
            "generate",
            str(items),
            "--system",
            f"full=openai-compatible:sim-chat@{sim.base_url}",
            "--system",
            "flaky=python:flaky_bot:reply",
            "-o",
            str(out),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert generated.returncode == 0, generated.stderr
    assert "generated 5, reused 0, failed 1" in generated.stderr
    assert "failed: i1 / flaky: python_error: ValueError: model not loaded" in generated.stderr
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert lines[1]["candidates"] == {"full": "You told me you have two cats. <<q=80>>"}
    assert lines[1]["meta"]["generation"]["flaky"]["status"] == "failed"

    with LiveService(redis_url, sqlite_url, tmp_path / "svc", worker_concurrency=2) as service:
        submitted = subprocess.run(
            [
                *CLI,
                "submit",
                str(out),
                "--judge",
                f"openai-compatible:sim-judge@{sim.base_url}",
                "--rubric",
                "rsum-single",
                "--mode",
                "single",
                "--aspect",
                "consistency",
                "--metric",
                "f1",
                "--api",
                service.api_url,
                "--wait",
                "--format",
                "json",
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert submitted.returncode == 0, submitted.stderr + submitted.stdout
        assert "3 items" in submitted.stderr  # the run's line is a notice: stdout is the report alone
        report = json.loads(submitted.stdout)
    scores = {
        (row["system"], row["judge"]): (row["n"], row["mean"])
        for row in report["scores"]
        if row["aspect"] == "consistency"
    }
    # the simulator scores each response by its <<q=NN>> marker: the stored responses are what reached the judge
    judge = f"openai-compatible:sim-judge@{sim.base_url.rstrip('/')}"
    assert scores[("full", judge)] == (3, 80.0)
    assert scores[("flaky", judge)] == (2, 40.0)  # i1 has no flaky response: not judged, not a zero
