"""Request and response models of monitors (docs/monitoring.md): a monitor, its alert rules and callback, the
responses posted to it and its series. Kept apart from the runs' models, which they build on."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from judge_api.schemas import (
    ID_PATTERN,
    MAX_BUDGET_USD,
    SYSTEM_PATTERN,
    Fact,
    JudgeOptions,
    Persona,
    Turn,
    check_callback_url,
)

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:@/+ -]{0,199}$"
RULE_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$"
SLICE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:@/+ -]{0,99}$"
WINDOW_PATTERN = r"^[1-9][0-9]{0,3}[hdw]$"  # 24h, 7d, 2w
MAX_RETENTION_DAYS = 3650
MAX_ALERT_RULES = 50  # the ceiling of DJ_MAX_RULES_PER_MONITOR (judge_api.config), checked by the routes
# a response's time, in UTC: well inside the calendar, so moving it to UTC and bucketing it cannot overflow
TIMESTAMP_MIN = datetime(1970, 1, 1)
TIMESTAMP_MAX = datetime(9000, 1, 1)
SliceBy = Literal["version", "system", "segment"]


class SliceCompare(BaseModel):
    """Candidate slice against baseline slice: two values of ``by`` (``version`` v2.4 vs v2.3), or with ``by:
    "time"`` two windows: the last ``candidate`` (e.g. ``24h``) against the ``baseline`` (e.g. ``7d``) before it."""

    model_config = ConfigDict(extra="forbid")

    by: Literal["version", "system", "segment", "time"]
    baseline: str = Field(min_length=1, max_length=100)
    candidate: str = Field(min_length=1, max_length=100)

    @model_validator(mode="after")
    def _check_values(self) -> SliceCompare:
        import re

        pattern = WINDOW_PATTERN if self.by == "time" else SLICE_PATTERN
        for name in ("baseline", "candidate"):
            if not re.fullmatch(pattern, getattr(self, name)):  # not match: "$" also matches before a last "\n"
                what = "a window like 24h, 7d or 2w" if self.by == "time" else "1-100 letters, digits or _.:@/+- "
                raise ValueError(f"{name}: {getattr(self, name)!r} must be {what} (by={self.by})")
        if self.by != "time" and self.baseline == self.candidate:
            raise ValueError("candidate: the candidate and the baseline slice are the same")
        return self


class FloorRule(BaseModel):
    """A plain floor: the metric's mean below ``below`` over at least ``min_n`` verdicts (of the last ``window``
    when given, else of everything the monitor keeps)."""

    model_config = ConfigDict(extra="forbid")

    below: float = Field(ge=-1e6, le=1e6, allow_inf_nan=False)
    min_n: int = Field(default=200, ge=1, le=10_000_000)
    window: str | None = Field(default=None, pattern=WINDOW_PATTERN)


class SliceFilter(BaseModel):
    """Which responses a rule looks at (every one when empty)."""

    model_config = ConfigDict(extra="forbid")

    system: str | None = Field(default=None, pattern=SLICE_PATTERN)
    version: str | None = Field(default=None, pattern=SLICE_PATTERN)
    segment: str | None = Field(default=None, pattern=SLICE_PATTERN)


class AlertRule(BaseModel):
    """One alert rule of a monitor: ``compare`` (the gate's anytime-valid decision of candidate against baseline at
    ``confidence``) or ``floor`` (a plain threshold), on an aspect's mean score or a fact-check rubric's
    contradiction rate."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=RULE_NAME_PATTERN)
    compare: SliceCompare | None = None
    floor: FloorRule | None = None
    aspect: str = Field(min_length=1, max_length=64)
    metric: Literal["mean", "contradiction_rate"] = "mean"
    rubric: str | None = Field(default=None, max_length=64, description="default: the monitor's first rubric")
    judge: str | None = Field(default=None, max_length=300, description="default: the monitor's first judge")
    confidence: float = Field(default=0.95, ge=0.5, le=0.999)
    margin: float = Field(
        default=0.0, ge=0, le=1e6, allow_inf_nan=False, description="compare: a regression is worse by more than this"
    )
    where: SliceFilter = Field(default_factory=SliceFilter)

    @model_validator(mode="after")
    def _one_kind(self) -> AlertRule:
        if (self.compare is None) == (self.floor is None):
            raise ValueError("compare/floor: a rule has exactly one of 'compare' (candidate vs baseline) or 'floor'")
        return self

    @property
    def kind(self) -> str:
        return "compare" if self.compare is not None else "floor"


class MonitorFields(BaseModel):
    """What POST and PATCH share: every field optional here; POST requires its own."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(default=None, pattern=NAME_PATTERN)
    rubrics: list[str] | None = Field(default=None, min_length=1, max_length=20)
    judges: list[str] | None = Field(default=None, min_length=1, max_length=10)
    aspects: list[str] | None = Field(default=None, min_length=1, max_length=20, description="default: every aspect")
    options: JudgeOptions | None = None
    sample_rate: float | None = Field(default=None, ge=0.0, le=1.0, allow_inf_nan=False)
    daily_budget_usd: float | None = Field(default=None, gt=0, le=MAX_BUDGET_USD, allow_inf_nan=False)
    retention_days: int | None = Field(default=None, ge=1, le=MAX_RETENTION_DAYS)
    alerts: list[AlertRule] | None = Field(default=None, max_length=MAX_ALERT_RULES)
    callback_url: str | None = Field(default=None, max_length=2000)
    callback_secret: str | None = Field(default=None, min_length=16, max_length=500)
    otlp_default: bool | None = Field(
        default=None,
        description="true: OTLP spans naming no monitor (no dialogue_judge.monitor attribute) come to this one, the "
        "project's default; false: no longer",
    )

    @field_validator("callback_url")
    @classmethod
    def _callback_url(cls, value: str | None) -> str | None:
        return check_callback_url(value)

    @field_validator("options")
    @classmethod
    def _fixed_samples(cls, value: JudgeOptions | None) -> JudgeOptions | None:
        if value is not None and value.samples == "adaptive":
            raise ValueError("samples: a monitor judges a fixed number of samples per response (1-16)")
        return value

    @field_validator("alerts")
    @classmethod
    def _unique_rules(cls, value: list[AlertRule] | None) -> list[AlertRule] | None:
        seen: set[str] = set()
        for index, rule in enumerate(value or []):
            if rule.name in seen:
                raise ValueError(f"alerts[{index}].name: duplicate rule name {rule.name!r}")
            seen.add(rule.name)
        return value


class MonitorCreate(MonitorFields):
    """POST /v1/monitors body."""

    name: str = Field(pattern=NAME_PATTERN)
    rubrics: list[str] = Field(min_length=1, max_length=20)
    judges: list[str] = Field(min_length=1, max_length=10)
    sample_rate: float = Field(ge=0.0, le=1.0, allow_inf_nan=False)
    alerts: list[AlertRule] = Field(default_factory=list, max_length=MAX_ALERT_RULES)

    @model_validator(mode="after")
    def _callback_pair(self) -> MonitorCreate:
        if (self.callback_url is None) != (self.callback_secret is None):
            raise ValueError("callback_secret: a callback needs both callback_url and callback_secret (>= 16 chars)")
        return self


class MonitorUpdate(MonitorFields):
    """PATCH /v1/monitors/{id} body: the fields given replace the stored ones; ``null`` clears an optional one
    (daily_budget_usd, retention_days, aspects, callback_url with callback_secret)."""


class OtlpStatus(BaseModel):
    """The OTLP spans of this UTC day that named this monitor (or came to it as the default): what became of them."""

    day: str
    spans: int = 0
    responses: int = Field(default=0, description="responses handed to the monitor (sampled like any other)")
    duplicates: int = Field(default=0, description="spans received again (an exporter's retry): not judged twice")
    waited: int = Field(default=0, description="responses judged after DJ_OTLP_WAIT with earlier turns missing")
    waiting: int = Field(default=0, description="responses waiting now for their conversation's earlier turns")
    received: int = Field(
        default=0,
        description="spans stored and not processed yet: their conversations are rebuilt and their responses "
        "handed to the monitor within seconds (a running API or worker's sweeper)",
    )
    not_llm: int = 0
    tool_call: int = Field(default=0, description="LLM spans answering with a tool call (no text to judge)")
    no_content: int = Field(default=0, description="LLM spans without message content (content capture off)")
    rejected: int = Field(
        default=0,
        description="LLM spans that cannot become a response (a text over a limit or not storable), at receipt "
        "(the exporter's partial_success says so too) or when released (a limit lowered since): the status message "
        "names the last",
    )
    message: str = ""


class MonitorStatus(BaseModel):
    state: Literal["active", "paused_budget"]
    message: str
    paused_until: datetime | None = Field(description="paused_budget: the next UTC midnight, when sampling resumes")
    spent_today_usd: float = Field(description="what the workers recorded for this UTC day's judgments")
    queued_estimate_usd: float = Field(
        default=0.0,
        description="the expected cost of this UTC day's judgments still queued or running; the daily budget "
        "counts it with spent_today_usd",
    )
    responses_today: int
    sampled_today: int
    pending_judgments: int
    otlp: OtlpStatus | None = Field(default=None, description="spans received over OTLP today (none: null)")


class MonitorOut(BaseModel):
    id: str
    name: str
    run_id: str = Field(description="the internal run holding the sampled responses and their judgments")
    rubrics: list[str]
    judges: list[str]
    aspects: list[str] | None
    options: dict[str, Any]
    sample_rate: float
    daily_budget_usd: float | None
    retention_days: int | None
    alerts: list[dict[str, Any]]
    callback_url: str | None
    callback_secret_set: bool = Field(description="the secret itself is never returned")
    otlp_default: bool = Field(default=False, description="OTLP spans naming no monitor come to this one")
    created_at: datetime
    updated_at: datetime
    status: MonitorStatus | None = None


class MonitorResponseIn(BaseModel):
    """One production response posted to a monitor: an item as in runs, with one response."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=ID_PATTERN)
    dialogue: list[Turn] = Field(default_factory=list, max_length=10_000)
    persona: Persona | None = None
    memory: str | None = Field(default=None, max_length=200_000)
    facts: list[Fact] | None = Field(default=None, max_length=500)
    response: str = Field(min_length=1, max_length=200_000)
    system: str = Field(pattern=SYSTEM_PATTERN)
    version: str = Field(pattern=SLICE_PATTERN)
    segment: str | None = Field(default=None, pattern=SLICE_PATTERN)
    timestamp: datetime | None = Field(default=None, description="when the bot answered (default: when received)")
    meta: dict[str, Any] = Field(default_factory=dict)

    @field_validator("response")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("the response is empty")
        return value

    @field_validator("timestamp")
    @classmethod
    def _in_range(cls, value: datetime | None) -> datetime | None:
        """Stored and bucketed in UTC: a time must stay in the calendar once moved there (and a bucket past it)."""
        if value is None:
            return value
        try:
            moment = value.astimezone(UTC).replace(tzinfo=None) if value.tzinfo is not None else value
        except OverflowError:
            moment = None
        if moment is None or not TIMESTAMP_MIN <= moment < TIMESTAMP_MAX:
            raise ValueError(
                f"{value.isoformat()} is out of range: a timestamp is from {TIMESTAMP_MIN.year} to "
                f"{TIMESTAMP_MAX.year - 1} in UTC"
            )
        return value

    @field_validator("facts")
    @classmethod
    def _unique_fact_ids(cls, value: list[Fact] | None) -> list[Fact] | None:
        seen: set[str] = set()
        for index, fact in enumerate(value or []):
            if fact.id in seen:
                raise ValueError(f"facts[{index}].id: duplicate fact id {fact.id!r}")
            seen.add(fact.id)
        return value


class ResponsesAccepted(BaseModel):
    accepted: int = Field(description="responses stored now (new ids)")
    sampled: int = Field(description="of them, sampled for judging")
    duplicates: int = Field(description="ids already stored (a retried batch): acknowledged, nothing stored")
    paused: bool = Field(description="sampling is paused by the daily budget (nothing sampled until the next UTC day)")


class SeriesRow(BaseModel):
    bucket_start: datetime
    system: str | None
    version: str | None
    segment: str | None
    rubric_id: str
    aspect: str
    judge: str
    n: int
    mean: float | None
    ci_low: float | None
    ci_high: float | None
    contradiction_rate: float | None = Field(description="fact-check rubrics: mean contradicted share per response")
    contradiction_n: int


class Series(BaseModel):
    monitor_id: str
    bucket: Literal["1h", "1d"]
    by: list[SliceBy]
    confidence: float
    rows: list[SeriesRow]


class MonitorAlertOut(BaseModel):
    """An alert of a monitor's rule (docs/monitoring.md#alerts)."""

    id: str
    monitor_id: str
    rule: str
    kind: Literal["compare", "floor"]
    status: Literal["open", "resolved"]
    opened_at: datetime
    resolved_at: datetime | None
    evidence: dict[str, Any] = Field(
        description="the rule, the difference (or mean), its interval, n, the slices and the worst responses"
    )
    resolution: dict[str, Any] | None = Field(description="why it was resolved, with the evidence then")
