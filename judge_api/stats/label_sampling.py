"""Which items to label: a seeded draw with known inclusion probabilities, so the calibrated interval stays valid.

* ``uniform``: ``n`` of the ``N`` eligible items without replacement; each item's inclusion probability is ``n/N``.
* ``active`` (Zrnic & Candès, *Active statistical inference*, 2024): Poisson sampling, each item labeled
  independently with probability ``pi_i`` proportional to how much a label on it is expected to say, scaled so that
  the probabilities add up to ``n`` (the queue holds ``n`` items in expectation), floored so that no item is left
  with a tiny probability (a tiny ``pi_i`` would make its weight ``1/pi_i`` explode), and capped at 1. An item's
  weight is its uncertainty: the spread of its judge scores (across the judges of a panel and the samples of each
  judge) on the rubric's scale, plus a base so that items the judges agree on keep a fair chance. Inverse-probability
  weights (``stats.ppi.ppi_mean_active``) make the estimate unbiased whatever the weights were.

Both draws come in a random order (the queue's positions) from ``numpy.random.default_rng(seed)``: the same seed and
items give the same queue.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from judge_api.stats import frames as F

STRATEGIES = ("uniform", "active")
ACTIVE_BASE = 0.25
"""The uncertainty every item has before its judges' spread is added (on the scale's unit)."""
ACTIVE_FLOOR = 0.2
"""No item's probability under ``active`` is below this share of the uniform one (``n/N``)."""


@dataclass(frozen=True)
class Draw:
    item_ids: list[str]
    """The drawn items, in the queue's order."""
    inclusion: dict[str, float]
    """Every eligible item's inclusion probability (drawn or not): the design the estimate needs."""


def eligible_items(judgments: pd.DataFrame) -> list[str]:
    """The items with at least one done single-mode judgment with a score, sorted."""
    df = F.validate_judgments(judgments)
    done = df[(df[F.MODE] == F.SINGLE) & (df[F.STATUS] == F.DONE) & df[F.SCORE].notna()]
    return sorted(str(i) for i in pd.unique(done[F.ITEM_ID]))


def labeled_items(judgments: pd.DataFrame, ratings: pd.DataFrame) -> set[str]:
    """The items the calibrated estimate counts as labeled: every system judged on the item (a done single-mode
    score) carries a human score rating, for every aspect people rate in this run. An item rated for one of its
    systems only is still to label: the other system's rows miss it (an ``active`` queue's rows stay null)."""
    r = F.validate_ratings(ratings)
    scores = r[(r[F.KIND] == F.KIND_SCORE) & r[F.VALUE].notna()]
    if scores.empty:
        return set()
    rated = set(
        zip(scores[F.ITEM_ID].astype(str), scores[F.SYSTEM].astype(str), scores[F.ASPECT].astype(str), strict=True)
    )
    aspects = {a for _, _, a in rated}
    df = F.validate_judgments(judgments)
    done = df[(df[F.MODE] == F.SINGLE) & (df[F.STATUS] == F.DONE) & df[F.SCORE].notna() & df[F.ASPECT].isin(aspects)]
    needed = set(
        zip(done[F.ITEM_ID].astype(str), done[F.SYSTEM_A].astype(str), done[F.ASPECT].astype(str), strict=True)
    )
    missing = {item for item, system, aspect in needed if (item, system, aspect) not in rated}
    return {item for item, _, _ in rated} - missing


def item_uncertainty(judgments: pd.DataFrame, items: list[str]) -> np.ndarray:
    """Per item: ACTIVE_BASE + the mean, over its (system, aspect), of the standard deviation of its judge scores
    (every judge, every sample) as a share of the rubric's scale."""
    df = F.validate_judgments(judgments)
    done = df[(df[F.MODE] == F.SINGLE) & (df[F.STATUS] == F.DONE) & df[F.SCORE].notna()]
    width = (done[F.SCALE_MAX] - done[F.SCALE_MIN]).where(lambda w: w > 0)
    unit = (done[F.SCORE] / width).rename("unit")
    frame = pd.concat([done[[F.ITEM_ID, F.SYSTEM_A, F.ASPECT]], unit], axis=1).dropna()
    spread = frame.groupby([F.ITEM_ID, F.SYSTEM_A, F.ASPECT], sort=False)["unit"].std(ddof=0).fillna(0.0)
    per_item = spread.groupby(level=0).mean()
    return ACTIVE_BASE + per_item.reindex(items).fillna(0.0).to_numpy(dtype="float64")


def _active_probabilities(weights: np.ndarray, n: int) -> np.ndarray:
    """``pi_i`` proportional to the weights, floored at ACTIVE_FLOOR x n/N, capped at 1, adding up to ``n``."""
    big_n = weights.size
    floor = ACTIVE_FLOOR * n / big_n
    pi = np.full(big_n, n / big_n)
    capped = np.zeros(big_n, dtype=bool)
    for _ in range(big_n + 1):  # each pass caps at least one more item, or is the last
        free = ~capped
        budget = n - capped.sum()
        share = weights[free] / weights[free].sum()
        pi[free] = np.maximum(floor, budget * share)
        # the floor may have pushed the total over the budget: scale the items above the floor back
        above = free & (pi > floor)
        excess = pi[free].sum() - budget
        if excess > 1e-12 and above.any():
            pi[above] -= excess * (pi[above] - floor) / (pi[above] - floor).sum()
        newly = free & (pi >= 1.0)
        if not newly.any():
            break
        pi[newly] = 1.0
        capped |= newly
    return np.clip(pi, floor, 1.0)


def draw(items: list[str], n: int, strategy: str, seed: int, uncertainty: np.ndarray | None = None) -> Draw:
    """A seeded draw of ``n`` items (in expectation for ``active``) with every item's inclusion probability."""
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {list(STRATEGIES)}, got {strategy!r}")
    big_n = len(items)
    if not 1 <= n <= big_n:
        raise ValueError(f"n must be between 1 and the {big_n} items with a single-mode score, got {n}")
    rng = np.random.default_rng(seed)
    if strategy == "uniform":
        chosen = rng.choice(big_n, size=n, replace=False)
        return Draw([items[i] for i in chosen], {item: n / big_n for item in items})
    weights = np.ones(big_n) if uncertainty is None else np.asarray(uncertainty, dtype="float64")
    if weights.shape != (big_n,) or not np.all(np.isfinite(weights)) or np.any(weights <= 0):
        raise ValueError("active sampling needs one positive, finite uncertainty per item")
    pi = _active_probabilities(weights, n)
    taken = np.flatnonzero(rng.random(big_n) < pi)
    order = rng.permutation(taken.size)
    return Draw([items[i] for i in taken[order]], {item: float(p) for item, p in zip(items, pi, strict=True)})
