"""Attempts and provider calls are counted apart (issue 29): a request that never reached the provider (connection
refused, or cut before it was sent) is an attempt, not a call the provider saw or bills; one the provider received
and did not answer is both."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from judge_api.config import Settings
from judge_api.judges import parse_judge
from workers.billing import CallTally
from workers.clients import JudgeCallError, JudgeReply, JudgeRequest, OpenAIJudgeClient, _http_limits
from workers.ratelimit import LocalRateLimiter
from workers.retries import call_with_retries

REQUEST = JudgeRequest(messages=[{"role": "user", "content": "Rate this."}])


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def hang_up_server() -> Iterator[tuple[int, list[bytes]]]:
    """Reads a whole HTTP request, then closes the connection without answering (a provider that received the
    call and failed): what it received is kept."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    received: list[bytes] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                head, _, body = data.partition(b"\r\n\r\n")
                length = next(
                    (
                        int(line.split(b":")[1])
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length")
                    ),
                    0,
                )
                while len(body) < length:
                    body += conn.recv(65536)
                received.append(head)

    threading.Thread(target=serve, daemon=True).start()
    yield int(listener.getsockname()[1]), received
    listener.close()


def client_at(port: int) -> OpenAIJudgeClient:
    settings = Settings(DJ_JUDGE_TIMEOUT=5.0)
    return OpenAIJudgeClient(parse_judge(f"openai-compatible:m@http://127.0.0.1:{port}/v1"), settings)


def test_a_refused_connection_did_not_reach_the_provider() -> None:
    with pytest.raises(JudgeCallError) as caught:
        client_at(_free_port()).complete(REQUEST)
    assert caught.value.kind == "connection_error" and caught.value.retryable
    assert caught.value.reached_provider is False
    assert "ConnectError" in caught.value.message  # the transport's own error is kept for the log and the row


def test_a_request_received_and_not_answered_reached_the_provider(hang_up_server: tuple[int, list[bytes]]) -> None:
    port, received = hang_up_server
    with pytest.raises(JudgeCallError) as caught:
        client_at(port).complete(REQUEST)
    assert len(received) == 1 and received[0].startswith(b"POST /v1/chat/completions")
    assert caught.value.kind == "connection_error"
    assert caught.value.reached_provider is True


def test_the_pool_drops_idle_connections_before_common_servers_do() -> None:
    """uvicorn (the simulator, vLLM) closes an idle keep-alive connection after 5 s; the SDKs' pool kept one 5 s
    too, so a request sent on a connection idle about 5 s raced the server's close (the phantom calls after a
    Redis restart, when the workers had been idle a few seconds)."""
    assert _http_limits().keepalive_expiry < 5.0


class Scripted:
    def __init__(self, outcomes: list[JudgeCallError | JudgeReply]) -> None:
        self.outcomes = outcomes

    def complete(self, request: JudgeRequest) -> JudgeReply:
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, JudgeCallError):
            raise outcome
        return outcome


def test_attempts_count_every_try_and_provider_calls_only_those_it_saw() -> None:
    reply = JudgeReply("Score: 3", "stop", 10, 2, 1.0)
    refused = JudgeCallError("connection_error", "refused", True, reached_provider=False)
    lost = JudgeCallError("connection_error", "server disconnected", True)
    tally = CallTally()
    got = call_with_retries(
        Scripted([refused, refused, lost, reply]),
        "openai-compatible:m",
        REQUEST,
        Settings(DJ_BACKOFF_BASE=0.0, DJ_BACKOFF_MAX=0.0),
        LocalRateLimiter(),
        tally,
        sleep=lambda _: None,
    )
    assert got is reply
    assert tally.attempts == 4
    assert tally.provider_calls == 2  # the unanswered call the provider received, and the answered one
