"""A run deleted or pruned mid-flight stops its work at once (issue 43): a real API and worker on PostgreSQL against
the simulator judge with latency and few call slots. Judgments claimed but not yet sent are dropped, a call in flight
may finish but its reply is stored nowhere (judgment, judge cache, stash), and nothing of the run comes back."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
from sqlalchemy import create_engine, text

from dialogue_judge.testing import LiveService
from judge_simulator.process import SimulatorProcess

from .test_service_e2e import make_items

pytestmark = [pytest.mark.e2e]

CALL_SLOTS = 4
LATENCY_S = 0.4
CALLS_BEFORE_DELETE = 40  # ~4 s in with 4 slots at 0.4 s a call: many judgments claimed and not yet sent
SETTLE_S = 15.0


@dataclass
class Stopped:
    calls_at_delete: int  # the judge's calls once the delete had answered
    calls_later: int  # the judge's calls SETTLE_S later
    answer: dict[str, Any]
    rows: dict[str, int]  # rows of every kind left SETTLE_S later
    stashes: int  # paid replies still stashed in Redis SETTLE_S later


def run_body(judge: str) -> dict[str, Any]:
    return {  # 120 items x 2 systems: 240 judgments, each its own prompt
        "items": make_items(120, {"good": 91, "bad": 12}),
        "rubrics": ["rsum-single"],
        "judges": [judge],
        "mode": ["single"],
        "aspects": ["consistency"],
    }


def count_rows(database_url: str) -> dict[str, int]:
    engine = create_engine(database_url)
    try:
        with engine.connect() as connection:
            return {
                table: int(connection.execute(text(f"SELECT COUNT(*) FROM {table}")).scalar() or 0)
                for table in ("runs", "items", "judgments", "judge_cache", "generations", "monitor_responses")
            }
    finally:
        engine.dispose()


def stashed_replies(redis_url: str) -> int:
    client = redis.Redis.from_url(redis_url)
    try:
        return sum(1 for key in client.scan_iter("dj:paid:*") if client.hexists(key, "payload"))
    finally:
        client.close()


def stop_mid_flight(
    sim: SimulatorProcess,
    service: LiveService,
    database_url: str,
    redis_url: str,
    start: Callable[[], None],
    stop: Callable[[], dict[str, Any]],
) -> Stopped:
    """Start the work, stop it once the judge has answered ``CALLS_BEFORE_DELETE`` calls, and look again
    ``SETTLE_S`` later."""

    def calls() -> int:
        return int(sim.stats()["total_calls"])

    sim.set_script({"latency": LATENCY_S})
    start()
    deadline = time.monotonic() + 45
    while calls() < CALLS_BEFORE_DELETE:
        assert time.monotonic() < deadline, "the worker made too few calls"
        time.sleep(0.05)
    answer = stop()
    calls_at_delete = calls()
    time.sleep(SETTLE_S)
    return Stopped(calls_at_delete, calls(), answer, count_rows(database_url), stashed_replies(redis_url))


def assert_stopped(stopped: Stopped) -> None:
    # a call in flight at the delete may finish; no other starts
    assert stopped.calls_later - stopped.calls_at_delete <= CALL_SLOTS, stopped
    assert all(count == 0 for count in stopped.rows.values()), stopped
    assert stopped.stashes == 0, stopped


def service_for(redis_url: str, pg_url: str, tmp_path: Path) -> LiveService:
    return LiveService(redis_url, pg_url, tmp_path / "svc", env_overrides={"DJ_CALL_CONCURRENCY": str(CALL_SLOTS)})


def test_a_run_deleted_mid_flight_stops_and_leaves_nothing(
    sim: SimulatorProcess, redis_url: str, pg_url: str, tmp_path: Path
) -> None:
    judge = f"openai-compatible:sim-judge@{sim.base_url}"
    with service_for(redis_url, pg_url, tmp_path) as service:
        client = service.client()
        run: dict[str, Any] = {}

        def start() -> None:
            run.update(client.create_run(run_body(judge)))

        def stop() -> dict[str, Any]:
            answer: dict[str, Any] = client.request("DELETE", f"/v1/runs/{run['id']}")
            return answer

        stopped = stop_mid_flight(sim, service, pg_url, redis_url, start, stop)
        assert stopped.answer["deleted"]["judgments"] == 240 and stopped.answer["deleted"]["items"] == 120
        assert stopped.answer["deleted"]["runs"] == 1
        assert_stopped(stopped)


def test_a_run_pruned_mid_flight_stops_and_leaves_nothing(
    sim: SimulatorProcess, redis_url: str, pg_url: str, tmp_path: Path
) -> None:
    judge = f"openai-compatible:sim-judge@{sim.base_url}"
    with service_for(redis_url, pg_url, tmp_path) as service:
        client = service.client()
        run: dict[str, Any] = {}

        def start() -> None:
            run.update(client.create_run(run_body(judge)))

        def stop() -> dict[str, Any]:
            answer: dict[str, Any] = client.request("POST", "/v1/runs/prune", params={"older_than": "1s"})
            return answer

        stopped = stop_mid_flight(sim, service, pg_url, redis_url, start, stop)
        assert stopped.answer["deleted"] == [run["id"]]
        assert_stopped(stopped)


def test_a_monitor_deleted_mid_flight_stops_and_leaves_nothing(
    sim: SimulatorProcess, redis_url: str, pg_url: str, tmp_path: Path
) -> None:
    """A project's monitor data (its internal run's items and judgments) deleted while the worker judges them."""
    judge = f"openai-compatible:sim-judge@{sim.base_url}"
    with service_for(redis_url, pg_url, tmp_path) as service:
        client = service.client()
        monitor: dict[str, Any] = {}

        def start() -> None:
            monitor.update(
                client.create_monitor(
                    {
                        "name": "deleted mid-flight",
                        "rubrics": ["rsum-single"],
                        "judges": [judge],
                        "aspects": ["consistency"],
                        "sample_rate": 1.0,
                    }
                )
            )
            responses = [
                {
                    "id": f"resp-{i:04d}",
                    "dialogue": [{"speaker": "user", "text": f"My dog is called Rex {i}.", "session": 1}],
                    "persona": {"user": ["I have a dog called Rex."], "bot": []},
                    "response": f"Rex is a fine name ({i}).",
                    "system": "bot",
                    "version": "v1",
                }
                for i in range(240)
            ]
            accepted = client.request("POST", f"/v1/monitors/{monitor['id']}/responses", json=responses)
            assert accepted["sampled"] == 240

        def stop() -> dict[str, Any]:
            answer: dict[str, Any] = client.request("DELETE", f"/v1/monitors/{monitor['id']}")
            return answer

        stopped = stop_mid_flight(sim, service, pg_url, redis_url, start, stop)
        assert stopped.answer["deleted"]["judgments"] == 240 and stopped.answer["deleted"]["monitors"] == 1
        assert_stopped(stopped)
