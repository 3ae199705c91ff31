"""A run's label queue: stored once (every eligible item with its inclusion probability, the drawn ones with their
position), read back for the API and for the calibrated estimate."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from judge_api.models import LabelQueueItem


@dataclass(frozen=True)
class LabelQueue:
    strategy: str
    seed: int
    n_requested: int
    drawn: list[tuple[str, float]]
    """(item id, inclusion probability) of the drawn items, in the queue's order."""
    inclusion: dict[str, float]
    """Every eligible item's inclusion probability."""


def store_label_queue(
    session: Session,
    run_id: str,
    *,
    strategy: str,
    seed: int,
    n_requested: int,
    drawn: list[str],
    inclusion: dict[str, float],
) -> None:
    """Insert the queue's rows in the caller's transaction (a second queue of the run breaks the unique key)."""
    position = {item: i for i, item in enumerate(drawn)}
    session.add_all(
        LabelQueueItem(
            run_id=run_id,
            item_key=item,
            position=position.get(item),
            inclusion_probability=probability,
            strategy=strategy,
            seed=seed,
            n_requested=n_requested,
        )
        for item, probability in inclusion.items()
    )
    session.flush()


def label_queue(session: Session, run_id: str) -> LabelQueue | None:
    rows = list(session.scalars(select(LabelQueueItem).where(LabelQueueItem.run_id == run_id)))
    if not rows:
        return None
    drawn = sorted((r for r in rows if r.position is not None), key=lambda r: int(r.position or 0))
    return LabelQueue(
        strategy=rows[0].strategy,
        seed=int(rows[0].seed),
        n_requested=rows[0].n_requested,
        drawn=[(r.item_key, r.inclusion_probability) for r in drawn],
        inclusion={r.item_key: r.inclusion_probability for r in rows},
    )
