"""The lean judge-call transport (workers.httppost, issue 26 service CPU): one keep-alive connection per call
thread, the SDK's headers, and the SDK path's error kinds, against a real HTTP server; and its own HTTP/1.1 reading
(framing, keep-alive, malformed answers, timeouts) against a scripted loopback server."""

from __future__ import annotations

import json
import re
import socket
import ssl
import struct
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from judge_api.config import Settings
from judge_api.judges import parse_judge
from workers.clients import JudgeCallError, JudgeRequest, OpenAIJudgeClient
from workers.httppost import JsonPoster, PostError, _tls, usable_for

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


# --- the transport itself, against a scripted loopback server (what a real server sends, byte by byte) ---------

Step = bytes | float | str  # bytes: sent; float: a pause (s); "close": close; "hang": wait for the test's end; "rst"


class Scripted:
    """A loopback HTTP/1.1 server that reads each request (head + Content-Length body) and answers it with the next
    script of ``replies`` (an OK reply once they run out), on a thread per connection. ``on_accept`` runs before
    the first request is read ("hang": never read; "rst": read a little, then reset)."""

    def __init__(self, host: str = "127.0.0.1", tls: ssl.SSLContext | None = None) -> None:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.listener = socket.socket(family, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self.listener.bind((host, 0))
        self.listener.listen(16)
        self.port = int(self.listener.getsockname()[1])
        self.tls = tls
        self.replies: list[list[Step]] = []
        self.on_accept: str | None = None
        self.requests: list[tuple[int, bytes, bytes]] = []  # (connection number, head, body)
        self.connections = 0
        self.done = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn, self.connections), daemon=True).start()

    def _serve(self, conn: socket.socket, number: int) -> None:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            if self.tls is not None:
                conn = self.tls.wrap_socket(conn, server_side=True)
            if self.on_accept == "hang":
                self.done.wait()
                return
            if self.on_accept == "rst":
                conn.recv(1024)
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                return
            buf = b""
            while True:
                while b"\r\n\r\n" not in buf:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    buf += chunk
                head, _, buf = buf.partition(b"\r\n\r\n")
                length = int(re.search(rb"(?i)\r\ncontent-length: *(\d+)", head).group(1))  # type: ignore[union-attr]
                while len(buf) < length:
                    buf += conn.recv(65536)
                self.requests.append((number, head, buf[:length]))
                buf = buf[length:]
                for step in self.replies.pop(0) if self.replies else [ok(b'{"n": 1}')]:
                    if isinstance(step, bytes):
                        conn.sendall(step)
                    elif isinstance(step, float):
                        time.sleep(step)
                    elif step == "hang":
                        self.done.wait()
                        return
                    else:
                        return
        except OSError:
            pass
        finally:
            conn.close()

    def url(self, host: str = "127.0.0.1") -> str:
        scheme = "https" if self.tls is not None else "http"
        return f"{scheme}://{host}:{self.port}/v1"

    def close(self) -> None:
        self.done.set()
        self.listener.close()


def ok(body: bytes, *headers: str) -> bytes:
    head = "".join(f"{h}\r\n" for h in headers)
    return (
        f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n{head}Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )


def pieces(data: bytes, size: int, pause: float = 0.002) -> list[Step]:
    """``data`` sent ``size`` bytes at a time with a pause between, so the client receives it in many recv()s."""
    steps: list[Step] = []
    for i in range(0, len(data), size):
        steps += [data[i : i + size], pause]
    return steps


@pytest.fixture
def scripted() -> Iterator[Scripted]:
    srv = Scripted()
    yield srv
    srv.close()


HEADERS = {"Authorization": "Bearer sk-test", "Content-Type": "application/json", "User-Agent": "OpenAI/Python 1.0"}


def poster(srv: Scripted, timeout: float = 5.0, host: str = "127.0.0.1") -> JsonPoster:
    return JsonPoster(srv.url(host), HEADERS, timeout)


CHUNKED = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"7;name=value\r\n" + b'{"a": "' + b"\r\n" + b"1A\r\n" + b"abcdefghijklmnopqrstuvwxyz" + b"\r\n"
    b'2;x="q"\r\n' + b'"}' + b"\r\n" + b"0\r\nX-Trailer: yes\r\nX-Other: 1\r\n\r\n"
)
CHUNKED_BODY = b'{"a": "abcdefghijklmnopqrstuvwxyz"}'
LONG = b'{"text": "' + b"x" * 3000 + b'"}'

# (script of the first answer, its status, body, headers it has, whether the next call reuses the connection)
ANSWERS: dict[str, tuple[list[Step], int, bytes, dict[str, str], bool]] = {
    "content-length": ([ok(b'{"n": 1}')], 200, b'{"n": 1}', {"content-type": "application/json"}, True),
    "content-length split over many recv()s": (
        [ok(LONG)[: -len(LONG)], *pieces(LONG, 97)],
        200,
        LONG,
        {"content-length": str(len(LONG))},
        True,
    ),
    "head arriving in pieces": (
        pieces(ok(b'{"n": 2}', "X-Request-Id: r1"), 5),
        200,
        b'{"n": 2}',
        {"x-request-id": "r1"},
        True,
    ),
    "head split at its blank line": (
        [b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r", 0.02, b"\n{}"],
        200,
        b"{}",
        {"content-length": "2"},
        True,
    ),
    "chunked: chunks, extensions, trailers": ([CHUNKED], 200, CHUNKED_BODY, {"transfer-encoding": "chunked"}, True),
    "chunked, split anywhere": (pieces(CHUNKED, 3), 200, CHUNKED_BODY, {}, True),
    "chunked, 'gzip, chunked' is still chunked framing": (
        [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: identity, chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n"],
        200,
        b"{}",
        {},
        True,
    ),
    "chunked wins over Content-Length": (
        [b"HTTP/1.1 200 OK\r\nContent-Length: 99\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n"],
        200,
        b"{}",
        {},
        True,
    ),
    "interim 100 Continue skipped": (
        [b"HTTP/1.1 100 Continue\r\n\r\n", 0.01, b"HTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n", ok(b"{}")],
        200,
        b"{}",
        {},
        True,
    ),
    "204 has no body": ([b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n"], 204, b"", {}, True),
    "304 has no body even with a length": (
        [b"HTTP/1.1 304 Not Modified\r\nContent-Length: 50\r\n\r\n"],
        304,
        b"",
        {},
        True,
    ),
    "an error status is an answer": (
        [b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 7\r\nContent-Length: 9\r\n\r\nslow down"],
        429,
        b"slow down",
        {"retry-after": "7"},
        True,
    ),
    "header names lower-cased, values trimmed, reason optional": (
        [b"HTTP/1.1 503\r\nRETRY-AFTER:   3  \r\nContent-Length: 0\r\n\r\n"],
        503,
        b"",
        {"retry-after": "3"},
        True,
    ),
    "bare LF line ends": ([b"HTTP/1.1 200 OK\nContent-Length: 2\n\n{}"], 200, b"{}", {"content-length": "2"}, True),
    "Connection: close": ([ok(b"{}", "Connection: close")], 200, b"{}", {"connection": "close"}, False),
    "HTTP/1.0 closes": ([b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\n{}"], 200, b"{}", {}, False),
    "HTTP/1.0 keep-alive": (
        [b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\n{}"],
        200,
        b"{}",
        {},
        True,
    ),
    "body read until close": ([b"HTTP/1.1 200 OK\r\n\r\n", *pieces(LONG, 500), "close"], 200, LONG, {}, False),
    "bytes past the answer end the connection": (
        [ok(b"{}") + b"HTTP/1.1 500 Stale\r\nContent-Length: 0\r\n\r\n"],
        200,
        b"{}",
        {},
        False,
    ),
    "bytes sent after the answer end the connection": (
        [ok(b"{}"), 0.05, b"HTTP/1.1 500 Stale\r\nContent-Length: 0\r\n\r\n"],
        200,
        b"{}",
        {},
        False,
    ),
}


@pytest.mark.parametrize("case", ANSWERS)
def test_answers_are_read_whole_and_the_connection_kept_only_when_it_is_in_step(scripted: Scripted, case: str) -> None:
    script, status, body, headers, reused = ANSWERS[case]
    scripted.replies = [script, [ok(b'{"second": true}')]]
    post = poster(scripted)
    answer = post.post("/chat/completions", {"n": 1})
    assert (answer.status, answer.body) == (status, body)
    assert headers.items() <= answer.headers.items()
    time.sleep(0.1)  # whatever the server does after its answer (close, stray bytes) has happened
    second = post.post("/chat/completions", {"n": 2})
    assert (second.status, second.json()) == (200, {"second": True})  # never the first answer's leftovers
    assert [r[0] for r in scripted.requests] == [1, 1 if reused else 2]
    assert [json.loads(r[2]) for r in scripted.requests] == [{"n": 1}, {"n": 2}]


def test_one_connection_carries_sequential_requests_with_the_headers_built_once(scripted: Scripted) -> None:
    post = poster(scripted)
    for i in range(5):
        assert post.post("/chat/completions", {"i": i, "text": "☃"}).json() == {"n": 1}
    assert scripted.connections == 1 and [r[0] for r in scripted.requests] == [1] * 5
    head, body = scripted.requests[0][1], scripted.requests[0][2]
    lines = head.decode("latin-1").split("\r\n")
    assert lines[0] == "POST /v1/chat/completions HTTP/1.1"
    fields = dict(line.split(": ", 1) for line in lines[1:])
    assert fields["Host"] == f"127.0.0.1:{scripted.port}"
    assert fields["Authorization"] == "Bearer sk-test" and fields["Connection"] == "keep-alive"
    assert fields["Accept-Encoding"] == "identity" and fields["Content-Length"] == str(len(body))
    assert json.loads(body) == {"i": 0, "text": "☃"}


def test_a_connection_the_peer_closed_while_idle_is_replaced(scripted: Scripted) -> None:
    scripted.replies = [[ok(b"{}"), "close"]]  # no Connection: close: the server just hangs up afterwards
    post = poster(scripted)
    post.post("/chat/completions", {})
    time.sleep(0.1)
    assert post.post("/chat/completions", {}).status == 200
    assert [r[0] for r in scripted.requests] == [1, 2]


# (script of the answer, error kind, phase, sent) - "hang" scripts must fail at once when malformed, not time out
FAILURES: dict[str, tuple[list[Step], str, str, bool]] = {
    "no answer: read timeout": (["hang"], "timeout", "ReadTimeout", True),
    "half a body then silence": ([ok(b'{"n": 1}')[:-3], "hang"], "timeout", "ReadTimeout", True),
    "closed without an answer": (["close"], "connection_error", "ReadError (RemoteDisconnected", True),
    "closed mid-body": ([ok(b'{"n": 1}')[:-3], "close"], "connection_error", "ReadError (IncompleteRead", True),
    "closed mid-chunk": ([CHUNKED[:-30], "close"], "connection_error", "ReadError (IncompleteRead", True),
    "malformed status line": ([b"HTTP/1.1 OK\r\n", "hang"], "connection_error", "ReadError (BadStatusLine", True),
    "not HTTP at all": ([b"SSH-2.0-OpenSSH_9.6\r\n", "hang"], "connection_error", "ReadError (BadStatusLine", True),
    "not HTTP/1": ([b"HTTP/2 200\r\n\r\n"], "connection_error", "ReadError (UnknownProtocol", True),
    "malformed header": (
        [b"HTTP/1.1 200 OK\r\nno colon here\r\n", "hang"],
        "connection_error",
        "ReadError (HTTPException",
        True,
    ),
    "bad Content-Length": (
        [b"HTTP/1.1 200 OK\r\nContent-Length: 12abc\r\n\r\n", "hang"],
        "connection_error",
        "ReadError (HTTPException",
        True,
    ),
    "conflicting Content-Lengths": (
        [b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}", "hang"],
        "connection_error",
        "ReadError (HTTPException",
        True,
    ),
    "bad chunk size": (
        [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "hang"],
        "connection_error",
        "ReadError (HTTPException",
        True,
    ),
    "chunk longer than its size": (
        [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}}\r\n0\r\n\r\n", "hang"],
        "connection_error",
        "ReadError (HTTPException",
        True,
    ),
}


@pytest.mark.parametrize("case", FAILURES)
def test_failures_map_to_kind_phase_and_sent(scripted: Scripted, case: str) -> None:
    script, kind, phase, sent = FAILURES[case]
    scripted.replies = [script]
    post = poster(scripted, timeout=0.5 if kind == "timeout" else 10.0)
    started = time.monotonic()
    with pytest.raises(PostError) as caught:
        post.post("/chat/completions", {"n": 1})
    assert time.monotonic() - started < 5.0  # a malformed answer is seen at once, not waited out
    assert (caught.value.kind, caught.value.sent) == (kind, sent)
    assert str(caught.value).startswith(phase), str(caught.value)
    assert post.post("/chat/completions", {"n": 2}).status == 200  # a fresh connection afterwards
    assert [r[0] for r in scripted.requests] == [1, 2]


def test_a_refused_connection_is_a_connect_error_never_sent() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(PostError) as caught:
        JsonPoster(f"http://127.0.0.1:{port}/v1", HEADERS, 2.0).post("/chat/completions", {})
    assert (caught.value.kind, caught.value.sent) == ("connection_error", False)
    assert str(caught.value).startswith("ConnectError (ConnectionRefusedError")


def test_a_full_accept_queue_is_a_connect_timeout_never_sent() -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    queued = []
    try:
        for _ in range(8):  # fill the accept queue: further SYNs are dropped, a connect waits
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", port))
            queued.append(s)
        time.sleep(0.1)
        with pytest.raises(PostError) as caught:
            JsonPoster(f"http://127.0.0.1:{port}/v1", HEADERS, 0.3).post("/chat/completions", {})
    finally:
        for s in queued:
            s.close()
        listener.close()
    assert (caught.value.kind, caught.value.sent) == ("timeout", False)
    assert str(caught.value).startswith("ConnectTimeout")


@pytest.mark.parametrize(
    ("on_accept", "kind", "phase"), [("hang", "timeout", "WriteTimeout"), ("rst", "connection_error", "WriteError")]
)
def test_a_request_not_completely_sent_is_not_a_provider_call(
    scripted: Scripted, on_accept: str, kind: str, phase: str
) -> None:
    scripted.on_accept = on_accept  # the server never reads it, or resets the connection after a little
    with pytest.raises(PostError) as caught:
        poster(scripted, timeout=0.3).post("/chat/completions", {"text": "x" * 32_000_000})
    assert (caught.value.kind, caught.value.sent) == (kind, False)
    assert str(caught.value).startswith(phase), str(caught.value)


def test_a_path_prefix_and_an_ipv6_literal_host() -> None:
    try:
        srv = Scripted("::1")
    except OSError:
        pytest.skip("no IPv6 loopback")
    try:
        post = JsonPoster(f"http://[::1]:{srv.port}/api/v1/", HEADERS, 5.0)
        assert post.post("/chat/completions", {}).json() == {"n": 1}
        lines = srv.requests[0][1].decode().split("\r\n")
        assert lines[0] == "POST /api/v1/chat/completions HTTP/1.1"
        assert f"Host: [::1]:{srv.port}" in lines
    finally:
        srv.close()


def test_tls_verifies_the_server_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    x509 = pytest.importorskip("cryptography.x509")
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(x509.oid.NameOID.COMMON_NAME, "localhost")])
    now = datetime.now(UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(hours=1))
        .not_valid_after(now + timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    (tmp_path / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "key.pem").write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    server_tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_tls.load_cert_chain(tmp_path / "cert.pem", tmp_path / "key.pem")
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "cert.pem"))
    _tls.cache_clear()
    srv = Scripted(tls=server_tls)
    try:
        post = poster(srv, host="localhost")
        assert [post.post("/chat/completions", {}).json() for _ in range(2)] == [{"n": 1}] * 2
        assert srv.connections == 1
        with pytest.raises(PostError) as caught:  # the certificate names localhost, not 127.0.0.1
            poster(srv).post("/chat/completions", {})
        assert (caught.value.kind, caught.value.sent) == ("connection_error", False)
        assert str(caught.value).startswith("ConnectError (SSLCertVerificationError")
    finally:
        srv.close()
        _tls.cache_clear()
