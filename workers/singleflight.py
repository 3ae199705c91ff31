"""Concurrent identical judge requests make one provider call.

The first worker to take the lock for a cache key calls the judge and fills the cache; the others wait for the
cache entry (or for the lock to be released or to lapse, then take it themselves: if the first call failed, the
next waiter tries). Redis serves several workers and processes; the in-process variant serves the standalone mode.
If Redis cannot be reached the Redis variant degrades to the in-process one (still correct, only less shared).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Callable
from typing import Protocol, TypeVar

import redis

log = logging.getLogger(__name__)
T = TypeVar("T")

# delete the lock only if we still hold it (a lapsed lease may have passed it to another worker)
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


class SingleFlight(Protocol):
    def run(self, key: str, lookup: Callable[[], T | None], compute: Callable[[], T], lease_s: float) -> tuple[T, bool]:
        """Return (value, computed_here). ``lookup`` reads the cache; ``compute`` calls the judge and fills it."""
        ...


class LocalSingleFlight:
    def __init__(self) -> None:
        self._locks: dict[str, tuple[threading.Lock, int]] = {}
        self._guard = threading.Lock()

    def run(self, key: str, lookup: Callable[[], T | None], compute: Callable[[], T], lease_s: float) -> tuple[T, bool]:
        with self._guard:
            lock, users = self._locks.get(key, (threading.Lock(), 0))
            self._locks[key] = (lock, users + 1)
        try:
            with lock:
                cached = lookup()
                if cached is not None:
                    return cached, False
                return compute(), True
        finally:
            with self._guard:  # forget the lock with its last user (the table does not grow with the cache)
                lock, users = self._locks[key]
                if users <= 1:
                    del self._locks[key]
                else:
                    self._locks[key] = (lock, users - 1)


class RedisSingleFlight:
    def __init__(self, client: redis.Redis, poll_s: float = 0.05) -> None:
        self.client = client
        self.poll_s = poll_s
        self._release = client.register_script(_RELEASE)
        self._fallback = LocalSingleFlight()

    def run(self, key: str, lookup: Callable[[], T | None], compute: Callable[[], T], lease_s: float) -> tuple[T, bool]:
        try:
            return self._run(key, lookup, compute, lease_s)
        except redis.RedisError as exc:
            log.warning("single-flight: Redis unavailable (%s); de-duplicating in this process only", exc)
            return self._fallback.run(key, lookup, compute, lease_s)

    def _run(
        self, key: str, lookup: Callable[[], T | None], compute: Callable[[], T], lease_s: float
    ) -> tuple[T, bool]:
        lock_key = f"dj:inflight:{key}"
        token = uuid.uuid4().hex
        while True:
            cached = lookup()
            if cached is not None:
                return cached, False
            if self.client.set(lock_key, token, nx=True, px=max(1, int(lease_s * 1000))):
                try:
                    cached = lookup()  # filled between our lookup and the lock
                    if cached is not None:
                        return cached, False
                    return compute(), True
                finally:
                    with contextlib.suppress(redis.RedisError):  # else the lease lapses on its own
                        self._release(keys=[lock_key], args=[token])
            while self.client.exists(lock_key):
                time.sleep(self.poll_s)
                cached = lookup()
                if cached is not None:
                    return cached, False
