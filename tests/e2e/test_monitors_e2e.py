"""Issue 25 through the real parts (API process, Redis, Celery worker process, SQLite / PostgreSQL, the simulator
over HTTP): sampling within the binomial bound and never again for a retried batch, the daily budget pausing
sampling, and the series equal to a pandas computation on the verdicts the workers stored."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import httpx
import pandas as pd
import pytest
from scipy import stats
from sqlalchemy import create_engine, text

from dialogue_judge.client import ApiClient
from dialogue_judge.testing import LiveService
from judge_api.monitor_ingest import is_sampled
from judge_simulator.process import SimulatorProcess

pytestmark = [pytest.mark.e2e]

FACTS = [
    {"id": "dog", "text": "The user's dog is called Rex.", "source": "persona.user"},
    {"id": "city", "text": "The user lives in Lyon.", "source": "persona.user"},
]


def response(i: int, version: str, hour: int = 10, text_: str | None = None) -> dict[str, Any]:
    return {
        "id": f"resp-{i:05d}",
        "dialogue": [
            {"speaker": "user", "text": "My dog Rex and I moved to Lyon.", "session": 1},
            {"speaker": "user", "text": "Where do we live now?", "session": 2},
        ],
        "persona": {"user": ["I have a dog called Rex.", "I live in Lyon."], "bot": []},
        "facts": FACTS,
        "response": text_ or f"You and Rex live in Lyon ({i}).",
        "system": "bot",
        "version": version,
        "timestamp": f"2026-11-20T{hour:02d}:{i % 60:02d}:00Z",
    }


def table_count(db_url: str, sql: str, **params: Any) -> int:
    engine = create_engine(db_url)
    try:
        with engine.connect() as connection:
            return int(connection.execute(text(sql), params).scalar_one())
    finally:
        engine.dispose()


def wait_judged(client: ApiClient, monitor_id: str, timeout_s: float = 180.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    info: dict[str, Any] = {}
    while time.monotonic() < deadline:
        info = client.monitor_info(monitor_id)
        if info["status"]["pending_judgments"] == 0:
            return info
        time.sleep(0.5)
    raise TimeoutError(f"monitor {monitor_id} still has pending judgments: {info}")


def test_sampling_within_the_binomial_bound_and_a_retried_batch_is_not_resampled(
    db_url: str, redis_url: str, tmp_path: Path, judge_simulator: SimulatorProcess
) -> None:
    judge = f"openai-compatible:sim-judge@{judge_simulator.base_url}"
    service = LiveService(redis_url, db_url, tmp_path / "svc")
    try:
        service.start_api()  # no worker: sampling is the API's; the judgments wait pending
        client = service.client()
        monitor = client.create_monitor(
            {
                "name": "sampling",
                "rubrics": ["rsum-single"],
                "judges": [judge],
                "aspects": ["consistency"],
                "sample_rate": 0.3,
            }
        )
        batch = [response(i, "v1") for i in range(2000)]
        with client.monitor(monitor["id"], batch_size=100, flush_interval=0.05) as logger:
            for entry in batch:
                logger.log(entry)
            assert logger.flush(timeout=120)
        assert logger.stats.accepted == 2000 and logger.stats.duplicates == 0 and logger.stats.rejected == 0
        sampled = logger.stats.sampled
        n, p = 2000, 0.3
        bound = 4 * math.sqrt(n * p * (1 - p))  # 4 sigma: 1 in 15,000 for a fair sampler
        assert abs(sampled - n * p) <= bound, (sampled, bound)
        assert sampled == sum(is_sampled(monitor["id"], r["id"], p) for r in batch)  # the stated hash, exactly

        stored = "SELECT COUNT(*) FROM judgments WHERE run_id = :r"
        assert table_count(db_url, stored, r=monitor["run_id"]) == sampled
        retried = httpx.post(f"{service.api_url}/v1/monitors/{monitor['id']}/responses", json=batch[500:700])
        assert retried.status_code == 202
        assert retried.json() == {"accepted": 0, "sampled": 0, "duplicates": 200, "paused": False}
        assert table_count(db_url, stored, r=monitor["run_id"]) == sampled
        rows = "SELECT COUNT(*) FROM monitor_responses WHERE monitor_id = :m"
        assert table_count(db_url, rows, m=monitor["id"]) == 2000
        assert client.get("/v1/runs")["total"] == 0  # the monitor's run stays out of the runs list
    finally:
        service.stop()


def test_the_daily_budget_pauses_sampling(
    pg_url: str, redis_url: str, tmp_path: Path, judge_simulator: SimulatorProcess
) -> None:
    judge_simulator.reset(restore_script=True)
    env = {"ANTHROPIC_BASE_URL": judge_simulator.root_url, "ANTHROPIC_API_KEY": "sk-ant-test-0000000000"}
    with LiveService(redis_url, pg_url, tmp_path / "svc", env_overrides=env) as service:
        client = service.client()
        monitor = client.create_monitor(
            {
                "name": "budget",
                "rubrics": ["rsum-single"],
                "judges": ["anthropic:claude-sonnet-4-5"],
                "aspects": ["consistency"],
                "sample_rate": 1.0,
                "daily_budget_usd": 0.002,
            }
        )
        url = f"{service.api_url}/v1/monitors/{monitor['id']}/responses"
        first = httpx.post(url, json=[response(i, "v1") for i in range(3)]).json()
        assert first == {"accepted": 3, "sampled": 3, "duplicates": 0, "paused": False}
        info = wait_judged(client, monitor["id"])
        assert info["status"]["spent_today_usd"] >= 0.002  # three judge calls at Sonnet's list price
        assert info["status"]["state"] == "paused_budget"
        assert info["status"]["paused_until"].endswith("00:00:00")
        assert "resumes" in info["status"]["message"]

        paused = httpx.post(url, json=[response(i, "v1") for i in range(3, 13)]).json()
        assert paused == {"accepted": 10, "sampled": 0, "duplicates": 0, "paused": True}
        assert table_count(pg_url, "SELECT COUNT(*) FROM judgments WHERE run_id = :r", r=monitor["run_id"]) == 3

        raised = client.request("PATCH", f"/v1/monitors/{monitor['id']}", json={"daily_budget_usd": 100})
        assert raised["status"]["state"] == "active"
        resumed = httpx.post(url, json=[response(i, "v1") for i in range(13, 15)]).json()
        assert resumed["sampled"] == 2 and resumed["paused"] is False


def test_series_equals_pandas_on_the_stored_verdicts(
    pg_url: str, redis_url: str, tmp_path: Path, judge_simulator: SimulatorProcess
) -> None:
    judge_simulator.reset(restore_script=True)
    judge = f"openai-compatible:sim-judge@{judge_simulator.base_url}"
    with LiveService(redis_url, pg_url, tmp_path / "svc") as service:
        client = service.client()
        monitor = client.create_monitor(
            {
                "name": "series",
                "rubrics": ["rsum-single", "fact-check"],
                "judges": [judge],
                "aspects": ["consistency"],
                "sample_rate": 0.6,
            }
        )
        batch = []
        for i in range(80):
            version = "v1" if i % 2 else "v2"
            label = "c" if (version == "v2" and i % 3 == 0) else "s"
            reply = f"Rex and you live in Lyon <<f:city={label}>> and <<q={40 + (i * 13) % 55}>>."
            batch.append(response(i, version, hour=9 + i % 3, text_=reply))
        answer = client.post(f"/v1/monitors/{monitor['id']}/responses", batch)
        assert answer["accepted"] == 80 and 0 < answer["sampled"] < 80
        wait_judged(client, monitor["id"])
        verdicts = pd.DataFrame(client.all_judgments(monitor["run_id"]))
        assert set(verdicts["status"]) == {"done"}
        assert len(verdicts) == 2 * answer["sampled"]
        hours = {r["id"]: pd.Timestamp(r["timestamp"]).tz_convert(None).floor("h") for r in batch}
        versions = {r["id"]: r["version"] for r in batch}
        verdicts["hour"] = verdicts["item_id"].map(hours)
        verdicts["version"] = verdicts["item_id"].map(versions)
        verdicts["rate"] = [(d or {}).get("contradiction_rate") for d in verdicts["details"]]

        series = client.monitor_series(monitor["id"], bucket="1h", by="version")["rows"]
        assert all(r["contradiction_rate"] is None for r in series if r["rubric_id"] == "rsum-single")
        got = pd.DataFrame(series)
        assert len(got) == verdicts.groupby(["hour", "version", "rubric_id"]).ngroups
        for (hour, version, rubric), group in verdicts.groupby(["hour", "version", "rubric_id"]):
            row = got[
                (pd.to_datetime(got["bucket_start"]).dt.tz_localize(None) == hour)
                & (got["version"] == version)
                & (got["rubric_id"] == rubric)
            ]
            assert len(row) == 1
            row = row.iloc[0]
            n = len(group)
            assert row["n"] == n
            assert row["mean"] == pytest.approx(group["score"].mean())
            if n >= 2:
                half = stats.t.ppf(0.975, n - 1) * group["score"].std() / math.sqrt(n)
                assert row["ci_low"] == pytest.approx(group["score"].mean() - half)
                assert row["ci_high"] == pytest.approx(group["score"].mean() + half)
            if rubric == "fact-check":
                assert row["contradiction_rate"] == pytest.approx(group["rate"].astype(float).mean())
            else:
                assert pd.isna(row["contradiction_rate"])  # null in the JSON
        contradicted = got[(got["rubric_id"] == "fact-check") & (got["version"] == "v2")]
        assert contradicted["contradiction_rate"].max() > 0  # the planted contradictions show

        csv_text = client.monitor_series(monitor["id"], bucket="1d", by="version", format="csv")
        daily = pd.read_csv(__import__("io").StringIO(csv_text))
        assert daily.groupby("rubric_id")["n"].sum().to_dict() == verdicts.groupby("rubric_id").size().to_dict()


def test_monitor_cli_create_log_list_show_series(
    sqlite_url: str, redis_url: str, tmp_path: Path, judge_simulator: SimulatorProcess
) -> None:
    import json

    from typer.testing import CliRunner

    from dialogue_judge.cli import app

    runner = CliRunner()
    judge = f"openai-compatible:sim-judge@{judge_simulator.base_url}"
    service = LiveService(redis_url, sqlite_url, tmp_path / "svc")
    try:
        service.start_api()
        api = ["--api", service.api_url]
        body = tmp_path / "monitor.json"
        body.write_text(json.dumps({"alerts": [{"name": "floor", "floor": {"below": 50}, "aspect": "consistency"}]}))
        created = runner.invoke(
            app,
            [
                *("monitor", "create", "--name", "cli", "-r", "rsum-single", "-j", judge, "--aspect", "consistency"),
                *("--sample-rate", "0.5", "--file", str(body)),
                *api,
            ],
        )
        assert created.exit_code == 0, created.output
        monitor_id = created.output.split()[0]
        assert monitor_id.startswith("mon_")
        responses = tmp_path / "responses.jsonl"
        responses.write_text("\n".join(json.dumps(response(i, "v1")) for i in range(30)))
        logged = runner.invoke(app, ["monitor", "log", monitor_id, str(responses), "--batch", "7", *api])
        assert logged.exit_code == 0, logged.output
        expected = sum(is_sampled(monitor_id, f"resp-{i:05d}", 0.5) for i in range(30))
        assert f"accepted 30, sampled {expected}, duplicates 0" in logged.output
        again = runner.invoke(app, ["monitor", "log", monitor_id, str(responses), *api])
        assert "accepted 0, sampled 0, duplicates 30" in again.output
        listed = runner.invoke(app, ["monitor", "list", *api])
        assert monitor_id in listed.output and "active" in listed.output
        shown = json.loads(runner.invoke(app, ["monitor", "show", monitor_id, *api]).output)
        assert shown["alerts"][0]["floor"]["below"] == 50 and shown["status"]["responses_today"] == 30
        csv_out = runner.invoke(app, ["monitor", "series", monitor_id, "--format", "csv", *api])
        assert csv_out.exit_code == 0 and csv_out.output.startswith("bucket_start,system,version")

        bad = tmp_path / "bad.jsonl"
        bad.write_text(json.dumps({**response(99, "v1"), "system": ""}))
        refused = runner.invoke(app, ["monitor", "log", monitor_id, str(bad), *api])
        assert refused.exit_code == 2 and "system" in refused.output
        missing = runner.invoke(app, ["monitor", "create", "--name", "x", *api])
        assert missing.exit_code == 2 and "--rubric" in missing.output
        wrong = runner.invoke(app, ["monitor", "series", monitor_id, "--bucket", "2h", *api])
        assert wrong.exit_code == 2
    finally:
        service.stop()
