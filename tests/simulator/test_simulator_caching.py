"""The simulator caches prompts as the providers do and keeps the bill it would charge (issue 24)."""

from __future__ import annotations

from typing import Any

import anthropic
import openai
import pytest
from anthropic.types import TextBlockParam

from judge_simulator import SimulatorProcess

HISTORY = "".join(f"Speaker {k % 2}: turn {k:04d} about the dog Rex and the trip to the coast.\n" for k in range(120))
PRICES = {
    "gpt-4o": {"input": 2.5, "cached_input": 1.25, "output": 10.0},
    "claude-sonnet-4-5": {"input": 3.0, "output": 15.0},
    "claude-haiku-4-5": {"input": 1.0, "output": 5.0, "min_cache_tokens": 4096},
}
M = 1_000_000


@pytest.fixture
def caching(sim: SimulatorProcess) -> SimulatorProcess:
    sim.set_script({"prompt_cache": {"enabled": True, "prices": PRICES}})
    return sim


def _openai(sim: SimulatorProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=sim.base_url, api_key="sk-test", max_retries=0, timeout=10.0)


def _ask_openai(client: openai.OpenAI, text: str, **extra: Any) -> Any:
    return client.chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": text}], extra_body=extra or None
    )


def test_openai_prefix_cache_in_128_token_steps(caching: SimulatorProcess) -> None:
    client = _openai(caching)
    assert len(HISTORY) // 4 > 1024
    first = _ask_openai(client, HISTORY + "Response A: Rex is a cat. <<q=10>>")
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    second = _ask_openai(client, HISTORY + "Response B: Rex is a dog. <<q=90>>")
    cached = second.usage.prompt_tokens_details.cached_tokens
    assert cached % 128 == 0 and cached >= 1024
    assert len(HISTORY) // 4 - 128 < cached <= len(HISTORY) // 4  # the shared prefix, to the 128-token step
    # a different prompt_cache_key is another cache; a prompt below 1,024 tokens is never cached
    assert _ask_openai(client, HISTORY + "C", prompt_cache_key="g1").usage.prompt_tokens_details.cached_tokens == 0
    keyed = _ask_openai(client, HISTORY + "D", prompt_cache_key="g1").usage.prompt_tokens_details.cached_tokens
    assert keyed == cached
    short = HISTORY[:3000]
    _ask_openai(client, short + "x")
    assert _ask_openai(client, short + "y").usage.prompt_tokens_details.cached_tokens == 0

    bill = caching.stats()["bill"]
    assert bill["calls"] == 6 and bill["cached_tokens"] == 2 * cached
    expected = (
        (bill["input_tokens"] - bill["cached_tokens"]) * 2.5 + bill["cached_tokens"] * 1.25 + bill["output_tokens"] * 10
    ) / M
    assert bill["usd"] == pytest.approx(expected)


def _anthropic(sim: SimulatorProcess) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=sim.root_url, api_key="sk-ant-test", max_retries=0, timeout=10.0)


def _ask_anthropic(client: anthropic.Anthropic, prefix: str, rest: str, mark: bool, model: str) -> Any:
    first: TextBlockParam = {"type": "text", "text": prefix}
    if mark:
        first["cache_control"] = {"type": "ephemeral"}
    return client.messages.create(
        model=model,
        max_tokens=256,
        messages=[{"role": "user", "content": [first, {"type": "text", "text": rest}]}],
    )


def test_anthropic_caches_only_up_to_a_breakpoint(caching: SimulatorProcess) -> None:
    client = _anthropic(caching)
    total = (len(HISTORY) + len("Response A <<q=10>>")) // 4 + 1
    plain = _ask_anthropic(client, HISTORY, "Response A <<q=10>>", mark=False, model="claude-sonnet-4-5")
    again = _ask_anthropic(client, HISTORY, "Response A <<q=10>>", mark=False, model="claude-sonnet-4-5")
    for reply in (plain, again):  # no breakpoint: never cached, whatever the prefix
        assert reply.usage.cache_read_input_tokens == 0 and reply.usage.cache_creation_input_tokens == 0
        assert reply.usage.input_tokens == total
    write = _ask_anthropic(client, HISTORY, "Response A <<q=10>>", mark=True, model="claude-sonnet-4-5")
    read = _ask_anthropic(client, HISTORY, "Response B <<q=80>>", mark=True, model="claude-sonnet-4-5")
    prefix_tokens = len(HISTORY) // 4
    assert write.usage.cache_creation_input_tokens == prefix_tokens and write.usage.cache_read_input_tokens == 0
    assert write.usage.input_tokens == total - prefix_tokens
    assert read.usage.cache_read_input_tokens == prefix_tokens and read.usage.cache_creation_input_tokens == 0
    # the two text blocks are one text: the verdict is what the unsplit prompt gets
    assert write.content[0].text == plain.content[0].text
    # below the model's minimum (Haiku 4.5: 4,096 tokens) a breakpoint caches nothing
    small = _ask_anthropic(client, HISTORY, "Response A <<q=10>>", mark=True, model="claude-haiku-4-5")
    assert small.usage.cache_creation_input_tokens == 0 and small.usage.cache_read_input_tokens == 0

    bill = caching.stats()["bill"]
    sonnet = ((4 * total - 2 * prefix_tokens) * 3.0 + prefix_tokens * 3.75 + prefix_tokens * 0.3) / M + sum(
        r.usage.output_tokens for r in (plain, again, write, read)
    ) * 15.0 / M
    assert bill["by_model"]["claude-sonnet-4-5"] == pytest.approx(sonnet)
    assert bill["by_model"]["claude-haiku-4-5"] == pytest.approx((total * 1.0 + small.usage.output_tokens * 5.0) / M)


def test_caching_is_off_unless_scripted(sim: SimulatorProcess) -> None:
    client = _openai(sim)
    _ask_openai(client, HISTORY + "a")
    assert _ask_openai(client, HISTORY + "b").usage.prompt_tokens_details.cached_tokens == 0
