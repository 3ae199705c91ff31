"""A lean JSON POST for judge calls: one keep-alive HTTP/1.1 connection per call thread (issue 26, service CPU).

The OpenAI SDK's ``post`` builds its request options, headers, URL and an httpx request per call, and httpcore scans
every pooled connection for each request: measured (yappi, CPU clock, 2,080 judgments at 32 in flight) that was
~60 % of a worker's CPU per judgment. A call slot only ever has one call out, so it keeps its own connection
(``http.client``) and sends the SDK's own headers, built once.

Semantics kept from the SDK path: the judge timeout applies to connecting and to every read and write; a timeout
is ``timeout``, a refused/reset/closed connection ``connection_error`` (both retried by the caller), and a failure
before the request was completely sent says so (``sent``: an attempt, not a provider call); an HTTP error status
gets ``_status_error``'s kinds with ``Retry-After``, a body that is not JSON ``malformed_response``. A connection
idle over ``IDLE_EXPIRY_S``, or one the server closed (it reads as EOF), is replaced before it is reused. TLS
verifies against ``SSL_CERT_FILE`` or certifi's bundle, as httpx does. Where the SDK's transport does more than
this - a proxy in the environment, a base URL with a query - the caller keeps the SDK (:func:`usable_for`).
"""

from __future__ import annotations

import http.client
import json
import os
import select
import ssl
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

# a connection idle this long is not reused: servers close idle ones (uvicorn, so vLLM and the simulator, after 5 s)
# and a request sent as the server closes fails unsent (the SDK clients' pools use the same expiry, workers.clients)
IDLE_EXPIRY_S = 2.0


class PostError(Exception):
    """The call did not get an HTTP answer: ``kind`` is ``timeout`` or ``connection_error``; ``sent`` is False when
    the request was not (completely) sent, so no server can have answered it (an attempt, not a provider call)."""

    def __init__(self, kind: str, message: str, sent: bool) -> None:
        super().__init__(message)
        self.kind = kind
        self.sent = sent


@dataclass
class Answer:
    status: int
    headers: dict[str, str]  # lower-case names
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def usable_for(base_url: str) -> bool:
    """Can a call to ``base_url`` go this way, as the SDK would send it? Not when the environment names a proxy for
    its scheme (httpx honours it; so does the SDK path kept for it), not with a query in the base URL, only http and
    https."""
    parts = urllib.parse.urlsplit(base_url)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query:
        return False
    proxies = urllib.request.getproxies_environment()
    return not (proxies.get(parts.scheme) or proxies.get("all"))


@lru_cache(maxsize=1)
def _tls() -> ssl.SSLContext:
    cafile = os.environ.get("SSL_CERT_FILE")
    capath = os.environ.get("SSL_CERT_DIR")
    if not cafile and not capath:
        import certifi

        cafile = certifi.where()
    return ssl.create_default_context(cafile=cafile, capath=capath)


class JsonPoster:
    """POST JSON to ``base_url`` + a path with fixed headers; one connection per calling thread."""

    def __init__(self, base_url: str, headers: Mapping[str, str], timeout_s: float) -> None:
        parts = urllib.parse.urlsplit(base_url)
        self.scheme = parts.scheme
        self.host = parts.hostname or ""
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.prefix = parts.path.rstrip("/")
        self.timeout_s = timeout_s
        self.headers = {**headers, "Connection": "keep-alive"}
        self._local = threading.local()

    def _connection(self) -> http.client.HTTPConnection:
        conn: http.client.HTTPConnection | None = getattr(self._local, "conn", None)
        idle = time.monotonic() - getattr(self._local, "used", 0.0)
        if conn is not None and conn.sock is not None and (idle > IDLE_EXPIRY_S or _closed_by_peer(conn.sock)):
            conn.close()  # expired, or the server ended it: reconnect rather than fail the call
        if conn is None:
            if self.scheme == "https":
                conn = http.client.HTTPSConnection(self.host, self.port, timeout=self.timeout_s, context=_tls())
            else:
                conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout_s)
            self._local.conn = conn
        return conn

    def _drop(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    def post(self, path: str, body: Mapping[str, Any]) -> Answer:
        payload = json.dumps(body, ensure_ascii=False).encode("utf-8", "surrogatepass")
        conn = self._connection()
        phase = "Connect"  # named as httpx names its errors: ConnectError, WriteTimeout, ReadError, ...
        try:
            if conn.sock is None:
                conn.connect()
            phase = "Write"
            conn.request("POST", self.prefix + path, body=payload, headers=self.headers)
            phase = "Read"
            response = conn.getresponse()
            data = response.read()
        except TimeoutError as exc:
            self._drop()
            raise PostError("timeout", _message(f"{phase}Timeout", exc), sent=phase == "Read") from None
        except (OSError, http.client.HTTPException) as exc:
            self._drop()
            raise PostError("connection_error", _message(f"{phase}Error", exc), sent=phase == "Read") from None
        self._local.used = time.monotonic()
        if response.will_close:
            self._drop()
        return Answer(response.status, {k.lower(): v for k, v in response.getheaders()}, data)


def _message(what: str, exc: BaseException) -> str:
    return f"{what} ({type(exc).__name__}: {exc})"


def _closed_by_peer(sock: Any) -> bool:
    """An idle keep-alive socket that is readable has been closed by the server (or is broken)."""
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)
