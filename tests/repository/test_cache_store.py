"""The judge cache (judge_api.repository.cache), on SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

from judge_api.db import get_engine
from judge_api.models import utcnow
from judge_api.repository import cache


def entry(key: str, text: str) -> dict[str, Any]:
    return {
        "key": key,
        "judge": "openai:gpt-4o",
        "raw_output": text,
        "finish_reason": "stop",
        "structured": None,
        "input_tokens": 12,
        "output_tokens": 3,
        "created_at": utcnow(),
    }


def test_lookup_returns_only_stored_keys(store_db: str) -> None:
    engine = get_engine()
    assert cache.cache_entries(engine, []) == {}
    cache.store_cache_rows(engine, [entry("k1", "Rating: [[70]]")])
    found = cache.cache_entries(engine, ["k1", "k2", "k1"])
    assert set(found) == {"k1"} and found["k1"].raw_output == "Rating: [[70]]"


def test_an_existing_entry_is_kept_and_a_batch_stores_a_key_once(store_db: str) -> None:
    engine = get_engine()
    cache.store_cache_rows(engine, [entry("k1", "first")])
    cache.store_cache_rows(engine, [entry("k1", "second"), entry("k2", "a"), entry("k2", "b")])
    found = cache.cache_entries(engine, ["k1", "k2"])
    assert found["k1"].raw_output == "first"  # the same key is the same request: the first reply stands
    assert found["k2"].raw_output == "b"  # within one batch the last row for a key is the one written
