"""Item-level aggregates of a run for the dashboard's pages (issue 39): grouped in the database, never the whole frame.

* ``item_scores``: the single-mode done scores averaged over samples, one row per (item, system, aspect, judge), as
  ``dashboard.analysis.judge_item_scores`` makes them from the judgments frame (the same means, scales and order).
* ``order_outcomes``: each pairwise key's outcome in both presentation orders (samples: the sign of the mean coded
  outcome) and whether it flips, as ``dashboard.analysis.order_outcomes`` makes them, with the per pair x aspect
  counts of keys judged in both orders and of flips.

The database groups the judgments (one row per key and rubric scale, or per key and order); Python merges those
rows, which number the keys, not the judgments. ``rated`` keeps the items with a human rating of the kind the page
compares with (index seeks by item instead of a scan of the run)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, Select, and_, case, func, select, tuple_
from sqlalchemy.orm import Session

from judge_api.models import HumanRating, Judgment

ITEM_SCORE_KEYS = ("item_id", "system", "aspect", "judge")
ORDER_KEYS = ("item_id", "system_a", "system_b", "aspect", "judge")
CODED = {"win": 1.0, "tie": 0.0, "loss": -1.0}


def _rated_items(run_id: str, kind: str) -> Select[Any]:
    """The keys of the run's items with a human rating of ``kind`` (``score`` or ``preference``): the judgments'
    ``item_key`` IN these seeks along ``ix_judgments_order_outcomes`` (run, mode, status, item_key, ...)."""
    return select(HumanRating.item_key).where(HumanRating.run_id == run_id, HumanRating.kind == kind).distinct()


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
    if rated:  # the rated items along the index, then the rated (item, system, aspect) keys among them
        rated_keys = select(HumanRating.item_key, HumanRating.system, HumanRating.aspect).where(
            HumanRating.run_id == run_id, HumanRating.kind == "score"
        )
        conditions.append(Judgment.item_key.in_(_rated_items(run_id, "score")))
        conditions.append(tuple_(Judgment.item_key, Judgment.system_a, Judgment.aspect).in_(rated_keys))
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
def _outcome(total: float | None, count: int) -> str | None:
    if not count or total is None:
        return None
    return "win" if total > 0 else "loss" if total < 0 else "tie"


def _per_key(run_id: str, filters: Mapping[str, str | None], rated: bool) -> Select[Any]:
    """One row per pairwise key: per order the coded outcomes' sum and count and the preferences' sum and count,
    grouped along ``ix_judgments_order_outcomes`` (in key order, without reading the rows)."""
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
        conditions.append(Judgment.item_key.in_(_rated_items(run_id, "preference")))
    columns = []
    for order in ("ab", "ba"):
        mine = Judgment.order == order
        columns += [
            func.sum(case((mine, coded))).label(f"coded_{order}"),
            func.count(case((mine, coded))).label(f"n_{order}"),
            func.sum(case((mine, Judgment.preference))).label(f"pref_{order}"),
            func.count(case((mine, Judgment.preference))).label(f"npref_{order}"),
        ]
    return select(*ORDER_COLUMNS, *columns).where(*conditions).group_by(*ORDER_COLUMNS)


ORDER_COLUMNS = (Judgment.item_key, Judgment.system_a, Judgment.system_b, Judgment.aspect, Judgment.judge)


def _sign(value: Any) -> Any:
    return case((value > 0, 1), (value < 0, -1), else_=0)


def _flipped(c: Any) -> ColumnElement[bool]:
    """Both orders have an outcome and they differ (on the per-key columns, or their aggregate expressions)."""
    return and_(c.n_ab > 0, c.n_ba > 0, _sign(c.coded_ab) != _sign(c.coded_ba))


def _key_order(session: Session) -> list[Any]:
    """Key order as Python sorts strings (code points): SQLite's binary collation (the index's order, so a page
    stops early); PostgreSQL's "C"."""
    if session.get_bind().dialect.name == "postgresql":
        return [c.collate("C") for c in ORDER_COLUMNS]
    return list(ORDER_COLUMNS)


def _order_row(row: Any) -> dict[str, Any]:
    out: dict[str, Any] = dict(zip(ORDER_KEYS, row[:5], strict=True))
    outcomes = {}
    for order in ("ab", "ba"):
        outcomes[order] = _outcome(getattr(row, f"coded_{order}"), int(getattr(row, f"n_{order}")))
        out[f"outcome_{order}"] = outcomes[order]
        n_pref = int(getattr(row, f"npref_{order}"))
        out[f"preference_{order}"] = float(getattr(row, f"pref_{order}")) / n_pref if n_pref else None
    out = {k: out[k] for k in (*ORDER_KEYS, "outcome_ab", "outcome_ba", "preference_ab", "preference_ba")}
    out["flipped"] = outcomes["ab"] is not None and outcomes["ba"] is not None and outcomes["ab"] != outcomes["ba"]
    return out


@dataclass
class OrderPage:
    """One page of keys, how many match, and per (system_a, system_b, aspect) the keys judged in both orders and
    their flips (over every key the filters keep, not only the page's)."""

    total: int
    rows: list[dict[str, Any]]
    n_keys: int
    by_pair: list[dict[str, Any]]

    @property
    def n_both(self) -> int:
        return sum(int(p["n"]) for p in self.by_pair)

    @property
    def n_flipped(self) -> int:
        return sum(int(p["flips"]) for p in self.by_pair)


def order_outcomes_page(
    session: Session,
    run_id: str,
    filters: Mapping[str, str | None],
    *,
    rated: bool = False,
    flipped: bool = False,
    offset: int = 0,
    limit: int = 1000,
) -> OrderPage:
    """``order_outcomes`` grouped and paged by the database: the flip counts per pair and aspect, and one page of the
    keys (only the flipped ones with ``flipped``) in key order."""
    grouped = _per_key(run_id, filters, rated)
    per_key = grouped.subquery("per_key")
    c = per_key.c
    flip = _flipped(c)
    both = and_(c.n_ab > 0, c.n_ba > 0)
    counts = session.execute(  # one pass over the keys: every key, those judged in both orders, the flips
        select(
            c.system_a,
            c.system_b,
            c.aspect,
            func.count(),
            func.sum(case((both, 1), else_=0)),
            func.sum(case((flip, 1), else_=0)),
        )
        .select_from(per_key)
        .group_by(c.system_a, c.system_b, c.aspect)
    ).all()
    by_pair = [
        {"system_a": a, "system_b": b, "aspect": aspect, "n": int(n or 0), "flips": int(flips or 0)}
        for a, b, aspect, _, n, flips in sorted(counts, key=lambda r: (r[0], r[1], r[2]))
        if n
    ]
    n_keys = sum(int(r[3]) for r in counts)
    page = grouped.order_by(*_key_order(session)).offset(offset).limit(limit)
    if flipped:  # HAVING on the aggregates: the groups come in index order, so page one reads a few keys
        page = page.having(_flipped(grouped.selected_columns))
    rows = [_order_row(r) for r in session.execute(page).all()]
    total = sum(int(p["flips"]) for p in by_pair) if flipped else n_keys
    return OrderPage(total, rows, n_keys, by_pair)


# -- judge score sums (two runs compared) ------------------------------------------------------------------------
def judge_score_sums(session: Session, run_id: str) -> list[tuple[str, str, str, str, float, int]]:
    """(item, system, aspect, judge, sum, count) of the run's done single-mode scores, one row per key: what the
    Compare runs page averages (``judge_api.stats.compare``) instead of the run's judgments."""
    query = (
        select(
            Judgment.item_key,
            Judgment.system_a,
            Judgment.aspect,
            Judgment.judge,
            func.sum(Judgment.score),
            func.count(Judgment.score),
        )
        .where(
            Judgment.run_id == run_id,
            Judgment.mode == "single",
            Judgment.status == "done",
            Judgment.score.is_not(None),
        )
        # system_b (null in single mode) keeps the GROUP BY in the order of ix_judgments_order_outcomes, which covers
        # score (migration 0027): an index scan without a sort or a read of the rows
        .group_by(Judgment.item_key, Judgment.system_a, Judgment.system_b, Judgment.aspect, Judgment.judge)
    )
    return [(str(a), str(b), str(c), str(d), float(s or 0.0), int(n)) for a, b, c, d, s, n in session.execute(query)]
