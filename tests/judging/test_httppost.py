"""The lean judge-call transport (workers.httppost, issue 26 service CPU): one keep-alive connection per call
thread, the SDK's headers, and the SDK path's error kinds, against a real HTTP server."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from judge_api.config import Settings
from judge_api.judges import parse_judge
from workers.clients import JudgeCallError, JudgeRequest, OpenAIJudgeClient
from workers.httppost import usable_for

REPLY = {
    "choices": [{"message": {"content": "Fine.\n\nRating: [[7]]"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 11, "completion_tokens": 5, "prompt_tokens_details": {"cached_tokens": 0}},
}


class Server(ThreadingHTTPServer):
    daemon_threads = True
    mode = "ok"
    connections = 0
    requests: list[dict[str, Any]]

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that timed out and hung up: nothing to report


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Server

    def setup(self) -> None:
        super().setup()
        self.server.connections += 1

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append({"path": self.path, "headers": dict(self.headers), "body": body})
        mode = self.server.mode
        if mode == "hang":
            time.sleep(2.0)
        status, payload, extra = 200, json.dumps(REPLY).encode(), {}
        if mode == "429":
            status, payload, extra = 429, b'{"error": {"message": "slow down"}}', {"Retry-After": "7"}
        elif mode == "503":
            status, payload = 503, b"upstream gone"
        elif mode == "400":
            status, payload = 400, b'{"error": {"message": "bad model"}}'
        elif mode == "garbage":
            payload = b"<html>not json</html>"
        self.send_response(status)
        for name, value in extra.items():
            self.send_header(name, value)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        if mode == "close":
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(payload)


@pytest.fixture
def server() -> Iterator[Server]:
    srv = Server(("127.0.0.1", 0), Handler)
    srv.requests = []
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def client(server: Server, timeout: float = 5.0) -> OpenAIJudgeClient:
    url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    settings = Settings().model_copy(update={"judge_timeout_s": timeout})
    return OpenAIJudgeClient(parse_judge(f"openai-compatible:m@{url}"), settings)


def ask(judge: OpenAIJudgeClient) -> Any:
    return judge.complete(JudgeRequest([{"role": "user", "content": "Rate this. ☃"}]))


def test_calls_from_one_thread_share_one_connection_with_the_sdk_headers(server: Server) -> None:
    judge = client(server)
    assert judge._poster is not None
    replies = [ask(judge) for _ in range(5)]
    assert [r.text for r in replies] == ["Fine.\n\nRating: [[7]]"] * 5
    assert replies[0].input_tokens == 11 and replies[0].output_tokens == 5
    assert server.connections == 1
    first = server.requests[0]
    assert first["path"] == "/v1/chat/completions"
    assert first["headers"]["Authorization"].startswith("Bearer ")
    assert first["headers"]["User-Agent"].startswith("OpenAI/Python")
    assert first["body"]["messages"][0]["content"] == "Rate this. ☃"


def test_a_connection_the_server_closed_is_replaced_not_failed(server: Server) -> None:
    judge = client(server)
    server.mode = "close"
    ask(judge)
    server.mode = "ok"
    time.sleep(0.1)
    assert ask(judge).text.endswith("[[7]]")
    ask(judge)
    assert server.connections == 2


def test_each_thread_has_its_own_connection(server: Server) -> None:
    judge = client(server)
    threads = [threading.Thread(target=lambda: [ask(judge) for _ in range(3)]) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(server.requests) == 12 and server.connections == 4


@pytest.mark.parametrize(
    ("mode", "kind", "retryable", "status", "retry_after"),
    [
        ("429", "rate_limited", True, 429, 7.0),
        ("503", "server_error", True, 503, None),
        ("400", "request_rejected", False, 400, None),
        ("garbage", "malformed_response", True, None, None),
    ],
)
def test_error_answers_keep_the_sdk_paths_kinds(
    server: Server, mode: str, kind: str, retryable: bool, status: int | None, retry_after: float | None
) -> None:
    judge = client(server)
    server.mode = mode
    with pytest.raises(JudgeCallError) as caught:
        ask(judge)
    assert (caught.value.kind, caught.value.retryable, caught.value.status_code) == (kind, retryable, status)
    assert caught.value.retry_after_s == retry_after
    if mode == "429":
        assert "slow down" in caught.value.message
    server.mode = "ok"
    assert ask(judge).text.endswith("[[7]]")  # the connection is still usable (or replaced)


def test_no_answer_within_the_timeout_is_a_retryable_timeout(server: Server) -> None:
    judge = client(server, timeout=0.5)
    server.mode = "hang"
    with pytest.raises(JudgeCallError) as caught:
        ask(judge)
    assert caught.value.kind == "timeout" and caught.value.retryable
    assert caught.value.reached_provider  # sent, then no answer: the provider may bill it


def test_a_refused_connection_is_a_retryable_connection_error() -> None:
    settings = Settings()
    judge = OpenAIJudgeClient(parse_judge("openai-compatible:m@http://127.0.0.1:9/v1"), settings)
    with pytest.raises(JudgeCallError) as caught:
        ask(judge)
    assert caught.value.kind == "connection_error" and caught.value.retryable
    assert not caught.value.reached_provider  # never sent: an attempt, not a provider call


def test_a_connection_idle_past_the_expiry_is_not_reused(server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("workers.httppost.IDLE_EXPIRY_S", 0.2)
    judge = client(server)
    ask(judge)
    ask(judge)
    assert server.connections == 1
    time.sleep(0.4)
    ask(judge)
    assert server.connections == 2


def test_a_proxy_in_the_environment_keeps_the_sdk_transport(monkeypatch: pytest.MonkeyPatch) -> None:
    assert usable_for("https://api.openai.com/v1") and usable_for("http://127.0.0.1:8300/v1")
    assert not usable_for("https://example.test/v1?api-version=1")
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.test:3128")
    assert not usable_for("https://api.openai.com/v1") and usable_for("http://127.0.0.1:8300/v1")
