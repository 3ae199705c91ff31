"""A run budget stops scheduling provider calls once the run's spend reaches it, cancels what is left (saying
why) and the run summary reports it; calls beyond the budget are only the ones already in flight."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from judge_api.schemas import RunCreate

from .harness import Harness, dialogue_item


def same_cost_items(prefix: str, n: int, start: int = 0) -> list[dict]:
    """Distinct prompts (no cache hits) of identical length and verdict: every call costs the same."""
    return [
        dialogue_item(f"{prefix}{k:02d}", {"s": f"Answer {k:02d} about Rex. <<q=50>>"}) for k in range(start, start + n)
    ]


def cost_of_one_call(harness: Harness, judge: str) -> float:
    run_id = harness.run(
        items=same_cost_items("calibrate", 1, start=99),
        rubrics=["rsum-single"],
        judges=[judge],
        aspects=["consistency"],
    )
    (row,) = harness.rows(run_id)
    assert row.cost_usd > 0
    return row.cost_usd


def test_budget_stops_scheduling_and_says_so(harness: Harness) -> None:
    judge = harness.judge("openai", "gpt-4o")  # priced in prices.yaml
    cost = cost_of_one_call(harness, judge)
    budget = 2.5 * cost  # reached after the third call
    harness.sim.reset()
    run_id = harness.create(
        items=same_cost_items("i", 10),
        rubrics=["rsum-single"],
        judges=[judge],
        aspects=["consistency"],
        budget_usd=budget,
    )
    results = harness.judge_all(run_id)
    assert results[:4] == ["done", "done", "done", "cancelled"]
    assert set(results[4:]) == {"skipped"}  # cancelled before a worker got to them
    assert harness.calls() == 3

    rows = harness.rows(run_id)
    assert [r.status for r in rows] == ["done"] * 3 + ["cancelled"] * 7
    for row in rows[3:]:
        assert row.provider_calls == 0 and row.cost_usd == 0 and "budget" in (row.error or "")
    summary = harness.summary(run_id)
    assert summary.status == "budget_exhausted" and summary.budget_exhausted
    assert summary.counts.done == 3 and summary.counts.cancelled == 7 and summary.progress == 1.0
    assert summary.cost_usd == pytest.approx(3 * cost) and summary.cost_usd >= budget
    assert summary.message and "budget" in summary.message and "7 judgments were not scheduled" in summary.message


def test_budget_with_concurrent_workers_overshoots_only_by_calls_in_flight(harness: Harness) -> None:
    judge = harness.judge("anthropic", "claude-sonnet-4-5")
    cost = cost_of_one_call(harness, judge)
    harness.sim.reset()
    harness.sim.set_script({"latency": 0.2})
    threads = 4
    run_id = harness.create(
        items=same_cost_items("c", 16),
        rubrics=["rsum-single"],
        judges=[judge],
        aspects=["consistency"],
        budget_usd=2.5 * cost,
    )
    harness.judge_all(run_id, threads=threads)
    calls = harness.calls()
    # the third call crosses the budget; a call can only start while fewer than three have been paid for, so at
    # most threads - 1 others are in flight when it does
    assert 3 <= calls <= 3 + threads - 1
    rows = harness.rows(run_id)
    assert sum(r.status == "done" for r in rows) == calls
    assert sum(r.status == "cancelled" for r in rows) == 16 - calls
    assert harness.summary(run_id).status == "budget_exhausted"


def test_no_budget_no_cancellation(harness: Harness) -> None:
    run_id = harness.run(
        items=same_cost_items("n", 4),
        rubrics=["rsum-single"],
        judges=[harness.judge("openai")],
        aspects=["consistency"],
    )
    summary = harness.summary(run_id)
    assert summary.status == "done" and not summary.budget_exhausted and summary.message is None
    assert summary.counts.done == 4


def test_budget_must_be_positive() -> None:
    with pytest.raises(ValidationError, match="budget_usd"):
        RunCreate.model_validate(
            {"items": same_cost_items("v", 1), "rubrics": ["rsum-single"], "judges": ["openai:gpt-4o"], "budget_usd": 0}
        )
