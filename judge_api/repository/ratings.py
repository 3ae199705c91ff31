"""Human ratings: stored per (item, system, aspect, rater), replaced when imported again."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from judge_api.models import (
    HumanRating,
    RunItem,
)
from judge_api.schemas import HumanRatingIn


def upsert_ratings(session: Session, run_id: str, ratings: Sequence[HumanRatingIn]) -> tuple[int, int]:
    """Insert ratings; a rating for the same (item, system(s), aspect, rater) replaces the old value."""
    existing = {
        (r.item_key, r.system, r.system_b, r.aspect, r.rater): r
        for r in session.scalars(select(HumanRating).where(HumanRating.run_id == run_id))
    }
    created = updated = 0
    for rating in ratings:
        key = (rating.item_id, rating.system, rating.system_b or "", rating.aspect, rating.rater)
        row = existing.get(key)
        if row is None:
            row = HumanRating(
                run_id=run_id,
                item_key=rating.item_id,
                system=rating.system,
                system_b=rating.system_b or "",
                aspect=rating.aspect,
                rater=rating.rater,
                kind=rating.kind,
                value=rating.value,
                scale_min=rating.scale[0],
                scale_max=rating.scale[1],
                meta=rating.meta,
            )
            session.add(row)
            existing[key] = row
            created += 1
        else:
            row.value, row.kind = rating.value, rating.kind
            (row.scale_min, row.scale_max), row.meta = rating.scale, rating.meta
            updated += 1
    session.flush()
    return created, updated


def item_systems(session: Session, run_id: str, item_keys: Iterable[str]) -> dict[str, set[str]]:
    """The candidate systems of the run's items among ``item_keys`` (an item the run lacks is absent)."""
    keys = sorted(set(item_keys))
    systems: dict[str, set[str]] = {}
    for start in range(0, len(keys), 500):
        query = select(RunItem.item_key, RunItem.payload).where(
            RunItem.run_id == run_id, RunItem.item_key.in_(keys[start : start + 500])
        )
        for key, payload in session.execute(query):
            systems[key] = set((payload or {}).get("candidates") or {})
    return systems
