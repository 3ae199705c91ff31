"""The submit rate limit: runs per API key (DJ_RUNS_PER_MINUTE). Routes reach the app's instance through
:func:`judge_api.deps.submit_limit`."""

from __future__ import annotations

import logging
import math
import threading
import time
import uuid
from collections import defaultdict, deque
from contextlib import suppress
from typing import Any

from fastapi import HTTPException, status

log = logging.getLogger(__name__)


class SubmitRateLimit:
    """Runs per API key (or client address) per minute, sliding window.

    Shared by every API process through Redis when REDIS_URL is set (compose runs several), else per
    process. A slot is reserved when a submission starts and given back if the submission is rejected, so only
    stored runs count.
    """

    _SCRIPT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local window = tonumber(ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then
  local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  return tostring(tonumber(oldest[2]) + window - now)
end
redis.call('ZADD', KEYS[1], now, ARGV[3])
redis.call('EXPIRE', KEYS[1], math.ceil(window) + 1)
return '0'
"""
    WINDOW_S = 60.0

    def __init__(self, redis_url: str | None = None) -> None:
        self._events: dict[str, deque[tuple[float, str]]] = defaultdict(deque)
        self._lock = threading.Lock()
        self._redis: Any = None
        self._script: Any = None
        if redis_url:
            try:
                import redis

                self._redis = redis.Redis.from_url(redis_url, socket_timeout=2, socket_connect_timeout=2)
                self._script = self._redis.register_script(self._SCRIPT)
            except Exception as exc:  # the redis package is optional for the API
                log.warning("submit rate limit is per process: %s", exc)
                self._redis = None

    @staticmethod
    def _too_many(per_minute: int, retry_s: float) -> HTTPException:
        retry = max(1, math.ceil(retry_s))
        return HTTPException(
            status.HTTP_429_TOO_MANY_REQUESTS,
            f"more than {per_minute} runs per minute for this key (DJ_RUNS_PER_MINUTE); retry in {retry}s",
            headers={"Retry-After": str(retry)},
        )

    def reserve(self, who: str, per_minute: int) -> str | None:
        """Take one slot for ``who`` or raise 429 with Retry-After; returns a token for :meth:`release`."""
        if per_minute <= 0:
            return None
        token = uuid.uuid4().hex
        if self._redis is not None:
            try:
                wait = float(self._script(keys=[f"dj:submit:{who}"], args=[self.WINDOW_S, per_minute, token]))
            except Exception as exc:  # Redis down: fall back to this process's window
                log.warning("submit rate limit falls back to this process (%s)", type(exc).__name__)
            else:
                if wait > 0:
                    raise self._too_many(per_minute, wait)
                return "r:" + token
        now = time.monotonic()
        with self._lock:
            events = self._events[who]
            while events and events[0][0] <= now - self.WINDOW_S:
                events.popleft()
            if len(events) >= per_minute:
                raise self._too_many(per_minute, self.WINDOW_S - (now - events[0][0]))
            events.append((now, token))
        return "l:" + token

    def release(self, who: str, reservation: str | None) -> None:
        if reservation is None:
            return
        kind, token = reservation[:2], reservation[2:]
        if kind == "r:":
            with suppress(Exception):
                self._redis.zrem(f"dj:submit:{who}", token)
            return
        with self._lock:
            events = self._events.get(who)
            if events:
                for entry in list(events):
                    if entry[1] == token:
                        events.remove(entry)
                        break

    def check(self, who: str, per_minute: int) -> None:
        """Reserve without giving back (kept for callers of the old interface)."""
        self.reserve(who, per_minute)
