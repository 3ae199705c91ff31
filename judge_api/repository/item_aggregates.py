"""Item-level aggregates of a run for the dashboard's pages (issue 39): grouped in the database, never the whole frame.

* ``item_scores``: the single-mode done scores averaged over samples, one row per (item, system, aspect, judge), as
  ``dashboard.analysis.judge_item_scores`` makes them from the judgments frame (the same means, scales and order).
* ``order_outcomes``: each pairwise key's outcome in both presentation orders (samples: the sign of the mean coded
  outcome) and whether it flips, as ``dashboard.analysis.order_outcomes`` makes them, with the per pair x aspect
  counts of keys judged in both orders and of flips.

The database groups the judgments (one row per key and rubric scale, or per key and order); Python merges those
rows, which number the keys, not the judgments. ``rated`` keeps the items with a human rating of the kind the page
compares with (an index seek through the run's items instead of a scan of the run)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import ColumnElement, Select, and_, case, func, select
from sqlalchemy.orm import Session

from judge_api.models import HumanRating, Judgment, RunItem

ITEM_SCORE_KEYS = ("item_id", "system", "aspect", "judge")
ORDER_KEYS = ("item_id", "system_a", "system_b", "aspect", "judge")
CODED = {"win": 1.0, "tie": 0.0, "loss": -1.0}


def _rated_items(run_id: str, kind: str) -> Select[Any]:
    """The run's items with a human rating of ``kind`` (``score`` or ``preference``)."""
    return (
        select(RunItem.id)
        .join(HumanRating, and_(HumanRating.run_id == RunItem.run_id, HumanRating.item_key == RunItem.item_key))
        .where(RunItem.run_id == run_id, HumanRating.kind == kind)
        .distinct()
    )


def _filters(run_id: str, filters: Mapping[str, str | None], system_column: Any) -> list[ColumnElement[bool]]:
    conditions: list[ColumnElement[bool]] = [Judgment.run_id == run_id]
    columns = {
        "item_id": Judgment.item_key,
        "system": system_column,
        "aspect": Judgment.aspect,
        "judge": Judgment.judge,
    }
    for name, value in filters.items():
        if value is not None:
            conditions.append(columns[name] == value)
    return conditions


# -- item scores -----------------------------------------------------------------------------------------------
def item_score_groups(session: Session, run_id: str, filters: Mapping[str, str | None], rated: bool) -> Sequence[Any]:
    """(item, system, aspect, judge, rubric, own scale min / max, first id, sum, count) per group of done scores."""
    conditions = _filters(run_id, filters, Judgment.system_a)
    conditions += [Judgment.mode == "single", Judgment.status == "done", Judgment.score.is_not(None)]
    if rated:
        conditions.append(Judgment.item_pk.in_(_rated_items(run_id, "score")))
    keys = (
        Judgment.item_key,
        Judgment.system_a,
        Judgment.aspect,
        Judgment.judge,
        Judgment.rubric_id,
        Judgment.scale_min,
        Judgment.scale_max,
    )
    query = select(*keys, func.min(Judgment.id), func.sum(Judgment.score), func.count(Judgment.score))
    return session.execute(query.where(*conditions).group_by(*keys)).all()


def merge_item_scores(
    groups: Iterable[Sequence[Any]], scales: Mapping[str, tuple[float, float]]
) -> list[dict[str, Any]]:
    """One row per (item, system, aspect, judge), sorted by those keys: the mean over every sample, the scale of the
    first judgment (by id) that has one (its own, else its rubric's), the number of samples."""
    merged: dict[tuple[str, ...], dict[str, Any]] = {}
    for item, system, aspect, judge, rubric, own_min, own_max, _first, total, count in sorted(
        groups, key=lambda g: g[7]
    ):
        default = scales.get(rubric, (math.nan, math.nan))
        lo = float(own_min) if own_min is not None else default[0]
        hi = float(own_max) if own_max is not None else default[1]
        key: tuple[str, ...] = (item, system, aspect, judge)
        row = merged.get(key)
        if row is None:
            merged[key] = {"sum": float(total), "n": int(count), "scale_min": lo, "scale_max": hi}
            continue
        row["sum"] += float(total)
        row["n"] += int(count)
        if math.isnan(row["scale_min"]):
            row["scale_min"] = lo
        if math.isnan(row["scale_max"]):
            row["scale_max"] = hi
    out = []
    for key in sorted(merged):
        row = merged[key]
        out.append(
            {
                **dict(zip(ITEM_SCORE_KEYS, key, strict=True)),
                "score": row["sum"] / row["n"],
                "scale_min": None if math.isnan(row["scale_min"]) else row["scale_min"],
                "scale_max": None if math.isnan(row["scale_max"]) else row["scale_max"],
                "n_samples": row["n"],
            }
        )
    return out


def rubric_scales(rubric_ids: Iterable[str]) -> dict[str, tuple[float, float]]:
    """Each rubric's stated scale (NaN where the registry does not know it or it has none), as the frame fills it."""
    from judge_api.rubrics import get_registry

    registry = get_registry()
    scales: dict[str, tuple[float, float]] = {}
    for rubric_id in set(rubric_ids):
        scale = registry.get(rubric_id).scale if rubric_id in registry else None
        scales[rubric_id] = (float(scale[0]), float(scale[1])) if scale else (math.nan, math.nan)
    return scales


def item_scores(
    session: Session, run_id: str, filters: Mapping[str, str | None], rated: bool = False
) -> list[dict[str, Any]]:
    groups = item_score_groups(session, run_id, filters, rated)
    return merge_item_scores(groups, rubric_scales(g[4] for g in groups))


# -- order outcomes ----------------------------------------------------------------------------------------------
def order_groups(session: Session, run_id: str, filters: Mapping[str, str | None], rated: bool) -> Sequence[Any]:
    """(item, a, b, aspect, judge, order, coded sum, coded count, preference sum, preference count) per key and order
    of the done pairwise judgments with an outcome."""
    coded = case((Judgment.outcome == "win", 1.0), (Judgment.outcome == "tie", 0.0), (Judgment.outcome == "loss", -1.0))
    conditions = _filters(run_id, filters, Judgment.system_a)
    conditions += [
        Judgment.mode == "pairwise",
        Judgment.status == "done",
        Judgment.outcome.is_not(None),
        Judgment.order.is_not(None),
        Judgment.system_b.is_not(None),
    ]
    if rated:
        conditions.append(Judgment.item_pk.in_(_rated_items(run_id, "preference")))
    keys = (Judgment.item_key, Judgment.system_a, Judgment.system_b, Judgment.aspect, Judgment.judge, Judgment.order)
    query = select(
        *keys, func.sum(coded), func.count(coded), func.sum(Judgment.preference), func.count(Judgment.preference)
    )
    return session.execute(query.where(*conditions).group_by(*keys)).all()


def _outcome(total: float | None, count: int) -> str | None:
    if not count or total is None:
        return None
    return "win" if total > 0 else "loss" if total < 0 else "tie"


@dataclass
class OrderOutcomes:
    """The keys (sorted), and per (system_a, system_b, aspect) how many were judged in both orders and flipped."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    by_pair: list[dict[str, Any]] = field(default_factory=list)

    @property
    def n_both(self) -> int:
        return sum(int(p["n"]) for p in self.by_pair)

    @property
    def n_flipped(self) -> int:
        return sum(int(p["flips"]) for p in self.by_pair)


def merge_order_outcomes(groups: Iterable[Sequence[Any]]) -> OrderOutcomes:
    keyed: dict[tuple[str, ...], dict[str, Any]] = {}
    for item, a, b, aspect, judge, order, coded_sum, coded_n, pref_sum, pref_n in groups:
        row = keyed.setdefault((item, a, b, aspect, judge), {})
        row[f"outcome_{order}"] = _outcome(coded_sum, int(coded_n))
        row[f"preference_{order}"] = float(pref_sum) / int(pref_n) if pref_n else None
    pairs: dict[tuple[str, str, str], list[int]] = {}
    out = OrderOutcomes()
    for key in sorted(keyed):
        row = keyed[key]
        ab, ba = row.get("outcome_ab"), row.get("outcome_ba")
        flipped = ab is not None and ba is not None and ab != ba
        out.rows.append(
            {
                **dict(zip(ORDER_KEYS, key, strict=True)),
                "outcome_ab": ab,
                "outcome_ba": ba,
                "preference_ab": row.get("preference_ab"),
                "preference_ba": row.get("preference_ba"),
                "flipped": flipped,
            }
        )
        if ab is not None and ba is not None:
            counts = pairs.setdefault((key[1], key[2], key[3]), [0, 0])
            counts[0] += 1
            counts[1] += int(flipped)
    out.by_pair = [
        {"system_a": a, "system_b": b, "aspect": aspect, "n": n, "flips": flips}
        for (a, b, aspect), (n, flips) in sorted(pairs.items())
    ]
    return out


def order_outcomes(
    session: Session, run_id: str, filters: Mapping[str, str | None], rated: bool = False
) -> OrderOutcomes:
    return merge_order_outcomes(order_groups(session, run_id, filters, rated))
