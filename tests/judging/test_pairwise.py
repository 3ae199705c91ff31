"""Pairwise judging: both presentation orders stored with the preference de-swapped to system_a, identical
responses tie without a call, the seeded single-order mode, the outcome mapping and the 4-level preference."""

from __future__ import annotations

from collections import Counter

import pytest

from judge_api.planning import PlanError, plan_run
from judge_api.rubrics import get_registry
from judge_api.schemas import RunCreate

from .harness import Harness, dialogue_item


def pair_item(item_id: str, qa: int, qb: int) -> dict:
    return dialogue_item(item_id, {"a": f"Your beagle is Rex. <<q={qa}>>", "b": f"Is it a cat? <<q={qb}>>"})


def by_order(rows: list) -> dict:
    return {(r.item_key, r.order): r for r in rows}


@pytest.mark.parametrize("provider", ["openai-compatible", "anthropic"])
def test_both_orders_stored_with_the_preference_for_system_a(harness: Harness, provider: str) -> None:
    run_id = harness.run(
        items=[pair_item("clear", 85, 20), pair_item("close", 55, 50)],
        rubrics=["rsum-pairwise"],
        mode=["pairwise"],
        judges=[harness.judge(provider)],
    )
    rows = by_order(harness.rows(run_id))
    assert len(rows) == 4 and all(r.status == "done" for r in rows.values())
    assert all(r.system_a == "a" and r.system_b == "b" for r in rows.values())
    # a shown first and judged better ...
    assert (rows["clear", "ab"].verdict, rows["clear", "ab"].preference) == ("Response 1 is better", 2.0)
    # ... and shown second: the stored verdict is the judge's own, the preference is de-swapped to a
    assert (rows["clear", "ba"].verdict, rows["clear", "ba"].preference) == ("Response 2 is better", 2.0)
    assert rows["clear", "ab"].outcome == rows["clear", "ba"].outcome == "win"
    # the 4-level preference is kept: "slightly better" is +1 (outcome tie by default)
    assert (rows["close", "ab"].verdict, rows["close", "ab"].preference) == ("Response 1 is slightly better", 1.0)
    assert (rows["close", "ba"].verdict, rows["close", "ba"].preference) == ("Response 2 is slightly better", 1.0)
    assert rows["close", "ab"].outcome == rows["close", "ba"].outcome == "tie"
    # each order saw the other presentation
    prompts = [m["body"]["messages"][0]["content"] for m in harness.sim.requests(4)]
    assert sum(p.index("<<q=85>>") < p.index("<<q=20>>") for p in prompts if "<<q=85>>" in p) == 1


def test_a_position_biased_judge_leaves_inconsistent_orders(harness: Harness) -> None:
    """A judge that always prefers the first shown: the two orders disagree, and both verdicts are stored."""
    harness.sim.set_script({"position_bias": 1.0})
    run_id = harness.run(
        items=[pair_item("p", 85, 20)],
        rubrics=["rsum-pairwise"],
        mode=["pairwise"],
        judges=[harness.judge("openai-compatible")],
    )
    rows = by_order(harness.rows(run_id))
    assert rows["p", "ab"].verdict == rows["p", "ba"].verdict == "Response 1 is better"
    assert (rows["p", "ab"].preference, rows["p", "ab"].outcome) == (2.0, "win")
    assert (rows["p", "ba"].preference, rows["p", "ba"].outcome) == (-2.0, "loss")


@pytest.mark.parametrize("orders", ["both", "random"])
def test_identical_responses_tie_without_a_call(harness: Harness, orders: str) -> None:
    same = "Your beagle is Rex."
    run_id = harness.run(
        items=[dialogue_item("same", {"a": same, "b": same + "  "})],
        rubrics=["rsum-pairwise"],
        mode=["pairwise"],
        judges=[harness.judge("openai-compatible")],
        orders=orders,
        options={"samples": 3, "temperature": 0.7},
    )
    rows = harness.rows(run_id)
    assert len(rows) == (2 if orders == "both" else 1)  # one row per order, no samples: nothing to sample
    for row in rows:
        assert (row.status, row.verdict, row.preference, row.outcome) == ("done", "identical", 0.0, "tie")
        assert row.provider_calls == 0 and row.attempts == 0
    assert harness.pending(run_id) == []
    assert harness.calls() == 0


def test_random_order_plans_one_seeded_order_per_pair() -> None:
    registry = get_registry(refresh=True)
    items = [pair_item(f"i{n}", 60, 40) for n in range(200)]

    def orders(seed: int) -> list[str | None]:
        request = RunCreate.model_validate(
            {
                "items": items,
                "rubrics": ["rsum-pairwise"],
                "mode": ["pairwise"],
                "judges": ["openai:gpt-4o", "anthropic:claude-sonnet-4-5"],
                "orders": "random",
                "order_seed": seed,
            }
        )
        planned = plan_run(request, registry, 10_000)
        per_pair = Counter((p.item_id, p.judge) for p in planned)
        assert set(per_pair.values()) == {1}  # exactly one order per pair and judge
        by_judge: dict[str, list[str | None]] = {}
        for p in planned:
            by_judge.setdefault(p.judge, []).append(p.order)
        assert by_judge["openai:gpt-4o"] == by_judge["anthropic:claude-sonnet-4-5"]  # judges see the same order
        return by_judge["openai:gpt-4o"]

    first = orders(7)
    assert orders(7) == first  # deterministic under a seed
    assert orders(8) != first  # and the seed matters
    assert 70 <= first.count("ab") <= 130  # roughly balanced (binomial(200, 1/2): sd ~7)


def test_random_order_run_judges_one_order(harness: Harness) -> None:
    run_id = harness.run(
        items=[pair_item(f"i{n}", 80 + n, 30) for n in range(6)],
        rubrics=["rsum-pairwise"],
        mode=["pairwise"],
        judges=[harness.judge("openai-compatible")],
        orders="random",
        order_seed=3,
    )
    rows = harness.rows(run_id)
    assert len(rows) == 6 and harness.calls() == 6
    assert {r.order for r in rows} == {"ab", "ba"}  # seed 3 happens to show both orders among these six
    assert all(r.preference == 2.0 and r.outcome == "win" for r in rows)  # de-swapped whichever order was shown


def test_outcome_map_default_and_run_override(harness: Harness) -> None:
    items = [pair_item("clear", 85, 20), pair_item("close", 55, 50), pair_item("lose", 50, 55)]
    default_run = harness.run(
        items=items, rubrics=["rsum-pairwise"], mode=["pairwise"], judges=[harness.judge("openai-compatible")]
    )
    outcomes = {(r.item_key, r.order): (r.preference, r.outcome) for r in harness.rows(default_run)}
    assert outcomes["clear", "ab"] == (2.0, "win") and outcomes["close", "ab"] == (1.0, "tie")
    assert outcomes["lose", "ab"] == (-1.0, "tie")

    override = harness.run(
        items=items,
        rubrics=["rsum-pairwise"],
        mode=["pairwise"],
        judges=[harness.judge("openai-compatible")],
        outcome_map={"1": "win", "-1": "loss"},
    )
    outcomes = {(r.item_key, r.order): (r.preference, r.outcome) for r in harness.rows(override)}
    assert outcomes["clear", "ab"] == (2.0, "win")  # unmapped levels keep the rubric's mapping
    assert outcomes["close", "ab"] == outcomes["close", "ba"] == (1.0, "win")
    assert outcomes["lose", "ab"] == outcomes["lose", "ba"] == (-1.0, "loss")

    with pytest.raises(PlanError) as error:
        harness.create(
            items=items,
            rubrics=["rsum-pairwise"],
            mode=["pairwise"],
            judges=[harness.judge("openai-compatible")],
            outcome_map={"+1": "win"},
        )
    assert error.value.field == "outcome_map" and "'+1'" in error.value.message


def test_fastchat_three_way_verdicts(harness: Harness) -> None:
    run_id = harness.run(
        items=[pair_item("win", 90, 10), pair_item("tie", 50, 50)],
        rubrics=["mtbench-pair-v2"],
        mode=["pairwise"],
        judges=[harness.judge("anthropic")],
    )
    rows = by_order(harness.rows(run_id))
    assert (rows["win", "ab"].verdict, rows["win", "ab"].preference, rows["win", "ab"].outcome) == ("[[A]]", 2.0, "win")
    assert (rows["win", "ba"].verdict, rows["win", "ba"].preference, rows["win", "ba"].outcome) == ("[[B]]", 2.0, "win")
    assert {(r.verdict, r.preference, r.outcome) for k, r in rows.items() if k[0] == "tie"} == {("[[C]]", 0.0, "tie")}


def test_baseline_pairing(harness: Harness) -> None:
    items = [dialogue_item("i", {"new": "Rex! <<q=90>>", "old": "Cat. <<q=30>>", "mid": "Rex? <<q=60>>"})]
    run_id = harness.run(
        items=items,
        rubrics=["rsum-pairwise"],
        mode=["pairwise"],
        judges=[harness.judge("openai-compatible")],
        pairing="baseline",
        baseline="old",
    )
    rows = harness.rows(run_id)
    assert {(r.system_a, r.system_b) for r in rows} == {("new", "old"), ("mid", "old")}
    assert all(r.outcome == "win" for r in rows)
