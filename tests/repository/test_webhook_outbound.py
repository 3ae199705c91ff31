"""Webhook attempts cannot be turned inward or stall the service (issue 36): a name that answers a public address
to the check and 127.0.0.1 to the connect (DNS rebinding) reaches nothing on loopback, because the attempt connects
to the address it checked (TLS named after the URL's host); a receiver that drips its headers cannot hold an
attempt past DJ_WEBHOOK_TIMEOUT; and deliveries stalled that way do not slow the sweeper's dead-worker checks."""

from __future__ import annotations

import socket
import ssl
import threading
import time
from typing import Any

import httpcore
import httpx
import pytest

from judge_api import outbound, webhooks
from judge_api import sweeper as sweeper_module
from judge_api.config import Settings
from judge_api.db import session_scope
from judge_api.repository import ensure_project
from judge_api.repository import webhooks as store
from tests.e2e.receiver import WebhookReceiver

SECRET = "a-secret-of-some-length"
PUBLIC = "93.184.216.34"  # never reached here: no route out of the test machine, or a refused/timed-out connect


def add(url: str) -> None:
    with session_scope() as session:
        ensure_project(session, "p")
        store.add_delivery(
            session,
            event_key="run.finished:run_x",
            project_id="p",
            event="run.finished",
            url=url,
            secret=SECRET,
            payload={"event": "run.finished", "run": {"id": "run_x"}, "rule": None},
        )


def fake_dns(monkeypatch: pytest.MonkeyPatch, answers: dict[str, list[str]]) -> dict[str, int]:
    """``socket.getaddrinfo`` answering ``answers[name]`` in turn (the last repeats); IP literals as usual.
    Returns the count of look-ups per name."""
    real = socket.getaddrinfo
    asked: dict[str, int] = {}

    def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        name = host.decode() if isinstance(host, bytes) else host
        if name not in answers:
            return real(host, port, *args, **kwargs)
        turn = asked.get(name, 0)
        asked[name] = turn + 1
        address = answers[name][min(turn, len(answers[name]) - 1)]
        return [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (address, int(port or 0)))]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return asked


def test_a_name_rebinding_to_loopback_reaches_nothing_there(store_db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with WebhookReceiver([200]) as listener:
        port = listener.server.server_address[1]
        asked = fake_dns(monkeypatch, {"rebind.example.org": [PUBLIC, "127.0.0.1"]})
        add(f"http://rebind.example.org:{port}/internal-admin")
        counts = webhooks.deliver_due(Settings(DJ_AUTH=True, DJ_WEBHOOK_TIMEOUT=1))
        assert counts == {"failed": 1}, counts
        assert listener.requests == []  # the checked (public) address was the one dialled
        assert asked == {"rebind.example.org": 1}  # resolved once: the check's answer is the connect's


def test_the_pinned_connection_keeps_the_urls_host(store_db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with WebhookReceiver([200]) as receiver:
        port = receiver.server.server_address[1]
        fake_dns(monkeypatch, {"hooks.internal.test": ["127.0.0.1"]})
        add(f"http://hooks.internal.test:{port}/hook")
        assert webhooks.deliver_due(Settings(DJ_AUTH=False)) == {"delivered": 1}
        assert receiver.requests[0].headers["Host"] == f"hooks.internal.test:{port}"


class DripServer:
    """Answers every request with a status line, then one header line every ``every_s`` for ``for_s`` seconds."""

    def __init__(self, every_s: float, for_s: float) -> None:
        self.every_s, self.for_s = every_s, for_s
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}/hook"

    def _serve(self) -> None:
        self.sock.settimeout(0.2)
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            threading.Thread(target=self._drip, args=(conn,), daemon=True).start()

    def _drip(self, conn: socket.socket) -> None:
        with conn:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\n")
            end = time.monotonic() + self.for_s
            try:
                while time.monotonic() < end and not self.stop.is_set():
                    time.sleep(self.every_s)
                    conn.sendall(b"X-Drip: 1\r\n")
                conn.sendall(b"Content-Length: 0\r\n\r\n")
            except OSError:
                pass  # the client gave up: what the test wants

    def __enter__(self) -> DripServer:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.thread.join(5)
        self.sock.close()


def test_a_dripping_receiver_is_cut_at_the_attempts_deadline(store_db: str) -> None:
    with DripServer(every_s=0.3, for_s=8.0) as drip:
        add(drip.url)
        started = time.monotonic()
        counts = webhooks.deliver_due(Settings(DJ_WEBHOOK_TIMEOUT=1))
        elapsed = time.monotonic() - started
    assert counts == {"failed": 1}, counts
    assert elapsed < 3.0, elapsed  # one second of deadline (and the recording), not the eight of the drip


class FakeRedis:
    def info(self, section: str) -> dict[str, str]:
        return {"run_id": "same"}


def test_stalled_deliveries_do_not_slow_the_dead_worker_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    checks: list[float] = []

    def check_workers(self: sweeper_module.Sweeper) -> int:
        checks.append(time.monotonic())
        return 0

    def stalled_sweep(settings: Settings) -> dict[str, int]:
        time.sleep(3.0)  # every receiver stalls
        return {}

    monkeypatch.setattr(sweeper_module.Sweeper, "check_workers", check_workers)
    monkeypatch.setattr(sweeper_module.Sweeper, "sweep_once", lambda self: 0)
    monkeypatch.setattr(webhooks, "sweep", stalled_sweep)
    settings = Settings(DJ_SWEEP_INTERVAL=0.2)
    sweeper = sweeper_module.Sweeper(settings, FakeRedis())  # type: ignore[arg-type]
    sweeper.start()
    time.sleep(2.0)
    sweeper.stop_event.set()
    sweeper.join(2)
    assert len(checks) >= 6, checks  # a look every 0.2 s (~9 in 2 s), not one per stalled delivery round


class RecordingBackend(httpcore.NetworkBackend):
    """Records where it is asked to connect and the TLS server name; the handshake then fails (no server here)."""

    def __init__(self) -> None:
        self.connected: list[tuple[str, int]] = []
        self.server_names: list[str | None] = []
        backend = self

        class Stream(httpcore.NetworkStream):
            def start_tls(
                self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
            ) -> httpcore.NetworkStream:
                backend.server_names.append(server_hostname)
                raise httpcore.ConnectError("no TLS server in this test")

            def close(self) -> None:
                pass

        self.stream = Stream()

    def connect_tcp(self, host: str, port: int, *args: Any, **kwargs: Any) -> httpcore.NetworkStream:
        self.connected.append((host, port))
        return self.stream


def test_tls_goes_to_the_checked_address_with_the_urls_server_name() -> None:
    inner = RecordingBackend()
    backend = outbound.PinnedBackend("hooks.example.org", [PUBLIC], time.monotonic() + 5, inner=inner)
    with httpx.Client(transport=outbound.PinnedTransport(backend)) as client, pytest.raises(httpx.ConnectError):
        client.post("https://hooks.example.org/dj", content=b"{}")
    assert inner.connected == [(PUBLIC, 443)]
    assert inner.server_names == ["hooks.example.org"]  # SNI and the certificate check: the name, not the address
