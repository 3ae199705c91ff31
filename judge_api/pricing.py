"""What a provider bills for a call, from an editable price table (USD per million tokens).

The table is ``workers/prices.yaml`` or the file named by ``DJ_PRICES_FILE``; it is re-read when the file changes,
so an edit takes effect without restarting the workers. The longest model-name prefix listed under the judge's
provider wins, a version number right after it excepted (``gpt-5`` does not price ``gpt-5.4``). A model that is
not listed costs 0 where its provider does not bill (self-hosted ``openai-compatible`` servers, ``local``). A model
of a billing provider (OpenAI, Anthropic, any provider the table gives ``rules``) that is not listed is *unpriced*:
its calls are recorded at 0, but its cost is not known, so the estimate says so (cost None) and a budget over it
is refused (``unpriced_budget_refusal``): a budget that counts $0 a call could never stop one.

Each model has an input, cached-input, cache-write and output price, and the provider's batch discount: a
``Usage`` record (tokens as the provider reports them, normalised so ``input_tokens`` counts every prompt token,
cached and written ones included) is billed by ``price_usage`` as the provider would bill it. ``list_price_usage``
prices the same tokens with no cache and no batch discount: what the call would have cost without them, the
baseline of the report's "saved" figures.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from judge_api.judges import JudgeSpec, JudgeSpecError, parse_judge

DEFAULT_PRICES = Path(__file__).resolve().parents[1] / "workers" / "prices.yaml"


class ProviderRules(BaseModel):
    """A provider's defaults for what a model entry leaves out (shares of the model's input price)."""

    model_config = ConfigDict(extra="forbid")
    cache_read: float = Field(1.0, ge=0)
    cache_write: float = Field(1.0, ge=0)
    batch: float = Field(1.0, gt=0, le=1)
    min_cache_tokens: int = Field(1024, ge=0)


class ModelPrice(BaseModel):
    """USD per million tokens of one model, every kind of token priced (see ``price_usage``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    input: float = Field(ge=0)
    output: float = Field(ge=0)
    cached_input: float = Field(ge=0)
    cache_write: float = Field(ge=0)
    batch: float = Field(gt=0, le=1)  # share of the real-time price a batch request pays
    min_cache_tokens: int = Field(ge=0)  # the shortest prefix the provider caches for this model


# providers that bill every call: a model of theirs the table does not list has an unknown cost. Any provider the
# table gives `rules` joins them (an operator whose openai-compatible judges are a paid gateway says so that way).
BILLING_PROVIDERS = ("openai", "anthropic")
ZERO = ModelPrice(input=0, output=0, cached_input=0, cache_write=0, batch=1, min_cache_tokens=1024)


@dataclass(frozen=True)
class Usage:
    """The tokens of one provider call. ``input_tokens`` counts all prompt tokens; ``cached_input_tokens`` (read
    from the provider's prompt cache) and ``cache_write_tokens`` (written to it, Anthropic) are parts of it."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    cache_write_tokens: int = 0
    batch: bool = False


class PriceTable:
    def __init__(self, rules: dict[str, ProviderRules], models: dict[str, dict[str, ModelPrice]]) -> None:
        self.rules = rules
        self.models = models

    def get(self, provider: str, model: str) -> ModelPrice | None:
        """The price of ``provider:model`` (longest listed prefix), or None when the table does not list it."""
        table = self.models.get(provider, {})
        best = max((m for m in table if _extends(model, m)), key=len, default=None)
        return table[best] if best is not None else None

    def for_spec(self, spec: JudgeSpec) -> ModelPrice:
        return self.get(spec.provider, spec.model) or ZERO

    def is_priced(self, spec: JudgeSpec) -> bool:
        """Is the cost of ``spec``'s calls known: the table lists its model, or its provider does not bill (a
        self-hosted ``openai-compatible`` server, the embedded ``local`` model: 0)."""
        bills = spec.provider in BILLING_PROVIDERS or spec.provider in self.rules
        return not bills or self.get(spec.provider, spec.model) is not None

    def min_cache_tokens(self, spec: JudgeSpec) -> int:
        price = self.get(spec.provider, spec.model)
        if price is not None:
            return price.min_cache_tokens
        return self.rules.get(spec.provider, ProviderRules()).min_cache_tokens  # type: ignore[call-arg]


_NEWER_VERSION = re.compile(r"^(\.\d|-\d{1,2}($|-))")


def _extends(model: str, prefix: str) -> bool:
    """Does ``prefix`` name ``model`` or a snapshot of it ("gpt-4o" -> "gpt-4o-2024-08-06", "-latest", "-16k")?
    A version number right after the prefix is another model ("gpt-5" is not "gpt-5.4", "claude-opus-4" is not
    "claude-opus-4-7"): it is not priced as the older one."""
    return model.startswith(prefix) and not _NEWER_VERSION.match(model[len(prefix) :])


def _model_price(entry: Any, rules: ProviderRules, where: str) -> ModelPrice:
    if isinstance(entry, list | tuple):
        if len(entry) != 2:
            raise ValueError(f"{where}: the short form is [input, output]")
        entry = {"input": entry[0], "output": entry[1]}
    if not isinstance(entry, dict):
        raise ValueError(f"{where}: a price is [input, output] or a mapping")
    try:
        price_in = float(entry["input"])
    except (KeyError, TypeError, ValueError):
        raise ValueError(f"{where}: 'input' must be a number") from None
    values = {
        "cached_input": price_in * rules.cache_read,
        "cache_write": price_in * rules.cache_write,
        "batch": rules.batch,
        "min_cache_tokens": rules.min_cache_tokens,
        **entry,
    }
    try:
        return ModelPrice.model_validate(values)
    except ValidationError as exc:
        raise ValueError(f"{where}: {exc.errors()[0]['loc']} {exc.errors()[0]['msg']}") from None


def parse_prices(raw: Any) -> PriceTable:
    raw = raw or {}
    if not isinstance(raw, dict):
        raise ValueError("the price table must be a mapping of provider to models")
    rules_raw = raw.get("rules") or {}
    rules = {p: ProviderRules.model_validate(r or {}) for p, r in rules_raw.items()}
    models: dict[str, dict[str, ModelPrice]] = {}
    for provider, entries in raw.items():
        if provider == "rules":
            continue
        provider_rules = rules.get(provider) or ProviderRules()  # type: ignore[call-arg]
        models[provider] = {
            str(model): _model_price(entry, provider_rules, f"{provider}.{model}")
            for model, entry in (entries or {}).items()
        }
    return PriceTable(rules, models)


_tables: dict[tuple[str, int], PriceTable] = {}  # (path, mtime_ns) -> its table; an edit is a new key
_tables_lock = threading.Lock()


def load_prices(path: str | None = None) -> PriceTable:
    """The price table of ``path`` (default: workers/prices.yaml), re-read when the file changes. Threads asking
    together for a table not read yet parse it once: a worker's 32 call slots starting at once each parsed it (YAML,
    several ms of CPU each) before the first one had cached it."""
    file = str(path or DEFAULT_PRICES)
    key = (file, os.stat(file).st_mtime_ns)
    table = _tables.get(key)
    if table is None:
        with _tables_lock:
            table = _tables.get(key)
            if table is None:
                table = parse_prices(yaml.safe_load(Path(file).read_text()))
                if len(_tables) >= 8:
                    _tables.clear()
                _tables[key] = table
    return table


def price_of(spec: JudgeSpec, prices_file: str | None = None) -> ModelPrice:
    return load_prices(prices_file).for_spec(spec)


def unpriced_judges(judges: Iterable[str], prices: PriceTable) -> list[str]:
    """The judges among ``judges`` (judge strings, in order, once each) whose cost the table cannot state;
    strings that name no provider judge (``reference``) are skipped."""
    out: list[str] = []
    for judge in dict.fromkeys(judges):
        try:
            spec = parse_judge(judge)
        except JudgeSpecError:
            continue
        if not prices.is_priced(spec):
            out.append(judge)
    return out


def unpriced_budget_refusal(judges: Iterable[str], prices: PriceTable, field: str) -> str | None:
    """Why a budget (named ``field``) over ``judges`` cannot be kept, or None when every judge is priced."""
    unpriced = unpriced_judges(judges, prices)
    if not unpriced:
        return None
    names = ", ".join(repr(j) for j in unpriced)
    has = "judges " + names + " have" if len(unpriced) > 1 else f"judge {names} has"
    return (
        f"{field} cannot be kept: {has} no price in the price table (workers/prices.yaml or "
        f"DJ_PRICES_FILE), so its calls would count $0 against the budget and never stop; add the model's prices to "
        f"the table or drop {field}"
    )


def bill(price: ModelPrice, usage: Usage) -> float:
    """USD the provider bills for ``usage`` at ``price``: uncached input, cached input, cache writes and output
    each at its own price, the whole times the batch share for a batch request."""
    cached = min(usage.cached_input_tokens, usage.input_tokens)
    written = min(usage.cache_write_tokens, usage.input_tokens - cached)
    plain = usage.input_tokens - cached - written
    total = (
        plain * price.input
        + cached * price.cached_input
        + written * price.cache_write
        + usage.output_tokens * price.output
    ) / 1_000_000
    return total * price.batch if usage.batch else total


def price_usage(spec: JudgeSpec, usage: Usage, prices_file: str | None = None) -> float:
    """What the provider bills ``spec``'s call with ``usage``."""
    return bill(price_of(spec, prices_file), usage)


def list_price_usage(spec: JudgeSpec, usage: Usage, prices_file: str | None = None) -> float:
    """The same tokens at list price: every input token uncached, real-time."""
    return bill(price_of(spec, prices_file), Usage(usage.input_tokens, usage.output_tokens))


def cost_usd(spec: JudgeSpec, input_tokens: int, output_tokens: int, prices_file: str | None = None) -> float:
    """List price of a call with no cache or batch discount (``price_usage`` of a plain usage)."""
    return price_usage(spec, Usage(input_tokens, output_tokens), prices_file)
