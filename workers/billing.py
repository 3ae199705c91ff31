"""What a judgment's calls took and cost: the tally of its attempts, tokens and latency (``CallTally``), a reply's
tokens as the price table bills them (``reply_usage``) and the judgment's bill (``bill_values``)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from judge_api.config import Settings
from judge_api.judges import JudgeSpec
from judge_api.pricing import Usage, bill, price_of
from workers.clients import JudgeReply


@dataclass
class CallTally:
    attempts: int = 0
    provider_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    latency_ms: float = 0.0
    cached_input_tokens: int = 0
    cache_write_tokens: int = 0
    paid: list[Usage] = field(default_factory=list)  # what the provider billed: replies that were not cache hits
    replies: int = 0
    cached_replies: int = 0
    errors: list[str] = field(default_factory=list)

    def add(self, reply: JudgeReply, from_cache: bool, batch: bool = False) -> None:
        self.replies += 1
        self.input_tokens += reply.input_tokens
        self.output_tokens += reply.output_tokens
        self.cached_input_tokens += reply.cached_input_tokens
        self.cache_write_tokens += reply.cache_write_tokens
        self.latency_ms += reply.latency_ms
        if from_cache:
            self.cached_replies += 1
        else:
            self.paid.append(reply_usage(reply, batch))

    def values(self, spec: JudgeSpec, settings: Settings) -> dict[str, Any]:
        prices = str(settings.prices_file) if settings.prices_file else None
        return {
            "attempts": self.attempts,
            "provider_calls": self.provider_calls,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cached_input_tokens": self.cached_input_tokens,
            "cache_write_tokens": self.cache_write_tokens,
            "latency_ms": round(self.latency_ms, 3) if self.replies else None,
            **bill_values(spec, self.paid, prices),
            "cached": self.replies > 0 and self.cached_replies == self.replies,
        }


def bill_values(spec: JudgeSpec, paid: list[Usage], prices: str | None) -> dict[str, float]:
    """A judgment's bill: ``cost_usd`` as the provider bills it, ``list_cost_usd`` the same tokens with no cache
    and no batch discount, ``cache_saved_usd`` what caching saved at real-time prices (the batch discount is the
    rest: list - cost - cache_saved)."""
    if not paid:
        return {"cost_usd": 0.0, "list_cost_usd": 0.0, "cache_saved_usd": 0.0}
    price = price_of(spec, prices)  # looked up once: each lookup checks the table file for an edit
    cost = sum((bill(price, u) for u in paid), 0.0)
    listed = sum((bill(price, Usage(u.input_tokens, u.output_tokens)) for u in paid), 0.0)
    realtime = sum((bill(price, replace(u, batch=False)) for u in paid), 0.0)
    return {"cost_usd": cost, "list_cost_usd": listed, "cache_saved_usd": max(listed - realtime, 0.0)}


def reply_usage(reply: JudgeReply, batch: bool = False) -> Usage:
    """A reply's tokens as the price table bills them (``batch``: the reply came from a provider batch)."""
    return Usage(reply.input_tokens, reply.output_tokens, reply.cached_input_tokens, reply.cache_write_tokens, batch)
