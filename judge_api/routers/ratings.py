"""Human ratings of a run's items: ``POST /v1/runs/{id}/human-ratings`` (insert or update) and ``GET`` them back."""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Query, Response
from sqlalchemy import exc as sa_exc
from sqlalchemy.orm import Session

from judge_api import repository
from judge_api.auth import Principal
from judge_api.deps import get_session, require, run_or_404
from judge_api.errors import field_error
from judge_api.guards import check_storable
from judge_api.schemas import HumanRatingsIn

router = APIRouter(tags=["reports"])


@router.post("/v1/runs/{run_id}/human-ratings", status_code=201)
def add_ratings(
    run_id: str,
    body: HumanRatingsIn,
    principal: Principal = Depends(require("submit")),
    session: Session = Depends(get_session),
) -> dict[str, Any]:
    run_or_404(session, run_id, principal)
    systems = repository.item_systems(session, run_id, (rating.item_id for rating in body.ratings))
    for index, rating in enumerate(body.ratings):
        candidates = systems.get(rating.item_id)
        if candidates is None:
            raise field_error(["ratings", index, "item_id"], f"item {rating.item_id!r} is not in run {run_id}")
        for name in ("system", "system_b"):
            system = getattr(rating, name)
            if system is not None and system not in candidates:
                raise field_error(
                    ["ratings", index, name],
                    f"system {system!r} is not a candidate of item {rating.item_id!r} "
                    f"(its candidates: {', '.join(sorted(candidates))})",
                )
    check_storable(body)
    try:
        created, updated = repository.upsert_ratings(session, run_id, body.ratings)
        session.commit()
    except sa_exc.IntegrityError:
        session.rollback()  # a concurrent request stored the same ratings first: nothing of ours was kept
        raise HTTPException(
            409, "these ratings were written concurrently by another request; nothing was stored, send them again"
        ) from None
    return {"run_id": run_id, "created": created, "updated": updated}


MAX_RATING_ITEMS = 1000
"""Item ids one ``GET .../human-ratings?item_id=...`` may ask for."""


@router.get("/v1/runs/{run_id}/human-ratings")
def get_ratings(
    run_id: str,
    item_id: list[str] | None = Query(None, description="only these items' ratings (repeatable)"),
    principal: Principal = Depends(require("read")),
    session: Session = Depends(get_session),
) -> Response:
    """The run's human ratings, or only those of the ``item_id`` items (the item explorer reads one item's, not a
    run's thousands: issue 39)."""
    run_or_404(session, run_id, principal)
    if item_id is not None and len(item_id) > MAX_RATING_ITEMS:
        raise HTTPException(
            422,
            [{"loc": ["query", "item_id"], "msg": f"at most {MAX_RATING_ITEMS} item ids", "type": "value_error"}],
        )
    frame = repository.ratings_frame(session, run_id, item_id)
    # the records' JSON as pandas writes it, not parsed and encoded again (a second of 14,000 ratings: issue 39)
    records = frame.to_json(orient="records")
    return Response(
        f'{{"run_id":{json.dumps(run_id)},"total":{len(frame)},"items":{records}}}', media_type="application/json"
    )
