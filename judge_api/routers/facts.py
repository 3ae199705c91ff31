"""A run's fact-check labels: ``GET /v1/runs/{id}/facts`` (docs/facts.md), one row per fact a fact-check judgment
labelled, with its text, source, label and the evidence quoted from the response; filtered and paged."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Depends, Query
from sqlalchemy.orm import Session

from judge_api import repository
from judge_api.auth import Principal
from judge_api.config import Settings
from judge_api.deps import MAX_OFFSET, app_settings, frame_readable, get_session, require, run_or_404
from judge_api.schemas import FactLabelOut, Page

router = APIRouter(tags=["runs"])

SOURCE = Query(
    None,
    max_length=100,
    description="facts from this source: exact ('session 2 turn 3') or a prefix ending at a word or dot "
    "('session' = every earlier session, 'session 2' = that session and its turns, 'persona' = both personas)",
)


def source_matches(source: str, wanted: str) -> bool:
    """``source`` is ``wanted`` or lies under it (``wanted`` followed by a space or a dot)."""
    return source == wanted or source.startswith((wanted + " ", wanted + "."))


@router.get("/v1/runs/{run_id}/facts", response_model=Page[FactLabelOut])
def list_fact_labels(
    run_id: str,
    offset: int = Query(0, ge=0, le=MAX_OFFSET),
    limit: int = Query(100, ge=1, le=1000),
    label: Literal["supported", "contradicted", "not_addressed"] | None = None,
    system: str | None = Query(None, max_length=100),
    source: str | None = SOURCE,
    item_id: str | None = Query(None, max_length=200),
    judge: str | None = Query(None, max_length=300),
    principal: Principal = Depends(require("read")),
    session: Session = Depends(get_session),
    app: Settings = Depends(app_settings),
) -> Page[FactLabelOut]:
    frame_readable(run_or_404(session, run_id, principal), app)  # every fact label is read, then paged
    frame = repository.fact_labels_frame(session, run_id)
    frame = frame[frame["fact_id"].notna()]
    for column, value in (("label", label), ("system", system), ("item_id", item_id), ("judge", judge)):
        if value is not None:
            frame = frame[frame[column] == value]
    if source is not None:
        frame = frame[[source_matches(str(s), source) for s in frame["source"]]]
    rows = frame.iloc[offset : offset + limit].to_dict("records")
    items = [
        FactLabelOut.model_validate({**r, "judgment_id": int(r["judgment_id"]), "sample_index": int(r["sample_index"])})
        for r in rows
    ]
    return Page[FactLabelOut](total=len(frame), offset=offset, limit=limit, items=items)
