"""Rate limits per provider+model shared by several processes through Redis: N workers together stay under the
limit (requests/min and tokens/min), and hitting a limit slows work down instead of failing it."""

from __future__ import annotations

import multiprocessing
import threading
import time
from typing import Any

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from judge_api.config import Settings
from workers.ratelimit import Limit, LocalRateLimiter, RedisRateLimiter, limit_for, parse_limits

from .harness import Harness, Timer, dialogue_item

RPM = 600  # 10 requests per second
RATE = RPM / 60
BURST_S = 1.0
PROCESSES, PER_PROCESS = 3, 20


def _acquire_in_process(redis_url: str, start: Any, out: Any) -> None:
    limiter = RedisRateLimiter(redis.Redis.from_url(redis_url), burst_s=BURST_S)
    start.wait(10)
    stamps = []
    for _ in range(PER_PROCESS):
        limiter.acquire("openai:gpt-4o", Limit(rpm=RPM), tokens=1)
        stamps.append(time.time())
    out.put(stamps)


def assert_within_limit(stamps: list[float]) -> None:
    """The documented guarantee: n calls take >= (n-1)/r - burst; any 1 s window holds <= 1 + r*(1 + burst)."""
    stamps = sorted(stamps)
    n = len(stamps)
    span = stamps[-1] - stamps[0]
    assert span >= (n - 1) / RATE - BURST_S - 0.05, span  # 60 calls at 10/s with a 1 s burst: >= 4.9 s
    assert span <= (n - 1) / RATE + 1.5, span  # ... and not much slower than the limit allows
    per_window = max(sum(1 for t in stamps if s <= t < s + 1.0) for s in stamps)
    assert per_window <= 1 + RATE * (1 + BURST_S), per_window  # rate + burst: 21


def test_redis_limiter_is_shared_by_processes(redis_url: str) -> None:
    context = multiprocessing.get_context("fork")
    start, out = context.Event(), context.Queue()
    processes = [context.Process(target=_acquire_in_process, args=(redis_url, start, out)) for _ in range(PROCESSES)]
    for process in processes:
        process.start()
    time.sleep(0.3)
    start.set()
    stamps = [t for _ in processes for t in out.get(timeout=30)]
    for process in processes:
        process.join(10)
        assert process.exitcode == 0
    assert len(stamps) == PROCESSES * PER_PROCESS
    assert_within_limit(stamps)


def test_local_limiter_is_equivalent_for_threads() -> None:
    limiter = LocalRateLimiter(burst_s=BURST_S)
    stamps: list[float] = []
    lock = threading.Lock()

    def worker() -> None:
        for _ in range(PER_PROCESS):
            limiter.acquire("openai:gpt-4o", Limit(rpm=RPM), tokens=1)
            with lock:
                stamps.append(time.time())

    threads = [threading.Thread(target=worker) for _ in range(PROCESSES)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert_within_limit(stamps)


@pytest.mark.parametrize("kind", ["redis", "local"])
def test_tokens_per_minute(kind: str, redis_url: str) -> None:
    limiter = RedisRateLimiter(redis.Redis.from_url(redis_url)) if kind == "redis" else LocalRateLimiter()
    limit = Limit(rpm=0, tpm=60_000)  # 1,000 tokens/s, burst 1 s
    # one request bigger than the burst still goes at once when the line is idle (its cost is charged after) ...
    assert limiter.acquire("anthropic:claude", limit, tokens=3_000) == 0
    # ... and the next one waits until that debt is paid down to the burst: 3,000 tokens at 1,000/s - 1 s
    with Timer() as timer:
        waited = limiter.acquire("anthropic:claude", limit, tokens=500)
    assert 1.8 <= waited <= 2.1 and timer.elapsed >= 1.8
    # another judge has its own budget
    assert limiter.acquire("anthropic:other", limit, tokens=3_000) == 0


def test_pause_after_a_429_holds_every_worker(redis_url: str) -> None:
    first = RedisRateLimiter(redis.Redis.from_url(redis_url))
    second = RedisRateLimiter(redis.Redis.from_url(redis_url))
    first.pause("openai:gpt-4o", 0.8)
    with Timer() as timer:
        second.acquire("openai:gpt-4o", Limit(), tokens=10)  # even an unlimited judge waits out the pause
    assert 0.7 <= timer.elapsed <= 1.3
    assert second.acquire("openai:gpt-4o-mini", Limit(), tokens=10) == 0  # other judges are not paused


def test_redis_outage_degrades_to_local_limiting() -> None:
    dead = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2, retry=Retry(NoBackoff(), 0))
    limiter = RedisRateLimiter(dead, burst_s=0.0)
    limit = Limit(rpm=600)
    with Timer() as timer:
        for _ in range(3):
            limiter.acquire("openai:gpt-4o", limit, tokens=1)
    assert timer.elapsed >= 0.2  # still limited (0.1 s apart), and no exception
    limiter.pause("openai:gpt-4o", 0.0)


def test_limits_are_configured_per_judge_pattern() -> None:
    settings = Settings(DJ_RATE_LIMITS="openai:*=500/300000, openai:gpt-4o-mini=5000/0", DJ_DEFAULT_RPM=60)
    assert limit_for("openai:gpt-4o", settings) == Limit(500, 300_000)
    assert limit_for("openai:gpt-4o-mini", settings) == Limit(5000, 0)  # later patterns win
    assert limit_for("anthropic:claude-sonnet-4-5", settings) == Limit(60, 0)
    with pytest.raises(ValueError, match="rpm and tpm"):
        parse_limits("openai:*=lots")


def test_a_limit_hit_slows_the_run_down_instead_of_failing_it(harness: Harness) -> None:
    """Our limit (60/min: one call a second after a 1 s burst) and the provider's (the simulator answers 429 with
    Retry-After beyond 3 calls a second) both only slow the run down."""
    judge = harness.judge("openai-compatible")
    harness.build(DJ_RATE_LIMITS=f"{judge}=60/0")
    items = [dialogue_item(f"i{k}", {"s": f"Rex {k}. <<q={40 + k}>>"}) for k in range(4)]
    with Timer() as timer:
        run_id = harness.run(items=items, rubrics=["rsum-single"], judges=[judge], aspects=["consistency"], threads=4)
    rows = harness.rows(run_id)
    assert all(r.status == "done" and r.attempts == 1 for r in rows)
    assert timer.elapsed >= 1.9  # calls 0 and 1 at once (burst), then one a second

    harness.sim.set_script({"rate_limit_rpm": 3, "rate_limit_window_seconds": 1.0})
    harness.build(DJ_RATE_LIMITS="")  # no limit of ours: the provider's 429s come back
    items = [dialogue_item(f"j{k}", {"s": f"Rex {k}. <<q={60 + k}>>"}) for k in range(8)]
    run_id = harness.run(items=items, rubrics=["rsum-single"], judges=[judge], aspects=["consistency"], threads=8)
    rows = harness.rows(run_id)
    assert all(r.status == "done" for r in rows)
    assert sorted(float(r.score or 0) for r in rows) == [60.0 + k for k in range(8)]
    assert harness.sim.stats()["by_status"].get("429", 0) >= 1  # the provider's limit was hit, and survived


def test_an_unlimited_judge_reads_the_shared_pause_at_most_every_check_interval(redis_url: str) -> None:
    from workers import ratelimit

    first = RedisRateLimiter(redis.Redis.from_url(redis_url))
    second = RedisRateLimiter(redis.Redis.from_url(redis_url))
    reads = 0
    paused_script = second._paused

    def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal reads
        reads += 1
        return paused_script(*args, **kwargs)

    second._paused = counted  # type: ignore[assignment]
    started = time.monotonic()
    while time.monotonic() - started < 0.35:
        assert second.acquire("openai:gpt-4o", Limit(), tokens=10) == 0
    assert 1 <= reads <= 0.35 / ratelimit.PAUSE_CHECK_S + 2  # not one round trip per call
    first.pause("openai:gpt-4o", 0.6)  # another worker got a 429
    time.sleep(ratelimit.PAUSE_CHECK_S)
    with Timer() as timer:
        second.acquire("openai:gpt-4o", Limit(), tokens=10)
    assert 0.3 <= timer.elapsed <= 0.9  # seen within the check interval and waited out
