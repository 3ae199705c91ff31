"""Issue 27.4: the dashboard's leaderboard intervals are the report's. The page asked for the report with
n_boot=500 and `dialogue-judge report` with 1000, so the same run showed gold coherence [46.72, 88.25] on the page
and [48.64, 88.50] in the CLI. Now neither sends its own count: one seeded computation (the API's default) for both.
Page (AppTest against an API process) against the API and the CLI."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from dialogue_judge.testing import LiveService

pytestmark = [pytest.mark.e2e]
ROOT = Path(__file__).resolve().parents[2]
SYSTEMS = ("gold", "rsum", "generic")


def run_body(n: int) -> dict:
    return {
        "items": [
            {
                "id": f"i{k}",
                "dialogue": [{"speaker": "user", "text": f"I have {k} cats."}],
                "candidates": {s: f"{s} answer {k}" for s in SYSTEMS},
            }
            for k in range(n)
        ],
        "rubrics": ["rsum-single"],
        "judges": ["openai-compatible:nobody@http://127.0.0.1:9/v1"],  # no worker: these stay pending
        "aspects": ["coherence"],
        "metrics": [],
    }


def verdicts_csv(n: int) -> bytes:
    rng = random.Random(27)
    lines = ["item_id,system,aspect,judge,score,scale_min,scale_max"]
    for k in range(n):
        for shift, system in zip((70, 55, 30), SYSTEMS, strict=True):
            lines.append(f"i{k},{system},coherence,my-judge,{min(100, max(1, shift + rng.randint(-30, 30)))},1,100")
    return ("\n".join(lines) + "\n").encode()


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_leaderboard_intervals_equal_the_reports(
    db_url: str, redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    n = 15
    service = LiveService(redis_url, db_url, tmp_path / "svc")
    service.start_api()
    try:
        client = service.client()
        run_id = client.create_run(run_body(n))["id"]
        imported = client.import_verdicts(run_id, verdicts_csv(n), {"format": "csv"})
        assert imported["created"] == 3 * n, imported
        api_rows = {
            r["system"]: (r["mean"], r["ci_low"], r["ci_high"])
            for r in client.report(run_id)["scores"]
            if r["judge"] == "my-judge"
        }
        assert set(api_rows) == set(SYSTEMS)
        cli = subprocess.run(
            [
                sys.executable,
                "-m",
                "dialogue_judge.cli",
                "report",
                run_id,
                "--format",
                "json",
                "--api",
                service.api_url,
            ],
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert cli.returncode == 0, cli.stderr
        cli_rows = {
            r["system"]: (r["mean"], r["ci_low"], r["ci_high"])
            for r in json.loads(cli.stdout)["scores"]
            if r["judge"] == "my-judge"
        }
        assert cli_rows == api_rows

        monkeypatch.setenv("DJ_API_URL", service.api_url)
        at = AppTest.from_file(str(ROOT / "dashboard" / "app.py"), default_timeout=90)
        at.query_params["run"] = run_id
        at.run()
        at.switch_page("views/leaderboard.py").run()
        at.selectbox(key="lb_judge").set_value("my-judge").run()
        assert not at.exception, [e.value for e in at.exception]
        tables = [d.value for d in at.dataframe if {"system", "ci_low", "ci_high"} <= set(d.value.columns)]
        assert tables, "no scores table on the leaderboard"
        page = tables[0]
        page = page[page["judge"] == "my-judge"] if "judge" in page else page
        page_rows = {r.system: (r.mean, r.ci_low, r.ci_high) for r in page.itertuples()}
        assert page_rows == api_rows  # exactly: the page shows the report's own figures
    finally:
        service.stop()
