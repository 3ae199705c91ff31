"""The price table's code lives in ``judge_api.pricing`` (the API prices estimates too); the table itself is
``workers/prices.yaml`` beside this module. Re-exported here for the workers."""

from judge_api.pricing import (
    DEFAULT_PRICES,
    ModelPrice,
    PriceTable,
    ProviderRules,
    Usage,
    bill,
    cost_usd,
    list_price_usage,
    load_prices,
    parse_prices,
    price_of,
    price_usage,
)

__all__ = [
    "DEFAULT_PRICES",
    "ModelPrice",
    "PriceTable",
    "ProviderRules",
    "Usage",
    "bill",
    "cost_usd",
    "list_price_usage",
    "load_prices",
    "parse_prices",
    "price_of",
    "price_usage",
]
