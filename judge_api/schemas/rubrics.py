"""Rubrics and their stored versions as the API returns them."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field


class RubricOut(BaseModel):
    id: str
    version: str
    kind: str
    description: str
    origin: str | None
    aspects: list[str]
    scale: tuple[float, float] | None
    parser: str
    structured_output: bool


class RubricVersionOut(BaseModel):
    """One version of a rubric: its config and template text, as the folders hold it now (``current``) or as a
    run was planned with it (``stored_at``)."""

    id: str
    version: str
    current: bool = Field(description="the rubric folders hold this version now")
    stored_at: datetime | None = Field(description="when a run planned with this version first stored it")
    content: dict[str, Any] = Field(description="the rubric's config, with its templates' text under 'templates'")
