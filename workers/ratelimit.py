"""Provider rate limits (requests/min and tokens/min per provider+model), shared by every worker through Redis.

Generic cell rate algorithm with reservation: each call reserves its slot on a shared timeline (one per judge key
and resource) and sleeps until the slot comes, so N workers together stay under the limit and a limit slows work
down instead of failing it. The cost of a call is charged *after* it starts (the timeline moves by
``cost x interval``), so one large request never waits for more tokens than the limit allows in total.

Guarantee, for a request rate r = rpm/60 per second and the burst tolerance ``burst_s``: at most
``1 + r * (W + burst_s)`` calls start in any window of W seconds, and n calls in a row take at least
``(n - 1) / r - burst_s`` seconds. With rpm=600 and burst_s=1: 11 calls may go at once, then one every 0.1 s.

A provider's own 429 pauses the judge for everyone (``pause``): the Retry-After deadline is stored on the shared
timeline, so the other workers wait for it too instead of collecting 429s of their own. A judge with no limit
configured has no timeline to reserve on: each process reads its pause from Redis at most every
``PAUSE_CHECK_S`` (a round trip per call was ~0.1 ms of the service's CPU per judgment, issue 26), so another
worker's pause is seen within that time; this process's own pause at once.

The in-process variant serves the standalone mode (CI gate without Redis); the Redis variant falls back to it
(with a warning) when Redis cannot be reached, so a Redis blip slows nothing down to a failure.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Protocol

import redis

from judge_api.ratelimits import Limit, limit_for, parse_limits

__all__ = ["Limit", "limit_for", "parse_limits"]

log = logging.getLogger(__name__)


class RateLimiter(Protocol):
    def acquire(self, judge_key: str, limit: Limit, tokens: int) -> float:
        """Block until the call may go; return the seconds waited."""
        ...

    def pause(self, judge_key: str, seconds: float) -> None:
        """The provider said "slow down": hold every call of this judge for ``seconds``."""
        ...


# KEYS: request key, token key, pause key. ARGV: request interval (s), token interval per token (s), tokens,
# burst (s). Returns the delay (s, as a string) after which the reserved slot starts.
_RESERVE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local function reserve(key, interval, cost, burst)
  if interval <= 0 then return 0 end
  local tat = tonumber(redis.call('GET', key) or '0')
  if tat < now then tat = now end
  local new_tat = tat + interval * cost
  redis.call('SET', key, tostring(new_tat), 'PX', math.ceil((new_tat - now + 60) * 1000))
  local wait = tat - burst - now
  if wait < 0 then wait = 0 end
  return wait
end
local paused = tonumber(redis.call('GET', KEYS[3]) or '0') - now
local w1 = reserve(KEYS[1], tonumber(ARGV[1]), 1, tonumber(ARGV[4]))
local w2 = reserve(KEYS[2], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]))
local delay = math.max(w1, w2, paused, 0)
return tostring(delay)
"""

# KEYS: pause key. Returns the seconds the judge stays paused (as a string).
_PAUSED = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local paused = tonumber(redis.call('GET', KEYS[1]) or '0') - now
if paused < 0 then paused = 0 end
return tostring(paused)
"""

PAUSE_CHECK_S = 0.1  # an unlimited judge's shared pause is read at most this often per process

# KEYS: pause key. ARGV: seconds. Moves the pause deadline forward (never back).
_PAUSE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local until_ = now + tonumber(ARGV[1])
local current = tonumber(redis.call('GET', KEYS[1]) or '0')
if until_ > current then
  redis.call('SET', KEYS[1], tostring(until_), 'PX', math.ceil(tonumber(ARGV[1]) * 1000) + 1000)
end
return 1
"""


def _intervals(limit: Limit) -> tuple[float, float]:
    return (60.0 / limit.rpm if limit.rpm else 0.0, 60.0 / limit.tpm if limit.tpm else 0.0)


class LocalRateLimiter:
    """The same reservation algorithm for one process."""

    def __init__(self, burst_s: float = 1.0) -> None:
        self.burst_s = burst_s
        self._tat: dict[str, float] = {}
        self._paused: dict[str, float] = {}
        self._lock = threading.Lock()

    def _reserve(self, key: str, interval: float, cost: int, now: float) -> float:
        if interval <= 0:
            return 0.0
        tat = max(self._tat.get(key, now), now)
        self._tat[key] = tat + interval * cost
        return max(0.0, tat - self.burst_s - now)

    def acquire(self, judge_key: str, limit: Limit, tokens: int) -> float:
        request_interval, token_interval = _intervals(limit)
        with self._lock:
            now = time.monotonic()
            delay = max(
                self._paused.get(judge_key, 0.0) - now,
                self._reserve(f"req:{judge_key}", request_interval, 1, now),
                self._reserve(f"tok:{judge_key}", token_interval, max(1, tokens), now),
                0.0,
            )
        if delay > 0:
            time.sleep(delay)
        return delay

    def pause(self, judge_key: str, seconds: float) -> None:
        with self._lock:
            until = time.monotonic() + max(0.0, seconds)
            self._paused[judge_key] = max(self._paused.get(judge_key, 0.0), until)


class RedisRateLimiter:
    def __init__(self, client: redis.Redis, burst_s: float = 1.0) -> None:
        self.client = client
        self.burst_s = burst_s
        self._reserve = client.register_script(_RESERVE)
        self._pause = client.register_script(_PAUSE)
        self._paused = client.register_script(_PAUSED)
        self._fallback = LocalRateLimiter(burst_s)
        self._pause_seen: dict[str, tuple[float, float]] = {}  # judge -> (read at, paused until), monotonic

    def acquire(self, judge_key: str, limit: Limit, tokens: int) -> float:
        request_interval, token_interval = _intervals(limit)
        if not request_interval and not token_interval:
            return self._wait_out_pause(judge_key)
        try:
            delay = float(
                self._reserve(
                    keys=[f"dj:rl:req:{judge_key}", f"dj:rl:tok:{judge_key}", f"dj:rl:pause:{judge_key}"],
                    args=[request_interval, token_interval, max(1, tokens), self.burst_s],
                )
            )
        except redis.RedisError as exc:
            log.warning("rate limiter: Redis unavailable (%s); limiting this process only", exc)
            return self._fallback.acquire(judge_key, limit, tokens)
        if delay > 0:
            time.sleep(delay)
        return delay

    def _wait_out_pause(self, judge_key: str) -> float:
        """An unlimited judge: wait only for a pause, read from Redis at most every PAUSE_CHECK_S."""
        now = time.monotonic()
        read_at, until = self._pause_seen.get(judge_key, (-PAUSE_CHECK_S, 0.0))
        if now - read_at >= PAUSE_CHECK_S:
            # this thread reads it: the other call slots asking meanwhile use what was read last, not a read each
            self._pause_seen[judge_key] = (now, until)
            try:
                remaining = float(self._paused(keys=[f"dj:rl:pause:{judge_key}"]))
            except redis.RedisError as exc:
                log.warning("rate limiter: Redis unavailable (%s); limiting this process only", exc)
                return self._fallback.acquire(judge_key, Limit(), 1)
            until = max(until if until > now else 0.0, now + remaining if remaining > 0 else 0.0)
            self._pause_seen[judge_key] = (now, until)
        delay = max(0.0, until - now)
        if delay > 0:
            time.sleep(delay)
        return delay

    def pause(self, judge_key: str, seconds: float) -> None:
        self._fallback.pause(judge_key, seconds)
        now = time.monotonic()
        read_at, until = self._pause_seen.get(judge_key, (-PAUSE_CHECK_S, 0.0))
        self._pause_seen[judge_key] = (read_at, max(until, now + max(0.0, seconds)))
        try:
            self._pause(keys=[f"dj:rl:pause:{judge_key}"], args=[max(0.0, seconds)])
        except redis.RedisError as exc:
            log.warning("rate limiter: Redis unavailable (%s); pausing this process only", exc)
