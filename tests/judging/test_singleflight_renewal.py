"""The single-flight lock of an identical request is renewed while its call is in flight (issue 26.6): a call
slower than the lock's lease does not let a second identical call out, from this worker or another, and a holder
that stops renewing (its process died) lets the lock lapse within one lease. Real Redis; each RedisSingleFlight
stands for one worker process."""

from __future__ import annotations

import gc
import threading
import time
import uuid
from typing import Any

import redis

from workers.singleflight import RedisSingleFlight

LEASE_S = 0.3


def test_a_call_slower_than_the_lease_lets_no_identical_call_out(machine_redis_url: str) -> None:
    worker_a = RedisSingleFlight(redis.Redis.from_url(machine_redis_url))
    worker_b = RedisSingleFlight(redis.Redis.from_url(machine_redis_url))
    cache: dict[str, str] = {}
    calls: list[str] = []
    results: dict[str, Any] = {}

    def compute(who: str) -> str:
        calls.append(who)
        time.sleep(LEASE_S * 5)  # the call outlives its lock's lease several times over
        cache["k"] = f"reply of {who}"
        return cache["k"]

    def ask(who: str, flight: RedisSingleFlight) -> None:
        results[who] = flight.run("k", lambda: cache.get("k"), lambda: compute(who), lease_s=LEASE_S)

    first = threading.Thread(target=ask, args=("a", worker_a))
    first.start()
    time.sleep(LEASE_S / 3)
    second = threading.Thread(target=ask, args=("b", worker_b))
    second.start()
    first.join(10)
    second.join(10)
    assert calls == ["a"]
    assert results == {"a": ("reply of a", True), "b": ("reply of a", False)}


def test_a_lock_taken_for_a_batch_is_held_until_released(machine_redis_url: str) -> None:
    """The hot path: the lock is taken with ``acquire`` and released with the verdict's write, which may come well
    after the lease (a slow call, then the write)."""
    worker_a = RedisSingleFlight(redis.Redis.from_url(machine_redis_url))
    worker_b = RedisSingleFlight(redis.Redis.from_url(machine_redis_url))
    lease = worker_a.acquire("k", LEASE_S)
    assert lease is not None
    time.sleep(LEASE_S * 4)
    assert worker_b.acquire("k", LEASE_S) is None
    worker_a.release([lease], committed=False)
    assert worker_b.acquire("k", LEASE_S) is not None


def test_a_holder_that_stops_renewing_lets_the_lock_lapse(machine_redis_url: str) -> None:
    """A worker killed mid-call renews nothing: its lock lapses within one lease and the next worker takes it
    (here the holder's lease is dropped unreleased, as a dead process would leave it)."""
    worker_a = RedisSingleFlight(redis.Redis.from_url(machine_redis_url))
    worker_b = RedisSingleFlight(redis.Redis.from_url(machine_redis_url))
    lease = worker_a.acquire("k", LEASE_S)
    assert lease is not None and worker_a.keeper.held() == [lease]
    # The keeper is now asleep between renewals: a reference it kept across that sleep kept the dropped lease alive
    # (and renewed, never lapsing); CI caught it whenever the keeper had looked before the drop.
    time.sleep(LEASE_S / 6)
    del lease
    gc.collect()
    assert worker_a.keeper.held() == []
    time.sleep(LEASE_S * 1.5)
    assert worker_b.acquire("k", LEASE_S) is not None


def test_a_batch_takes_its_locks_in_one_call_and_holds_them_as_acquire_does(machine_redis_url: str) -> None:
    """``acquire_many`` (a batch's misses, one round trip): a free key is taken, one held elsewhere or filled a
    moment ago is not, a key listed twice is taken once, and the locks are renewed and released like ``acquire``'s."""
    client = redis.Redis.from_url(machine_redis_url)
    worker_a = RedisSingleFlight(client)
    worker_b = RedisSingleFlight(redis.Redis.from_url(machine_redis_url))
    tag = uuid.uuid4().hex  # the machine's Redis is shared
    free_a, free_b, held_key, filled_key = (f"{name}-{tag}" for name in ("free1", "free2", "held", "filled"))
    warm = worker_a.acquire_many([f"warm-{tag}"], LEASE_S)  # the script loaded (a first call may take two)
    worker_a.release([lease for lease in warm if lease is not None], committed=False)
    held_elsewhere = worker_b.acquire(held_key, LEASE_S)
    assert held_elsewhere is not None
    filled = worker_b.acquire(filled_key, LEASE_S)
    assert filled is not None
    filled.filled = True
    worker_b.release([filled], committed=True)  # leaves the 'filled a moment ago' marker
    scripts_before = int(client.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0))
    leases = worker_a.acquire_many([free_a, held_key, free_b, filled_key, free_a], LEASE_S)
    scripts_after = int(client.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0))
    assert scripts_after - scripts_before == 1
    free1, held, free2, filled_again, twice = leases
    assert free1 is not None and free2 is not None
    assert held is None and filled_again is None and twice is None
    assert len({free1.token, free2.token}) == 2
    time.sleep(LEASE_S * 4)  # renewed while held
    assert worker_b.acquire(free_a, LEASE_S) is None and worker_b.acquire(free_b, LEASE_S) is None
    worker_a.release([free1, free2], committed=False)
    assert worker_b.acquire(free_a, LEASE_S) is not None and worker_b.acquire(free_b, LEASE_S) is not None
