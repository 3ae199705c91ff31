"""Idempotent submission against the real API process (uvicorn) on SQLite and PostgreSQL: a retried submission with
the same Idempotency-Key returns the run the first one stored, concurrent identical submissions store one run, a
response lost on the way back is retried by the client into the same run, and an API killed -9 between storing a
run and answering it (the client sees a connection error) leaves exactly one run after the client's retry."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine, text

from dialogue_judge.client import ApiClient
from dialogue_judge.testing import REPO_ROOT, LiveService, OwnRedis

from .conftest import make_items, single_run

pytestmark = [pytest.mark.e2e]

JUDGE = "openai-compatible:sim-judge@http://127.0.0.1:9/v1"  # never called: these tests start no worker


def heavy_body(n_items: int, prefix: str) -> dict[str, Any]:
    """A submission that takes the API a while to parse, plan and store (tens of turns per item, four systems)."""
    items = make_items(n_items, {"a": 1, "b": 2, "c": 3, "d": 4}, prefix=prefix)
    for entry in items:
        entry["dialogue"] = [
            {"speaker": "user" if t % 2 == 0 else "bot", "text": f"turn {t} " + "words " * 40} for t in range(30)
        ]
    return single_run(items, JUDGE)


def table_counts(database_url: str) -> dict[str, int]:
    engine = create_engine(database_url)
    try:
        with engine.connect() as connection:
            return {
                t: int(connection.execute(text(f"SELECT COUNT(*) FROM {t}")).scalar_one())
                for t in ("runs", "items", "judgments", "idempotency_keys")
            }
    finally:
        engine.dispose()


def stored_run_ids(database_url: str) -> list[str]:
    engine = create_engine(database_url)
    try:
        with engine.connect() as connection:
            return [str(r[0]) for r in connection.execute(text("SELECT id FROM runs ORDER BY created_at, id"))]
    finally:
        engine.dispose()


@pytest.fixture
def service(db_url: str, own_redis: OwnRedis, tmp_path: Path, services: list[LiveService]) -> LiveService:
    live = LiveService(own_redis.url, db_url, tmp_path / "svc", env_overrides={"DJ_RUNS_PER_MINUTE": "0"})
    services.append(live)
    live.start_api()
    return live


def test_a_retried_submission_returns_the_same_run(service: LiveService, db_url: str) -> None:
    body = single_run(make_items(5, {"a": 1, "b": 2}, prefix="retry"), JUDGE)
    client = service.client()
    first = client.create_run(body, idempotency_key="ci-build-41")
    counts = table_counts(db_url)
    for _ in range(3):
        assert client.create_run(body, idempotency_key="ci-build-41") == first
    assert table_counts(db_url) == counts and counts["runs"] == 1
    # the same key with another body: 409 with the reason, nothing stored
    response = httpx.post(
        f"{service.api_url}/v1/runs",
        json=single_run(make_items(6, {"a": 1, "b": 2}, prefix="retry"), JUDGE),
        headers={"Idempotency-Key": "ci-build-41"},
        timeout=30,
    )
    assert response.status_code == 409 and "different body" in response.json()["detail"]
    assert table_counts(db_url) == counts
    # the client sends a fresh key per submission: submitting the same items again is a new run
    assert client.create_run(body)["id"] != first["id"]
    assert table_counts(db_url)["runs"] == 2


def submit_at_once(url: str, body: dict[str, Any], key: str, n: int) -> list[tuple[int, str | None, str | None]]:
    """``n`` POST /v1/runs with one key, released together; (status, run id, Idempotent-Replayed) of each."""
    barrier = threading.Barrier(n)
    answers: list[tuple[int, str | None, str | None]] = []
    lock = threading.Lock()

    def submit() -> None:
        with httpx.Client(timeout=120) as http:
            barrier.wait()
            response = http.post(f"{url}/v1/runs", json=body, headers={"Idempotency-Key": key})
        with lock:
            replayed = response.headers.get("idempotent-replayed")
            answers.append((response.status_code, response.json().get("id"), replayed))

    threads = [threading.Thread(target=submit) for _ in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(180)
    return answers


def test_concurrent_identical_submissions_store_one_run(service: LiveService, db_url: str) -> None:
    """Eight requests with one key released at once: all answer with one run; the others' work is rolled back."""
    body = heavy_body(60, "race")
    rounds_raced = 0
    for round_ in range(3):
        before = table_counts(db_url)
        answers = submit_at_once(service.api_url, body, f"race-{round_}-{uuid.uuid4()}", 8)
        assert len(answers) == 8 and {a[0] for a in answers} == {202}, answers
        assert len({a[1] for a in answers}) == 1, answers
        assert sum(a[2] is None for a in answers) == 1, answers  # one creator, seven replays
        after = table_counts(db_url)
        assert after["runs"] == before["runs"] + 1 and after["idempotency_keys"] == before["idempotency_keys"] + 1
        assert after["judgments"] - before["judgments"] == 60 * 4 and after["items"] - before["items"] == 60
        if db_url.startswith("postgresql"):
            # a request that stored its run and then lost the key to another one rolled back: its judgment ids
            # were drawn from the sequence and left a gap; the race was run, not avoided
            engine = create_engine(db_url)
            with engine.connect() as connection:
                highest = int(connection.execute(text("SELECT MAX(id) FROM judgments")).scalar_one())
            engine.dispose()
            rounds_raced += highest > after["judgments"]
    if db_url.startswith("postgresql"):
        assert rounds_raced >= 1, "no two requests were ever storing the same key at once"


class DropFirstResponse:
    """A loopback TCP proxy in front of the API that passes the first request on and then cuts the connection
    instead of relaying the answer (the server did the work, the client never hears of it); later connections
    are relayed whole."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.connections = 0
        self.dropped = 0
        self._closed = False
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _serve(self) -> None:
        while not self._closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._relay, args=(client, self.connections == 1), daemon=True).start()

    def _relay(self, client: socket.socket, drop: bool) -> None:
        upstream = socket.create_connection(("127.0.0.1", self.upstream_port))

        def pump(source: socket.socket, sink: socket.socket) -> None:
            try:
                while data := source.recv(65536):
                    sink.sendall(data)
            except OSError:
                pass
            finally:
                for end in (source, sink):
                    with contextlib.suppress(OSError):
                        end.shutdown(socket.SHUT_RDWR)

        threading.Thread(target=pump, args=(client, upstream), daemon=True).start()
        if not drop:
            pump(upstream, client)
            return
        upstream.recv(65536)  # the answer has started: the server finished the request
        self.dropped += 1
        # hang up on the client: shutdown (not only close) also wakes the pump blocked reading from it
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        client.shutdown(socket.SHUT_RDWR)
        client.close()
        upstream.close()

    def close(self) -> None:
        self._closed = True
        self.listener.close()


def test_a_lost_answer_is_retried_into_the_same_run(service: LiveService, db_url: str) -> None:
    proxy = DropFirstResponse(service.api_port)
    retries: list[str] = []
    client = ApiClient(proxy.url, on_retry=lambda attempt, delay, problem: retries.append(problem))
    try:
        created = client.create_run(single_run(make_items(4, {"a": 1, "b": 2}, prefix="lost"), JUDGE))
    finally:
        client.close()
        proxy.close()
    assert proxy.dropped == 1 and len(retries) == 1 and "cannot reach the API" in retries[0]
    assert stored_run_ids(db_url) == [created["id"]]
    assert table_counts(db_url)["idempotency_keys"] == 1


def test_dialogue_judge_submit_retries_a_lost_answer_into_one_run(
    service: LiveService, db_url: str, tmp_path: Path
) -> None:
    items = tmp_path / "items.jsonl"
    items.write_text("".join(json.dumps(i) + "\n" for i in make_items(3, {"a": 1, "b": 2}, prefix="cli")))
    proxy = DropFirstResponse(service.api_port)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "dialogue_judge.cli", "submit", str(items), "--judge", JUDGE, "--api", proxy.url],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        )
    finally:
        proxy.close()
    assert done.returncode == 0, done.stderr
    assert proxy.dropped == 1 and "submission attempt 1 failed" in done.stderr and "same key" in done.stderr
    run_id = done.stdout.split()[0]
    assert stored_run_ids(db_url) == [run_id]


def wait_for_new_run(database_url: str, known: int, timeout_s: float) -> None:
    """Return as soon as the database holds more than ``known`` runs (polled every millisecond)."""
    engine = create_engine(database_url)
    deadline = time.monotonic() + timeout_s
    try:
        with engine.connect() as connection:
            while time.monotonic() < deadline:
                if int(connection.execute(text("SELECT COUNT(*) FROM runs")).scalar_one()) > known:
                    return
                connection.rollback()
                time.sleep(0.001)
    finally:
        engine.dispose()
    raise TimeoutError("no run was committed")


def test_api_killed_between_storing_and_answering_then_retried(service: LiveService, db_url: str) -> None:
    """The issue's failure: kill -9 of the API mid-POST, the client sees a connection error although the run was
    stored, and a retry used to store it again. Killed the moment the run is committed (before the 202 is out)
    and, once, early (before anything is stored): after the client's own retries there is exactly one run per
    submission, and it is the one the client was given."""
    body = heavy_body(300, "kill")
    durations = []
    for _ in range(2):  # how long an undisturbed submission takes, for the early kill
        started = time.monotonic()
        service.client().create_run(body)
        durations.append(time.monotonic() - started)
    caught_after_commit = 0
    for trial, kill_early in enumerate((False, False, False, True)):
        before = stored_run_ids(db_url)
        retries: list[str] = []
        result: dict[str, Any] = {}
        client = ApiClient(service.api_url, timeout=120, retry_for=90, on_retry=lambda a, d, p: retries.append(p))  # noqa: B023

        def submit() -> None:
            try:
                result["run"] = client.create_run(body)  # noqa: B023
            except Exception as exc:  # reported below
                result["error"] = exc  # noqa: B023

        thread = threading.Thread(target=submit)
        thread.start()
        if kill_early:
            time.sleep(0.3 * min(durations))
        else:
            wait_for_new_run(db_url, len(before), 120)
        service.stop_api(signal.SIGKILL)
        stored_at_kill = len(stored_run_ids(db_url)) - len(before)
        time.sleep(1.0)  # the client meets a dead port for a while
        service.start_api()
        thread.join(150)
        client.close()
        assert "error" not in result, (trial, result)
        new = [r for r in stored_run_ids(db_url) if r not in before]
        assert new == [result["run"]["id"]], (trial, new, result, retries)
        if kill_early:
            assert stored_at_kill == 0 and retries, (durations, retries)
        elif retries:
            assert stored_at_kill == 1  # the first attempt's run was stored, and it is the one returned
            caught_after_commit += 1
    assert caught_after_commit >= 1, "no kill landed between the commit and the answer"
    assert table_counts(db_url)["runs"] == 2 + 4
