"""Rubrics: ``GET /v1/rubrics`` (the registry's current ones) and their stored versions."""

from __future__ import annotations

from fastapi import APIRouter, Depends, HTTPException, Path
from sqlalchemy.orm import Session

from judge_api import repository
from judge_api.auth import Principal
from judge_api.deps import get_session, require
from judge_api.rubrics import get_registry
from judge_api.schemas import RubricOut, RubricVersionOut

router = APIRouter(tags=["rubrics"])

RUBRIC_ID_PATH = Path(pattern=r"^[a-z0-9][a-z0-9_.-]{0,63}$", description="a rubric id, as GET /v1/rubrics lists")
RUBRIC_VERSION_PATH = Path(
    pattern=r"^[A-Za-z0-9_.-]{1,32}$", description="a rubric version (the rubric_version of a judgment)"
)


@router.get("/v1/rubrics", response_model=list[RubricOut])
def list_rubrics(_: Principal = Depends(require("read"))) -> list[RubricOut]:
    return [
        RubricOut(
            id=r.id,
            version=r.version,
            kind=r.kind,
            description=r.description,
            origin=r.origin,
            aspects=r.aspect_names,
            scale=r.scale,
            parser=r.parser,
            structured_output=r.structured_output is not None,
        )
        for r in get_registry().all()
    ]


@router.get("/v1/rubrics/{rubric_id}/versions", response_model=list[RubricVersionOut])
def rubric_versions(
    rubric_id: str = RUBRIC_ID_PATH,
    principal: Principal = Depends(require("read")),
    session: Session = Depends(get_session),
) -> list[RubricVersionOut]:
    """Every version of a rubric: the ones the caller's project stored (its runs were planned with them, oldest
    first) and the folders' current one. The folders' current version is always shown with the folders' content: a
    stored row claiming that id and version never stands in for it."""
    registry = get_registry()
    current = registry.get(rubric_id) if rubric_id in registry else None
    versions = [
        RubricVersionOut(
            id=rubric_id,
            version=snapshot.version,
            current=is_current,
            stored_at=snapshot.created_at,
            content=repository.rubric_content(current) if is_current and current is not None else snapshot.content,
        )
        for snapshot in repository.rubric_versions(session, principal.project_id, rubric_id)
        for is_current in [current is not None and current.version == snapshot.version]
    ]
    if current is not None and not any(v.current for v in versions):
        versions.append(
            RubricVersionOut(
                id=rubric_id,
                version=current.version,
                current=True,
                stored_at=None,
                content=repository.rubric_content(current),
            )
        )
    if not versions:
        raise HTTPException(404, f"rubric {rubric_id!r} not found (GET /v1/rubrics lists them)")
    return versions


@router.get("/v1/rubrics/{rubric_id}/versions/{version}", response_model=RubricVersionOut)
def rubric_version(
    rubric_id: str = RUBRIC_ID_PATH,
    version: str = RUBRIC_VERSION_PATH,
    principal: Principal = Depends(require("read")),
    session: Session = Depends(get_session),
) -> RubricVersionOut:
    """One version of a rubric, e.g. the ``rubric_version`` of a judgment: the prompt it was asked with."""
    for found in rubric_versions(rubric_id, principal, session):
        if found.version == version:
            return found
    raise HTTPException(404, f"rubric {rubric_id!r} has no version {version!r}")
