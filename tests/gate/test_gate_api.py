"""``dialogue-judge gate --api URL`` against the real service: an API process and a Celery worker process (Redis,
SQLite), judging through the loopback simulator. Files are judged batch by batch (one run per batch, early stop =
later batches never submitted); two existing run ids are compared from their stored verdicts (no judge call)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dialogue_judge.cli import app
from dialogue_judge.testing import LiveService, OwnRedis
from judge_simulator.process import SimulatorProcess

from .planting import judge_for, plant

pytestmark = [pytest.mark.e2e]


def gate(*args: str | Path) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["gate", *map(str, args)])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


def test_gate_against_a_running_service(
    sqlite_url: str,
    own_redis: OwnRedis,
    tmp_path: Path,
    judge_simulator: SimulatorProcess,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    judge_simulator.reset(restore_script=True)
    judge = judge_for(judge_simulator)
    with LiveService(own_redis.url, sqlite_url, tmp_path / "svc", worker_concurrency=8) as service:
        # files, judged on the service batch by batch: a big regression stops early
        worse = plant(tmp_path / "worse", 80, -15.0, seed=21)
        code, stdout, stderr = gate(
            "-b",
            worse.baseline,
            "-c",
            worse.candidate,
            "--judge",
            judge,
            "--api",
            service.api_url,
            "--max-drop",
            "3",
            "--json",
            tmp_path / "api.json",
        )
        assert code == 1, stderr
        assert stderr.strip().splitlines()[-1].startswith("FAIL: regression in consistency: mean drop ")
        report = json.loads((tmp_path / "api.json").read_text())
        assert report["backend"] == "api"
        calls = report["calls"]
        assert len(calls["run_ids"]) == calls["looks_done"] < calls["looks_planned"]
        assert calls["saved"] > 0 and calls["judged"] < calls["planned"]
        assert judge_simulator.stats()["total_calls"] == calls["provider_calls"] == calls["judged"]
        assert "The early stop saved" in stdout

        # two existing runs of the service, compared by run id from their stored verdicts
        same = plant(tmp_path / "same", 40, 0.0, seed=22)
        client = service.client()
        run_ids = []
        for path in (same.baseline, same.candidate):
            items = [json.loads(line) for line in path.read_text().splitlines()]
            created = client.create_run(
                {"items": items, "rubrics": ["rsum-single"], "judges": [judge], "aspects": ["consistency"]}
            )
            service.wait_run(created["id"], timeout_s=120)
            run_ids.append(created["id"])
        before = judge_simulator.stats()["total_calls"]
        code, stdout, stderr = gate(
            "-b",
            run_ids[0],
            "-c",
            run_ids[1],
            "--judge",
            judge,
            "--api",
            service.api_url,
            "--max-drop",
            "20",
            "--json",
            tmp_path / "runs.json",
        )
        assert code == 0, stderr
        assert stderr.strip().splitlines()[-1].startswith("PASS: no regression in consistency: mean drop ")
        assert judge_simulator.stats()["total_calls"] == before  # verdicts reused: no judge call
        runs = json.loads((tmp_path / "runs.json").read_text())
        assert runs["calls"]["reused"] and runs["calls"]["run_ids"] == run_ids and runs["n_items"] == 40
        assert "were reused" in stdout

        # an unknown run id is exit 2 with the service's answer
        code, _, stderr = gate(
            "-b", "run_0000000000000000", "-c", run_ids[1], "--judge", judge, "--api", service.api_url
        )
        assert code == 2
        assert stderr.strip().splitlines()[-1] == (
            f"ERROR: the service at {service.api_url} answered: HTTP 404: run 'run_0000000000000000' not found"
        )
