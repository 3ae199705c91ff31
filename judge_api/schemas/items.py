"""An item: one dialogue context with the candidate responses of one or more systems."""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from judge_api.schemas.common import ID_PATTERN, MAX_SESSION, SYSTEM_PATTERN, Speaker


class Turn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    speaker: Speaker
    text: str = Field(max_length=200_000)
    session: int | None = Field(default=None, ge=0, le=MAX_SESSION)


class Persona(BaseModel):
    model_config = ConfigDict(extra="forbid")

    user: list[str] = Field(default_factory=list)
    bot: list[str] = Field(default_factory=list)


FACT_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$"
# where a fact comes from: the persona of either side, the memory text, a whole earlier session (its summary, as
# MSC's per-session personas) or one turn of it
FACT_SOURCE_PATTERN = r"^(?:persona\.user|persona\.bot|memory|session [0-9]{1,4}(?: turn [0-9]{1,6})?)$"


class Fact(BaseModel):
    """One fact a response must stay consistent with (docs/facts.md)."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=FACT_ID_PATTERN)
    text: str = Field(min_length=1, max_length=4000)
    source: str = Field(pattern=FACT_SOURCE_PATTERN)

    @field_validator("text")
    @classmethod
    def _text_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("a fact's text is empty")
        return value


class Item(BaseModel):
    """One thing to judge."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=ID_PATTERN)
    dialogue: list[Turn] = Field(default_factory=list)
    persona: Persona | None = None
    memory: str | None = None
    reference: str | None = None
    facts: list[Fact] | None = Field(default=None, max_length=500, description="explicit fact sheet (docs/facts.md)")
    candidates: dict[str, str] = Field(
        default_factory=dict, description="system -> response; may be empty when the run's 'systems' generate them"
    )
    meta: dict[str, Any] = Field(default_factory=dict)

    @field_validator("facts")
    @classmethod
    def _unique_fact_ids(cls, value: list[Fact] | None) -> list[Fact] | None:
        seen: set[str] = set()
        for index, fact in enumerate(value or []):
            if fact.id in seen:
                raise ValueError(f"facts[{index}].id: duplicate fact id {fact.id!r}")
            seen.add(fact.id)
        return value

    @field_validator("candidates")
    @classmethod
    def _candidates_not_empty(cls, value: dict[str, str]) -> dict[str, str]:
        for name, text in value.items():
            if not re.match(SYSTEM_PATTERN, name):
                raise ValueError(f"system name {name!r} must be 1-100 letters, digits or _.:@/+- ")
            if not text.strip():
                raise ValueError(f"candidate {name!r} is empty")
        return value
