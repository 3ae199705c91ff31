"""A run's judgments and items: ``GET /v1/runs/{id}/judgments`` (filtered pages), ``.../judgments.csv`` and
``.../items``."""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Iterator
from typing import Any, Literal

from fastapi import APIRouter, Depends, HTTPException, Query
from fastapi.responses import StreamingResponse
from sqlalchemy.orm import Session

from judge_api import repository
from judge_api.auth import Principal
from judge_api.deps import MAX_OFFSET, get_session, require, run_or_404
from judge_api.schemas import JudgmentOut, Page
from judge_api.secrets import known_secrets, scrub

router = APIRouter(tags=["runs"])


def scrub_judgment(judgment: JudgmentOut) -> JudgmentOut:
    """No provider key leaves through a judgment, whatever a judge echoed (workers already scrub on write)."""
    if not known_secrets():
        return judgment
    return judgment.model_copy(
        update={
            "error": scrub(judgment.error),
            "raw_output": scrub(judgment.raw_output),
            "explanation": scrub(judgment.explanation),
            "details": json.loads(scrub(json.dumps(judgment.details)) or "null") if judgment.details else None,
        }
    )


@router.get("/v1/runs/{run_id}/judgments", response_model=Page[JudgmentOut])
def list_judgments(
    run_id: str,
    offset: int = Query(0, ge=0, le=MAX_OFFSET),
    limit: int = Query(100, ge=1, le=1000),
    status_: str | None = Query(None, alias="status"),
    system: str | None = None,
    aspect: str | None = None,
    item_id: str | None = None,
    rubric_id: str | None = None,
    judge: str | None = None,
    mode: Literal["single", "pairwise"] | None = None,
    score_min: float | None = None,
    score_max: float | None = None,
    principal: Principal = Depends(require("read")),
    session: Session = Depends(get_session),
) -> Page[JudgmentOut]:
    run_or_404(session, run_id, principal)
    for name, bound in (("score_min", score_min), ("score_max", score_max)):
        if bound is not None and not math.isfinite(bound):
            raise HTTPException(
                422, detail=[{"loc": ["query", name], "msg": "must be a finite number", "type": "value_error"}]
            )
    filters = {
        "status": status_,
        "system": system,
        "aspect": aspect,
        "item_id": item_id,
        "rubric_id": rubric_id,
        "judge": judge,
        "mode": mode,
    }
    total, rows = repository.list_judgments(session, run_id, offset, limit, filters, score_min, score_max)
    items = [scrub_judgment(j) for j in rows]
    return Page[JudgmentOut](total=total, offset=offset, limit=limit, items=items)


@router.get("/v1/runs/{run_id}/judgments.csv")
def judgments_csv(
    run_id: str, principal: Principal = Depends(require("read")), session: Session = Depends(get_session)
) -> StreamingResponse:
    run_or_404(session, run_id, principal)
    frame = repository.judgments_frame(session, run_id)

    def rows() -> Iterator[str]:
        buffer = io.StringIO()
        frame.to_csv(buffer, index=False, quoting=csv.QUOTE_MINIMAL)
        yield buffer.getvalue()

    return StreamingResponse(
        rows(),
        media_type="text/csv",
        headers={"Content-Disposition": f'attachment; filename="{run_id}-judgments.csv"'},
    )


@router.get("/v1/runs/{run_id}/items")
def list_items(
    run_id: str,
    item_id: list[str] | None = Query(None),
    offset: int = Query(0, ge=0, le=MAX_OFFSET),
    limit: int = Query(100, ge=1, le=1000),
    principal: Principal = Depends(require("read")),
    session: Session = Depends(get_session),
) -> dict[str, Any]:
    run = run_or_404(session, run_id, principal)
    items = repository.get_items(session, run_id, item_id)
    return {
        "total": len(items) if item_id else run.n_items,
        "offset": offset,
        "limit": limit,
        "items": items[offset : offset + limit],
    }
