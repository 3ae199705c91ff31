"""Provider-style prompt caching and the bill the simulator would charge.

Tokens are the simulator's usual approximation (``approx_tokens``: about 4 characters a token), so a block of
128 tokens is 512 characters of the prompt.

* OpenAI (automatic prefix caching): a prompt of at least ``min_cache_tokens`` (1,024) tokens is cached in
  128-token steps once its call has answered; a later prompt of the same model and the same ``prompt_cache_key``
  (none is a key of its own) that starts with a cached prefix reads it, reported as
  ``usage.prompt_tokens_details.cached_tokens``. Cached input is billed at the model's ``cached_input`` price.
* Anthropic: only up to a ``cache_control`` breakpoint (a system or message content block carrying it). A prefix
  shorter than the model's minimum is not cached (and not billed as a write). The first call writes it
  (``cache_creation_input_tokens``, billed at ``cache_write``, 1.25x input), later ones read it
  (``cache_read_input_tokens``, 0.1x); ``input_tokens`` counts only the rest, as Anthropic reports it.

Entries live ``ttl_seconds`` after their last use. A prompt's prefix is looked up when its call arrives and
written when it answers, so calls sent while the first of a group is still out all miss, as at the providers.

``Bill`` adds up what each answered call would cost at the script's per-model prices (USD per million tokens,
longest model prefix), and the tokens behind it: ``GET /_sim/stats`` shows it under ``bill``.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

CHARS_PER_TOKEN = 4
BLOCK_TOKENS = 128


class ModelPrice(BaseModel):
    """USD per million tokens of one model (prefix) the simulator bills."""

    model_config = ConfigDict(extra="forbid")
    input: float = Field(ge=0)
    output: float = Field(ge=0)
    cached_input: float | None = Field(default=None, ge=0, description="default: input x cache_read")
    cache_write: float | None = Field(default=None, ge=0, description="default: input x cache_write")
    min_cache_tokens: int = Field(default=1024, ge=1)
    batch: float = Field(default=0.5, gt=0, le=1)


class PromptCaching(BaseModel):
    """The script's ``prompt_cache`` section."""

    model_config = ConfigDict(extra="forbid")
    enabled: bool = False
    ttl_seconds: float = Field(default=300.0, gt=0)
    openai_cache_read: float = Field(default=0.5, ge=0, description="cached input share when a price gives none")
    anthropic_cache_read: float = Field(default=0.1, ge=0)
    anthropic_cache_write: float = Field(default=1.25, ge=0)
    prices: dict[str, ModelPrice] = Field(default_factory=dict, description="model prefix -> price (the bill)")

    def price(self, model: str) -> ModelPrice | None:
        best = max((m for m in self.prices if model.startswith(m)), key=len, default=None)
        return self.prices[best] if best is not None else None

    def min_tokens(self, model: str) -> int:
        price = self.price(model)
        return price.min_cache_tokens if price is not None else 1024


@dataclass
class CallUsage:
    """One call's prompt tokens as the provider reports them (``input_tokens`` counts every prompt token)."""

    input_tokens: int
    cached_tokens: int = 0
    cache_write_tokens: int = 0
    pending: list[str] = field(default_factory=list)  # cache entries written when the call answers


def _digest(*parts: str) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode("utf-8", "surrogatepass"))
        h.update(b"\x00")
    return h.hexdigest()


def anthropic_breakpoints(body: dict[str, Any]) -> list[int]:
    """Character offsets in the simulator's Anthropic prompt (``wire.parse_anthropic``: system, then each message's
    text, joined by blank lines; a message's text blocks concatenated) where a ``cache_control`` block ends."""
    offsets: list[int] = []
    pos = 0
    first = True

    def segment(content: Any) -> None:
        nonlocal pos, first
        marks: list[int]
        if isinstance(content, str):
            text, marks = content, []
        elif isinstance(content, list):
            text, marks = "", []
            for block in content:
                if isinstance(block, dict) and isinstance(block.get("text"), str):
                    text += block["text"]
                    if isinstance(block.get("cache_control"), dict):
                        marks.append(len(text))
        else:
            return
        if not text:
            return
        if not first:
            pos += 2  # the blank line between segments
        first = False
        offsets.extend(pos + m for m in marks)
        pos += len(text)

    segment(body.get("system"))
    for message in body.get("messages") or []:
        if isinstance(message, dict):
            segment(message.get("content"))
    return offsets


class PromptCache:
    def __init__(self, config: PromptCaching, clock: Any = time.monotonic) -> None:
        self.config = config
        self.clock = clock
        self.entries: dict[str, float] = {}  # key -> expiry

    def _live(self, key: str, now: float) -> bool:
        expiry = self.entries.get(key)
        return expiry is not None and expiry > now

    def lookup(self, provider: str, model: str, prompt: str, body: dict[str, Any], total_tokens: int) -> CallUsage:
        """The usage of a call arriving now (nothing cached when caching is off)."""
        usage = CallUsage(total_tokens)
        if not self.config.enabled:
            return usage
        now = self.clock()
        if provider == "openai":
            return self._openai(model, prompt, body, usage, now)
        return self._anthropic(model, prompt, body, usage, now)

    def _openai(self, model: str, prompt: str, body: dict[str, Any], usage: CallUsage, now: float) -> CallUsage:
        key = body.get("prompt_cache_key")
        namespace = key if isinstance(key, str) else ""
        step = BLOCK_TOKENS * CHARS_PER_TOKEN
        first = -(-self.config.min_tokens(model) // BLOCK_TOKENS)  # blocks in the shortest cacheable prefix
        blocks = len(prompt) // step
        keys = [_digest("openai", model, namespace, prompt[: k * step]) for k in range(first, blocks + 1)]
        for index in range(len(keys) - 1, -1, -1):
            if self._live(keys[index], now):
                usage.cached_tokens = (first + index) * BLOCK_TOKENS
                break
        usage.pending = keys
        return usage

    def _anthropic(self, model: str, prompt: str, body: dict[str, Any], usage: CallUsage, now: float) -> CallUsage:
        marks = [m for m in anthropic_breakpoints(body) if m // CHARS_PER_TOKEN >= self.config.min_tokens(model)]
        if not marks:
            return usage
        keys = [_digest("anthropic", model, prompt[:m]) for m in marks]
        for mark, key in sorted(zip(marks, keys, strict=True), reverse=True):
            if self._live(key, now):
                usage.cached_tokens = mark // CHARS_PER_TOKEN
                break
        last = max(marks)
        if last // CHARS_PER_TOKEN > usage.cached_tokens:
            usage.cache_write_tokens = last // CHARS_PER_TOKEN - usage.cached_tokens
        usage.pending = keys
        return usage

    def commit(self, usage: CallUsage) -> None:
        """The call answered: its prefixes are cached (and a read refreshes the entry's lifetime)."""
        expiry = self.clock() + self.config.ttl_seconds
        for key in usage.pending:
            self.entries[key] = expiry
        if len(self.entries) > 200_000:  # drop what has expired
            now = self.clock()
            self.entries = {k: v for k, v in self.entries.items() if v > now}


@dataclass
class Bill:
    """What the answered calls would cost, and their tokens."""

    usd: float = 0.0
    calls: int = 0
    input_tokens: int = 0
    cached_tokens: int = 0
    cache_write_tokens: int = 0
    output_tokens: int = 0
    by_model: dict[str, float] = field(default_factory=dict)

    def charge(
        self, config: PromptCaching, provider: str, model: str, usage: CallUsage, output_tokens: int, batch: bool
    ) -> float:
        price = config.price(model)
        cost = 0.0
        if price is not None:
            read = (config.anthropic_cache_read if provider == "anthropic" else config.openai_cache_read) * price.input
            cached_price = price.cached_input if price.cached_input is not None else read
            write_price = price.cache_write
            if write_price is None:
                write_price = price.input * (config.anthropic_cache_write if provider == "anthropic" else 1.0)
            plain = usage.input_tokens - usage.cached_tokens - usage.cache_write_tokens
            cost = (
                plain * price.input
                + usage.cached_tokens * cached_price
                + usage.cache_write_tokens * write_price
                + output_tokens * price.output
            ) / 1_000_000
            if batch:
                cost *= price.batch
        self.usd += cost
        self.calls += 1
        self.input_tokens += usage.input_tokens
        self.cached_tokens += usage.cached_tokens
        self.cache_write_tokens += usage.cache_write_tokens
        self.output_tokens += output_tokens
        self.by_model[model] = self.by_model.get(model, 0.0) + cost
        return cost

    def snapshot(self) -> dict[str, Any]:
        return {
            "usd": self.usd,
            "calls": self.calls,
            "input_tokens": self.input_tokens,
            "cached_tokens": self.cached_tokens,
            "cache_write_tokens": self.cache_write_tokens,
            "output_tokens": self.output_tokens,
            "by_model": dict(self.by_model),
        }
