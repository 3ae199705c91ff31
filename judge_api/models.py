"""ORM tables. The database is the source of truth; Redis only carries work and rate-limit state."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, ClassVar

from sqlalchemy import (
    JSON,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    false,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship


def utcnow() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def fresh_judgment_fields(now: datetime) -> dict[str, Any]:
    """The bookkeeping columns of a judgment row inserted in bulk: no call made yet, nothing spent."""
    return {
        "injection_flags": [],
        "created_at": now,
        "updated_at": now,
        "input_tokens": 0,
        "output_tokens": 0,
        "cached_input_tokens": 0,
        "cache_write_tokens": 0,
        "cost_usd": 0.0,
        "list_cost_usd": 0.0,
        "cache_saved_usd": 0.0,
        "attempts": 0,
        "provider_calls": 0,
        "cached": False,
    }


class Base(DeclarativeBase):
    type_annotation_map: ClassVar[dict[Any, Any]] = {dict[str, Any]: JSON, list[Any]: JSON}


JUDGMENT_STATUSES = ("pending", "running", "done", "failed", "unparseable", "cancelled")
TERMINAL_STATUSES = ("done", "failed", "unparseable", "cancelled")


class Project(Base):
    __tablename__ = "projects"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)


class ApiKey(Base):
    __tablename__ = "api_keys"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id"), index=True)
    name: Mapped[str] = mapped_column(String(200))
    key_hash: Mapped[str] = mapped_column(String(128), unique=True)
    scopes: Mapped[list[Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)


class Run(Base):
    __tablename__ = "runs"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id"), index=True)
    name: Mapped[str | None] = mapped_column(String(200), nullable=True)
    config: Mapped[dict[str, Any]] = mapped_column(JSON)
    n_items: Mapped[int] = mapped_column(Integer)
    n_judgments: Mapped[int] = mapped_column(Integer)
    budget_usd: Mapped[float | None] = mapped_column(Float, nullable=True)
    budget_exhausted_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow, index=True)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    plan_open: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false(), index=True)
    """Adaptive runs (pairing or samples): more judgments may still be planned."""
    plan_round: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    """Adaptive runs: planning steps taken (a step is a compare-and-set on it, so no two plan the same batch)."""
    plan_state: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    """Adaptive runs: the ranking, intervals, calls used and (once stopped) the stopping reason."""

    items: Mapped[list[RunItem]] = relationship(back_populates="run", cascade="all, delete-orphan")


class RunItem(Base):
    __tablename__ = "items"
    __table_args__ = (UniqueConstraint("run_id", "item_key", name="uq_items_run_key"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    item_key: Mapped[str] = mapped_column(String(200))
    payload: Mapped[dict[str, Any]] = mapped_column(JSON)

    run: Mapped[Run] = relationship(back_populates="items")
    released_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    """Runs with ``systems``: when the item's generations were all settled and its judgments planned (None: not yet,
    or a run without systems). Setting it is the compare-and-set that makes the release happen once."""


class Judgment(Base):
    __tablename__ = "judgments"
    __table_args__ = (
        UniqueConstraint("dedup_key", name="uq_judgments_dedup"),
        Index("ix_judgments_run_status", "run_id", "status"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    dedup_key: Mapped[str] = mapped_column(String(64))
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    item_pk: Mapped[int] = mapped_column(ForeignKey("items.id", ondelete="CASCADE"), index=True)
    item_key: Mapped[str] = mapped_column(String(200))
    mode: Mapped[str] = mapped_column(String(16))
    system_a: Mapped[str] = mapped_column(String(100))
    system_b: Mapped[str | None] = mapped_column(String(100), nullable=True)
    order: Mapped[str | None] = mapped_column(String(2), nullable=True)
    rubric_id: Mapped[str] = mapped_column(String(64))
    rubric_version: Mapped[str] = mapped_column(String(32))
    aspect: Mapped[str] = mapped_column(String(64))
    judge: Mapped[str] = mapped_column(String(300))
    judge_params: Mapped[dict[str, Any]] = mapped_column(JSON)
    sample_index: Mapped[int] = mapped_column(Integer, default=0)

    status: Mapped[str] = mapped_column(String(16), default="pending")
    claim_token: Mapped[str | None] = mapped_column(String(32), nullable=True)
    claimed_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    enqueued_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)

    prompt_hash: Mapped[str | None] = mapped_column(String(64), nullable=True)
    cache_key: Mapped[str | None] = mapped_column(String(64), nullable=True, index=True)
    raw_output: Mapped[str | None] = mapped_column(Text, nullable=True)
    score: Mapped[float | None] = mapped_column(Float, nullable=True)
    verdict: Mapped[str | None] = mapped_column(String(100), nullable=True)
    preference: Mapped[float | None] = mapped_column(Float, nullable=True)
    outcome: Mapped[str | None] = mapped_column(String(8), nullable=True)
    explanation: Mapped[str | None] = mapped_column(Text, nullable=True)
    details: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    input_tokens: Mapped[int] = mapped_column(Integer, default=0)
    output_tokens: Mapped[int] = mapped_column(Integer, default=0)
    # parts of input_tokens read from / written to the provider's prompt cache, as the provider reported them
    cached_input_tokens: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    cache_write_tokens: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    latency_ms: Mapped[float | None] = mapped_column(Float, nullable=True)
    cost_usd: Mapped[float] = mapped_column(Float, default=0.0)  # what the provider billed (workers.pricing)
    list_cost_usd: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")  # no cache, no batch
    cache_saved_usd: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")  # of it, by caching
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    provider_calls: Mapped[int] = mapped_column(Integer, default=0)
    cached: Mapped[bool] = mapped_column(Boolean, default=False)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    injection_flags: Mapped[list[Any]] = mapped_column(JSON, default=list)
    len_a: Mapped[int] = mapped_column(Integer, default=0)
    len_b: Mapped[int | None] = mapped_column(Integer, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    updated_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True, default=utcnow)
    source: Mapped[str | None] = mapped_column(String(64), nullable=True)
    """Imported verdicts (``POST /v1/runs/{id}/verdicts``): the SHA-256 of the file they came from; None for the
    service's own judge calls. The file's name and format are in ``judge_params``."""
    scale_min: Mapped[float | None] = mapped_column(Float, nullable=True)
    """Imported single scores: the scale they were given on (the service's own take the rubric's)."""
    scale_max: Mapped[float | None] = mapped_column(Float, nullable=True)


GENERATION_STATUSES = ("pending", "running", "done", "failed")


class Generation(Base):
    """One system's response to one item of a run with ``systems`` (docs/generation.md): generated by a worker
    before the item is judged; claimed like a judgment (token + lease), written once."""

    __tablename__ = "generations"
    __table_args__ = (
        UniqueConstraint("item_pk", "system", name="uq_generations_item_system"),
        Index("ix_generations_run_status", "run_id", "status"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    item_pk: Mapped[int] = mapped_column(ForeignKey("items.id", ondelete="CASCADE"), index=True)
    item_key: Mapped[str] = mapped_column(String(200))
    system: Mapped[str] = mapped_column(String(100))
    responder: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(16), default="pending")
    claim_token: Mapped[str | None] = mapped_column(String(32), nullable=True)
    claimed_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    enqueued_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    response: Mapped[str | None] = mapped_column(Text, nullable=True)
    memory: Mapped[str | None] = mapped_column(Text, nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    details: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    """calls, tokens, seconds, the strategy's step trace (as ``meta.generation`` of dialogue-judge generate)."""
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    updated_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True, default=utcnow)


class HumanRating(Base):
    __tablename__ = "human_ratings"
    __table_args__ = (
        UniqueConstraint("run_id", "item_key", "system", "system_b", "aspect", "rater", name="uq_human_rating"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    item_key: Mapped[str] = mapped_column(String(200))
    system: Mapped[str] = mapped_column(String(100))
    system_b: Mapped[str] = mapped_column(String(100), default="")
    aspect: Mapped[str] = mapped_column(String(64))
    rater: Mapped[str] = mapped_column(String(100))
    kind: Mapped[str] = mapped_column(String(16))
    value: Mapped[float] = mapped_column(Float)
    scale_min: Mapped[float] = mapped_column(Float)
    scale_max: Mapped[float] = mapped_column(Float)
    meta: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)


class CacheEntry(Base):
    """Content-addressed judge replies: identical requests are paid for once, across runs and workers."""

    __tablename__ = "judge_cache"

    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    judge: Mapped[str] = mapped_column(String(300))
    raw_output: Mapped[str] = mapped_column(Text)
    finish_reason: Mapped[str | None] = mapped_column(String(32), nullable=True)
    structured: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    input_tokens: Mapped[int] = mapped_column(Integer, default=0)
    output_tokens: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    # the reply's number tokens with their alternatives' log-probabilities (expected scoring), when asked for
    logprobs: Mapped[list[Any] | None] = mapped_column(JSON, nullable=True)


class RubricSnapshot(Base):
    """A rubric exactly as a run was planned with it (config and template text), by id and version: a run in
    flight finishes with the prompts it started with when the rubric folder is edited, and an old judgment's
    prompt can still be shown."""

    __tablename__ = "rubric_snapshots"

    rubric_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    version: Mapped[str] = mapped_column(String(32), primary_key=True)
    content: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)


class IdempotencyKey(Base):
    """A submission's ``Idempotency-Key`` and the run it created, per project: a retried request (same key, same
    body) gets that run back instead of a second one. The primary key is the race guard: two concurrent requests
    with one key both try to insert this row in their run's transaction, and only one commits."""

    __tablename__ = "idempotency_keys"

    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id"), primary_key=True)
    key: Mapped[str] = mapped_column(String(255), primary_key=True)
    endpoint: Mapped[str] = mapped_column(String(64))
    request_hash: Mapped[str] = mapped_column(String(64))
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow, index=True)
