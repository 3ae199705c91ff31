"""Issue 42, findings 2 and 3: the workers re-check a system under test and a judge at the point of use, whatever
path stored its row. Rows of a bundle stored with no import gate at all (``retention.import_run`` called directly,
as if the gate were missing) and taken by the real worker code:

* a ``python:subprocess:run`` generation with auth on never runs (its command would create a file);
* an ``http:`` responder pointing at a loopback listener outside DJ_JUDGE_URL_ALLOWLIST: the listener receives
  nothing, and nothing of what it would answer reaches the run's export;
* a judgment whose openai-compatible judge URL is not allow-listed is never asked (nor its template rendered).

Each is recorded as failed with the reason, once (never pending again, never retried)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from judge_api.config import get_settings
from judge_api.db import session_factory, session_scope
from judge_api.models import Generation, Judgment
from judge_api.repository import generations, retention
from workers.ratelimit import LocalRateLimiter
from workers.responders.stored import generate_stored
from workers.runtime import build_engine

from .conftest import Api, ApiFactory, run_body

ALLOWED = "http://127.0.0.1:9/v1"  # the api fixtures' allowlist (a closed port)
SECRET = "db_password=hunter2"


class Listener:
    """A loopback HTTP server that records every request and answers like an internal admin endpoint."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, bytes]] = []
        listener = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                listener.requests.append((self.path, body))
                reply = json.dumps({"response": SECRET, "memory": SECRET}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def listener() -> Iterator[Listener]:
    served = Listener()
    yield served
    served.close()


@pytest.fixture
def secured_api(api_factory: ApiFactory) -> Api:
    api = api_factory(auth=True)
    api.create_key("attacker", ["submit", "read"], "attacker")
    return api


def exported_lines(api: Api, body: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    """Submit a run the API accepts, export it and delete it: the bundle an attacker then rewrites."""
    run_id = api.submit("attacker", body)["id"]
    exported = api.client.get(f"/v1/runs/{run_id}/export", headers=api.as_key("attacker"))
    assert exported.status_code == 200, exported.text
    assert api.client.delete(f"/v1/runs/{run_id}", headers=api.as_key("attacker")).status_code == 200
    return run_id, [json.loads(line) for line in exported.text.splitlines()]


def store_without_gate(records: list[dict[str, Any]]) -> str:
    """Store the rows as the bundle gives them, as if there were no import gate; the run id the import issued."""
    with session_scope() as session:
        bundle = retention.parse_bundle(json.dumps(r) for r in records)
        return str(retention.import_run(session, bundle, "attacker", None)["run_id"])


def generate_pending(run_id: str) -> list[str]:
    with session_scope() as session:
        ids = generations.pending_generation_ids(session, run_id)
    limiter = LocalRateLimiter()
    return [generate_stored(i, get_settings(), session_factory(), limiter) for i in ids]


def generation_rows(run_id: str) -> list[Generation]:
    with session_scope() as session:
        rows = list(session.scalars(select(Generation).where(Generation.run_id == run_id)))
        session.expunge_all()
    return rows


def systems_run(responder: str) -> dict[str, Any]:
    body = run_body(n_items=1, systems={"mine": responder})
    for entry in body["items"]:
        entry.pop("candidates")
    return body


def test_an_imported_python_responder_never_runs_with_auth_on(secured_api: Api, tmp_path: Path) -> None:
    target = tmp_path / "owned"
    _, records = exported_lines(secured_api, systems_run(f"http:{ALLOWED}/respond"))
    for record in records:
        if record["record"] == "generation":
            record.update(responder="python:subprocess:run", status="pending")
        if record["record"] == "item":  # subprocess.run(item) runs the item's keys: sh -c "touch FILE" meta
            record["payload"] = {"sh": 1, "-c": 1, f"touch {target}": 1}
    run_id = store_without_gate(records)
    assert generate_pending(run_id) == ["failed"]
    assert not target.exists()
    [row] = generation_rows(run_id)
    assert row.status == "failed" and "refused by the worker" in (row.error or "")
    assert "python responders run in-process on the workers and are refused when auth is on" in (row.error or "")
    assert generate_pending(run_id) == []  # settled: never generated again


def test_an_imported_http_responder_to_loopback_is_never_called(secured_api: Api, listener: Listener) -> None:
    url = f"http://127.0.0.1:{listener.port}/internal/admin"
    _, records = exported_lines(secured_api, systems_run(f"http:{ALLOWED}/respond"))
    for record in records:
        if record["record"] == "generation":
            record.update(responder=f"http:{url}", status="pending")
    run_id = store_without_gate(records)
    assert generate_pending(run_id) == ["failed"]
    assert listener.requests == []
    [row] = generation_rows(run_id)
    assert row.status == "failed" and f"URL {url!r} is not in DJ_JUDGE_URL_ALLOWLIST" in (row.error or "")
    exported = secured_api.client.get(f"/v1/runs/{run_id}/export", headers=secured_api.as_key("attacker"))
    assert exported.status_code == 200 and "hunter2" not in exported.text


@pytest.mark.parametrize(
    ("judge", "reason"),
    [
        ("openai-compatible:m@http://127.0.0.1:{port}/v1", "judge refused by the worker: base URL"),
        ("openai-compatible:m@http://127.0.0.1:9/v1/../../{port}", "judge refused by the worker: base URL"),
        ("no-such-provider:m", "judge 'no-such-provider:m': unknown provider"),  # not an "internal error"
    ],
    ids=["unlisted URL", "dot segments out of the listed prefix", "not a judge"],
)
def test_an_imported_judgment_with_a_refused_judge_is_never_asked(
    secured_api: Api, listener: Listener, judge: str, reason: str
) -> None:
    judge = judge.format(port=listener.port)
    _, records = exported_lines(secured_api, run_body(n_items=1))
    for record in records:
        if record["record"] == "judgment":
            record.update(judge=judge, status="pending")
    run_id = store_without_gate(records)
    engine = build_engine(standalone=True)
    with session_scope() as session:
        ids = list(session.scalars(select(Judgment.id).where(Judgment.run_id == run_id)))
    assert ids and all(engine.judge(i) == "failed" for i in ids)
    assert listener.requests == []
    with session_scope() as session:
        rows = list(session.scalars(select(Judgment).where(Judgment.run_id == run_id)))
        outcomes = [(r.status, r.error or "", r.score) for r in rows]
    assert outcomes and all(status == "failed" and score is None for status, _, score in outcomes)
    assert all(error.startswith(reason) for _, error, _ in outcomes), outcomes
