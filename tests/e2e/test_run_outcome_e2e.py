"""Issue 27 item 2: a finished run whose judge answered nothing usable looks failed everywhere: `outcome: failed`
in GET /v1/runs/{id}, exit 3 from `submit --wait`, and the Runs page's status line and colour. Before, a run with
every judgment unparseable ended "done" like a healthy one (exit 0, the same 100 % bar)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from dialogue_judge.cli.submit import EXIT_NOTHING_USABLE
from dialogue_judge.testing import LiveService
from judge_simulator.process import SimulatorProcess

pytestmark = [pytest.mark.e2e]
ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "dialogue_judge.cli"]
APP = str(ROOT / "dashboard" / "app.py")


def write_items(path: Path) -> Path:
    items = [
        {
            "id": f"i{i}",
            "dialogue": [
                {"speaker": "user", "text": f"I have {i + 2} cats."},
                {"speaker": "bot", "text": "Nice!"},
                {"speaker": "user", "text": "How many pets do I have?"},
            ],
            "candidates": {"good": "Two cats. <<q=88>>", "bad": "A dog. <<q=15>>"},
        }
        for i in range(3)
    ]
    path.write_text("".join(json.dumps(i) + "\n" for i in items))
    return path


def submit(service: LiveService, items: Path, judge: str) -> subprocess.CompletedProcess[str]:
    flags = ["--rubric", "rsum-single", "--aspect", "consistency", "--wait", "--format", "json"]
    return subprocess.run(
        [*CLI, "submit", str(items), "--judge", judge, *flags, "--api", service.api_url],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=240,
    )


def runs_page(monkeypatch: pytest.MonkeyPatch, api_url: str, run_id: str) -> AppTest:
    monkeypatch.setenv("DJ_API_URL", api_url)
    at = AppTest.from_file(APP, default_timeout=60)
    at.query_params["run"] = run_id
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_a_run_with_nothing_usable_is_failed_in_the_api_the_cli_and_the_runs_page(
    db_url: str, redis_url: str, tmp_path: Path, sim: SimulatorProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    judge = f"openai-compatible:sim-judge@{sim.base_url}"
    items = write_items(tmp_path / "items.jsonl")
    with LiveService(redis_url, db_url, tmp_path / "svc") as service:
        sim.set_script({"faults": [{"kind": "malformed", "first_n": 1000, "text": "I cannot decide."}]})
        bad = submit(service, items, judge)
        assert bad.returncode == EXIT_NOTHING_USABLE == 3, (bad.stdout, bad.stderr)
        assert "nothing usable came back" in bad.stderr and "--unparseable" in bad.stderr
        bad_id = json.loads(bad.stdout)["run"]["id"]  # stdout is the report alone (issue 36): its run names the id
        summary = service.client().run(bad_id)
        assert summary["status"] == "done" and summary["counts"]["unparseable"] == 6
        assert summary["outcome"] == "failed"

        sim.set_script({"faults": [{"kind": "malformed", "first_n": 2, "text": "I cannot decide."}]})
        mixed = submit(service, items, f"openai-compatible:sim-judge-2@{sim.base_url}")  # another judge: no cache
        assert mixed.returncode == 0, mixed.stderr
        mixed_id = json.loads(mixed.stdout)["run"]["id"]  # stdout is the report alone (issue 36): its run names the id
        assert service.client().run(mixed_id)["outcome"] == "partial" and "partial" in mixed.stderr

        sim.reset(restore_script=True)
        good = submit(service, items, f"openai-compatible:sim-judge-3@{sim.base_url}")
        assert good.returncode == 0, good.stderr
        good_id = json.loads(good.stdout)["run"]["id"]  # stdout is the report alone (issue 36): its run names the id
        assert service.client().run(good_id)["outcome"] == "ok"

        at = runs_page(monkeypatch, service.api_url, bad_id)
        table = at.dataframe[0].value.set_index("id")
        assert table.loc[bad_id, "outcome"] == "🔴 failed"
        assert table.loc[mixed_id, "outcome"] == "🟠 partial" and table.loc[good_id, "outcome"] == "🟢 ok"
        assert "done · failed" in [m.value for m in at.metric]
        errors = " ".join(e.value for e in at.error)
        assert "nothing usable came back" in errors and f"dialogue-judge retry {bad_id} --unparseable" in errors

        at = runs_page(monkeypatch, service.api_url, good_id)
        assert not at.error and "done · ok" in [m.value for m in at.metric]
        assert any("none failed or unparseable" in s.value for s in at.success)
