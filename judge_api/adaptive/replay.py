"""Drive the adaptive planner against a judge function, in process: the benchmark's and the tests' loop.

The judge function stands for judging one comparison in both presentation orders and combining them (it returns
system ``a``'s order-combined score, 1 / 0.5 / 0, or None when the comparison yielded no verdict). The loop is the
service's: plan a batch, judge it all, plan again, until the planner stops.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import pandas as pd

from judge_api.adaptive.planner import Pair, Plan, Planned, PlannerConfig, canonical, plan_step
from judge_api.adaptive.ranking import Comparison, RankingState
from judge_api.stats import frames as F
from judge_api.stats.preferences import combine_orders

Judge = Callable[[str, str, str], float | None]
SCORES = {F.WIN: 1.0, F.TIE: 0.5, F.LOSS: 0.0}


@dataclass
class AdaptiveResult:
    ranking: list[str]
    stop: str
    calls: int
    comparisons: int
    batches: int
    last_plan: Plan
    outcomes: list[Comparison] = field(default_factory=list)


def pair_items_of(items: Mapping[str, Sequence[str]]) -> dict[Pair, list[str]]:
    """Per canonical pair, the items (``item -> its systems``) holding both systems."""
    out: dict[Pair, list[str]] = {}
    for item, systems in items.items():
        names = sorted(set(systems))
        for x in range(len(names)):
            for y in range(x + 1, len(names)):
                out.setdefault(canonical(names[x], names[y]), []).append(item)
    return out


def run_adaptive(
    systems: Sequence[str],
    pair_items: Mapping[Pair, Sequence[str]],
    judge: Judge,
    config: PlannerConfig,
    *,
    calls_per_comparison: int = 2,
    max_steps: int = 100_000,
) -> AdaptiveResult:
    planned: list[Planned] = []
    outcomes: list[Comparison] = []
    for batches in range(max_steps):
        plan = plan_step(
            systems,
            pair_items,
            planned,
            outcomes,
            config,
            calls_per_comparison=calls_per_comparison,
            calls_used=len(planned) * calls_per_comparison,
        )
        if plan.stop is not None:
            return AdaptiveResult(
                plan.ranking, plan.stop, len(planned) * calls_per_comparison, len(planned), batches, plan, outcomes
            )
        for item, a, b in plan.comparisons:
            planned.append((item, a, b))
            score = judge(item, a, b)
            if score is not None:
                outcomes.append(Comparison(item, a, b, score))
    raise RuntimeError(f"the planner did not stop within {max_steps} steps")


def full_ranking(systems: Sequence[str], pair_items: Mapping[Pair, Sequence[str]], judge: Judge) -> list[str]:
    """The ranking every comparison gives (round robin: every pair on every item)."""
    outcomes = []
    for (a, b), items in sorted(pair_items.items()):
        for item in items:
            score = judge(item, a, b)
            if score is not None:
                outcomes.append(Comparison(item, a, b, score))
    return RankingState(systems, outcomes).ranking()


@dataclass
class Oracle:
    """Recorded verdicts replayed as a judge: a comparison's outcome is looked up, never computed."""

    systems: list[str]
    items: dict[str, list[str]]
    """item -> the systems it has verdicts for"""
    verdicts: dict[tuple[str, str, str], float]

    def __call__(self, item: str, a: str, b: str) -> float | None:
        return self.verdicts.get((item, a, b))

    @property
    def pair_items(self) -> dict[Pair, list[str]]:
        """Per pair, the items that hold a verdict for it."""
        out: dict[Pair, list[str]] = {}
        for item, a, b in self.verdicts:
            if a < b:
                out.setdefault((a, b), []).append(item)
        return {pair: sorted(items) for pair, items in sorted(out.items())}


def oracle_from_judgments(judgments: pd.DataFrame) -> Oracle:
    """An oracle from a pairwise judgments frame of one aspect and judge: orders combined as the report does."""
    combined = combine_orders(judgments)
    verdicts: dict[tuple[str, str, str], float] = {}
    items: dict[str, set[str]] = {}
    for item, a, b, outcome in combined[[F.ITEM_ID, F.SYSTEM_A, F.SYSTEM_B, F.OUTCOME]].itertuples(index=False):
        score = SCORES[outcome]
        verdicts[item, a, b] = score
        verdicts[item, b, a] = 1.0 - score
        items.setdefault(item, set()).update((a, b))
    systems = sorted({s for names in items.values() for s in names})
    return Oracle(systems, {item: sorted(names) for item, names in items.items()}, verdicts)
