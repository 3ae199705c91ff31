"""Projects: the tenant every run, key and cache entry belongs to."""

from __future__ import annotations

from sqlalchemy.orm import Session

from judge_api.models import (
    Project,
)

DEFAULT_PROJECT = "default"


def ensure_project(session: Session, project_id: str = DEFAULT_PROJECT, name: str | None = None) -> Project:
    project = session.get(Project, project_id)
    if project is None:
        project = Project(id=project_id, name=name or project_id)
        session.add(project)
        session.flush()
    return project
