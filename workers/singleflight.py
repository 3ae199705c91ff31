"""Concurrent identical judge requests make one provider call.

The first worker to take the lock for a cache key calls the judge and fills the cache; the others wait for the
cache entry (or for the lock to be released or to lapse, then take it themselves: if the first call failed, the
next waiter tries). Redis serves several workers and processes; the in-process variant serves the standalone mode.
If Redis cannot be reached the Redis variant degrades to the in-process one (still correct, only less shared).

Two ways in:

* ``run(key, lookup, compute)``: look the cache up, take the lock, look again, compute (which fills the cache),
  release. Every step is in the call.
* ``acquire(key)`` / ``release(leases, committed)``: the hot path of a batch that has just looked its keys up in
  the cache. ``acquire`` takes the lock without a second cache lookup and returns None when another worker holds
  it or filled the entry a moment ago (then the caller goes through ``run``, which finds the entry or waits).
  The caller writes the cache entry together with its verdict and only then releases; ``committed`` leases leave a
  *filled* marker (for the lock lease) so that a worker whose cache lookup predates the write does not pay for the
  same request again.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

import redis

log = logging.getLogger(__name__)
T = TypeVar("T")

# take the lock unless the entry was filled a moment ago; 1 = taken, 0 = held elsewhere or filled
_ACQUIRE = """
if redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
return 0
"""

# ARGV: n, then per lease: token, filled (0/1), marker ttl ms; KEYS: per lease: lock key, filled-marker key
_RELEASE_MANY = """
local n = tonumber(ARGV[1])
for i = 1, n do
  local lock, marker = KEYS[2 * i - 1], KEYS[2 * i]
  local token, filled, ttl = ARGV[3 * i - 1], ARGV[3 * i], ARGV[3 * i + 1]
  if filled == '1' then redis.call('SET', marker, '1', 'PX', ttl) end
  if redis.call('GET', lock) == token then redis.call('DEL', lock) end
end
return n
"""


@dataclass
class Lease:
    """A single-flight lock this worker holds. ``filled`` once its reply is about to be written to the cache."""

    key: str
    token: str
    ttl_ms: int
    local: bool = False
    filled: bool = False


class SingleFlight(Protocol):
    def run(
        self, key: str, lookup: Callable[[], T | None], compute: Callable[[], T | None], lease_s: float
    ) -> tuple[T | None, bool]:
        """Return (value, computed_here). ``lookup`` reads the cache; ``compute`` calls the judge and fills it."""
        ...

    def acquire(self, key: str, lease_s: float) -> Lease | None:
        """Take the lock for a key the caller has just missed in the cache; None: use ``run`` instead."""
        ...

    def release(self, leases: Sequence[Lease], committed: bool) -> None:
        """Give the locks back; ``committed``: the filled leases' cache entries are written."""
        ...


class LocalSingleFlight:
    def __init__(self) -> None:
        self._locks: dict[str, tuple[threading.Lock, int]] = {}
        self._guard = threading.Lock()
        self._filled: dict[str, float] = {}  # key -> monotonic deadline of its filled marker

    def acquire(self, key: str, lease_s: float) -> Lease | None:
        with self._guard:
            if self._filled.get(key, 0.0) > time.monotonic():
                return None
            lock, users = self._locks.get(key, (threading.Lock(), 0))
            if not lock.acquire(blocking=False):
                return None
            self._locks[key] = (lock, users + 1)
        return Lease(key, "local", max(1, int(lease_s * 1000)), local=True)

    def release(self, leases: Sequence[Lease], committed: bool) -> None:
        now = time.monotonic()
        with self._guard:
            for lease in leases:
                if committed and lease.filled:
                    self._filled[lease.key] = now + lease.ttl_ms / 1000
                lock, users = self._locks[lease.key]
                lock.release()
                if users <= 1:
                    del self._locks[lease.key]
                else:
                    self._locks[lease.key] = (lock, users - 1)
            if len(self._filled) > 10_000:  # forget lapsed markers now and then
                self._filled = {k: deadline for k, deadline in self._filled.items() if deadline > now}

    def run(
        self, key: str, lookup: Callable[[], T | None], compute: Callable[[], T | None], lease_s: float
    ) -> tuple[T | None, bool]:
        with self._guard:
            lock, users = self._locks.get(key, (threading.Lock(), 0))
            self._locks[key] = (lock, users + 1)
        try:
            with lock:
                cached = lookup()
                if cached is not None:
                    return cached, False
                value = compute()
                if value is not None:
                    with self._guard:
                        self._filled[key] = time.monotonic() + lease_s
                return value, True
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
        self._acquire = client.register_script(_ACQUIRE)
        self._release_many = client.register_script(_RELEASE_MANY)
        self._fallback = LocalSingleFlight()

    def acquire(self, key: str, lease_s: float) -> Lease | None:
        token = uuid.uuid4().hex
        ttl_ms = max(1, int(lease_s * 1000))
        try:
            taken = self._acquire(keys=[f"dj:inflight:{key}", f"dj:filled:{key}"], args=[token, ttl_ms])
        except redis.RedisError as exc:
            log.warning("single-flight: Redis unavailable (%s); de-duplicating in this process only", exc)
            return self._fallback.acquire(key, lease_s)
        return Lease(key, token, ttl_ms) if taken else None

    def release(self, leases: Sequence[Lease], committed: bool) -> None:
        local = [lease for lease in leases if lease.local]
        if local:
            self._fallback.release(local, committed)
        shared = [lease for lease in leases if not lease.local]
        if not shared:
            return
        keys: list[str] = []
        args: list[str | int] = [len(shared)]
        for lease in shared:
            keys += [f"dj:inflight:{lease.key}", f"dj:filled:{lease.key}"]
            args += [lease.token, int(committed and lease.filled), lease.ttl_ms]
        with contextlib.suppress(redis.RedisError):  # else the locks lapse on their own
            self._release_many(keys=keys, args=args)

    def run(
        self, key: str, lookup: Callable[[], T | None], compute: Callable[[], T | None], lease_s: float
    ) -> tuple[T | None, bool]:
        try:
            return self._run(key, lookup, compute, lease_s)
        except redis.RedisError as exc:
            log.warning("single-flight: Redis unavailable (%s); de-duplicating in this process only", exc)
            return self._fallback.run(key, lookup, compute, lease_s)

    def _run(
        self, key: str, lookup: Callable[[], T | None], compute: Callable[[], T | None], lease_s: float
    ) -> tuple[T | None, bool]:
        lock_key = f"dj:inflight:{key}"
        token = uuid.uuid4().hex
        while True:
            cached = lookup()
            if cached is not None:
                return cached, False
            lease = Lease(key, token, max(1, int(lease_s * 1000)))
            if self.client.set(lock_key, token, nx=True, px=lease.ttl_ms):
                try:
                    cached = lookup()  # filled between our lookup and the lock
                    if cached is not None:
                        return cached, False
                    value = compute()
                    lease.filled = value is not None
                    return value, True
                finally:
                    self.release([lease], committed=True)
            while self.client.exists(lock_key):
                time.sleep(self.poll_s)
                cached = lookup()
                if cached is not None:
                    return cached, False
