"""Judgments, fact labels, pages and webhook deliveries as the API returns them."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Generic, Literal

from pydantic import BaseModel, Field

from judge_api.schemas.common import T


class JudgmentOut(BaseModel):
    id: int
    run_id: str
    item_id: str
    mode: str
    system_a: str
    system_b: str | None
    order: str | None
    rubric_id: str
    rubric_version: str
    aspect: str
    judge: str
    judge_params: dict[str, Any]
    sample_index: int
    prompt_hash: str | None
    raw_output: str | None
    score: float | None
    verdict: str | None
    preference: float | None
    outcome: str | None
    explanation: str | None
    details: dict[str, Any] | None = Field(
        default=None,
        description="parser extras: memory-faithfulness error labels; expected scoring's distribution, parsed score "
        "and mass, or the reason it fell back to the parsed score (scoring_fallback)",
    )
    input_tokens: int
    output_tokens: int
    latency_ms: float | None
    cost_usd: float
    attempts: int
    status: str
    error: str | None
    cached: bool
    injection_flags: list[str]
    updated_at: datetime | None


class FactLabelOut(BaseModel):
    """One fact labelled by a fact-check judgment (docs/facts.md), with the fact's text from the item's sheet."""

    judgment_id: int
    item_id: str
    system: str
    judge: str
    rubric_id: str
    aspect: str
    sample_index: int
    fact_id: str
    text: str | None
    source: str
    label: Literal["supported", "contradicted", "not_addressed"]
    evidence: str


class Page(BaseModel, Generic[T]):
    total: int
    offset: int
    limit: int
    items: list[T]


class JudgmentPage(Page[JudgmentOut]):
    """A page of ``GET /v1/runs/{id}/judgments``: ``next_cursor`` is the page's last judgment id when more rows
    match (pass it as ``cursor`` for the next page), None on the last page."""

    next_cursor: int | None = None


class WebhookAttemptOut(BaseModel):
    attempt: int
    started_at: datetime
    duration_ms: float
    status_code: int | None
    outcome: str = Field(description="delivered (2xx), failed (another answer or none), refused (URL not allowed)")
    error: str | None


class WebhookDeliveryOut(BaseModel):
    """One webhook event and its delivery: the body sent (less the per-attempt fields) and every attempt."""

    id: str = Field(description="the event id, the body's 'id' on every attempt (a receiver's de-duplication key)")
    event: str
    status: str = Field(description="pending (to be sent or retried), delivered, failed (given up after 24 h)")
    url: str
    attempts: int
    created_at: datetime
    next_attempt_at: datetime | None
    delivered_at: datetime | None
    last_error: str | None
    payload: dict[str, Any]
    history: list[WebhookAttemptOut]
