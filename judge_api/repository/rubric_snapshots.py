"""Rubric versions stored with the runs planned on them (the API stores and lists them; workers load one when the
folder no longer holds it)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

from sqlalchemy import Table, select
from sqlalchemy.orm import Session

from judge_api.models import (
    RubricSnapshot,
    utcnow,
)
from judge_api.repository.sql import insert_ignoring
from judge_api.rubrics import Rubric


def store_rubric_snapshots(session: Session, rubrics: Iterable[Rubric]) -> None:
    """Keep each rubric version (config and template text) in the caller's transaction; a version stored already is
    kept (the version is the hash of the rubric's files)."""
    rows = {
        (r.id, r.version): {
            "rubric_id": r.id,
            "version": r.version,
            "content": rubric_content(r),
            "created_at": utcnow(),
        }
        for r in rubrics
    }
    if rows:
        session.execute(
            insert_ignoring(session.get_bind(), _SNAPSHOT_TABLE, ["rubric_id", "version"]), list(rows.values())
        )


def rubric_content(rubric: Rubric) -> dict[str, Any]:
    return rubric.model_dump(mode="json", exclude={"folder"})


def rubric_snapshot(session: Session, rubric_id: str, version: str) -> Rubric | None:
    """The rubric version a run was planned with, as stored when the run was created (None: not stored)."""
    content = session.scalar(
        select(RubricSnapshot.content).where(RubricSnapshot.rubric_id == rubric_id, RubricSnapshot.version == version)
    )
    return Rubric.model_validate(content) if content is not None else None


def rubric_versions(session: Session, rubric_id: str) -> list[RubricSnapshot]:
    """The stored versions of a rubric, oldest first."""
    query = select(RubricSnapshot).where(RubricSnapshot.rubric_id == rubric_id)
    return list(session.scalars(query.order_by(RubricSnapshot.created_at, RubricSnapshot.version)))


_SNAPSHOT_TABLE = cast(Table, RubricSnapshot.__table__)
