"""Runtime perturbations: fault schedules, the per-model rate limiter and latency sampling.

These hold the simulator's only mutable behaviour state (call counters, seeded RNG positions,
rate windows). They are used from a single asyncio event loop and never await, so no locking is
needed. RNGs are seeded from the script seed (string seeds hash deterministically in CPython),
so a sequential client sees the same faults and delays on every run; with concurrent clients the
*sequence* is the same but which request draws which value depends on arrival order.
"""

from __future__ import annotations

import math
import random
import re
from collections import deque
from collections.abc import Callable
from time import monotonic

from .script import Fault, Latency, Provider, Script


class FaultEngine:
    """Decides, per call, which (if any) scripted fault fires."""

    def __init__(self, script: Script) -> None:
        self._faults = list(script.faults)
        self._eligible = [0] * len(self._faults)
        self._fired = [0] * len(self._faults)
        self._rngs = [random.Random(f"{script.seed}:fault:{i}") for i in range(len(self._faults))]
        self._patterns: list[tuple[re.Pattern[str] | None, re.Pattern[str] | None]] = [
            (
                re.compile(f.model) if f.model else None,
                re.compile(f.match, re.IGNORECASE | re.DOTALL) if f.match else None,
            )
            for f in self._faults
        ]

    def _is_eligible(self, i: int, provider: Provider, model: str, prompt: str) -> bool:
        fault = self._faults[i]
        model_re, match_re = self._patterns[i]
        if fault.endpoint is not None and fault.endpoint != provider:
            return False
        if model_re is not None and not model_re.search(model):
            return False
        return match_re is None or bool(match_re.search(prompt))

    def decide(self, provider: Provider, model: str, prompt: str) -> Fault | None:
        """Advance every eligible fault's counter and return the first one that fires.

        All eligible faults advance (and draw from their RNG) even when an earlier fault already
        fired, so one fault's schedule never shifts another's.
        """
        chosen: Fault | None = None
        for i, fault in enumerate(self._faults):
            if not self._is_eligible(i, provider, model, prompt):
                continue
            self._eligible[i] += 1
            n = self._eligible[i]
            draw = self._rngs[i].random()
            fires = (
                n <= fault.first_n
                or (fault.every_k > 0 and n % fault.every_k == 0)
                or n in fault.calls
                or draw < fault.probability
            )
            if fault.max_count is not None and self._fired[i] >= fault.max_count:
                fires = False
            if fires and chosen is None:
                self._fired[i] += 1
                chosen = fault
        return chosen


class RateLimiter:
    """Sliding-window request limit per model: more than ``rpm`` calls within ``window`` seconds
    are rejected. Rejected calls do not enter the window (like a token bucket that refuses)."""

    def __init__(self, rpm: int | None, window: float = 60.0, clock: Callable[[], float] = monotonic) -> None:
        self.rpm = rpm
        self.window = window
        self._clock = clock
        self._hits: dict[str, deque[float]] = {}

    def check(self, model: str) -> float | None:
        """Record a call; return None if allowed, else seconds until a slot frees up."""
        if self.rpm is None:
            return None
        now = self._clock()
        hits = self._hits.setdefault(model, deque())
        while hits and hits[0] <= now - self.window:
            hits.popleft()
        if len(hits) >= self.rpm:
            return max(hits[0] + self.window - now, 0.001)
        hits.append(now)
        return None


class LatencySampler:
    """Draws response delays from the script's latency distribution with a seeded RNG."""

    def __init__(self, spec: Latency, seed: int) -> None:
        self.spec = spec
        self._rng = random.Random(f"{seed}:latency")

    def sample(self) -> float:
        """Seconds to wait before answering (0 for ``none``)."""
        spec = self.spec
        if spec.kind == "fixed":
            value = spec.seconds
        elif spec.kind == "uniform":
            value = self._rng.uniform(spec.lo, spec.hi)
        elif spec.kind == "lognormal":
            value = self._rng.lognormvariate(math.log(spec.median), spec.sigma) if spec.median > 0 else 0.0
        else:
            value = 0.0
        if spec.max_seconds is not None:
            value = min(value, spec.max_seconds)
        return max(value, 0.0)
