"""Logging production responses to a monitor from the bot's process (docs/monitoring.md).

``client.monitor(monitor_id).log(id=..., dialogue=..., response=..., system=..., version=...)`` puts the response
in a buffer and returns at once; a background thread sends the buffer in batches (``POST
/v1/monitors/{id}/responses``) every ``flush_interval`` seconds or once ``batch_size`` responses wait. The caller
never waits on the network: a full buffer (``max_buffer``) drops the oldest response and counts it in ``dropped``.
A batch that fails on the network or with a 5xx is sent again with back-off (safe: the server stores an id once and
counts a repeat as a duplicate); a 4xx (a response the server refuses) is not retried, and its message is kept in
``last_error``. ``flush()`` waits until everything logged so far is sent, ``close()`` flushes and stops the thread
(also at interpreter exit).
"""

from __future__ import annotations

import atexit
import random
import threading
import time
import weakref
from collections import deque
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx

RETRIED = (httpx.NetworkError, httpx.TimeoutException, httpx.RemoteProtocolError)


@dataclass
class LogStats:
    logged: int = 0
    sent: int = 0
    accepted: int = 0
    sampled: int = 0
    duplicates: int = 0
    dropped: int = 0
    """buffer full: the oldest responses were dropped, never sent"""
    rejected: int = 0
    """responses in batches the server refused (4xx)"""
    retries: int = 0


class MonitorLogger:
    def __init__(
        self,
        base_url: str,
        monitor_id: str,
        headers: dict[str, str] | None = None,
        *,
        batch_size: int = 100,
        flush_interval: float = 1.0,
        max_buffer: int = 10_000,
        timeout: float = 10.0,
        backoff_max: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        if batch_size < 1 or max_buffer < batch_size:
            raise ValueError("batch_size must be >= 1 and max_buffer >= batch_size")
        self.monitor_id = monitor_id
        self.path = f"/v1/monitors/{monitor_id}/responses"
        self.batch_size = batch_size
        self.flush_interval = flush_interval
        self.backoff_max = backoff_max
        self.stats = LogStats()
        self.last_error: str | None = None
        self._http = httpx.Client(
            base_url=base_url.rstrip("/"), headers=headers or {}, timeout=timeout, transport=transport
        )
        self._buffer: deque[dict[str, Any]] = deque(maxlen=max_buffer)
        self._in_flight = 0
        self._cond = threading.Condition()
        self._closed = False
        self._flush_wanted = False
        self._thread = threading.Thread(target=self._run, name=f"dj-monitor-log-{monitor_id}", daemon=True)
        self._thread.start()
        ref = weakref.ref(self)
        atexit.register(lambda: (logger := ref()) is not None and logger.close(timeout=5.0))

    def log(self, response: dict[str, Any] | None = None, /, **fields: Any) -> None:
        """Buffer one response (a dict, or its fields as keywords: ``id``, ``dialogue``, ``response``, ``system``,
        ``version``, optional ``persona``/``facts``/``memory``/``segment``/``timestamp``/``meta``). Its
        ``timestamp`` defaults to now (when logged, not when sent). Never blocks on the network."""
        entry = {**(response or {}), **fields}
        for name in ("id", "response", "system", "version"):
            if not entry.get(name):
                raise ValueError(f"log: {name!r} is required")
        if entry.get("timestamp") is None:
            entry["timestamp"] = datetime.now(UTC).isoformat()
        elif isinstance(entry["timestamp"], datetime):
            entry["timestamp"] = entry["timestamp"].isoformat()
        with self._cond:
            if self._closed:
                raise RuntimeError("log: this monitor logger is closed")
            if len(self._buffer) == self._buffer.maxlen:
                self.stats.dropped += 1
            self._buffer.append(entry)
            self.stats.logged += 1
            if len(self._buffer) >= self.batch_size:
                self._cond.notify_all()

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every response logged so far is sent (or refused); False if ``timeout`` passed first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            self._flush_wanted = True
            self._cond.notify_all()
            try:
                while self._buffer or self._in_flight:
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        return False
                    self._cond.wait(remaining if remaining is not None else 0.5)
            finally:
                self._flush_wanted = False
        return True

    def close(self, timeout: float | None = 30.0) -> bool:
        """Flush, then stop the sending thread. Returns False if something was still unsent at ``timeout``."""
        if self._closed:
            return True
        done = self.flush(timeout)
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout=5.0)
        self._http.close()
        return done

    def __enter__(self) -> MonitorLogger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _take(self) -> list[dict[str, Any]] | None:
        with self._cond:
            deadline = time.monotonic() + self.flush_interval
            while (
                not self._closed and len(self._buffer) < self.batch_size and not (self._flush_wanted and self._buffer)
            ):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._cond.wait(remaining)
            if not self._buffer:
                return None if self._closed else []
            batch = [self._buffer.popleft() for _ in range(min(self.batch_size, len(self._buffer)))]
            self._in_flight = len(batch)
            return batch

    def _run(self) -> None:
        while True:
            batch = self._take()
            if batch is None:
                return
            if batch:
                self._send(batch)
            with self._cond:
                self._in_flight = 0
                self._cond.notify_all()

    def _send(self, batch: list[dict[str, Any]]) -> None:
        attempt = 0
        while True:
            attempt += 1
            try:
                answer = self._http.post(self.path, json=batch)
            except RETRIED as exc:
                problem = f"cannot reach the API: {str(exc) or type(exc).__name__}"
            except httpx.HTTPError as exc:
                self._refused(batch, f"cannot reach the API: {exc}")
                return
            else:
                if answer.status_code < 400:
                    body = answer.json()
                    with self._cond:
                        self.stats.sent += len(batch)
                        self.stats.accepted += int(body.get("accepted", 0))
                        self.stats.sampled += int(body.get("sampled", 0))
                        self.stats.duplicates += int(body.get("duplicates", 0))
                    return
                if answer.status_code < 500 and answer.status_code != 429:
                    self._refused(batch, f"HTTP {answer.status_code}: {answer.text[:500]}")
                    return
                problem = f"HTTP {answer.status_code}"
            self.last_error = problem
            self.stats.retries += 1
            if self._closed and attempt > 3:
                self._refused(batch, f"{problem} (gave up at close)")
                return
            delay = min(self.backoff_max, 0.25 * 2 ** (attempt - 1)) * random.uniform(0.5, 1.0)
            with self._cond:
                self._cond.wait(delay)

    def _refused(self, batch: list[dict[str, Any]], message: str) -> None:
        with self._cond:
            self.stats.rejected += len(batch)
        self.last_error = message
