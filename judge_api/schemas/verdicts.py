"""Imported verdicts: judgments made elsewhere, brought into a run."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from judge_api.schemas.common import ID_PATTERN, SYSTEM_PATTERN

IMPORTED_JUDGE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:@/+ -]{0,199}$"
VerdictLabel = Literal["A", "B", "tie"]
VERDICT_FORMATS = ("rows", "csv", "jsonl", "fastchat-single", "fastchat-pair", "alpacaeval")
VerdictFormat = Literal["rows", "csv", "jsonl", "fastchat-single", "fastchat-pair", "alpacaeval"]


class VerdictIn(BaseModel):
    """One verdict of an external judge (docs/data-contract.md, "Imported verdicts"): a score of ``system``
    (single), or which of ``system`` (A) and ``system_b`` (B) is better (pairwise)."""

    model_config = ConfigDict(extra="forbid")

    item_id: str = Field(pattern=ID_PATTERN)
    system: str = Field(pattern=SYSTEM_PATTERN, description="single: the judged system; pairwise: system A")
    system_b: str | None = Field(default=None, pattern=SYSTEM_PATTERN, description="pairwise: system B")
    aspect: str = Field(default="overall", min_length=1, max_length=64)
    judge: str = Field(pattern=IMPORTED_JUDGE_PATTERN, description="the external judge's name")
    score: float | None = Field(default=None, ge=-1e9, le=1e9, description="single: the score")
    scale_min: float | None = Field(default=None, ge=-1e9, le=1e9)
    scale_max: float | None = Field(default=None, ge=-1e9, le=1e9)
    verdict: VerdictLabel | None = Field(default=None, description="pairwise: A (system), B (system_b) or tie")
    order: Literal["ab", "ba"] | None = Field(
        default=None, description="pairwise: presentation order, ab = system shown first; None when unknown"
    )
    unparseable: bool = Field(default=False, description="the judge's reply held no verdict (stored as unparseable)")
    explanation: str | None = Field(default=None, max_length=200_000)
    details: dict[str, Any] = Field(default_factory=dict, description="kept with the judgment (e.g. the turn)")

    @model_validator(mode="after")
    def _check_verdict(self) -> VerdictIn:
        if (self.scale_min is None) != (self.scale_max is None):
            raise ValueError("scale_min and scale_max: give both or neither")
        if self.scale_min is not None and self.scale_max is not None and self.scale_min >= self.scale_max:
            raise ValueError("scale_min must be below scale_max")
        if self.system_b is None:
            if self.verdict is not None or self.order is not None:
                raise ValueError("verdict/order: a single-mode verdict (no system_b) is a score")
            if self.score is None and not self.unparseable:
                raise ValueError("score: a single-mode verdict needs a score")
            lo, hi = self.scale_min, self.scale_max
            if self.score is not None and lo is not None and hi is not None and not lo <= self.score <= hi:
                raise ValueError(f"score: {self.score:g} is outside the scale {lo:g}..{hi:g}")
        else:
            if self.system_b == self.system:
                raise ValueError("system_b: a pairwise verdict compares two different systems")
            if self.score is not None:
                raise ValueError("score: a pairwise verdict (with system_b) is A, B or tie, not a score")
            if self.verdict is None and not self.unparseable:
                raise ValueError("verdict: a pairwise verdict needs A, B or tie")
        if self.unparseable and (self.score is not None or self.verdict is not None):
            raise ValueError("unparseable: a verdict without a result has no score and no verdict")
        return self

    @property
    def mode(self) -> str:
        return "single" if self.system_b is None else "pairwise"


class VerdictSource(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(default=None, max_length=300, description="the file's name")
    sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$", description="the file's SHA-256")
    format: VerdictFormat = "rows"


class VerdictsIn(BaseModel):
    """POST /v1/runs/{id}/verdicts as JSON (the file formats go in the body as they are, with ``?format=``)."""

    model_config = ConfigDict(extra="forbid")

    verdicts: list[VerdictIn] = Field(min_length=1, max_length=200_000)
    source: VerdictSource = Field(
        default_factory=VerdictSource,
        description="where the verdicts come from; without sha256 the hash of the verdicts themselves is stored",
    )
    rubric: str = Field(default="imported", pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$")
    scale_min: float | None = Field(default=None, ge=-1e9, le=1e9, description="scores' scale when a row has none")
    scale_max: float | None = Field(default=None, ge=-1e9, le=1e9)

    @model_validator(mode="after")
    def _check_scale(self) -> VerdictsIn:
        if (self.scale_min is None) != (self.scale_max is None):
            raise ValueError("scale_min and scale_max: give both or neither")
        if self.scale_min is not None and self.scale_max is not None and self.scale_min >= self.scale_max:
            raise ValueError("scale_min must be below scale_max")
        return self


class VerdictsImported(BaseModel):
    run_id: str
    created: int = Field(description="verdicts stored now")
    unchanged: int = Field(description="verdicts this file had already imported (a repeated import stores nothing)")
    judges: list[str]
    source: VerdictSource
    format: str
    ignored_columns: list[str] = Field(default_factory=list, description="CSV columns that are not verdict fields")
