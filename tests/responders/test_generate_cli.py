"""dialogue-judge generate: every responder kind (chat model + strategy on the simulator, a team's HTTP service, a
Python function), failures recorded per item with the reason, resumable (a rerun reuses what the output holds and
calls nothing), bad input exits 2 before anything is generated; MSC session 5 cut into one item per bot turn."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
from typer.testing import CliRunner

from dialogue_judge.cli import app
from dialogue_judge.datasets import msc_record_to_items
from judge_api.config import reset_settings_cache
from judge_simulator.process import SimulatorProcess


def item(item_id: str, question: str = "How many cats do I have?") -> dict[str, Any]:
    return {
        "id": item_id,
        "dialogue": [
            {"speaker": "user", "text": "I have two cats.", "session": 1},
            {"speaker": "bot", "text": "Nice!", "session": 1},
            {"speaker": "user", "text": question, "session": 2},
        ],
        "persona": {"user": ["I have two cats."]},
        "reference": "Two.",
        "candidates": {},
    }


def write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture
def fast_settings(settings_env: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    settings_env.setenv("DJ_MAX_ATTEMPTS", "2")
    settings_env.setenv("DJ_JUDGE_TIMEOUT", "1")
    reset_settings_cache()
    return settings_env


class TeamService(BaseHTTPRequestHandler):
    """A team's own bot: answers from the item; 'boom' is a 500, 'slow' hangs, 'bad' replies without a response."""

    seen: ClassVar[Counter[str]] = Counter()

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        TeamService.seen[body["id"]] += 1
        assert "candidates" not in body and "generation" not in body.get("meta", {})
        if body["id"] == "slow":
            time.sleep(2.5)
        if body["id"] == "boom":
            self.send_response(500)
            self.end_headers()
            self.wfile.write(b"database down")
            return
        reply = (
            {"nope": 1}
            if body["id"] == "bad"
            else {
                "response": f"service saw: {body['dialogue'][-1]['text']}",
                "memory": f"memory of {body['id']}",
            }
        )
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def team_service() -> Iterator[str]:
    TeamService.seen = Counter()
    server = ThreadingHTTPServer(("127.0.0.1", 0), TeamService)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/respond"
    server.shutdown()


@pytest.fixture
def python_bot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    module = tmp_path / "pybot" / "team_bot.py"
    module.parent.mkdir()
    module.write_text(
        "import time\n"
        "def reply(item):\n"
        "    if item['id'] == 'boom':\n"
        "        raise RuntimeError('no model loaded')\n"
        "    if item['id'] == 'slow':\n"
        "        time.sleep(2.5)\n"
        "    if item['id'] == 'bad':\n"
        "        return 42\n"
        "    return {'response': 'python saw ' + item['dialogue'][-1]['text'], 'memory': 'py memory'}\n"
    )
    monkeypatch.syspath_prepend(str(module.parent))
    return "python:team_bot:reply"


def test_generate_with_every_responder_kind_records_failures_and_resumes(
    fast_settings: pytest.MonkeyPatch, sim: SimulatorProcess, team_service: str, python_bot: str, tmp_path: Path
) -> None:
    sim.set_script(
        {
            "rules": [
                {"name": "mem", "match": "store and update a memory", "reply": "user has two cats"},
                {"name": "resp", "match": r"\[Previous Memory\] user has two cats", "reply": "You have two cats."},
            ]
        }
    )
    items = write(tmp_path / "items.jsonl", [item("ok"), item("boom"), item("slow"), item("bad")])
    out, memories = tmp_path / "candidates.jsonl", tmp_path / "memories.jsonl"
    args = [
        "generate", str(items), "-o", str(out), "--memory-out", str(memories), "--no-progress",
        "--system", f"rsum=strategy:rsum@openai-compatible:sim-chat@{sim.base_url}",
        "--system", f"team=http:{team_service}",
        "--system", f"py={python_bot}",
    ]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    rows = {row["id"]: row for row in lines(out)}
    assert list(rows) == ["ok", "boom", "slow", "bad"]  # the input's order
    assert rows["ok"]["candidates"] == {
        "rsum": "You have two cats.",
        "team": "service saw: How many cats do I have?",
        "py": "python saw How many cats do I have?",
    }
    generation = rows["ok"]["meta"]["generation"]
    assert generation["rsum"]["memory"] == "user has two cats" and generation["team"]["memory"] == "memory of ok"
    assert generation["rsum"]["status"] == "done" and generation["rsum"]["responder"].startswith("strategy:rsum@")
    # failures: recorded per item with the reason; the system is missing from that item's candidates, never empty
    errors = {
        (item_id, system): record["error"]
        for item_id, row in rows.items()
        for system, record in row["meta"]["generation"].items()
        if record["status"] == "failed"
    }
    assert set(errors) == {
        ("boom", "team"),
        ("boom", "py"),
        ("slow", "team"),
        ("slow", "py"),
        ("bad", "team"),
        ("bad", "py"),
    }
    assert (
        errors[("boom", "team")].startswith("server_error HTTP 500")
        and "(after 2 attempts)" in errors[("boom", "team")]
    )
    assert errors[("slow", "team")].startswith("timeout") and "(after 2 attempts)" in errors[("slow", "team")]
    assert (
        errors[("bad", "team")].startswith("malformed_response: ") and 'no "response" text' in errors[("bad", "team")]
    )
    assert errors[("boom", "py")] == "python_error: RuntimeError: no model loaded"
    assert errors[("slow", "py")] == "timeout: python:team_bot:reply did not answer within 1s"
    assert errors[("bad", "py")] == "malformed_response: python:team_bot:reply returned int, not the response text"
    assert TeamService.seen["boom"] == 2 and TeamService.seen["ok"] == 1  # retried as judge calls are
    for item_id in ("boom", "slow", "bad"):
        assert rows[item_id]["candidates"] == {"rsum": "You have two cats."}
    assert "failed: boom / team: server_error HTTP 500" in result.output
    assert "4 items x 3 systems: generated 6, reused 0, failed 6" in result.output
    # rsum's memory iteration of the shared first session was asked once for all four items (same request)
    assert Counter(r["rule"] for r in sim.requests(100)) == {"mem": 1, "resp": 1}
    audit = {row["id"]: row["candidates"] for row in lines(memories)}
    assert audit["ok"] == {"rsum": "user has two cats", "team": "memory of ok", "py": "py memory"}

    # rerun: everything done is reused (no call at all); the failed ones are tried again and fail again
    calls_before, seen_before = len(sim.requests(100)), sum(TeamService.seen.values())
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0, again.output
    assert "generated 0, reused 6, failed 6" in again.output
    assert len(sim.requests(100)) == calls_before
    assert sum(TeamService.seen.values()) - seen_before == 2 + 2 + 2  # boom/slow/bad, two attempts each
    assert {r["id"]: r["candidates"] for r in lines(out)} == {i: r["candidates"] for i, r in rows.items()}

    # an edited item is generated again (the cache key is item + responder + strategy version)
    write(items, [item("ok", "Do I have cats?")])
    third = CliRunner().invoke(app, [*args[:7], "--system", f"team=http:{team_service}"])
    assert third.exit_code == 0, third.output
    assert "generated 1, reused 0, failed 0" in third.output
    assert lines(out)[0]["candidates"]["team"] == "service saw: Do I have cats?"


def test_an_interrupted_output_is_completed_not_redone(
    fast_settings: pytest.MonkeyPatch, team_service: str, tmp_path: Path
) -> None:
    items = write(tmp_path / "items.jsonl", [item("a"), item("b")])
    out = tmp_path / "out.jsonl"
    args = ["generate", str(items), "-o", str(out), "--system", f"team=http:{team_service}", "--no-progress"]
    assert CliRunner().invoke(app, args).exit_code == 0
    first = lines(out)
    out.write_text(json.dumps(first[0]) + "\n" + json.dumps(first[1])[:40])  # killed while writing item b
    TeamService.seen.clear()
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0 and "generated 1, reused 1, failed 0" in result.output
    assert TeamService.seen == {"b": 1}
    assert [r["id"] for r in lines(out)] == ["a", "b"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--system", "rsum"], "write NAME=RESPONDER"),
        (["--system", "a=local:smollm2", "--system", "a=local:smollm2"], "system 'a' is named twice"),
        (["--system", "bad name!=local:smollm2"], "system name 'bad name!'"),
        (["--system", "x=strategy:nope@local:smollm2"], "unknown strategy 'nope'"),
        (["--system", "x=python:no_such_module_19:f"], "cannot import 'no_such_module_19'"),
        (["--system", "x=grpc:thing"], "unknown provider 'grpc'"),
    ],
)
def test_bad_systems_exit_2_before_anything_is_written(
    settings_env: pytest.MonkeyPatch, tmp_path: Path, extra: list[str], message: str
) -> None:
    items = write(tmp_path / "items.jsonl", [item("a")])
    out = tmp_path / "out.jsonl"
    result = CliRunner().invoke(app, ["generate", str(items), "-o", str(out), *extra])
    assert result.exit_code == 2
    assert message in result.output
    assert not out.exists()


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([item("a"), item("a")], "items[1].id: duplicate id 'a'"),
        ([{"id": "a", "dialogue": []}], "items[0].dialogue"),
        ([{"dialogue": [{"speaker": "user", "text": "x"}]}], "items[0].id"),
    ],
)
def test_bad_items_exit_2(settings_env: pytest.MonkeyPatch, tmp_path: Path, rows: list[Any], message: str) -> None:
    out = tmp_path / "out.jsonl"
    result = CliRunner().invoke(
        app, ["generate", str(write(tmp_path / "i.jsonl", rows)), "-o", str(out), "--system", "a=local:smollm2"]
    )
    assert result.exit_code == 2 and message in result.output and not out.exists()


def test_msc_session_5_becomes_one_item_per_bot_turn(shared_dir: Path) -> None:
    record = json.loads((shared_dir / "data/msc/msc_session5_test_episode0_sample.json").read_text())
    items = msc_record_to_items(record, "s5")
    turns = record["dialog"]
    assert [i["id"] for i in items] == ["s5.t1", "s5.t3", "s5.t5", "s5.t7", "s5.t9", "s5.t11"]
    for entry in items:
        index = int(entry["id"].rsplit(".t", 1)[1])
        assert entry["reference"] == turns[index]["text"].strip()
        assert entry["dialogue"][-1] == {"speaker": "user", "text": turns[index - 1]["text"].strip(), "session": 5}
        assert {t["session"] for t in entry["dialogue"]} == {1, 2, 3, 4, 5}
        assert sum(t["session"] == 5 for t in entry["dialogue"]) == index
