"""Bring your own verdicts through the real surfaces (issue 14's "done when"): an API process, a Celery worker and
the loopback judge; `dialogue-judge import-verdicts` of a FastChat single-judgment file and of a CSV of 1-100
scores, `dialogue-judge import-ratings` of human scores, then the agreement read from the API equals an independent
scipy computation, beside the run's own judge and told apart from it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dialogue_judge.testing import LiveService
from judge_simulator.process import SimulatorProcess
from tests.verdicts.test_verdicts_api import (
    DATA,
    csv_scores,
    expected_score_agreement,
    fastchat_scores,
    mtbench_run_body,
)

pytestmark = [pytest.mark.e2e]
ROOT = Path(__file__).resolve().parents[2]


def test_imported_verdicts_and_human_ratings_through_the_cli_and_api(
    sqlite_url: str, redis_url: str, tmp_path: Path, judge_simulator: SimulatorProcess
) -> None:
    judge_simulator.reset(restore_script=True)
    own_judge = f"openai-compatible:sim@{judge_simulator.base_url}"
    with LiveService(redis_url, sqlite_url, tmp_path / "svc") as service:
        client = service.client()
        run = client.create_run(mtbench_run_body(judges=[own_judge]))
        service.wait_run(run["id"], timeout_s=120)
        env = {**os.environ, "PYTHONPATH": str(ROOT)}

        def cli(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [sys.executable, "-m", "dialogue_judge.cli", *args, "--api", service.api_url],
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
            )

        single = cli("import-verdicts", run["id"], str(DATA / "gpt-4_single.jsonl"), "--turn", "1")
        assert single.returncode == 0, single.stderr
        assert "24 verdicts imported, 0 already imported" in single.stdout and "fastchat-single" in single.stdout
        scores = cli("import-verdicts", run["id"], str(DATA / "my_judge_scores.csv"))
        assert scores.returncode == 0, scores.stderr
        assert "24 verdicts imported" in scores.stdout and "ignored columns: comment" in scores.stderr
        again = cli("import-verdicts", run["id"], str(DATA / "my_judge_scores.csv"))
        assert again.returncode == 0 and "0 verdicts imported, 24 already imported" in again.stdout
        clash = cli("import-verdicts", run["id"], str(DATA / "gpt-4_single.jsonl"), "--turn", "1", "--judge", own_judge)
        assert clash.returncode == 2 and "HTTP 409" in clash.stderr and "is a judge this run calls" in clash.stderr
        wrong_turn = cli("import-verdicts", run["id"], str(DATA / "gpt-4_single.jsonl"))
        assert wrong_turn.returncode == 2 and "line 25.item_id: item 'mtbench-81-t2' is not in run" in wrong_turn.stderr
        ratings = cli("import-ratings", run["id"], str(DATA / "human_scores.csv"))
        assert ratings.returncode == 0, ratings.stderr

        body = client.get(f"/v1/runs/{run['id']}/agreement")
        rows = {r["judge"]: r for r in body["agreement"]["scores"]}
        assert set(rows) == {"gpt-4", "my-judge"}  # the run's own judge scored consistency, the humans overall
        report = client.report(run["id"], n_boot=20)
        assert set(report["counts"]["imported"]) == {"gpt-4", "my-judge"}
        assert set(report["counts"]["judges"]) == {own_judge, "gpt-4", "my-judge"}
        for judge, judge_scores, scale in (("gpt-4", fastchat_scores(), (1, 10)), ("my-judge", csv_scores(), (1, 100))):
            expected = expected_score_agreement(judge_scores, scale)
            assert rows[judge]["imported"] is True and rows[judge]["n"] == expected["n"]
            for name in ("spearman", "pearson", "kendall", "qwk"):
                assert rows[judge][name] == pytest.approx(expected[name], abs=1e-9), (judge, name)
        summary = client.run(run["id"])
        assert summary["status"] == "done" and summary["n_judgments"] == 24 * 3
        shown = cli("agreement", run["id"])
        assert shown.returncode == 0 and "gpt-4 (imported)" in shown.stdout and "my-judge (imported)" in shown.stdout
