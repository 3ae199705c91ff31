"""Human ratings through the real surfaces: `dialogue-judge import-ratings` (CSV on the seed paper's 0-2 scale and
JSONL), several raters per item, then judge-human score agreement from the API."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dialogue_judge.testing import LiveService
from judge_simulator.process import SimulatorProcess

pytestmark = [pytest.mark.e2e]
ROOT = Path(__file__).resolve().parents[2]
QUALITY = {"s1": [90, 80, 70, 60, 50, 40], "s2": [30, 35, 45, 55, 20, 25]}


def test_import_ratings_and_score_agreement(
    sqlite_url: str, redis_url: str, tmp_path: Path, judge_simulator: SimulatorProcess
) -> None:
    judge_simulator.reset(restore_script=True)
    items = [
        {
            "id": f"it{i}",
            "dialogue": [{"speaker": "user", "text": "Remember my sister Ann?"}],
            "persona": {"user": ["My sister is Ann."]},
            "candidates": {s: f"reply {s} {i} <<q={QUALITY[s][i]}>>" for s in QUALITY},
        }
        for i in range(6)
    ]
    with LiveService(redis_url, sqlite_url, tmp_path / "svc") as service:
        client = service.client()
        run = client.create_run(
            {
                "items": items,
                "rubrics": ["rsum-single"],
                "aspects": ["consistency"],
                "judges": [f"openai-compatible:sim@{judge_simulator.base_url}"],
            }
        )
        service.wait_run(run["id"])
        ratings_csv = tmp_path / "ratings.csv"
        with ratings_csv.open("w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(["item_id", "system", "aspect", "rater", "value", "scale_min", "scale_max"])
            for system, qualities in QUALITY.items():
                for i, quality in enumerate(qualities):
                    for rater, offset in (("crowd-1", 0), ("crowd-2", 5)):
                        value = 2 if quality + offset >= 65 else 1 if quality + offset >= 40 else 0
                        writer.writerow([f"it{i}", system, "consistency", rater, value, 0, 2])
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        cli = [sys.executable, "-m", "dialogue_judge.cli"]
        done = subprocess.run(
            [*cli, "import-ratings", run["id"], str(ratings_csv), "--api", service.api_url],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        assert "24 ratings added" in done.stdout
        again = subprocess.run(
            [*cli, "import-ratings", run["id"], str(ratings_csv), "--api", service.api_url],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert "0 ratings added, 24 updated" in again.stdout  # idempotent: same rater/item/system replaces

        bad = tmp_path / "bad.jsonl"
        bad.write_text(
            json.dumps(
                {
                    "item_id": "it0",
                    "system": "s1",
                    "aspect": "consistency",
                    "rater": "r",
                    "value": 7,
                    "scale_min": 0,
                    "scale_max": 2,
                }
            )
            + "\n"
        )
        rejected = subprocess.run(
            [*cli, "import-ratings", run["id"], str(bad), "--api", service.api_url],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert rejected.returncode == 2 and "outside the scale" in rejected.stderr

        body = client.get(f"/v1/runs/{run['id']}/agreement")
        scores = body["agreement"]["scores"]
        assert body["n_ratings"] == 24 and scores
        row = scores[0]
        assert row["spearman"] > 0.8 and row["spearman_p"] < 0.01
        shown = subprocess.run(
            [*cli, "agreement", run["id"], "--api", service.api_url],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert shown.returncode == 0 and "spearman" in shown.stdout.lower()
