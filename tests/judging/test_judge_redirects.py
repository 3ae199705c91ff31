"""Issue 42 review: a judge's base URL is checked against DJ_JUDGE_URL_ALLOWLIST, so the worker must not follow a
redirect the judge answers with: the OpenAI and Anthropic SDKs' httpx clients follow 3xx by default, and a 307 from
an allowed URL carried the judge request (the prompt, the provider key) to any host, loopback included, whose reply
was then read as the verdict. The SDK path is the one a worker takes behind a proxy or for a base URL with a query."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from judge_api.config import Settings
from judge_api.judges import parse_judge
from workers.clients import JudgeCallError, OpenAIJudgeClient

COMPLETION = {
    "id": "x",
    "object": "chat.completion",
    "model": "m",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "secret [[9]]"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
}


def _serve(handler: type[BaseHTTPRequestHandler]) -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def internal() -> Iterator[tuple[ThreadingHTTPServer, list[str]]]:
    hits: list[str] = []

    class Internal(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            hits.append(self.path)
            body = json.dumps(COMPLETION).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    yield from ((server, hits) for server in _serve(Internal))


def test_a_judge_answering_a_redirect_is_not_followed(internal: tuple[ThreadingHTTPServer, list[str]]) -> None:
    target, hits = internal
    location = f"http://127.0.0.1:{target.server_address[1]}/internal/admin"

    class Redirecting(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(307)
            self.send_header("Location", location)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    for allowed in _serve(Redirecting):
        base = f"http://127.0.0.1:{allowed.server_address[1]}/v1"
        settings = Settings(DJ_JUDGE_URL_ALLOWLIST=base, DJ_AUTH=True)
        client = OpenAIJudgeClient(parse_judge(f"openai-compatible:m@{base}"), settings)
        body = {"model": "m", "messages": [{"role": "user", "content": "prompt"}], "max_tokens": 5}
        with pytest.raises(JudgeCallError) as refused:
            client._sdk_post(body)
        assert "307" in str(refused.value), str(refused.value)
    assert hits == []
