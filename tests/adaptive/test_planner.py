"""The adaptive planner's choices on hand-built states, its stopping reasons and its budget."""

from __future__ import annotations

from collections import Counter

import pytest

from judge_api.adaptive.planner import STOP_REASONS, PlannerConfig, canonical, item_order, plan_step
from judge_api.adaptive.ranking import Comparison
from judge_api.adaptive.replay import pair_items_of, run_adaptive

from .simulated import BTJudge

SYSTEMS = ["A", "B", "C"]
ITEMS = [f"i{k:02d}" for k in range(60)]
PAIR_ITEMS = pair_items_of({i: SYSTEMS for i in ITEMS})


def outcomes(pair: tuple[str, str], items: list[str], wins: int, ties: int = 0) -> list[Comparison]:
    """``wins`` wins of pair[0], then ``ties`` ties, then losses, on ``items`` in order."""
    out = []
    for k, item in enumerate(items):
        score = 1.0 if k < wins else 0.5 if k < wins + ties else 0.0
        out.append(Comparison(item, pair[0], pair[1], score))
    return out


def planned_of(comparisons: list[Comparison]) -> list[tuple[str, str, str]]:
    return [(c.item, c.a, c.b) for c in comparisons]


def test_first_batch_looks_at_every_pair_once() -> None:
    plan = plan_step(SYSTEMS, PAIR_ITEMS, [], [], PlannerConfig(batch=3))
    assert plan.stop is None
    assert sorted(canonical(a, b) for _, a, b in plan.comparisons) == [("A", "B"), ("A", "C"), ("B", "C")]


def test_the_undecided_adjacent_pair_gets_the_batch() -> None:
    """A is far ahead of B and C (settled); B and C split their comparisons: the batch goes to B vs C, on items
    not yet used for that pair."""
    done = (
        outcomes(("A", "B"), ITEMS[:40], wins=32, ties=5)
        + outcomes(("A", "C"), ITEMS[:40], wins=33, ties=5)
        + outcomes(("B", "C"), ITEMS[:10], wins=5, ties=0)
    )
    plan = plan_step(SYSTEMS, PAIR_ITEMS, planned_of(done), done, PlannerConfig(batch=8))
    assert plan.stop is None
    assert plan.ranking[0] == "A"
    gaps = {(g.upper, g.lower): g for g in plan.gaps}
    assert gaps[("A", plan.ranking[1])].separated and not gaps[(plan.ranking[1], plan.ranking[2])].separated
    pairs = Counter(canonical(a, b) for _, a, b in plan.comparisons)
    assert pairs == {("B", "C"): 8}
    used = set(ITEMS[:10])
    chosen = [item for item, _, _ in plan.comparisons]
    assert not used & set(chosen) and len(set(chosen)) == len(chosen)
    # in the pair's seeded order
    assert chosen == [i for i in item_order(0, ("B", "C"), ITEMS) if i not in used][:8]


def test_when_a_pair_has_no_items_left_its_neighbours_are_compared_with_a_third_system() -> None:
    """B vs C is open and every one of its items is used: what can still move it is B or C against A."""
    done = (
        outcomes(("A", "B"), ITEMS[:6], wins=4, ties=2)
        + outcomes(("A", "C"), ITEMS[:6], wins=5, ties=1)
        + outcomes(("B", "C"), ITEMS, wins=20)
    )
    plan = plan_step(SYSTEMS, PAIR_ITEMS, planned_of(done), done, PlannerConfig(batch=6, confidence=0.95))
    assert plan.stop is None
    assert ("B", "C") not in {canonical(a, b) for _, a, b in plan.comparisons}
    assert {canonical(a, b) for _, a, b in plan.comparisons} <= {("A", "B"), ("A", "C")}


def test_the_same_state_gives_the_same_plan() -> None:
    done = outcomes(("A", "B"), ITEMS[:5], wins=3) + outcomes(("B", "C"), ITEMS[:5], wins=2, ties=2)
    first = plan_step(SYSTEMS, PAIR_ITEMS, planned_of(done), done, PlannerConfig(batch=10, seed=3))
    again = plan_step(SYSTEMS, PAIR_ITEMS, list(reversed(planned_of(done))), done, PlannerConfig(batch=10, seed=3))
    assert first.comparisons == again.comparisons
    other_seed = plan_step(SYSTEMS, PAIR_ITEMS, planned_of(done), done, PlannerConfig(batch=10, seed=4))
    assert [c[1:] for c in other_seed.comparisons] == [c[1:] for c in first.comparisons]
    assert [c[0] for c in other_seed.comparisons] != [c[0] for c in first.comparisons]


def test_stops_when_every_adjacent_pair_is_separated() -> None:
    done = (
        outcomes(("A", "B"), ITEMS[:40], wins=36, ties=2)
        + outcomes(("B", "C"), ITEMS[:40], wins=36, ties=2)
        + outcomes(("A", "C"), ITEMS[:40], wins=40)
    )
    plan = plan_step(SYSTEMS, PAIR_ITEMS, planned_of(done), done, PlannerConfig())
    assert plan.stop == "separated" and plan.comparisons == []
    assert plan.ranking == ["A", "B", "C"] and all(g.separated for g in plan.gaps)
    lo_a, hi_a = plan.intervals["A"]
    hi_b = plan.intervals["B"][1]
    assert lo_a < plan.strengths["A"] < hi_a and hi_b < plan.strengths["A"]


def test_top_k_stops_once_the_top_is_settled() -> None:
    """A is clearly first; B and C have barely met. The full ranking keeps planning, top-1 stops."""
    done = (
        outcomes(("A", "B"), ITEMS[:40], wins=36, ties=2)
        + outcomes(("A", "C"), ITEMS[:40], wins=36, ties=2)
        + outcomes(("B", "C"), ITEMS[:8], wins=4, ties=1)
    )
    full = plan_step(SYSTEMS, PAIR_ITEMS, planned_of(done), done, PlannerConfig())
    assert full.stop is None and full.comparisons
    top = plan_step(SYSTEMS, PAIR_ITEMS, planned_of(done), done, PlannerConfig(top_k=1))
    assert top.stop == "top_k_separated" and top.comparisons == []
    assert [g.rank for g in top.gaps] == [1]


def test_items_exhausted_when_nothing_is_left_to_judge() -> None:
    done = (
        outcomes(("A", "B"), ITEMS, wins=20, ties=0)
        + outcomes(("A", "C"), ITEMS, wins=20)
        + outcomes(("B", "C"), ITEMS, wins=20)
    )
    plan = plan_step(SYSTEMS, PAIR_ITEMS, planned_of(done), done, PlannerConfig())
    assert plan.stop == "items_exhausted" and plan.comparisons == []


def test_inseparable_pairs_are_given_up() -> None:
    """B and C tied on 150 of 160 items: the 10 left cannot separate them, and the planner says so instead of
    spending them."""
    items = [f"i{k:03d}" for k in range(160)]
    pair_items = pair_items_of({i: SYSTEMS for i in items})
    done = (
        outcomes(("A", "B"), items[:40], wins=40)
        + outcomes(("A", "C"), items[:40], wins=40)
        + outcomes(("B", "C"), items[:150], wins=50, ties=50)
    )
    plan = plan_step(SYSTEMS, pair_items, planned_of(done), done, PlannerConfig())
    assert plan.stop == "inseparable" and plan.comparisons == []
    assert set(STOP_REASONS) >= {"separated", "top_k_separated", "budget", "items_exhausted", "inseparable"}


@pytest.mark.parametrize("max_calls", [0, 1, 30, 97, 250])
def test_budget_stops_and_is_never_exceeded(max_calls: int) -> None:
    judge = BTJudge({"A": 0.4, "B": 0.2, "C": 0.0, "D": -0.2}, n_items=60, seed=1)
    result = run_adaptive(
        judge.systems, judge.pair_items, judge, PlannerConfig(max_calls=max_calls), calls_per_comparison=2
    )
    assert result.stop == "budget"
    assert result.calls <= max_calls and result.calls > max_calls - 2 - 1
    assert result.calls == 2 * len(judge.asked)


def test_a_comparison_is_never_planned_twice() -> None:
    judge = BTJudge({"A": 0.3, "B": 0.0, "C": -0.3}, n_items=50, seed=2)
    result = run_adaptive(judge.systems, judge.pair_items, judge, PlannerConfig(batch=7))
    asked = [(item, *canonical(a, b)) for item, a, b in judge.asked]
    assert len(asked) == len(set(asked)) == result.comparisons
    assert result.stop in STOP_REASONS
