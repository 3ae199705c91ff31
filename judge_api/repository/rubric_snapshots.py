"""Rubric versions stored with the runs planned on them, per project (the API stores and lists them; workers load
one when the folder no longer holds it). A project reads only its own snapshots: one project's (an imported bundle's
too) is never the prompt another is shown or judged with (issue 42, finding 4)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

from pydantic import ValidationError
from sqlalchemy import Table, select
from sqlalchemy.orm import Session

from judge_api.models import (
    RubricSnapshot,
    utcnow,
)
from judge_api.repository.sql import insert_ignoring
from judge_api.rubrics import Rubric, RubricError


def store_rubric_snapshots(session: Session, project_id: str, rubrics: Iterable[Rubric]) -> None:
    """Keep each rubric version (config and template text) for ``project_id`` in the caller's transaction; a version
    the project stored already is kept (the version is the hash of the rubric's files)."""
    rows = {
        (r.id, r.version): {
            "project_id": project_id,
            "rubric_id": r.id,
            "version": r.version,
            "content": rubric_content(r),
            "created_at": utcnow(),
        }
        for r in rubrics
    }
    if rows:
        session.execute(
            insert_ignoring(session.get_bind(), _SNAPSHOT_TABLE, ["project_id", "rubric_id", "version"]),
            list(rows.values()),
        )


def rubric_content(rubric: Rubric) -> dict[str, Any]:
    return rubric.model_dump(mode="json", exclude={"folder"})


def rubric_snapshot(session: Session, project_id: str, rubric_id: str, version: str) -> Rubric | None:
    """The rubric version a run of ``project_id`` was planned with, as stored when the run was created (None: not
    stored). RubricError when the stored content is not a rubric, or names another id or version than its row."""
    content = session.scalar(
        select(RubricSnapshot.content).where(
            RubricSnapshot.project_id == project_id,
            RubricSnapshot.rubric_id == rubric_id,
            RubricSnapshot.version == version,
        )
    )
    if content is None:
        return None
    try:
        rubric = Rubric.model_validate(content)
    except ValidationError as exc:
        raise RubricError(f"the stored rubric {rubric_id!r} version {version} is not a valid rubric: {exc}") from None
    if (rubric.id, rubric.version) != (rubric_id, version):
        raise RubricError(
            f"the stored rubric {rubric_id!r} version {version} carries rubric {rubric.id!r} version "
            f"{rubric.version!r}; refused"
        )
    return rubric


def rubric_versions(session: Session, project_id: str, rubric_id: str) -> list[RubricSnapshot]:
    """The versions of a rubric ``project_id`` stored, oldest first."""
    query = select(RubricSnapshot).where(RubricSnapshot.project_id == project_id, RubricSnapshot.rubric_id == rubric_id)
    return list(session.scalars(query.order_by(RubricSnapshot.created_at, RubricSnapshot.version)))


_SNAPSHOT_TABLE = cast(Table, RubricSnapshot.__table__)
