"""Cost per judgment from an editable price table (USD per million tokens)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import yaml

from judge_api.judges import JudgeSpec

DEFAULT_PRICES = Path(__file__).resolve().parent / "prices.yaml"


@lru_cache(maxsize=4)
def load_prices(path: str | None = None) -> dict[str, dict[str, tuple[float, float]]]:
    raw = yaml.safe_load(Path(path or DEFAULT_PRICES).read_text()) or {}
    return {
        provider: {model: (float(p[0]), float(p[1])) for model, p in (models or {}).items()}
        for provider, models in raw.items()
    }


def cost_usd(spec: JudgeSpec, input_tokens: int, output_tokens: int, prices_file: str | None = None) -> float:
    table = load_prices(prices_file).get(spec.provider, {})
    best = max((m for m in table if spec.model.startswith(m)), key=len, default=None)
    if best is None:
        return 0.0
    price_in, price_out = table[best]
    return (input_tokens * price_in + output_tokens * price_out) / 1_000_000
