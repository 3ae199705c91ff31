"""The configured provider rate limits (``DJ_RATE_LIMITS``): which limit applies to a judge. Enforced by the
workers (workers.ratelimit); read by the estimate to say how long a run takes."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass

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
        try:
            limit = Limit(int(rpm or 0), int(tpm or 0))
        except ValueError:
            raise ValueError(f"DJ_RATE_LIMITS entry {part!r}: rpm and tpm must be whole numbers") from None
        limits.append((pattern, limit))
    return limits


def limit_for(judge_key: str, settings: Settings) -> Limit:
    chosen = Limit(settings.default_rpm, settings.default_tpm)
    for pattern, limit in parse_limits(settings.rate_limits):
        if fnmatch.fnmatchcase(judge_key, pattern):
            chosen = limit
    return chosen
