"""POST /v1/runs with ``systems``: the workers generate the responses, then judge them. A live API and Celery worker,
the simulator as chat model and judge: one memory strategy (rsum, its memory iterated on the simulator) and one
http responder that cannot be reached. The good system's responses are judged; the failing one is recorded with its
reason in the run status and the items, and has no judgment; the memory is stored with the item."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from dialogue_judge.testing import LiveService, free_port
from judge_simulator.process import SimulatorProcess

pytestmark = [pytest.mark.e2e]
ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "dialogue_judge.cli"]
MEMORY = "MEM<the user has two cats>"


def item(i: int, candidates: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "id": f"i{i}",
        "dialogue": [
            {"speaker": "user", "text": "I have two cats.", "session": 1},
            {"speaker": "bot", "text": "Nice!", "session": 1},
            {"speaker": "user", "text": "How many cats do I have?", "session": 2},
        ],
        "persona": {"user": ["I have two cats."]},
        "reference": "You have two cats.",
        **({"candidates": candidates} if candidates else {}),
    }


def test_a_run_with_systems_generates_then_judges_and_records_the_failing_system(
    sim: SimulatorProcess, redis_url: str, sqlite_url: str, tmp_path: Path
) -> None:
    sim.set_script(
        {
            "rules": [
                {"name": "judge", "match": r"\[\[\s*score\s*\]\]", "kind": "single"},
                {
                    "name": "memory",
                    "match": r"\[Previous Memory\] none \[Session Context\] User: I have two cats",
                    "reply": MEMORY,
                },
                {
                    "name": "answer",
                    "match": r"\[Previous Memory\] MEM<the user has two cats> \[Current Context\]",
                    "reply": "You have two cats. <<q=80>>",
                },
            ]
        }
    )
    dead = f"http://127.0.0.1:{free_port()}/respond"  # nothing listens: every call is a connection error
    items = tmp_path / "items.jsonl"
    rows = [item(0, {"given": "Two cats? <<q=30>>"}), item(1), item(2)]
    items.write_text("".join(json.dumps(r) + "\n" for r in rows))
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "DJ_HOME": str(tmp_path / "home")}
    with LiveService(redis_url, sqlite_url, tmp_path / "svc", worker_concurrency=2) as service:
        submitted = subprocess.run(
            [
                *CLI,
                "submit",
                str(items),
                "--system",
                f"rsum=strategy:rsum@openai-compatible:sim-chat@{sim.base_url}",
                "--system",
                f"ours=http:{dead}",
                "--judge",
                f"openai-compatible:sim-judge@{sim.base_url}",
                "--rubric",
                "rsum-single",
                "--aspect",
                "consistency",
                "--metric",
                "f1",
                "--api",
                service.api_url,
                "--wait",
                "--format",
                "json",
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert submitted.returncode == 0, submitted.stderr + submitted.stdout
        assert "3 items  6 responses to generate" in submitted.stderr  # a notice: stdout is the report alone
        assert "generation failed: i1 / ours: connection_error" in submitted.stderr
        report = json.loads(submitted.stdout)
        run_id = report["run"]["id"]
        client = service.client()
        summary = client.run(run_id)
        judgments = client.get(f"/v1/runs/{run_id}/judgments", limit=500)["items"]
        stored = {i["id"]: i for i in client.get(f"/v1/runs/{run_id}/items")["items"]}

    assert summary["status"] == "done"
    generation = summary["generation"]
    assert (generation["total"], generation["generated"], generation["failed"], generation["pending"]) == (6, 3, 3, 0)
    assert generation["items_released"] == 3
    assert sorted(f["item_id"] for f in generation["failures"]) == ["i0", "i1", "i2"]
    assert all(f["system"] == "ours" and f["error"].startswith("connection_error") for f in generation["failures"])
    # 3 rsum + 1 given responses, each judged once for consistency and once by F1; nothing for 'ours'
    assert summary["n_judgments"] == len(judgments) == 8
    assert {j["system_a"] for j in judgments} == {"rsum", "given"}
    assert all(j["status"] == "done" for j in judgments)
    for stored_item in stored.values():
        records = stored_item["meta"]["generation"]
        assert stored_item["candidates"]["rsum"] == "You have two cats. <<q=80>>"
        assert "ours" not in stored_item["candidates"]  # never an empty response
        assert records["rsum"]["status"] == "done" and records["rsum"]["memory"] == MEMORY
        # one memory iteration (session 1) + the response; identical requests of other items come from the cache
        assert records["rsum"]["calls"] + records["rsum"]["cached_calls"] == 2
        assert records["ours"]["status"] == "failed" and "connection_error" in records["ours"]["error"]
        assert records["ours"]["responder"] == f"http:{dead}"
    assert stored["i0"]["candidates"]["given"] == "Two cats? <<q=30>>"
    scores = {row["system"]: (row["n"], row["mean"]) for row in report["scores"] if row["aspect"] == "consistency"}
    assert scores == {"rsum": (3, 80.0), "given": (1, 30.0)}  # the generated text is what reached the judge


class SlowBot(BaseHTTPRequestHandler):
    """A team's bot whose first answer never comes (the worker asking it is killed meanwhile); later ones are quick."""

    calls: ClassVar[Counter[str]] = Counter()

    def do_POST(self) -> None:
        item_id = json.loads(self.rfile.read(int(self.headers["Content-Length"])))["id"]
        SlowBot.calls[item_id] += 1
        if SlowBot.calls[item_id] == 1:
            time.sleep(20)
        body = json.dumps({"response": f"Rex, of course. <<q=70>> ({item_id})", "memory": "dog: Rex"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: Any) -> None:
        pass


def test_a_generation_survives_a_worker_kill_and_is_not_generated_again(
    sim: SimulatorProcess, redis_url: str, sqlite_url: str, tmp_path: Path
) -> None:
    sim.set_script({"rules": [{"name": "judge", "match": r"\[\[\s*score\s*\]\]", "kind": "single"}]})
    SlowBot.calls.clear()
    server = ThreadingHTTPServer(("127.0.0.1", 0), SlowBot)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with LiveService(redis_url, sqlite_url, tmp_path / "svc", worker_concurrency=2) as service:
            body = {
                "items": [item(0)],
                "systems": {"ours": f"http:http://127.0.0.1:{server.server_port}/respond"},
                "rubrics": ["rsum-single"],
                "judges": [f"openai-compatible:sim-judge@{sim.base_url}"],
                "aspects": ["consistency"],
                "metrics": [],
            }
            run_id = service.client().create_run(body)["id"]
            deadline = time.monotonic() + 30
            while SlowBot.calls["i0"] == 0 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert SlowBot.calls["i0"] == 1  # the worker is asking the bot now
            service.kill_worker(service.workers[0])  # SIGKILL mid-generation: the claim is left behind
            service.start_worker()
            summary = service.wait_run(run_id, timeout_s=90)
            time.sleep(3)  # sweeps after the generation was stored must not send it again
            judgments = service.client().get(f"/v1/runs/{run_id}/judgments")["items"]
            stored = service.client().get(f"/v1/runs/{run_id}/items")["items"][0]
    finally:
        server.shutdown()
    assert SlowBot.calls["i0"] == 2  # the killed attempt and the one that was stored; never a third
    assert summary["generation"]["generated"] == 1 and summary["generation"]["pending"] == 0
    assert stored["candidates"] == {"ours": "Rex, of course. <<q=70>> (i0)"}
    assert stored["meta"]["generation"]["ours"]["memory"] == "dog: Rex"
    assert [(j["system_a"], j["status"], j["score"]) for j in judgments] == [("ours", "done", 70.0)]
