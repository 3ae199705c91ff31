"""End to end through the real parts: HTTP -> API process -> Redis -> Celery worker process -> judge over HTTP
(the loopback simulator speaking the OpenAI wire format) -> SQLite / PostgreSQL -> report."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from dialogue_judge.testing import LiveService
from judge_simulator.process import SimulatorProcess

pytestmark = [pytest.mark.e2e]


def make_items(n: int, scores: dict[str, int]) -> list[dict]:
    return [
        {
            "id": f"item-{i}",
            "dialogue": [
                {"speaker": "user", "text": f"I adopted a dog called Rex {i} years ago.", "session": 1},
                {"speaker": "bot", "text": "How lovely!", "session": 1},
                {"speaker": "user", "text": "Do you remember my dog's name?", "session": 2},
            ],
            "persona": {"user": ["I have a dog called Rex."], "bot": ["I like animals."]},
            "candidates": {
                system: f"Answer from {system} about Rex. <<q={score}>>" for system, score in scores.items()
            },
        }
        for i in range(n)
    ]


def judgment_rows(database_url: str, run_id: str) -> list[tuple]:
    engine = create_engine(database_url)
    with engine.connect() as connection:
        rows = connection.execute(
            text(
                "SELECT item_key, system_a, aspect, status, score, provider_calls FROM judgments "
                "WHERE run_id = :r ORDER BY id"
            ),
            {"r": run_id},
        ).all()
    engine.dispose()
    return [tuple(r) for r in rows]


def test_single_run_through_real_stack(
    db_url: str, machine_redis_url: str, tmp_path: Path, judge_simulator: SimulatorProcess
) -> None:
    """Against the machine's own Redis server (the other live tests use a private one)."""
    judge_simulator.reset(restore_script=True)
    judge = f"openai-compatible:sim-judge@{judge_simulator.base_url}"
    with LiveService(machine_redis_url, db_url, tmp_path / "svc") as service:
        client = service.client()
        created = client.create_run(
            {
                "items": make_items(3, {"good": 91, "bad": 12}),
                "rubrics": ["rsum-single"],
                "judges": [judge],
                "mode": ["single"],
                "aspects": ["consistency", "coherence"],
            }
        )
        assert created["n_judgments"] == 3 * 2 * 2
        summary = service.wait_run(created["id"], timeout_s=90)
        assert summary["counts"]["done"] == 12 and summary["progress"] == 1.0
        rows = judgment_rows(db_url, created["id"])
        assert len(rows) == 12
        assert {r[4] for r in rows if r[1] == "good"} == {91.0}
        assert {r[4] for r in rows if r[1] == "bad"} == {12.0}
        assert all(r[5] == 1 for r in rows)  # one provider call each
        report = client.report(created["id"], n_boot=200)
        means = {(s["system"], s["aspect"]): s["mean"] for s in report["scores"]}
        assert means[("good", "consistency")] == 91.0 and means[("bad", "coherence")] == 12.0
        page = client.get(f"/v1/runs/{created['id']}/judgments", limit=5, system="good")
        assert page["total"] == 6 and len(page["items"]) == 5
        assert page["items"][0]["raw_output"] and page["items"][0]["prompt_hash"]


def test_killed_worker_mid_task_every_judgment_done_exactly_once(
    sqlite_url: str, redis_url: str, tmp_path: Path, judge_simulator: SimulatorProcess
) -> None:
    judge_simulator.reset(restore_script=True)
    judge_simulator.set_script({"latency": {"kind": "fixed", "seconds": 1.0}})
    judge = f"openai-compatible:sim-judge@{judge_simulator.base_url}"
    service = LiveService(redis_url, sqlite_url, tmp_path / "svc", worker_concurrency=4)
    try:
        service.start_api()
        first = service.start_worker()
        client = service.client()
        created = client.create_run(
            {
                "items": make_items(6, {"a": 70, "b": 40}),
                "rubrics": ["rsum-single"],
                "judges": [judge],
                "mode": ["single"],
                "aspects": ["consistency"],
            }
        )
        # wait until the worker is inside judge calls, then kill -9 it
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and client.run(created["id"])["counts"]["running"] == 0:
            time.sleep(0.05)
        assert client.run(created["id"])["counts"]["running"] > 0
        service.kill_worker(first, signal.SIGKILL)
        service.start_worker()
        summary = service.wait_run(created["id"], timeout_s=120)
    finally:
        service.stop()
    assert summary["counts"]["done"] == 12
    rows = judgment_rows(sqlite_url, created["id"])
    keys = [(r[0], r[1], r[2]) for r in rows]
    assert len(keys) == len(set(keys)) == 12
    assert all(r[3] == "done" for r in rows)
    assert sorted({r[4] for r in rows}) == [40.0, 70.0]
