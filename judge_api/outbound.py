"""Outbound HTTP to a URL a user named (webhook callbacks): where it may go, and a connection that goes only there,
within a deadline.

Checking a name's addresses and then letting the HTTP client resolve the name again to connect is open to DNS
rebinding (a name that answers a public address to the check and 127.0.0.1 to the connect). So the host is resolved
once, every address is checked, and :class:`PinnedBackend` connects to those addresses only; the URL keeps its host,
so the ``Host`` header and the TLS server name (SNI, and the certificate check) are the name's, not the address's.

An address is public when it is global unicast and, for IPv6, when the IPv4 address it embeds (IPv4-mapped
``::ffff:a.b.c.d``, IPv4-translated ``::ffff:0:a.b.c.d``, IPv4-compatible ``::a.b.c.d``, NAT64 ``64:ff9b::/96``,
6to4 ``2002::/16``) is public too: those forms reach the IPv4 host through a translator or tunnel. The local-use
NAT64 prefix ``64:ff9b:1::/48``, Teredo ``2001::/32`` and the old site-local ``fec0::/10`` are never public.

Every read, write and connect of a connection made by :class:`PinnedBackend` waits at most until one wall-clock
deadline, so an attempt's whole time (connect, TLS, send, headers) is bounded, not only each read: a receiver that
drips one header line a second cannot hold it past the deadline.
"""

from __future__ import annotations

import ipaddress
import socket
import ssl
import time
from collections.abc import Callable, Iterable
from typing import Any

import httpcore
import httpx

Resolver = Callable[[str], list[str]]
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
NAT64_LOCAL = ipaddress.IPv6Network("64:ff9b:1::/48")  # RFC 8215: local use, not global
IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")
IPV4_TRANSLATED = ipaddress.IPv6Network("::ffff:0:0:0/96")  # SIIT (RFC 2765): ::ffff:0:a.b.c.d
SITE_LOCAL = ipaddress.IPv6Network("fec0::/10")  # deprecated (RFC 3879) but still routed inside some networks


def resolve_host(host: str) -> list[str]:
    """Every address ``host`` resolves to (an IP literal is itself)."""
    try:
        return [str(ipaddress.ip_address(host))]
    except ValueError:
        pass
    infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    return sorted({str(info[4][0]) for info in infos})


def embedded_ipv4(ip: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 address carries and reaches (through mapping, NAT64 or 6to4)."""
    if ip.ipv4_mapped is not None:
        return [ip.ipv4_mapped]
    if ip.sixtofour is not None:
        return [ip.sixtofour]
    if ip in NAT64 or ip in IPV4_TRANSLATED or (ip in IPV4_COMPATIBLE and int(ip) > 1):
        return [ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)]
    return []


def is_public(address: str) -> bool:
    """Is ``address`` global unicast, and so is every IPv4 address it embeds?"""
    ip: IPAddress = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address):
        if ip in NAT64_LOCAL or ip in SITE_LOCAL or ip.teredo is not None:  # Teredo reaches any host its relay does
            return False
        embedded = embedded_ipv4(ip)
        if embedded:
            return all(v4.is_global and not v4.is_multicast for v4 in embedded)
    return ip.is_global and not ip.is_multicast


class DeadlinePassed(httpcore.TimeoutException):
    """The attempt's wall-clock deadline passed (whatever step it was at)."""


def _left(deadline: float, timeout: float | None) -> float:
    """How long the next socket step may wait: its own timeout, cut to what is left before the deadline."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise DeadlinePassed("the attempt's deadline passed")
    return left if timeout is None else min(timeout, left)


class TooMuchRead(httpcore.ReadError):
    """The peer sent more than the connection reads."""


class DeadlineStream(httpcore.NetworkStream):
    """A connection whose every step ends by ``deadline`` (a ``time.monotonic()`` value) and that reads at most
    ``max_read_bytes`` (None: no limit)."""

    def __init__(self, stream: httpcore.NetworkStream, deadline: float, max_read_bytes: int | None = None) -> None:
        self._stream = stream
        self._deadline = deadline
        self._unread = max_read_bytes

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        if self._unread is not None:
            if self._unread <= 0:
                raise TooMuchRead("the response is larger than the service reads")
            max_bytes = min(max_bytes, self._unread)
        data = self._stream.read(max_bytes, _left(self._deadline, timeout))
        if self._unread is not None:
            self._unread -= len(data)
        return data

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._stream.write(buffer, _left(self._deadline, timeout))

    def close(self) -> None:
        self._stream.close()

    def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.NetworkStream:
        tls = self._stream.start_tls(ssl_context, server_hostname, _left(self._deadline, timeout))
        return DeadlineStream(tls, self._deadline, self._unread)

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class PinnedBackend(httpcore.NetworkBackend):
    """Connects to ``host`` only at the ``addresses`` it was checked to have (in order, the first that answers),
    never resolving it again; each connection ends by ``deadline`` and reads at most ``max_read_bytes``."""

    def __init__(
        self,
        host: str,
        addresses: list[str],
        deadline: float,
        max_read_bytes: int | None = None,
        inner: httpcore.NetworkBackend | None = None,
    ) -> None:
        self.host = host
        self.addresses = addresses
        self.deadline = deadline
        self.max_read_bytes = max_read_bytes
        self._inner = inner or httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        if host.strip("[]").lower() != self.host.strip("[]").lower():
            raise httpcore.ConnectError(f"{host!r} is not the checked host {self.host!r}")
        failure: Exception = httpcore.ConnectError(f"{host!r} has no address")
        for address in self.addresses:
            try:
                stream = self._inner.connect_tcp(
                    address, port, _left(self.deadline, timeout), local_address, socket_options
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                failure = exc
                continue
            return DeadlineStream(stream, self.deadline, self.max_read_bytes)
        raise failure

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        raise httpcore.ConnectError("outbound calls go over TCP only")


class PinnedTransport(httpx.HTTPTransport):
    """httpx's transport over a :class:`PinnedBackend` (one connection, no proxy, TLS verified against the URL's
    host name)."""

    def __init__(self, backend: PinnedBackend) -> None:
        super().__init__(trust_env=False)
        # httpx builds its pool without a way to pass a network backend; this is the same pool over ours
        self._pool = httpcore.ConnectionPool(
            ssl_context=httpx.create_ssl_context(trust_env=False),
            max_connections=1,
            max_keepalive_connections=0,
            network_backend=backend,
        )
