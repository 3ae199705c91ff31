"""The simulator's script with the mutable state derived from it (faults, rate limiter, latency, prompt cache)."""

from __future__ import annotations

from dataclasses import dataclass

from .caching import PromptCache
from .faults import FaultEngine, LatencySampler, RateLimiter
from .script import Script


@dataclass
class Runtime:
    """A script with the mutable state derived from it; swapped as a whole on script change or
    reset, and captured once per request so a concurrent ``PUT /_sim/script`` never mixes."""

    script: Script
    faults: FaultEngine
    limiter: RateLimiter
    latency: LatencySampler
    cache: PromptCache

    @classmethod
    def build(cls, script: Script) -> Runtime:
        return cls(
            script=script,
            faults=FaultEngine(script),
            limiter=RateLimiter(script.rate_limit_rpm, script.rate_limit_window_seconds),
            latency=LatencySampler(script.latency, script.seed),
            cache=PromptCache(script.prompt_cache),
        )
