"""Service faults against the real stack: the database connection drops (PostgreSQL terminates every session of the
service's database and refuses new ones for a few seconds), and the API is SIGKILLed while submissions are in
flight. The runs finish with every judgment written once; a submission either got 202 and was stored whole, or
failed and left nothing (no run without all its items and judgments)."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from sqlalchemy import create_engine, text

from dialogue_judge.testing import LiveService, OwnRedis
from judge_simulator.process import SimulatorProcess

from .conftest import (
    make_items,
    run_counts,
    scores_for,
    single_run,
    verify_exactly_once,
    wait_run,
    wait_until,
)

pytestmark = [pytest.mark.e2e]

SYSTEMS = {"a": 33, "b": 66}
# the admin connection goes to another database (as tests/conftest.py's pg_url fixture), so it survives the drop
PG_ADMIN = os.environ.get("DJ_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")


def database_name(url: str) -> str:
    return url.rsplit("/", 1)[1]


def drop_connections(admin_url: str, name: str, outage_s: float) -> int:
    """Terminate every session on database ``name``; with ``outage_s`` > 0 also refuse new ones that long."""
    with psycopg.connect(admin_url, autocommit=True) as admin:
        if outage_s > 0:
            admin.execute(f'ALTER DATABASE "{name}" WITH ALLOW_CONNECTIONS false')
        killed = admin.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = %s AND pid <> "
            "pg_backend_pid()",
            (name,),
        ).fetchone()
        if outage_s > 0:
            time.sleep(outage_s)
            admin.execute(f'ALTER DATABASE "{name}" WITH ALLOW_CONNECTIONS true')
    return int(killed[0]) if killed else 0


def test_database_connections_drop_and_come_back(
    pg_url: str, own_redis: OwnRedis, tmp_path: Path, sim: SimulatorProcess, services: list[LiveService]
) -> None:
    sim.set_script({"latency": {"kind": "fixed", "seconds": 0.25}})
    judge = f"openai-compatible:sim-judge@{sim.base_url}"
    service = LiveService(own_redis.url, pg_url, tmp_path / "svc", worker_concurrency=4)
    services.append(service)
    service.start_api()
    service.start_worker()
    items = make_items(40, SYSTEMS)
    created = service.client().create_run(single_run(items, judge))
    wait_until(lambda: run_counts(service.api_url, created["id"])["done"] >= 6, 60, "first verdicts")
    name = database_name(pg_url)
    # an outage: every connection killed mid-transaction, and no new one accepted for 3 s
    assert drop_connections(PG_ADMIN, name, outage_s=3.0) >= 2  # the API's and the worker's connections
    # the API answers 503 (not 500) while the database is away, then recovers by itself
    wait_until(
        lambda: httpx.get(f"{service.api_url}/v1/runs/{created['id']}", timeout=5).status_code == 200,
        30,
        "API back after the outage",
    )
    # and plain drops (connections killed mid-query, reconnects allowed at once) while the run is still going
    drops = 0
    while drops < 25 and run_counts(service.api_url, created["id"])["pending"] > 0:
        drops += drop_connections(PG_ADMIN, name, outage_s=0) > 0
        time.sleep(0.15)
    verdict = verify_exactly_once(
        service, pg_url, created["id"], 80, sim=sim, expected_scores=scores_for(items, SYSTEMS), timeout_s=150
    )
    not_done = [(r["item_key"], r["system_a"], r["status"], r["error"]) for r in verdict.rows if r["status"] != "done"]
    assert not not_done, f"a database blip must not fail judgments: {not_done}"
    api_log = (tmp_path / "svc" / "api.log").read_text(errors="replace")
    assert "Traceback" not in api_log or "OperationalError" in api_log


def test_api_sigkill_mid_submit(
    db_url: str, own_redis: OwnRedis, tmp_path: Path, sim: SimulatorProcess, services: list[LiveService]
) -> None:
    """Four clients submit runs back to back; the API is killed -9 under them and restarted."""
    judge = f"openai-compatible:sim-judge@{sim.base_url}"
    service = LiveService(
        own_redis.url, db_url, tmp_path / "svc", worker_concurrency=8, env_overrides={"DJ_RUNS_PER_MINUTE": "0"}
    )
    services.append(service)
    service.start_api()
    service.start_worker()
    # heavy enough bodies (40 items of 60 turns) that a request spends a while being parsed and stored; the
    # prompts repeat across runs, so after the first run the judge cache answers and the test stays quick
    items = make_items(40, {"a": 5}, prefix="submit")
    for entry in items:
        entry["dialogue"] = [
            {"speaker": "user" if t % 2 == 0 else "bot", "text": f"turn {t} " + "words " * 40} for t in range(60)
        ]
    body = single_run(items, judge)
    outcomes: list[tuple[str, Any]] = []
    lock = threading.Lock()
    stop = threading.Event()

    def submitter() -> None:
        with httpx.Client(timeout=30) as http:
            while not stop.is_set():
                try:
                    response = http.post(f"{service.api_url}/v1/runs", json=body)
                    outcome = (
                        ("accepted", response.json()["id"])
                        if response.status_code == 202
                        else ("refused", f"{response.status_code}: {response.text[:300]}")
                    )
                except httpx.HTTPError as exc:
                    outcome = ("failed", type(exc).__name__)
                    time.sleep(0.05)
                with lock:
                    outcomes.append(outcome)

    threads = [threading.Thread(target=submitter, daemon=True) for _ in range(4)]
    for thread in threads:
        thread.start()
    wait_until(lambda: sum(o[0] == "accepted" for o in outcomes) >= 4, 60, "first accepted submissions")
    service.stop_api(signal.SIGKILL)
    killed_at = len(outcomes)
    time.sleep(1.0)
    service.start_api()
    wait_until(lambda: sum(o[0] == "accepted" for o in outcomes[killed_at:]) >= 4, 60, "submissions after restart")
    stop.set()
    for thread in threads:
        thread.join(40)
    accepted = [o[1] for o in outcomes if o[0] == "accepted"]
    failed = [o for o in outcomes if o[0] == "failed"]
    assert failed, "no submission was caught by the kill"
    # at least one request was cut off mid-flight (read / protocol error), not merely refused while the API was down
    assert any(o[1] != "ConnectError" for o in failed), failed
    assert not [o for o in outcomes if o[0] == "refused"], outcomes
    # every stored run is whole, every accepted run is stored
    engine = create_engine(db_url)
    with engine.connect() as connection:
        stored = connection.execute(
            text(
                "SELECT r.id, r.n_items, r.n_judgments, (SELECT COUNT(*) FROM items i WHERE i.run_id = r.id), "
                "(SELECT COUNT(*) FROM judgments j WHERE j.run_id = r.id) FROM runs r"
            )
        ).all()
        orphans = connection.execute(
            text(
                "SELECT (SELECT COUNT(*) FROM items WHERE run_id NOT IN (SELECT id FROM runs)) + "
                "(SELECT COUNT(*) FROM judgments WHERE run_id NOT IN (SELECT id FROM runs))"
            )
        ).scalar_one()
    engine.dispose()
    assert orphans == 0
    assert [r for r in stored if (r[1], r[2], r[3], r[4]) != (40, 40, 40, 40)] == []
    stored_ids = {r[0] for r in stored}
    assert set(accepted) <= stored_ids
    # a request cut off by the kill either committed whole (the client never heard) or left nothing
    assert len(stored_ids) <= len(accepted) + len(failed)
    # and every stored run finishes, each judgment once, with the verdict of its own item
    for run_id in sorted(stored_ids):
        wait_run(service.api_url, run_id, timeout_s=120)
    for run_id in sorted(stored_ids)[:3] + sorted(stored_ids)[-3:]:
        verdict = verify_exactly_once(service, db_url, run_id, 40, expected_scores=scores_for(items, {"a": 5}))
        assert verdict.by_status == {"done": 40}
    with create_engine(db_url).connect() as connection:
        statuses: dict[str, int] = dict(
            connection.execute(text("SELECT status, COUNT(*) FROM judgments GROUP BY status")).all()
        )
        duplicates = connection.execute(
            text(
                "SELECT COUNT(*) FROM (SELECT run_id, item_key, system_a, aspect FROM judgments "
                "GROUP BY run_id, item_key, system_a, aspect HAVING COUNT(*) > 1) d"
            )
        ).scalar_one()
    assert statuses == {"done": 40 * len(stored_ids)} and duplicates == 0
