"""Adaptive pairing: choose the next batch of (item, pair) comparisons, or say why the ranking is finished.

Pure: the caller (the service's planning step, the benchmark, the tests) hands in what the database holds (the
systems, which items can compare which pair, every comparison planned so far and the outcomes of those judged) and
gets back the comparisons to judge next or the stopping reason. Given the same state it always returns the same
plan, so two planners that race on the same state plan the same comparisons (and the database's unique keys keep
them single).

One step:

1. Fit the Bradley-Terry state (``ranking.RankingState``) and check the adjacent pairs of the current order (all,
   or those deciding the top ``k``): all separated at the requested confidence -> stop ``separated``.
2. No room in the call budget for one more comparison -> stop ``budget``.
3. Warm-up: every pair that has fewer than ``warmup`` comparisons gets them (the model needs a first look at
   every pair before it can tell which are close).
4. Greedy expected value of information: each comparison of pair (a, b) adds ``p (1 - p) u u'`` (``u = e_a -
   e_b``, ``p`` the current win probability) to the Fisher information; its value is the sum, over the adjacent
   pairs not yet separated, of the share of their variance it removes (Sherman-Morrison). The best pair gets the
   next unused item, the information is updated as if it had been judged, and so on until the batch is full. A
   pair adjacent in the order whose intervals overlap most is usually the winner; a third system compared with
   both members of an undecided pair can be worth more when their direct comparisons are used up.
5. Nothing left that could tell an undecided pair apart (their items are used up) -> stop ``items_exhausted``.

Items are taken in a seeded pseudo-random order per pair, never chosen by their outcome, so the items judged for
a pair are a random sample of its items.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

import numpy as np

from judge_api.adaptive.ranking import Comparison, Gap, RankingState, predictive_power

StopReason = Literal["separated", "budget", "items_exhausted"]
STOP_REASONS: dict[str, str] = {
    "separated": "every adjacent pair of the ranking is separated at the requested confidence",
    "top_k_separated": "the top k are separated at the requested confidence",
    "budget": "the call budget is spent",
    "items_exhausted": "no unused item is left that could separate the remaining pairs",
    "inseparable": "the items left are very unlikely to separate the remaining pairs (predictive power below 5 %)",
}
Pair = tuple[str, str]
Planned = tuple[str, str, str]
"""(item, system_a, system_b) with the pair in canonical order."""

MIN_GAIN = 1e-9
FUTILITY = 0.05
"""An undecided pair whose predictive power (``ranking.predictive_power``) is below this gets no more comparisons:
even every item left would very likely not separate it."""


@dataclass(frozen=True)
class PlannerConfig:
    confidence: float = 0.95
    top_k: int | None = None
    max_calls: int | None = None
    batch: int = 16
    """Comparisons per planning step."""
    warmup: int = 1
    """Comparisons every pair gets before the greedy choice starts."""
    seed: int = 0


@dataclass(frozen=True)
class Plan:
    comparisons: list[Planned]
    stop: str | None
    """None while planning goes on; else a key of ``STOP_REASONS``."""
    ranking: list[str]
    gaps: list[Gap]
    strengths: dict[str, float] = field(default_factory=dict)
    intervals: dict[str, tuple[float, float]] = field(default_factory=dict)


def canonical(a: str, b: str) -> Pair:
    return (a, b) if a <= b else (b, a)


def item_order(seed: int, pair: Pair, items: Iterable[str]) -> list[str]:
    """The seeded pseudo-random order in which a pair's items are used."""

    def key(item: str) -> bytes:
        return hashlib.sha256(f"{seed}\x1f{pair[0]}\x1f{pair[1]}\x1f{item}".encode()).digest()

    return sorted(items, key=key)


def plan_step(
    systems: Sequence[str],
    pair_items: Mapping[Pair, Sequence[str]],
    planned: Iterable[Planned],
    outcomes: Sequence[Comparison],
    config: PlannerConfig,
    *,
    calls_per_comparison: int = 2,
    calls_used: int = 0,
) -> Plan:
    """The next batch (see the module docstring). ``pair_items``: per canonical pair, the items holding both
    systems; ``planned``: every comparison planned so far (judged or not); ``calls_used``: judge calls planned so
    far (what the budget is charged with)."""
    state = RankingState(systems, outcomes)
    gaps = state.gaps(config.confidence, config.top_k)
    base = Plan(
        [],
        None,
        state.ranking(),
        gaps,
        {name: float(state.theta[i]) for i, name in enumerate(state.systems)},
        state.intervals(config.confidence),
    )
    if gaps and all(g.separated for g in gaps):
        return replace(base, stop="separated" if config.top_k is None else "top_k_separated")
    room = None
    if config.max_calls is not None:
        room = (config.max_calls - calls_used) // max(calls_per_comparison, 1)
        if room <= 0:
            return replace(base, stop="budget")
    batch = config.batch if room is None else min(config.batch, room)
    used: dict[Pair, set[str]] = {}
    for item, a, b in planned:
        used.setdefault(canonical(a, b), set()).add(item)
    queues = {
        pair: [i for i in item_order(config.seed, pair, items) if i not in used.get(pair, set())]
        for pair, items in pair_items.items()
    }
    chosen: list[Planned] = []

    def take(pair: Pair) -> None:
        chosen.append((queues[pair].pop(0), pair[0], pair[1]))

    count = Counter({pair: len(used.get(pair, ())) for pair in pair_items})
    for pair in sorted(pair_items):
        while count[pair] < config.warmup and queues[pair] and len(chosen) < batch:
            take(pair)
            count[pair] += 1
    undecided = [g for g in gaps if not g.separated]
    power = _predictive_power(state, undecided, queues, 1.0 - config.confidence)
    hopeful = [g for g, pp in zip(undecided, power, strict=True) if pp >= FUTILITY]
    if len(chosen) < batch and hopeful:
        chosen += _greedy(state, hopeful, queues, batch - len(chosen))
    if not chosen:
        return replace(base, stop="inseparable" if any(pp > 0 for pp in power) else "items_exhausted")
    return replace(base, comparisons=chosen)


def _predictive_power(
    state: RankingState, undecided: list[Gap], queues: dict[Pair, list[str]], alpha: float
) -> list[float]:
    """Per undecided gap, the chance that judging every comparison still available separates it."""
    if not undecided:
        return []
    s = len(state.systems)
    full = state.information.copy()
    for (a, b), left in queues.items():
        if left:
            i, j = state.index[a], state.index[b]
            p = state.win_probability(i, j)
            w = len(left) * p * (1.0 - p)
            full[i, i] += w
            full[j, j] += w
            full[i, j] -= w
            full[j, i] -= w
    full_inv = np.linalg.inv(full + np.ones((s, s)) / s)
    out = []
    for g in undecided:
        c = np.zeros(s)
        c[state.index[g.upper]], c[state.index[g.lower]] = 1.0, -1.0
        # the robust information grows as the model's does
        ratio = float(c @ state._a_inv @ c) / float(c @ full_inv @ c)
        out.append(predictive_power(g, g.information * ratio, alpha))
    return out


def _greedy(state: RankingState, undecided: list[Gap], queues: dict[Pair, list[str]], n: int) -> list[Planned]:
    s = len(state.systems)
    a_inv = state._a_inv.copy()
    contrasts = np.zeros((len(undecided), s))
    for k, g in enumerate(undecided):
        contrasts[k, state.index[g.upper]] = 1.0
        contrasts[k, state.index[g.lower]] = -1.0
    pairs = [p for p in sorted(queues) if queues[p]]
    if not pairs:
        return []
    u = np.zeros((len(pairs), s))
    w = np.empty(len(pairs))
    for k, (a, b) in enumerate(pairs):
        i, j = state.index[a], state.index[b]
        u[k, i], u[k, j] = 1.0, -1.0
        p = state.win_probability(i, j)
        w[k] = p * (1.0 - p)
    left = np.array([len(queues[p]) for p in pairs])
    out: list[Planned] = []
    while len(out) < n:
        var = np.einsum("gi,ij,gj->g", contrasts, a_inv, contrasts)
        au = u @ a_inv  # (pairs, s)
        cau = contrasts @ au.T  # (gaps, pairs)
        quad = np.einsum("pi,pi->p", au, u)
        gain = (w[:, None] * (cau**2).T / (1.0 + w * quad)[:, None] / var[None, :]).sum(axis=1)
        gain[left <= 0] = -1.0
        best = int(np.argmax(gain))
        if gain[best] <= MIN_GAIN:
            break
        pair = pairs[best]
        out.append((queues[pair].pop(0), pair[0], pair[1]))
        left[best] -= 1
        v = au[best]
        a_inv = a_inv - w[best] * np.outer(v, v) / (1.0 + w[best] * quad[best])
    return out
