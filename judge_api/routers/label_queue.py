"""A run's label queue: ``POST /v1/runs/{id}/label-queue`` draws the items for people to label, seeded and
recorded with their inclusion probabilities; ``GET`` shows it with what is labeled so far. The calibrated estimate
(``GET /v1/runs/{id}/calibrated``) weights the queue's labels by those probabilities."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, HTTPException
from sqlalchemy import exc as sa_exc
from sqlalchemy.orm import Session

from judge_api import repository
from judge_api.auth import Principal
from judge_api.config import Settings, get_settings
from judge_api.deps import app_settings, frame_readable, get_session, require, run_or_404
from judge_api.errors import field_error
from judge_api.schemas import LabelQueueIn
from judge_api.stats.label_sampling import draw, eligible_items, item_uncertainty, labeled_items

router = APIRouter(tags=["reports"])


def _labeled_items(session: Session, run_id: str) -> set[str]:
    """Items rated for every system judged on them (``stats.label_sampling.labeled_items``)."""
    judgments = repository.judgments_frame(session, run_id, readers=get_settings().frame_readers)
    return labeled_items(judgments, repository.ratings_frame(session, run_id))


def _queue_out(run_id: str, queue: repository.LabelQueue, labeled: set[str]) -> dict[str, Any]:
    items = [
        {"position": i, "item_id": item, "inclusion_probability": p, "labeled": item in labeled}
        for i, (item, p) in enumerate(queue.drawn)
    ]
    return {
        "run_id": run_id,
        "strategy": queue.strategy,
        "seed": queue.seed,
        "n_requested": queue.n_requested,
        "n_drawn": len(items),
        "n_eligible": len(queue.inclusion),
        "n_labeled": sum(1 for i in items if i["labeled"]),
        "items": items,
    }


@router.post("/v1/runs/{run_id}/label-queue", status_code=201)
def create_label_queue(
    run_id: str,
    body: LabelQueueIn,
    principal: Principal = Depends(require("submit")),
    session: Session = Depends(get_session),
    app: Settings = Depends(app_settings),
) -> dict[str, Any]:
    frame_readable(run_or_404(session, run_id, principal), app)
    if repository.label_queue(session, run_id) is not None:
        raise HTTPException(409, "this run has a label queue already: GET /v1/runs/{id}/label-queue shows it")
    judgments = repository.judgments_frame(session, run_id, readers=get_settings().frame_readers)
    items = eligible_items(judgments)
    if not items:
        raise HTTPException(
            409, "this run has no done single-mode judgment with a score yet: a label queue draws from those items"
        )
    if body.n > len(items):
        raise field_error(["n"], f"the run has {len(items)} items with a single-mode score; n={body.n} is more")
    uncertainty = item_uncertainty(judgments, items) if body.strategy == "active" else None
    drawn = draw(items, body.n, body.strategy, body.seed, uncertainty)
    try:
        repository.store_label_queue(
            session,
            run_id,
            strategy=body.strategy,
            seed=body.seed,
            n_requested=body.n,
            drawn=drawn.item_ids,
            inclusion=drawn.inclusion,
        )
        session.commit()
    except sa_exc.IntegrityError:
        session.rollback()
        raise HTTPException(409, "a label queue for this run was drawn concurrently; nothing was stored") from None
    queue = repository.label_queue(session, run_id)
    assert queue is not None
    return _queue_out(run_id, queue, _labeled_items(session, run_id))


@router.get("/v1/runs/{run_id}/label-queue")
def get_label_queue(
    run_id: str,
    principal: Principal = Depends(require("read")),
    session: Session = Depends(get_session),
    app: Settings = Depends(app_settings),
) -> dict[str, Any]:
    frame_readable(run_or_404(session, run_id, principal), app)
    queue = repository.label_queue(session, run_id)
    if queue is None:
        raise HTTPException(404, "this run has no label queue: POST /v1/runs/{id}/label-queue draws one")
    return _queue_out(run_id, queue, _labeled_items(session, run_id))
