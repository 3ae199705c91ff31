"""A lean JSON POST for judge calls: one keep-alive HTTP/1.1 connection per call thread (issue 26, service CPU).

The OpenAI SDK's ``post`` builds its request options, headers, URL and an httpx request per call, and httpcore scans
every pooled connection for each request: measured (yappi, CPU clock, 2,080 judgments at 32 in flight) that was
~60 % of a worker's CPU per judgment. A call slot only ever has one call out, so it keeps its own connection and
sends the SDK's own headers, built once. The HTTP/1.1 exchange is written here on a plain socket rather than with
``http.client``, whose per-call cost was most of what was left (its ``parse_headers`` runs the ``email`` package's
feed parser, ``putheader`` runs per header per request, a request goes out in several ``sendall``s): the request
line and headers are built once per path, a request is one ``sendall``, and the response's status line and headers
are split by hand. The response body is read by ``Content-Length``, by ``Transfer-Encoding: chunked`` (extensions
and trailers skipped), or to the connection's close when it has neither; 1xx, 204 and 304 answers have none, and
interim 1xx answers (``100 Continue``) are skipped. A malformed status line, header, or chunk is a
``connection_error`` as soon as it is seen, not a wait for the timeout.

Semantics kept from the SDK path: the judge timeout applies to connecting and to every read and write (the socket's
timeout); a timeout is ``timeout``, a refused/reset/closed connection or a malformed answer ``connection_error``
(both retried by the caller), named as httpx names its errors (``ConnectError``, ``WriteTimeout``, ``ReadError``,
...), and a failure before the request was completely sent says so (``sent``: an attempt, not a provider call); an
HTTP error status is an :class:`Answer` like any other, so the caller gets ``_status_error``'s kinds with
``Retry-After``, and a body that is not JSON ``malformed_response``. An answer with ``Connection: close`` (or an
HTTP/1.0 one without keep-alive), a body read to the close, or bytes after the answer the server should not have
sent, end the connection. A connection idle over ``IDLE_EXPIRY_S``, or one the server closed (it reads as EOF), is
replaced before it is reused. TLS verifies against ``SSL_CERT_FILE`` or certifi's bundle, as httpx does. Where the
SDK's transport does more than this - a proxy in the environment, a base URL with a query - the caller keeps the SDK
(:func:`usable_for`).
"""

from __future__ import annotations

import http.client
import json
import os
import re
import select
import socket
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


# limits on what a response may send before its body (http.client's per line, a little more for the whole head)
_MAX_LINE = 65536
_MAX_HEAD = 262144
_RECV = 65536
_NO_BODY = frozenset({204, 304})
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+\Z")
_HEX = re.compile(rb"[0-9A-Fa-f]+\Z")


class _Connection:
    """One call thread's socket, with a poll set to see it closed while idle."""

    __slots__ = ("poll", "sock", "tls", "used")

    def __init__(self, sock: socket.socket, tls: bool) -> None:
        self.sock = sock
        self.tls = tls
        self.used = 0.0
        self.poll = select.poll()
        self.poll.register(sock, select.POLLIN)

    def closed_by_peer(self) -> bool:
        """An idle keep-alive socket that is readable has been closed by the server (or is broken, or the server
        sent bytes no request asked for): not to be reused."""
        try:
            return bool(self.poll.poll(0)) or (self.tls and self.sock.pending() > 0)  # type: ignore[attr-defined]
        except (OSError, ValueError):
            return True

    def close(self) -> None:
        self.sock.close()


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
        self._heads: dict[str, bytes] = {}  # path -> request line and headers, up to the Content-Length value
        self._local = threading.local()

    def _head(self, path: str) -> bytes:
        """The request line and headers of a POST to ``path``, built once (as http.client would send them: Host
        and ``Accept-Encoding: identity`` unless given; names and values checked, values in Latin-1)."""
        target = self.prefix + path
        if re.search(r"[\x00-\x20\x7f]", target):
            raise http.client.InvalidURL(f"URL can't contain control characters. {target!r}")
        names = {name.lower() for name in self.headers}
        lines = [f"POST {target} HTTP/1.1\r\n".encode("ascii")]
        if "host" not in names:
            try:
                host = self.host.encode("ascii")
            except UnicodeEncodeError:
                host = self.host.encode("idna")
            if b":" in host:  # an IPv6 literal, bracketed and without its zone
                host = b"[" + host.split(b"%", 1)[0] + b"]"
            if self.port != (443 if self.scheme == "https" else 80):
                host += b":%d" % self.port
            lines.append(b"Host: " + host + b"\r\n")
        if "accept-encoding" not in names:
            lines.append(b"Accept-Encoding: identity\r\n")
        for name, value in self.headers.items():
            if name.lower() == "content-length":
                continue
            if not _TOKEN.match(name):
                raise ValueError(f"Invalid header name {name!r}")
            if re.search(r"[\r\n\x00]", value):
                raise ValueError(f"Invalid header value {value!r}")
            lines.append(name.encode("ascii") + b": " + value.encode("latin-1") + b"\r\n")
        lines.append(b"Content-Length: ")
        head = b"".join(lines)
        self._heads[path] = head
        return head

    def _connect(self) -> _Connection:
        sock = socket.create_connection((self.host, self.port), self.timeout_s)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # one sendall a request: send it now
            if self.scheme == "https":
                sock = _tls().wrap_socket(sock, server_hostname=self.host)
        except BaseException:
            sock.close()
            raise
        return _Connection(sock, self.scheme == "https")

    def _drop(self) -> None:
        conn: _Connection | None = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    def post(self, path: str, body: Mapping[str, Any]) -> Answer:
        payload = json.dumps(body, ensure_ascii=False).encode("utf-8", "surrogatepass")
        head = self._heads.get(path) or self._head(path)
        request = b"%b%d\r\n\r\n%b" % (head, len(payload), payload)
        conn: _Connection | None = getattr(self._local, "conn", None)
        if conn is not None and (time.monotonic() - conn.used > IDLE_EXPIRY_S or conn.closed_by_peer()):
            self._drop()  # expired, or the server ended it: reconnect rather than fail the call
            conn = None
        phase = "Connect"  # named as httpx names its errors: ConnectError, WriteTimeout, ReadError, ...
        try:
            if conn is None:
                conn = self._local.conn = self._connect()
            phase = "Write"
            conn.sock.sendall(request)
            phase = "Read"
            status, headers, data, keep = _Reader(conn.sock).response()
        except TimeoutError as exc:
            self._drop()
            raise PostError("timeout", _message(f"{phase}Timeout", exc), sent=phase == "Read") from None
        except (OSError, http.client.HTTPException) as exc:
            self._drop()
            raise PostError("connection_error", _message(f"{phase}Error", exc), sent=phase == "Read") from None
        except BaseException:
            self._drop()  # the connection is mid-exchange: never reuse it
            raise
        if keep:
            conn.used = time.monotonic()
        else:
            self._drop()
        return Answer(status, headers, data)


class _Reader:
    """One HTTP/1.1 response off a socket. Every receive is one ``recv`` under the socket's timeout; end of stream
    where more is due is ``RemoteDisconnected`` (nothing yet) or ``IncompleteRead``; what is malformed is an
    ``http.client.HTTPException`` (so the caller's ``connection_error``)."""

    __slots__ = ("buf", "pos", "sock")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = b""
        self.pos = 0

    def _fill(self) -> bool:
        """Receive more (dropping what was consumed); False at end of stream."""
        chunk = self.sock.recv(_RECV)
        if not chunk:
            return False
        self.buf = self.buf[self.pos :] + chunk if self.pos < len(self.buf) else chunk
        self.pos = 0
        return True

    def response(self) -> tuple[int, dict[str, str], bytes, bool]:
        """(status, lower-case headers, body, whether the connection can take another request)."""
        while True:
            version, status, headers = self._head()
            if 100 <= status < 200 and status != 101:
                continue  # an interim answer (100 Continue, 103 Early Hints): the real one follows
            break
        if version == 11:
            keep = "close" not in headers.get("connection", "").lower()
        else:
            keep = "keep-alive" in headers.get("connection", "").lower() or "keep-alive" in headers
        coding = headers.get("transfer-encoding")
        if status < 200 or status in _NO_BODY:
            body = b""
            keep = keep and status != 101
        elif coding is not None and coding.rsplit(",", 1)[-1].strip().lower() == "chunked":
            body = self._chunked()
        elif coding is None and "content-length" in headers:
            length = headers["content-length"].strip()
            if not (length.isascii() and length.isdigit()):
                raise http.client.HTTPException(f"invalid Content-Length {length!r}")
            body = self._exactly(int(length))
        else:  # delimited by the server closing the connection
            body = self._until_close()
            keep = False
        if self.pos < len(self.buf):
            keep = False  # bytes past the answer: the stream is not where the next request expects it
        return status, headers, body, keep

    def _head(self) -> tuple[int, int, dict[str, str]]:
        """The status line and headers of one answer (interim or final), consumed."""
        while True:
            buf, pos = self.buf, self.pos
            end = buf.find(b"\n\r\n", pos)
            bare = buf.find(b"\n\n", pos, None if end < 0 else end + 1)  # bare-LF line ends, as http.client allowed
            if bare >= 0:
                head, self.pos = buf[pos : bare + 1], bare + 2
                break
            if end >= 0:
                head, self.pos = buf[pos : end + 1], end + 3
                break
            if pos < len(buf):
                _check_partial_head(buf, pos)
            if not self._fill():
                if self.pos < len(self.buf):
                    raise http.client.BadStatusLine(repr(self.buf[self.pos :][:100]))
                raise http.client.RemoteDisconnected("Remote end closed connection without response")
        lines = head.decode("latin-1").split("\n")
        version, status = _status(lines[0])
        return version, status, _headers(lines, len(lines) - 1)

    def _line(self, limit: int = _MAX_LINE) -> bytes:
        """One line (without its line end), consumed."""
        while True:
            end = self.buf.find(b"\n", self.pos)
            if end >= 0:
                line = self.buf[self.pos : end]
                self.pos = end + 1
                return line.rstrip(b"\r")
            if len(self.buf) - self.pos > limit:
                raise http.client.LineTooLong("chunked body line")
            if not self._fill():
                raise http.client.IncompleteRead(b"")

    def _exactly(self, n: int) -> bytes:
        buf, pos = self.buf, self.pos
        have = len(buf) - pos
        if have >= n:
            self.pos = pos + n
            return buf[pos : pos + n] if pos or n < len(buf) else buf
        parts = [buf[pos:]]
        self.buf, self.pos = b"", 0
        while have < n:
            chunk = self.sock.recv(_RECV)
            if not chunk:
                raise http.client.IncompleteRead(b"".join(parts), n - have)
            parts.append(chunk)
            have += len(chunk)
        data = b"".join(parts)
        if have == n:
            return data
        self.buf = data
        self.pos = n
        return data[:n]

    def _chunked(self) -> bytes:
        parts = []
        while True:
            size = self._line().split(b";", 1)[0].strip()  # chunk extensions are ignored
            if not _HEX.match(size) or len(size) > 16:
                raise http.client.HTTPException(f"invalid chunk size {size[:100]!r}")
            n = int(size, 16)
            if n == 0:
                break
            parts.append(self._exactly(n))
            if self._line(2):
                raise http.client.HTTPException("chunk data not followed by its line end")
        trailers = 0
        while line := self._line():  # trailers, ignored, up to the empty line
            trailers += len(line)
            if trailers > _MAX_HEAD:
                raise http.client.LineTooLong("chunked body trailers")
        return b"".join(parts)

    def _until_close(self) -> bytes:
        parts = [self.buf[self.pos :]]
        self.buf, self.pos = b"", 0
        while chunk := self.sock.recv(_RECV):
            parts.append(chunk)
        return b"".join(parts)


def _status(line: str) -> tuple[int, int]:
    """(version 10 or 11, status) of a status line, as http.client reads it."""
    version, _, rest = line.rstrip("\r").partition(" ")
    code = rest.lstrip(" ")[:4].rstrip(" ")
    if not version.startswith("HTTP/") or len(code) != 3 or not (code.isascii() and code.isdigit()):
        raise http.client.BadStatusLine(line[:100])
    if version == "HTTP/1.0":
        number = 10
    elif version.startswith("HTTP/1."):
        number = 11
    else:
        raise http.client.UnknownProtocol(version)
    status = int(code)
    if status < 100:
        raise http.client.BadStatusLine(line[:100])
    return number, status


def _headers(lines: list[str], stop: int) -> dict[str, str]:
    """The headers in ``lines[1:stop]`` (lines of a head split at LF, so perhaps ending in CR), lower-case names."""
    headers: dict[str, str] = {}
    name = ""
    for i in range(1, stop):
        line = lines[i]
        if line[:1] in (" ", "\t"):  # an obsolete folded continuation of the previous header
            if not name:
                raise http.client.HTTPException(f"malformed header line {line[:100]!r}")
            headers[name] = f"{headers[name]} {line.strip()}".strip()
            continue
        name, sep, value = line.partition(":")
        if not sep or not _TOKEN.match(name):
            raise http.client.HTTPException(f"malformed header line {line[:100]!r}")
        name = name.lower()
        value = value.strip()
        if name in headers:
            if name == "content-length" and headers[name] != value:
                raise http.client.HTTPException("conflicting Content-Length headers")
            if name == "transfer-encoding":
                value = f"{headers[name]}, {value}"
        headers[name] = value
    return headers


def _check_partial_head(buf: bytes, pos: int) -> None:
    """Fail at once on a head that cannot become a good one (rather than wait for the timeout): not starting like a
    status line, a bad status line or header line so far, or too long."""
    start = buf[pos : pos + 5]
    if start != b"HTTP/"[: len(start)]:
        raise http.client.BadStatusLine(repr(buf[pos:][:100]))
    if len(buf) - pos > _MAX_HEAD:
        raise http.client.LineTooLong("response head")
    end = buf.rfind(b"\n", pos)
    if end >= 0:
        lines = buf[pos:end].decode("latin-1").split("\n")
        _status(lines[0])
        _headers(lines, len(lines))


def _message(what: str, exc: BaseException) -> str:
    return f"{what} ({type(exc).__name__}: {exc})"
