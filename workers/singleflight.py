"""Concurrent identical judge requests make one provider call.

The first worker to take the lock for a cache key calls the judge and fills the cache; the others wait for the
cache entry (or for the lock to lapse, then take it themselves). Redis serves several workers; the in-process
variant serves the standalone mode.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from typing import Protocol, TypeVar

import redis

T = TypeVar("T")


class SingleFlight(Protocol):
    def run(self, key: str, lookup: Callable[[], T | None], compute: Callable[[], T], lease_s: float) -> tuple[T, bool]:
        """Return (value, computed_here). ``lookup`` reads the cache; ``compute`` calls the judge and fills it."""
        ...


class RedisSingleFlight:
    def __init__(self, client: redis.Redis, poll_s: float = 0.05) -> None:
        self.client = client
        self.poll_s = poll_s

    def run(self, key: str, lookup: Callable[[], T | None], compute: Callable[[], T], lease_s: float) -> tuple[T, bool]:
        lock_key = f"dj:inflight:{key}"
        token = uuid.uuid4().hex
        while True:
            cached = lookup()
            if cached is not None:
                return cached, False
            if self.client.set(lock_key, token, nx=True, px=int(lease_s * 1000)):
                try:
                    cached = lookup()  # filled between our lookup and the lock
                    if cached is not None:
                        return cached, False
                    return compute(), True
                finally:
                    if self.client.get(lock_key) == token.encode():
                        self.client.delete(lock_key)
            while self.client.exists(lock_key):
                time.sleep(self.poll_s)
                cached = lookup()
                if cached is not None:
                    return cached, False


class LocalSingleFlight:
    def __init__(self) -> None:
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def run(self, key: str, lookup: Callable[[], T | None], compute: Callable[[], T], lease_s: float) -> tuple[T, bool]:
        with self._guard:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            cached = lookup()
            if cached is not None:
                return cached, False
            return compute(), True
