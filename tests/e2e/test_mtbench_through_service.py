"""Acceptance: the published MT-Bench agreement figures, reproduced through the service's own path — the
`import-mtbench` command stores GPT-4's verdicts as judgments and the votes as human ratings, and the API's
agreement endpoint computes S1/S2 from the stored rows."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from judge_api.app import create_app
from judge_api.config import reset_settings_cache
from judge_api.db import reset_engines

ROOT = Path(__file__).resolve().parents[2]
PUBLISHED = {  # shared/reference/published-numbers.md
    1: {"judge": ((886, 1343), (727, 859)), "human": ((454, 721), (388, 479))},
    2: {"judge": ((871, 1325), (731, 864)), "human": ((471, 707), (388, 474))},
}


@pytest.mark.parametrize("turn", [1, 2])
def test_published_mtbench_agreement_through_import_and_api(
    turn: int, shared_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = shared_dir / "data" / "mtbench_human_judgments"
    env = {**os.environ, "DJ_HOME": str(tmp_path), "PYTHONPATH": str(ROOT)}
    env.pop("DATABASE_URL", None)
    imported = subprocess.run(
        [sys.executable, "-m", "dialogue_judge.cli", "import-mtbench", str(folder), "--turn", str(turn)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert imported.returncode == 0, imported.stderr
    run_id = imported.stdout.strip()
    monkeypatch.setenv("DJ_HOME", str(tmp_path))
    monkeypatch.delenv("DATABASE_URL", raising=False)
    reset_settings_cache()
    reset_engines()
    with TestClient(create_app()) as client:
        run = client.get(f"/v1/runs/{run_id}").json()
        assert run["status"] == "done" and run["counts"]["done"] == run["n_judgments"] > 0
        body = client.get(f"/v1/runs/{run_id}/agreement", params={"human_prefix": "expert_"}).json()
    reset_engines()
    preferences = body["agreement"]["preferences"]
    judge = preferences["judge_vs_human"][0]
    human = preferences["human_vs_human"][0]
    (s1, s2), (h1, h2) = PUBLISHED[turn]["judge"], PUBLISHED[turn]["human"]
    assert (judge["s1"]["agree"], judge["s1"]["total"]) == s1
    assert (judge["s2"]["agree"], judge["s2"]["total"]) == s2
    assert (human["s1"]["agree"], human["s1"]["total"]) == h1
    assert (human["s2"]["agree"], human["s2"]["total"]) == h2


def test_import_mtbench_rejects_a_folder_without_the_files(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "dialogue_judge.cli", "import-mtbench", str(tmp_path)],
        env={**os.environ, "DJ_HOME": str(tmp_path), "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2 and "missing questions.jsonl" in result.stderr
