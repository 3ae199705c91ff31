"""Issue 24 through the real parts (API process, Redis, Celery worker process, SQLite / PostgreSQL, the simulator
caching prompts as Anthropic does): breakpoints only where the prefix is cacheable, cached tokens priced as the
table says and the report's cost equal to the simulator's bill, the estimate's judgment count what the run plans."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from dialogue_judge.testing import LiveService
from judge_api.judges import parse_judge
from judge_api.pricing import Usage, price_usage
from judge_simulator.process import SimulatorProcess

pytestmark = [pytest.mark.e2e]

HISTORY = [
    {"speaker": "user" if k % 2 == 0 else "bot", "text": f"Turn {k:03d}: we talked about Rex the beagle and the coast."}
    for k in range(160)
]
PRICES = {"claude-sonnet-4-5": {"input": 3.0, "output": 15.0}}


def item(item_id: str, long: bool) -> dict:
    # each item's history its own from the first turn: two long items with one history share their prefix, and
    # whichever group answers first warms the other's leader (seen under load: a leader read from the cache)
    opening = {"speaker": "user", "text": f"This is conversation {item_id}."}
    dialogue = [opening, *(HISTORY if long else HISTORY[:3])]
    return {
        "id": item_id,
        "dialogue": [*dialogue, {"speaker": "user", "text": "What is my dog's name?"}],
        "candidates": {f"s{k}": f"Rex, {item_id} answer {k}. <<q={30 + k}>>" for k in range(4)},
    }


def _marked(body: dict) -> bool:
    values = [body.get("system")] + [m["content"] for m in body["messages"]]
    return any(isinstance(v, list) and any("cache_control" in b for b in v) for v in values)


def test_anthropic_breakpoints_bill_and_estimate(
    db_url: str, redis_url: str, tmp_path: Path, judge_simulator: SimulatorProcess
) -> None:
    judge_simulator.reset(restore_script=True)
    judge_simulator.set_script({"prompt_cache": {"enabled": True, "prices": PRICES}, "latency": 0.05})
    env = {"ANTHROPIC_BASE_URL": judge_simulator.root_url, "ANTHROPIC_API_KEY": "sk-ant-test-0000000000"}
    body = {
        "items": [item("long1", True), item("long2", True), item("short", False)],
        "rubrics": ["memochat-consistency"],
        "judges": ["anthropic:claude-sonnet-4-5"],
    }
    with LiveService(redis_url, db_url, tmp_path / "svc", env_overrides=env) as service:
        client = service.client()
        estimate = client.estimate_run(body)
        assert judge_simulator.stats()["total_calls"] == 0  # the estimate called nothing
        created = client.create_run(body)
        assert estimate["judgments"] == created["n_judgments"] == 12
        summary = service.wait_run(created["id"], timeout_s=90)
        assert summary["counts"]["done"] == 12
        report = client.report(created["id"], n_boot=50)

    bodies = [r["body"] for r in judge_simulator.requests(limit=100)]
    assert len(bodies) == 12
    long_bodies = [b for b in bodies if "Turn 100" in str(b)]
    short_bodies = [b for b in bodies if "Turn 100" not in str(b)]
    assert len(long_bodies) == 8 and all(_marked(b) for b in long_bodies)
    assert not any(_marked(b) for b in short_bodies)  # a short prefix pays nothing extra

    engine = create_engine(db_url)
    with engine.connect() as connection:
        rows = connection.execute(
            text(
                "SELECT item_key, input_tokens, output_tokens, cached_input_tokens, cache_write_tokens, cost_usd "
                "FROM judgments WHERE run_id = :r"
            ),
            {"r": created["id"]},
        ).all()
    engine.dispose()
    spec = parse_judge("anthropic:claude-sonnet-4-5")
    for row in rows:
        usage = Usage(row.input_tokens, row.output_tokens, row.cached_input_tokens, row.cache_write_tokens)
        assert row.cost_usd == pytest.approx(price_usage(spec, usage))  # 1.25x writes, 0.1x reads
    for key in ("long1", "long2"):
        group = [r for r in rows if r.item_key == key]
        assert sorted(r.cached_input_tokens > 0 for r in group) == [False, True, True, True]
        assert sum(r.cache_write_tokens > 0 for r in group) == 1
    bill = judge_simulator.stats()["bill"]
    assert report["cost"]["cost_usd"] == pytest.approx(bill["usd"], rel=1e-6)
    assert report["cost"]["saved_usd"]["cache"] > 0
