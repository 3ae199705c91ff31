"""A run's judgments and items: ``GET /v1/runs/{id}/judgments`` (filtered pages, or with ``format=jsonl|csv|parquet``
every matching judgment streamed in keyset pages: judge_api/repository/exports.py), ``.../judgments.csv`` and
``.../items``."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any, Literal

from fastapi import APIRouter, Depends, HTTPException, Query
from fastapi.responses import StreamingResponse
from sqlalchemy import ColumnElement
from sqlalchemy.orm import Session

from judge_api import repository
from judge_api.auth import Principal
from judge_api.db import session_scope
from judge_api.deps import MAX_OFFSET, get_session, require, run_or_404
from judge_api.repository import exports
from judge_api.schemas import JudgmentOut, JudgmentPage
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


JudgmentStatus = Literal["pending", "running", "done", "failed", "unparseable", "cancelled"]
ExportFormat = Literal["json", "jsonl", "csv", "parquet"]
MAX_PAGE = 1000


def _query_error(name: str, message: str) -> HTTPException:
    return HTTPException(422, detail=[{"loc": ["query", name], "msg": message, "type": "value_error"}])


@router.get(
    "/v1/runs/{run_id}/judgments",
    response_model=JudgmentPage,
    responses={
        200: {
            "content": {media: {} for media in exports.MEDIA_TYPES.values()},
            "description": "format=json: a page (total, items, next_cursor); jsonl, csv, parquet: every matching "
            "judgment streamed as the judgments frame of docs/data-contract.md",
        }
    },
)
def list_judgments(
    run_id: str,
    format_: ExportFormat = Query(
        "json",
        alias="format",
        description="json: a page of full judgments; jsonl, csv, parquet: stream every matching judgment "
        "(the data contract's judgments frame)",
    ),
    offset: int = Query(0, ge=0, le=MAX_OFFSET, description="json only: rows skipped (prefer cursor)"),
    limit: int | None = Query(
        None, ge=1, le=MAX_OFFSET, description=f"json: page size (default 100, at most {MAX_PAGE}); exports: at most"
    ),
    cursor: int | None = Query(
        None, ge=0, le=MAX_OFFSET, description="the rows after this judgment id: a page's next_cursor"
    ),
    status_: JudgmentStatus | None = Query(None, alias="status"),
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
) -> Any:
    run_or_404(session, run_id, principal)
    for name, bound in (("score_min", score_min), ("score_max", score_max)):
        if bound is not None and not math.isfinite(bound):
            raise _query_error(name, "must be a finite number")
    if cursor is not None and offset:
        raise _query_error("cursor", "give either cursor or offset, not both")
    filters: dict[str, str | None] = {
        "status": status_,
        "system": system,
        "aspect": aspect,
        "item_id": item_id,
        "rubric_id": rubric_id,
        "judge": judge,
        "mode": mode,
    }
    if format_ == "json":
        size = 100 if limit is None else limit
        if size > MAX_PAGE:
            raise _query_error("limit", f"Input should be less than or equal to {MAX_PAGE}")
        total, rows, next_cursor = repository.list_judgments(
            session, run_id, offset, size, filters, score_min, score_max, after=cursor
        )
        items = [scrub_judgment(j) for j in rows]
        return JudgmentPage(total=total, offset=offset, limit=size, items=items, next_cursor=next_cursor)
    if offset:
        raise _query_error("offset", f"pages JSON only; a {format_} export starts after a judgment id with cursor")
    conditions = exports.judgment_conditions(run_id, filters, score_min, score_max)
    total = exports.count_judgments(session, conditions)
    return _export_response(run_id, format_, conditions, cursor or 0, limit, total)


def _export_response(
    run_id: str,
    fmt: str,
    conditions: list[ColumnElement[bool]],
    after: int,
    limit: int | None,
    total: int,
) -> StreamingResponse:
    """Every matching judgment in ``fmt``, read in keyset pages in a session of its own (the request's closes when
    the route returns, before the body is sent)."""

    def body() -> Iterator[bytes]:
        with session_scope() as reader:
            yield from exports.ENCODERS[fmt](exports.export_rows(reader, conditions, after=after, limit=limit))

    count = total if limit is None else min(total, limit)
    extension = "jsonl" if fmt == "jsonl" else fmt
    return StreamingResponse(
        body(),
        media_type=exports.MEDIA_TYPES[fmt],
        headers={
            "Content-Disposition": f'attachment; filename="{run_id}-judgments.{extension}"',
            "X-Total-Count": str(count),
        },
    )


@router.get("/v1/runs/{run_id}/judgments.csv")
def judgments_csv(
    run_id: str, principal: Principal = Depends(require("read")), session: Session = Depends(get_session)
) -> StreamingResponse:
    """Every judgment of the run as CSV: ``GET .../judgments?format=csv`` without filters."""
    run_or_404(session, run_id, principal)
    conditions = exports.judgment_conditions(run_id)
    return _export_response(run_id, "csv", conditions, 0, None, exports.count_judgments(session, conditions))


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
    if item_id:  # the items asked for: as many as the ids given
        items = repository.get_items(session, run_id, item_id)
        return {"total": len(items), "offset": offset, "limit": limit, "items": items[offset : offset + limit]}
    page = repository.get_items(session, run_id, offset=offset, limit=limit)
    return {"total": run.n_items, "offset": offset, "limit": limit, "items": page}
