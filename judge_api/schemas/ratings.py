"""Human ratings as the API accepts them."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from judge_api.schemas.common import ID_PATTERN, RATING_BOUND, SYSTEM_PATTERN


class HumanRatingIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    item_id: str = Field(pattern=ID_PATTERN)
    system: str = Field(pattern=SYSTEM_PATTERN)
    system_b: str | None = Field(default=None, pattern=SYSTEM_PATTERN)
    aspect: str = Field(min_length=1, max_length=64)
    rater: str = Field(min_length=1, max_length=100)
    kind: Literal["score", "preference"] = "score"
    value: float = Field(ge=-RATING_BOUND, le=RATING_BOUND, allow_inf_nan=False)
    scale_min: float | None = Field(
        default=None,
        ge=-RATING_BOUND,
        le=RATING_BOUND,
        allow_inf_nan=False,
        description="a score's scale (required: never guessed); a preference's is -1..1",
    )
    scale_max: float | None = Field(default=None, ge=-RATING_BOUND, le=RATING_BOUND, allow_inf_nan=False)
    meta: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _check_value(self) -> HumanRatingIn:
        if self.kind == "preference":
            if self.system_b is None:
                raise ValueError("system_b: a preference names both systems")
            if self.value not in (-1, 0, 1):
                raise ValueError("value: a preference is 1 (system wins), 0 (tie) or -1 (system_b wins)")
            self.scale_min, self.scale_max = -1, 1
        else:
            if self.scale_min is None or self.scale_max is None:
                missing = " and ".join(n for n in ("scale_min", "scale_max") if getattr(self, n) is None)
                raise ValueError(
                    f"{missing}: a score rating needs its scale (scale_min and scale_max, e.g. 1 and 5); it is "
                    "never guessed, since a wrong scale silently changes kappa and alpha"
                )
            if self.scale_min >= self.scale_max:
                raise ValueError("scale_min must be below scale_max")
            if not self.scale_min <= self.value <= self.scale_max:
                raise ValueError(f"value: {self.value} is outside the scale {self.scale_min}..{self.scale_max}")
        return self

    @property
    def scale(self) -> tuple[float, float]:
        """The validated scale (a preference's is -1..1)."""
        assert self.scale_min is not None and self.scale_max is not None  # set or rejected by the validator
        return self.scale_min, self.scale_max


MAX_RATINGS = 200_000  # per request, and per imported bundle


class HumanRatingsIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ratings: list[HumanRatingIn] = Field(min_length=1, max_length=MAX_RATINGS)


class LabelQueueIn(BaseModel):
    """``POST /v1/runs/{id}/label-queue``: draw the items to label (``stats.label_sampling``)."""

    model_config = ConfigDict(extra="forbid")

    n: int = Field(ge=1, le=100_000, description="items to draw (in expectation for 'active')")
    strategy: Literal["uniform", "active"] = "uniform"
    seed: int = Field(default=0, ge=0, le=2**32 - 1)
