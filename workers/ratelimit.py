"""Provider rate limits (requests/min and tokens/min per provider+model), shared by every worker through Redis.

Generic cell rate algorithm with reservation: each call reserves its slot on a shared timeline and sleeps until the
slot comes, so N workers together stay under the limit and a limit slows work down instead of failing it. The
in-process variant serves the standalone mode (CI gate without Redis).
"""

from __future__ import annotations

import fnmatch
import threading
import time
from dataclasses import dataclass
from typing import Protocol

import redis

from judge_api.config import Settings


@dataclass(frozen=True)
class Limit:
    rpm: int = 0  # 0 = unlimited
    tpm: int = 0


def parse_limits(spec: str) -> list[tuple[str, Limit]]:
    """``"openai:gpt-4o=500/300000,anthropic:*=50/0"`` -> [(pattern, Limit)]; later patterns win."""
    limits: list[tuple[str, Limit]] = []
    for part in filter(None, (p.strip() for p in spec.split(","))):
        pattern, _, numbers = part.rpartition("=")
        rpm, _, tpm = numbers.partition("/")
        if not pattern:
            raise ValueError(f"DJ_RATE_LIMITS entry {part!r} must be '<judge pattern>=<rpm>/<tpm>'")
        limits.append((pattern, Limit(int(rpm or 0), int(tpm or 0))))
    return limits


def limit_for(judge_key: str, settings: Settings) -> Limit:
    chosen = Limit(settings.default_rpm, settings.default_tpm)
    for pattern, limit in parse_limits(settings.rate_limits):
        if fnmatch.fnmatchcase(judge_key, pattern):
            chosen = limit
    return chosen


class RateLimiter(Protocol):
    def acquire(self, judge_key: str, limit: Limit, tokens: int) -> float:
        """Block until the call may go; return the seconds waited."""
        ...


# KEYS: request key, token key. ARGV: request interval (s), token interval per token (s), tokens, burst (s).
# Returns the delay (s, as a string) after which the reserved slot starts.
_RESERVE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local delay = 0
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
local w1 = reserve(KEYS[1], tonumber(ARGV[1]), 1, tonumber(ARGV[4]))
local w2 = reserve(KEYS[2], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]))
if w2 > w1 then delay = w2 else delay = w1 end
return tostring(delay)
"""


class RedisRateLimiter:
    def __init__(self, client: redis.Redis, burst_s: float = 1.0) -> None:
        self.client = client
        self.burst_s = burst_s
        self._script = client.register_script(_RESERVE)

    def acquire(self, judge_key: str, limit: Limit, tokens: int) -> float:
        if not limit.rpm and not limit.tpm:
            return 0.0
        request_interval = 60.0 / limit.rpm if limit.rpm else 0.0
        token_interval = 60.0 / limit.tpm if limit.tpm else 0.0
        delay = float(
            self._script(
                keys=[f"dj:rl:req:{judge_key}", f"dj:rl:tok:{judge_key}"],
                args=[request_interval, token_interval, max(1, tokens), self.burst_s],
            )
        )
        if delay > 0:
            time.sleep(delay)
        return delay


class LocalRateLimiter:
    """The same reservation algorithm for one process."""

    def __init__(self, burst_s: float = 1.0) -> None:
        self.burst_s = burst_s
        self._tat: dict[str, float] = {}
        self._lock = threading.Lock()

    def _reserve(self, key: str, interval: float, cost: int, now: float) -> float:
        if interval <= 0:
            return 0.0
        tat = max(self._tat.get(key, now), now)
        self._tat[key] = tat + interval * cost
        return max(0.0, tat - self.burst_s - now)

    def acquire(self, judge_key: str, limit: Limit, tokens: int) -> float:
        if not limit.rpm and not limit.tpm:
            return 0.0
        with self._lock:
            now = time.monotonic()
            delay = max(
                self._reserve(f"req:{judge_key}", 60.0 / limit.rpm if limit.rpm else 0.0, 1, now),
                self._reserve(f"tok:{judge_key}", 60.0 / limit.tpm if limit.tpm else 0.0, max(1, tokens), now),
            )
        if delay > 0:
            time.sleep(delay)
        return delay
