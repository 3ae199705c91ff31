"""Batched tasks (``JudgeEngine.judge_many``): misses go through the per-judgment claim path concurrently, cache
hits are settled in one bulk write, and every judgment is still written exactly once."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from sqlalchemy import update

from dialogue_judge.stack import Stack
from judge_api.db import session_scope
from judge_api.models import Judgment

from .harness import Harness, Timer, dialogue_item


def request(harness: Harness, n: int = 6) -> dict[str, Any]:
    return {
        "items": [
            dialogue_item(f"b{k}", {"a": f"Rex {k} <<q={40 + k}>>", "b": f"Cat {k} <<q={10 + k}>>"}) for k in range(n)
        ],
        "rubrics": ["rsum-single"],
        "judges": [harness.judge("openai-compatible")],
        "aspects": ["consistency"],
    }


def test_batch_of_misses_runs_concurrently_then_an_identical_batch_is_settled_from_the_cache(
    harness: Harness,
) -> None:
    harness.sim.set_script({"latency": 0.3})
    engine = harness.build(DJ_CALL_CONCURRENCY="12")
    first = harness.create(**request(harness))
    ids = harness.pending(first)
    with Timer() as timer:
        outcomes = engine.judge_many(ids)
    assert outcomes == {"done": 12}
    assert harness.calls() == 12 and timer.elapsed < 12 * 0.3 / 2  # concurrent, not one after another
    harness.sim.reset()
    second = harness.create(**request(harness))
    outcomes = engine.judge_many(harness.pending(second))
    assert outcomes == {"cached": 12} and harness.calls() == 0
    rows, before = harness.rows(second), harness.rows(first)
    assert all(r.status == "done" and r.cached and r.provider_calls == 0 and r.cost_usd == 0 for r in rows)
    assert [r.score for r in rows] == [r.score for r in before]
    assert [r.raw_output for r in rows] == [r.raw_output for r in before]
    assert [r.prompt_hash for r in rows] == [r.prompt_hash for r in before]


def test_duplicate_batches_write_each_judgment_once(harness: Harness) -> None:
    harness.sim.set_script({"latency": 0.2})
    engine = harness.build()
    run_id = harness.create(**request(harness, 4))
    ids = harness.pending(run_id)
    results: list[dict[str, int]] = []
    threads = [threading.Thread(target=lambda: results.append(engine.judge_many(ids))) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    written = sum(r.get("done", 0) + r.get("cached", 0) for r in results)
    assert written == len(ids)  # the other batches found them claimed or finished
    assert harness.calls() == len(ids)
    assert all(r.status == "done" for r in harness.rows(run_id))


def test_a_finished_judgment_in_a_batch_is_left_alone(harness: Harness) -> None:
    engine = harness.build()
    run_id = harness.create(**request(harness, 1))
    ids = harness.pending(run_id)
    with session_scope() as session:
        session.execute(update(Judgment).where(Judgment.id == ids[0]).values(status="done", score=77.0))
    outcomes = engine.judge_many(ids)
    assert outcomes == {"skipped": 1, "done": 1}
    assert harness.rows(run_id)[0].score == 77.0


def test_the_embedded_local_judge_gets_two_calls_in_flight_not_a_batch(harness: Harness, tmp_path: Path) -> None:
    """llama.cpp answers one request at a time: the embedded stack queues calls in the worker (DJ_CALL_CONCURRENCY)
    rather than sending a batch's worth at once and letting each call's latency grow towards the timeout."""
    stack = Stack(tmp_path / "home", worker_concurrency=8, start_local_judge=True)
    stack.queue_in_the_worker()
    assert stack.worker_concurrency == 2 and stack.extra_env["DJ_JUDGE_TIMEOUT"] == "600"
    harness.sim.set_script({"latency": 0.2})
    capped = harness.build(DJ_CALL_CONCURRENCY=stack.extra_env["DJ_CALL_CONCURRENCY"])
    assert capped.judge_many(harness.pending(harness.create(**request(harness)))) == {"done": 12}
    assert harness.sim.stats()["max_in_flight"] == 2

    harness.sim.reset()  # the default pool sends the whole batch at once
    uncapped = harness.build(DJ_CALL_CONCURRENCY="32")
    other = {**request(harness), "aspects": ["coherence"]}
    assert uncapped.judge_many(harness.pending(harness.create(**other))) == {"done": 12}
    assert harness.sim.stats()["max_in_flight"] > 2
