"""``client.monitor(id).log(...)``: the caller never waits on the network, batches are sent in the background,
a 5xx or a broken connection is retried (ids make it safe), a 4xx is not, flush/close wait for what was logged."""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest

from dialogue_judge.client import ApiClient
from dialogue_judge.monitor_log import MonitorLogger


def entry(i: int) -> dict[str, object]:
    return {"id": f"r{i}", "dialogue": [], "response": f"answer {i}", "system": "bot", "version": "v1"}


class Server:
    """A stand-in API: records each batch, answers after ``delay``, fails the first ``failures`` requests."""

    def __init__(self, delay: float = 0.0, failures: int = 0, status: int = 500) -> None:
        self.delay = delay
        self.failures = failures
        self.status = status
        self.batches: list[list[dict[str, object]]] = []
        self.lock = threading.Lock()

    def __call__(self, request: httpx.Request) -> httpx.Response:
        time.sleep(self.delay)
        with self.lock:
            if self.failures > 0:
                self.failures -= 1
                return httpx.Response(self.status, json={"detail": "boom"})
            batch = json.loads(request.content)
            self.batches.append(batch)
        assert request.url.path == "/v1/monitors/mon_1/responses"
        assert request.headers["authorization"] == "Bearer k"
        return httpx.Response(202, json={"accepted": len(batch), "sampled": 1, "duplicates": 0, "paused": False})


def logger_for(server: Server, **options: object) -> MonitorLogger:
    client = ApiClient("http://api.test", api_key="k")
    return client.monitor("mon_1", transport=httpx.MockTransport(server), **options)


def test_log_never_waits_on_a_slow_server_and_flush_sends_everything() -> None:
    server = Server(delay=0.5)
    logger = logger_for(server, batch_size=10, flush_interval=0.05)
    started = time.monotonic()
    for i in range(35):
        logger.log(entry(i))
    assert time.monotonic() - started < 0.2  # 35 logs, while every request takes 0.5 s
    assert logger.flush(timeout=30)
    sent = [r["id"] for batch in server.batches for r in batch]
    assert sent == [f"r{i}" for i in range(35)]
    assert all(len(b) <= 10 for b in server.batches)
    assert all("timestamp" in r for b in server.batches for r in b)
    assert logger.stats.accepted == 35
    logger.close()


def test_a_5xx_is_retried_until_sent_and_a_4xx_is_not() -> None:
    server = Server(failures=2, status=503)
    logger = logger_for(server, batch_size=5, flush_interval=0.01, backoff_max=0.05)
    logger.log(id="a", response="x", system="bot", version="v1")
    assert logger.flush(timeout=10)
    assert [r["id"] for b in server.batches for r in b] == ["a"]
    assert logger.stats.retries == 2
    logger.close()

    refusing = Server(failures=1, status=422)
    logger = logger_for(refusing, batch_size=5, flush_interval=0.01)
    logger.log(entry(1))
    assert logger.flush(timeout=10)
    assert refusing.batches == []
    assert logger.stats.rejected == 1
    assert logger.last_error is not None and "422" in logger.last_error
    logger.close()


def test_a_full_buffer_drops_the_oldest_and_log_checks_required_fields() -> None:
    gate = threading.Event()

    def blocked(request: httpx.Request) -> httpx.Response:
        gate.wait(10)
        batch = json.loads(request.content)
        return httpx.Response(202, json={"accepted": len(batch), "sampled": 0, "duplicates": 0})

    client = ApiClient("http://api.test")
    logger = client.monitor(
        "m", transport=httpx.MockTransport(blocked), batch_size=2, max_buffer=4, flush_interval=0.01
    )
    for i in range(12):
        logger.log(entry(i))  # the first batch hangs in flight; the buffer keeps the newest 4
    assert logger.stats.dropped > 0
    gate.set()
    assert logger.flush(timeout=10)
    with pytest.raises(ValueError, match="version"):
        logger.log(id="x", response="y", system="bot")
    logger.close()
    with pytest.raises(RuntimeError):
        logger.log(entry(99))
