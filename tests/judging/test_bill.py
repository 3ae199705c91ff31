"""A bill that equals the provider's (issue 24 item 3): usage is read as the providers report it (cached input,
cache writes), each judgment stores those tokens and its cost at the table's prices, and the report's cost section
equals what the (simulated) provider bills, with the caching discount against list price."""

from __future__ import annotations

from typing import cast

import pytest

from judge_api.db import session_scope
from judge_api.judges import parse_judge
from judge_api.repository import frames
from judge_api.stats.report import cost_section
from workers.pricing import Usage, load_prices, price_usage

from .harness import Harness, dialogue_item

HISTORY = [
    {"speaker": "user" if k % 2 == 0 else "bot", "text": f"Turn {k:03d}: we talked about Rex the beagle and the coast."}
    for k in range(160)
]
# the simulator bills at the table's prices: the two bills are then comparable to the cent
SIM_PRICES = {
    "gpt-4o": {"input": 2.5, "cached_input": 1.25, "output": 10.0},
    "claude-sonnet-4-5": {"input": 3.0, "output": 15.0},
}


def long_item(item_id: str, n_systems: int) -> dict:
    answers = {f"s{k}": f"Rex is a beagle, {item_id} answer {k}. <<q={40 + k}>>" for k in range(n_systems)}
    item = dialogue_item(item_id, answers)
    item["dialogue"] = [*HISTORY, {"speaker": "user", "text": "What is my dog's name?"}]
    return item


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_cached_tokens_are_priced_as_the_table_says(harness: Harness, provider: str) -> None:
    harness.sim.set_script({"prompt_cache": {"enabled": True, "prices": SIM_PRICES}})
    judge = harness.judge(provider)
    run_id = harness.run(
        items=[long_item("a", 4), long_item("b", 4)],
        rubrics=["memochat-consistency"],
        judges=[judge],
    )
    rows = harness.rows(run_id)
    assert [r.status for r in rows] == ["done"] * 8
    spec = parse_judge(judge)
    price = load_prices().for_spec(spec)
    cached = [r for r in rows if r.cached_input_tokens > 0]
    if provider == "openai":  # automatic prefix caching: every prompt after the first reads the shared history
        assert len(cached) == 7
        assert price.cached_input == pytest.approx(price.input * 0.5)
    for row in rows:
        usage = Usage(row.input_tokens, row.output_tokens, row.cached_input_tokens, row.cache_write_tokens)
        assert row.cost_usd == pytest.approx(price_usage(spec, usage))
        assert row.list_cost_usd == pytest.approx(
            (row.input_tokens * price.input + row.output_tokens * price.output) / 1e6
        )
        assert row.cache_saved_usd == pytest.approx(row.list_cost_usd - row.cost_usd)

    bill = harness.sim.stats()["bill"]
    assert sum(r.input_tokens for r in rows) == bill["input_tokens"]
    assert sum(r.cached_input_tokens for r in rows) == bill["cached_tokens"]
    with session_scope() as session:
        section = cost_section(frames.judgments_frame(session, run_id))
    assert section["cost_usd"] == pytest.approx(bill["usd"], rel=1e-9)
    assert section["cached_input_tokens"] == bill["cached_tokens"]
    assert section["list_cost_usd"] - section["cost_usd"] == pytest.approx(section["saved_usd"]["cache"])
    assert section["saved_usd"]["batch"] == pytest.approx(0.0, abs=1e-12)
    if provider == "openai":
        assert section["saved_usd"]["cache"] > 0


def _bodies(harness: Harness) -> list[dict]:
    return [r["body"] for r in harness.sim.requests(limit=1000)]


def _marked(body: dict) -> bool:
    values = [body.get("system")] + [m["content"] for m in body["messages"]]
    return any(isinstance(v, list) and any("cache_control" in b for b in v) for v in values)


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_cache_aware_dispatch_marks_only_cacheable_prefixes(harness: Harness, provider: str) -> None:
    """A batch with a long-history MemoChat item (4 candidates) and a short rsum item: the long group's leader goes
    first, the rest read the cached prefix; only the long prompts carry a breakpoint / prompt_cache_key."""
    harness.sim.set_script({"prompt_cache": {"enabled": True, "prices": SIM_PRICES}, "latency": 0.05})
    judge = harness.judge(provider)
    long_run = harness.create(items=[long_item("a", 4)], rubrics=["memochat-consistency"], judges=[judge])
    short_run = harness.create(
        items=[dialogue_item("s", {f"s{k}": f"Rex. <<q={50 + k}>>" for k in range(3)})],
        rubrics=["memochat-consistency"],
        judges=[judge],
    )
    ids = harness.pending(long_run) + harness.pending(short_run)
    counts = harness.engine.judge_many(ids)
    assert counts == {"done": 7}

    bodies = _bodies(harness)
    long_bodies = [b for b in bodies if "Turn 100" in str(b)]
    short_bodies = [b for b in bodies if "Turn 100" not in str(b)]
    assert len(long_bodies) == 4 and len(short_bodies) == 3
    if provider == "anthropic":
        assert all(_marked(b) for b in long_bodies) and not any(_marked(b) for b in short_bodies)
    else:
        keys = {b.get("prompt_cache_key") for b in long_bodies}
        assert len(keys) == 1 and None not in keys
        assert all("prompt_cache_key" not in b for b in short_bodies)
    rows = harness.rows(long_run)
    read = sorted(r.cached_input_tokens > 0 for r in rows)
    assert read == [False, True, True, True]  # the leader wrote (or missed), every follower read
    if provider == "anthropic":
        assert sum(r.cache_write_tokens > 0 for r in rows) == 1
    assert all(r.cached_input_tokens == 0 and r.cache_write_tokens == 0 for r in harness.rows(short_run))
    # the prompts are the same bytes as without dispatch: the same judge-cache keys, the same verdicts
    assert sorted(cast(float, r.score) for r in rows) == [40, 41, 42, 43]
