"""A worker loads OpenAI's tokenizer before it takes work when cache-aware dispatch will count OpenAI prompts
with it (workers.runtime.warm_tokenizer), so no batch of a run stalls the process loading its vocabulary."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from judge_api import tokens
from judge_api.config import Settings
from judge_api.judges import parse_judge
from workers import runtime


@pytest.fixture
def cold(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in ("OPENAI_API_KEY", "OPENAI_API_KEY_FILE"):
        monkeypatch.delenv(name, raising=False)
    tokens._encoding.cache_clear()
    yield
    tokens._encoding.cache_clear()


def loaded() -> int:
    return tokens._encoding.cache_info().currsize


def test_a_worker_that_can_call_openai_loads_the_tokenizer_up_front(
    cold: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-0000")
    assert runtime.warm_tokenizer(Settings(DJ_CACHE_AWARE_DISPATCH=True)) is True
    assert loaded() == 1
    before = tokens._encoding.cache_info().misses
    tokens.count_text(parse_judge("openai:gpt-4o"), "the first prefix counted on the hot path")
    assert tokens._encoding.cache_info().misses == before  # nothing left to load when judging starts


@pytest.mark.parametrize(
    ("key", "cache_aware"),
    [(None, True), ("sk-test-0000", False)],
    ids=["no OpenAI key", "cache-aware dispatch off"],
)
def test_no_tokenizer_is_loaded_where_it_cannot_be_used(
    cold: None, monkeypatch: pytest.MonkeyPatch, key: str | None, cache_aware: bool
) -> None:
    if key is not None:
        monkeypatch.setenv("OPENAI_API_KEY", key)
    assert runtime.warm_tokenizer(Settings(DJ_CACHE_AWARE_DISPATCH=cache_aware)) is False
    assert loaded() == 0  # the ~150 MB vocabulary is not spent
