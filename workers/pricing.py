"""Cost per judgment from an editable price table (USD per million tokens).

The table is ``workers/prices.yaml`` or the file named by ``DJ_PRICES_FILE``; it is re-read when the file changes,
so an edit takes effect without restarting the workers. The longest model-name prefix listed under the judge's
provider wins; a model that is not listed costs 0 (self-hosted and local judges).
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

import yaml

from judge_api.judges import JudgeSpec

DEFAULT_PRICES = Path(__file__).resolve().parent / "prices.yaml"
Prices = dict[str, dict[str, tuple[float, float]]]


@lru_cache(maxsize=8)
def _load(path: str, mtime_ns: int) -> Prices:
    raw = yaml.safe_load(Path(path).read_text()) or {}
    return {
        provider: {model: (float(p[0]), float(p[1])) for model, p in (models or {}).items()}
        for provider, models in raw.items()
    }


def load_prices(path: str | None = None) -> Prices:
    file = str(path or DEFAULT_PRICES)
    return _load(file, os.stat(file).st_mtime_ns)


def cost_usd(spec: JudgeSpec, input_tokens: int, output_tokens: int, prices_file: str | None = None) -> float:
    table = load_prices(prices_file).get(spec.provider, {})
    best = max((m for m in table if spec.model.startswith(m)), key=len, default=None)
    if best is None:
        return 0.0
    price_in, price_out = table[best]
    return (input_tokens * price_in + output_tokens * price_out) / 1_000_000
