"""Concurrent identical judge requests make one provider call.

The first worker to take the lock for a cache key calls the judge and fills the cache; the others wait for the
cache entry (or for the lock to be released or to lapse, then take it themselves: if the first call failed, the
next waiter tries). Redis serves several workers and processes; the in-process variant serves the standalone mode.
If Redis cannot be reached the Redis variant degrades to the in-process one (still correct, only less shared).

Two ways in:

* ``run(key, lookup, compute)``: look the cache up, take the lock, look again, compute (which fills the cache),
  release. Every step is in the call.
* ``run(..., wait=False)``: on a call slot, where waiting could starve the holder: a key held by another request
  raises ``KeyHeld`` instead, and the caller waits off the slot (``held`` says when the key is let go; the
  judge engine's ``workers.keywait.HeldKeyWaiter``) and then comes back, to find the entry or take the lock.
* ``acquire(key)`` / ``release(leases, committed)``: the hot path of a batch that has just looked its keys up in
  the cache. ``acquire`` takes the lock without a second cache lookup and returns None when another worker holds
  it or filled the entry a moment ago (then the caller goes through ``run``, which finds the entry or waits).
  The caller writes the cache entry together with its verdict and only then releases; ``committed`` leases leave a
  *filled* marker (for the lock lease) so that a worker whose cache lookup predates the write does not pay for the
  same request again.

A held lock is renewed while its call is in flight (and until its verdict is written): every third of its lease a
keeper thread extends each lock this process still holds (one script call for all of them, compare-and-set on the
lock's token), as ``workers.leases`` does for claims. So a call slower than the lease does not let an identical
request go out beside it; a killed worker stops renewing and its locks lapse within one lease. A lease nobody
releases (dropped by a bug) stops being renewed once it is garbage.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
import weakref
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

# the same for several keys at once. KEYS: per key its lock and its filled marker; ARGV: lease ms, then per key its
# token. Returns per key 1 (taken) or 0
_ACQUIRE_MANY = """
local out = {}
for i = 1, #KEYS / 2 do
  local lock, marker = KEYS[2 * i - 1], KEYS[2 * i]
  if redis.call('EXISTS', marker) == 0 and redis.call('SET', lock, ARGV[i + 1], 'NX', 'PX', ARGV[1]) then
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
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


# KEYS: lock keys; ARGV: per lock its token and lease ms. Extend the locks still held by these tokens
_RENEW = """
local n = 0
for i = 1, #KEYS do
  if redis.call('GET', KEYS[i]) == ARGV[2 * i - 1] then
    redis.call('PEXPIRE', KEYS[i], ARGV[2 * i])
    n = n + 1
  end
end
return n
"""


class KeyHeld(Exception):
    """``run(..., wait=False)`` missed the cache and another request holds the key's lock. A batch takes its misses'
    locks before its judgments reach the call slots, so a judgment that waited on a slot for such a lock could wait
    for a holder queued behind it: with every slot taken by waiters, nothing ran and the keeper renewed the locks for
    ever. The caller waits off the slot instead and asks again once ``held`` says the key is free."""

    def __init__(self, key: str) -> None:
        super().__init__(f"single-flight key {key[:16]}... is held by another request")
        self.key = key


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
        self,
        key: str,
        lookup: Callable[[], T | None],
        compute: Callable[[], T | None],
        lease_s: float,
        wait: bool = True,
    ) -> tuple[T | None, bool]:
        """Return (value, computed_here). ``lookup`` reads the cache; ``compute`` calls the judge and fills it.
        ``wait=False``: raise ``KeyHeld`` rather than wait for another holder of the key."""
        ...

    def held(self, keys: Sequence[str]) -> list[bool]:
        """Per key: is its lock held (by any request, here or elsewhere)?"""
        ...

    def acquire(self, key: str, lease_s: float) -> Lease | None:
        """Take the lock for a key the caller has just missed in the cache; None: use ``run`` instead."""
        ...

    def acquire_many(self, keys: Sequence[str], lease_s: float) -> list[Lease | None]:
        """``acquire`` for several keys in one round trip (a batch's misses); per key its lease or None."""
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

    def acquire_many(self, keys: Sequence[str], lease_s: float) -> list[Lease | None]:
        return [self.acquire(key, lease_s) for key in keys]

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

    def held(self, keys: Sequence[str]) -> list[bool]:
        with self._guard:
            return [key in self._locks and self._locks[key][0].locked() for key in keys]

    def run(
        self,
        key: str,
        lookup: Callable[[], T | None],
        compute: Callable[[], T | None],
        lease_s: float,
        wait: bool = True,
    ) -> tuple[T | None, bool]:
        with self._guard:
            lock, users = self._locks.get(key, (threading.Lock(), 0))
            self._locks[key] = (lock, users + 1)
        try:
            if not lock.acquire(blocking=wait):
                cached = lookup()
                if cached is not None:
                    return cached, False
                raise KeyHeld(key)
            try:
                cached = lookup()
                if cached is not None:
                    return cached, False
                value = compute()
                if value is not None:
                    with self._guard:
                        self._filled[key] = time.monotonic() + lease_s
                return value, True
            finally:
                lock.release()
        finally:
            with self._guard:  # forget the lock with its last user (the table does not grow with the cache)
                lock, users = self._locks[key]
                if users <= 1:
                    del self._locks[key]
                else:
                    self._locks[key] = (lock, users - 1)


class LockKeeper:
    """Renews the Redis single-flight locks this process holds, every third of the shortest lease held."""

    def __init__(self, client: redis.Redis) -> None:
        self._renew = client.register_script(_RENEW)
        self._held: weakref.WeakValueDictionary[int, Lease] = weakref.WeakValueDictionary()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def hold(self, lease: Lease) -> None:
        with self._lock:
            self._held[id(lease)] = lease
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="dj-flight-keeper", daemon=True)
                self._thread.start()

    def drop(self, lease: Lease) -> None:
        with self._lock:
            if self._held.get(id(lease)) is lease:
                del self._held[id(lease)]

    def held(self) -> list[Lease]:
        with self._lock:
            return list(self._held.values())

    def renew_once(self) -> int:
        held = self.held()
        if not held:
            return 0
        args: list[str | int] = []
        for lease in held:
            args += [lease.token, lease.ttl_ms]
        try:
            return int(self._renew(keys=[f"dj:inflight:{lease.key}" for lease in held], args=args))
        except redis.RedisError as exc:  # the locks may lapse; the stash still keeps what was paid
            log.warning("single-flight: could not renew %d locks (%s)", len(held), exc)
            return 0

    def shortest_ttl_ms(self) -> int | None:
        """The shortest lease held, or None when nothing is held. Returns a number, not the leases: a reference kept
        across the keeper's sleep would keep a lease its holder dropped alive in the weak map, renewed forever."""
        with self._lock:
            return min((lease.ttl_ms for lease in self._held.values()), default=None)

    def _run(self) -> None:
        while True:
            shortest_ms = self.shortest_ttl_ms()
            if shortest_ms is None:
                with self._lock:
                    if not self._held:  # nothing to keep: end (the next hold starts another)
                        self._thread = None
                        return
                continue
            time.sleep(max(0.01, shortest_ms / 3000))
            self.renew_once()


class RedisSingleFlight:
    def __init__(self, client: redis.Redis, poll_s: float = 0.05, holder: str = "") -> None:
        self.client = client
        self.poll_s = poll_s
        # lock tokens begin with the process's instance id: the sweeper frees a dead worker's locks at once
        # (judge_api.heartbeats.release_locks) instead of letting its waiters wait out the lease
        self.holder = holder
        self._acquire = client.register_script(_ACQUIRE)
        self._acquire_many = client.register_script(_ACQUIRE_MANY)
        self._release_many = client.register_script(_RELEASE_MANY)
        self._fallback = LocalSingleFlight()
        self.keeper = LockKeeper(client)

    def acquire(self, key: str, lease_s: float) -> Lease | None:
        token = self.holder + uuid.uuid4().hex
        ttl_ms = max(1, int(lease_s * 1000))
        try:
            taken = self._acquire(keys=[f"dj:inflight:{key}", f"dj:filled:{key}"], args=[token, ttl_ms])
        except redis.RedisError as exc:
            log.warning("single-flight: Redis unavailable (%s); de-duplicating in this process only", exc)
            return self._fallback.acquire(key, lease_s)
        if not taken:
            return None
        lease = Lease(key, token, ttl_ms)
        self.keeper.hold(lease)
        return lease

    def acquire_many(self, keys: Sequence[str], lease_s: float) -> list[Lease | None]:
        """One script call for a batch's keys instead of one per judgment on its call slot (issue 26: a Redis round
        trip a judgment). A key listed twice is taken once: its second lease is None."""
        if not keys:
            return []
        ttl_ms = max(1, int(lease_s * 1000))
        batch = self.holder + uuid.uuid4().hex
        tokens = [f"{batch}.{index}" for index in range(len(keys))]
        redis_keys: list[str] = []
        for key in keys:
            redis_keys += [f"dj:inflight:{key}", f"dj:filled:{key}"]
        try:
            taken = self._acquire_many(keys=redis_keys, args=[ttl_ms, *tokens])
        except redis.RedisError as exc:
            log.warning("single-flight: Redis unavailable (%s); de-duplicating in this process only", exc)
            return self._fallback.acquire_many(keys, lease_s)
        leases: list[Lease | None] = []
        for key, token, ok in zip(keys, tokens, taken, strict=True):
            lease = Lease(key, token, ttl_ms) if int(ok) else None
            if lease is not None:
                self.keeper.hold(lease)
            leases.append(lease)
        return leases

    def release(self, leases: Sequence[Lease], committed: bool) -> None:
        local = [lease for lease in leases if lease.local]
        if local:
            self._fallback.release(local, committed)
        shared = [lease for lease in leases if not lease.local]
        if not shared:
            return
        for lease in shared:
            self.keeper.drop(lease)
        keys: list[str] = []
        args: list[str | int] = [len(shared)]
        for lease in shared:
            keys += [f"dj:inflight:{lease.key}", f"dj:filled:{lease.key}"]
            args += [lease.token, int(committed and lease.filled), lease.ttl_ms]
        with contextlib.suppress(redis.RedisError):  # else the locks lapse on their own
            self._release_many(keys=keys, args=args)

    def held(self, keys: Sequence[str]) -> list[bool]:
        local = self._fallback.held(keys)
        try:
            pipe = self.client.pipeline(transaction=False)
            for key in keys:
                pipe.exists(f"dj:inflight:{key}")
            shared = [bool(found) for found in pipe.execute()]
        except redis.RedisError:  # nothing known: report free, and the caller's next ``run`` finds out
            shared = [False] * len(keys)
        return [a or b for a, b in zip(local, shared, strict=True)]

    def run(
        self,
        key: str,
        lookup: Callable[[], T | None],
        compute: Callable[[], T | None],
        lease_s: float,
        wait: bool = True,
    ) -> tuple[T | None, bool]:
        try:
            return self._run(key, lookup, compute, lease_s, wait)
        except redis.RedisError as exc:
            log.warning("single-flight: Redis unavailable (%s); de-duplicating in this process only", exc)
            return self._fallback.run(key, lookup, compute, lease_s, wait)

    def _run(
        self, key: str, lookup: Callable[[], T | None], compute: Callable[[], T | None], lease_s: float, wait: bool
    ) -> tuple[T | None, bool]:
        lock_key = f"dj:inflight:{key}"
        token = self.holder + uuid.uuid4().hex
        while True:
            cached = lookup()
            if cached is not None:
                return cached, False
            lease = Lease(key, token, max(1, int(lease_s * 1000)))
            if self.client.set(lock_key, token, nx=True, px=lease.ttl_ms):
                self.keeper.hold(lease)
                try:
                    cached = lookup()  # filled between our lookup and the lock
                    if cached is not None:
                        return cached, False
                    value = compute()
                    lease.filled = value is not None
                    return value, True
                finally:
                    self.release([lease], committed=True)
            if not wait:
                cached = lookup()  # filled and let go between our lookup and the lock
                if cached is not None:
                    return cached, False
                raise KeyHeld(key)
            while self.client.exists(lock_key):
                time.sleep(self.poll_s)
                cached = lookup()
                if cached is not None:
                    return cached, False
