"""ORM tables. The database is the source of truth; Redis only carries work and rate-limit state."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, ClassVar

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    PrimaryKeyConstraint,
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
    default_monitor_id: Mapped[str | None] = mapped_column(String(32), nullable=True)
    """The monitor OTLP spans naming none (no ``dialogue_judge.monitor`` attribute) go to (issue 38)."""


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
    monitor_id: Mapped[str | None] = mapped_column(String(32), nullable=True, index=True)
    """A monitor's internal run (docs/monitoring.md): holds its sampled responses and their judgments; left out of
    the runs list, deleted with the monitor."""
    callback_url: Mapped[str | None] = mapped_column(String(2000), nullable=True)
    """Where the ``run.finished`` webhook goes (judge_api/webhooks.py)."""
    callback_secret: Mapped[str | None] = mapped_column(String(500), nullable=True)
    """The webhook's HMAC key: never returned by the API, never logged."""
    execution: Mapped[str] = mapped_column(String(16), default="realtime", server_default="realtime")
    """``realtime`` (a call per judgment) or ``batch`` (provider batch APIs at the batch price: workers.batches)."""
    cancelled_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    """``POST /v1/runs/{id}/cancel``: pending judgments cancelled, open provider batches asked to cancel."""
    data_version: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer, "sqlite"), default=0, server_default="0"
    )  # 64-bit (SQLite's INTEGER is): bumped by every write of a run that may live for years
    """Bumped in the same transaction as every insert or deletion of the run's judgments and every write of its
    human ratings and label queue (database triggers, migration 0023): with the last ``updated_at`` of its judgments,
    the state the report cache compares (repository.report_cache, issue 39)."""

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
        Index("ix_judgments_run_created", "run_id", "created_at"),  # a monitor's spend today (its daily budget)
        # the estimate's calibration: a run's judgments of a rubric version and judge, newest first (repository.history)
        Index("ix_judgments_history", "run_id", "rubric_id", "rubric_version", "judge", "id"),
        # the report cache's state of a run: its last write, one index seek (repository.report_cache, issue 39)
        Index("ix_judgments_run_updated", "run_id", "updated_at"),
        # keyset pages of a run's judgments by id: the JSON cursor and the streaming exports (issue 39)
        Index("ix_judgments_run_id_id", "run_id", "id"),
        # a run's pairwise keys with both orders' outcomes, grouped in key order without reading the rows (the
        # dashboard's order flips: repository.item_aggregates, issue 39)
        Index(
            "ix_judgments_order_outcomes",
            *("run_id", "mode", "status", "item_key", "system_a", "system_b", "aspect", "judge", "order"),
            *("outcome", "preference", "score"),  # score: the single scores' sums per key too (0027)
        ),
        # a run's counts and totals by status, read by every run poll, without reading the rows (issue 39)
        Index(
            "ix_judgments_run_counts",
            *("run_id", "status", "cost_usd", "input_tokens", "output_tokens", "provider_calls", "cached", "id"),
        ),
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
    estimated_cost_usd: Mapped[float | None] = mapped_column(Float, nullable=True)
    """A monitor's sampled judgment with a daily budget: its expected cost (judge_api.estimate), which the budget
    counts while the judgment waits or runs (then its recorded ``cost_usd``); None elsewhere."""
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


class JudgmentCacheKey(Base):
    """A judge-cache key a judgment used besides its own ``cache_key``: a re-ask's (an unparseable reply asked
    again), recorded before the re-ask is looked up or sent, so deleting the run finds its entry (issue 43 review)."""

    __tablename__ = "judgment_cache_keys"

    judgment_id: Mapped[int] = mapped_column(ForeignKey("judgments.id", ondelete="CASCADE"), primary_key=True)
    key: Mapped[str] = mapped_column(String(64), primary_key=True, index=True)


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


class ReportCacheEntry(Base):
    """A run's report as ``GET /v1/runs/{id}/report`` computed it, for the state of the run it was computed on
    (``state``: the run's judgment count and last write, its ratings and label queue) and the query it answered
    (``params_key``). Served again while the run's state is the same (repository.report_cache, issue 39)."""

    __tablename__ = "report_cache"
    __table_args__ = (UniqueConstraint("run_id", "params_key", name="uq_report_cache_run_params"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    project_id: Mapped[str] = mapped_column(String(100))
    params_key: Mapped[str] = mapped_column(String(64))
    state: Mapped[str] = mapped_column(Text)
    computed_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    body: Mapped[str] = mapped_column(Text)


class LabelQueueItem(Base):
    """One item of a run's label queue: drawn with a known inclusion probability (``stats.label_sampling``), so the
    calibrated estimate can weight its label by it. Every eligible item of the draw has a row (``position`` None:
    not drawn), because the estimate needs the whole design."""

    __tablename__ = "label_queue_items"
    __table_args__ = (UniqueConstraint("run_id", "item_key", name="uq_label_queue_item"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    item_key: Mapped[str] = mapped_column(String(200))
    position: Mapped[int | None] = mapped_column(Integer, nullable=True)
    inclusion_probability: Mapped[float] = mapped_column(Float)
    strategy: Mapped[str] = mapped_column(String(16))
    seed: Mapped[int] = mapped_column(BigInteger)
    n_requested: Mapped[int] = mapped_column(Integer)
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
    """A rubric exactly as a run was planned with it (config and template text), by project, id and version: a run
    in flight finishes with the prompts it started with when the rubric folder is edited, and an old judgment's
    prompt can still be shown. Kept per project: a snapshot one project stores (an imported bundle's too) is never
    another project's prompt (issue 42, finding 4)."""

    __tablename__ = "rubric_snapshots"

    project_id: Mapped[str] = mapped_column(String(64), primary_key=True)
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


class Monitor(Base):
    """A chatbot watched in production (docs/monitoring.md): responses are posted to it, a deterministic sample of
    them is judged in its internal run (``run_id``), and its series, alerts and callbacks read those verdicts."""

    __tablename__ = "monitors"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id"), index=True)
    name: Mapped[str] = mapped_column(String(200))
    run_id: Mapped[str] = mapped_column(String(32))
    config: Mapped[dict[str, Any]] = mapped_column(JSON)
    """rubrics, judges, aspects and judge options (as a run's config), what every sampled response is judged by."""
    sample_rate: Mapped[float] = mapped_column(Float)
    daily_budget_usd: Mapped[float | None] = mapped_column(Float, nullable=True)
    retention_days: Mapped[int | None] = mapped_column(Integer, nullable=True)
    alerts: Mapped[list[Any]] = mapped_column(JSON, default=list)
    """The alert rules, validated (``schemas.AlertRule``); evaluated by the alert evaluator."""
    callback_url: Mapped[str | None] = mapped_column(Text, nullable=True)
    callback_secret: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    otlp_stats: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    """OTLP spans of this UTC day: received, turned into responses, waiting, skipped and why (issue 38)."""


class MonitorResponse(Base):
    """Every response posted to a monitor, once per response id (a retried batch inserts nothing): its slice keys,
    its time and whether it was sampled. The text is kept only for sampled ones (as an item of the monitor's run)."""

    __tablename__ = "monitor_responses"
    __table_args__ = (
        UniqueConstraint("monitor_id", "response_id", name="uq_monitor_responses_id"),
        Index("ix_monitor_responses_received", "monitor_id", "received_at"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    monitor_id: Mapped[str] = mapped_column(ForeignKey("monitors.id", ondelete="CASCADE"))
    response_id: Mapped[str] = mapped_column(String(200))
    system: Mapped[str] = mapped_column(String(100))
    version: Mapped[str] = mapped_column(String(100))
    segment: Mapped[str] = mapped_column(String(100), default="")
    ts: Mapped[datetime] = mapped_column(DateTime)
    """The response's own time (``timestamp``, else when it was received): the series' buckets are by it."""
    received_at: Mapped[datetime] = mapped_column(DateTime)
    sampled: Mapped[bool] = mapped_column(Boolean)


class MonitorHourly(Base):
    """Hourly sums of every finished verdict of a monitor, kept by triggers on ``judgments`` in the transaction that
    writes the verdict (migration 0024: a judgment that becomes ``done`` adds, one that leaves it or changes takes its
    old verdict back out; deleting a judgment, as retention does, leaves its verdict here). The series reads these
    alone, one indexed query (``repository.monitors.series_sums``)."""

    __tablename__ = "monitor_hourly"
    # the series groups by (hour, version, rubric, aspect, judge) by default: in the key's order, SQLite's GROUP BY
    # streams along the key instead of sorting (migration 0024; on SQLite the rows live in the key: no rowid)
    __table_args__ = (
        PrimaryKeyConstraint(
            "monitor_id", "hour_start", "version", "rubric_id", "aspect", "judge", "system", "segment"
        ),
        {"sqlite_with_rowid": False},
    )

    monitor_id: Mapped[str] = mapped_column(ForeignKey("monitors.id", ondelete="CASCADE"))
    hour_start: Mapped[datetime] = mapped_column(DateTime)
    system: Mapped[str] = mapped_column(String(100))
    version: Mapped[str] = mapped_column(String(100))
    segment: Mapped[str] = mapped_column(String(100))
    rubric_id: Mapped[str] = mapped_column(String(64))
    aspect: Mapped[str] = mapped_column(String(64))
    judge: Mapped[str] = mapped_column(String(300))
    verdicts: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    """the verdicts summed (with a score or not): a row whose verdicts were all retried away (0) is no series row"""
    n: Mapped[int] = mapped_column(Integer)
    total: Mapped[float] = mapped_column(Float)
    total_sq: Mapped[float] = mapped_column(Float)
    fact_n: Mapped[int] = mapped_column(Integer, default=0)
    """fact-check verdicts among n, and the sum of their contradiction rates"""
    fact_total: Mapped[float] = mapped_column(Float, default=0.0)


class WebhookDelivery(Base):
    """One webhook event to deliver (``run.finished``, ``alert.opened``, ``alert.resolved``), unique by its event
    key so an event is stored, and sent, once; retried with back-off until a 2xx or until it is given up
    (``judge_api/webhooks.py``). ``secret`` is the HMAC key at the time of the event: never returned, never logged."""

    __tablename__ = "webhook_deliveries"
    __table_args__ = (Index("ix_webhook_deliveries_due", "status", "next_attempt_at"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    event_key: Mapped[str] = mapped_column(String(200), unique=True)
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id"), index=True)
    event: Mapped[str] = mapped_column(String(32))
    run_id: Mapped[str | None] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), nullable=True, index=True)
    monitor_id: Mapped[str | None] = mapped_column(String(32), nullable=True, index=True)
    url: Mapped[str] = mapped_column(String(2000))
    secret: Mapped[str] = mapped_column(String(500))
    payload: Mapped[dict[str, Any]] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(String(16), default="pending")
    """pending (to send, now or at ``next_attempt_at``), delivered (a 2xx came back), failed (given up)."""
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    claimed_until: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    delivered_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    last_error: Mapped[str | None] = mapped_column(Text, nullable=True)


class WebhookAttempt(Base):
    """Every attempt at a delivery: when, how long, the receiver's status code or why it failed."""

    __tablename__ = "webhook_attempts"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    delivery_id: Mapped[str] = mapped_column(ForeignKey("webhook_deliveries.id", ondelete="CASCADE"), index=True)
    attempt: Mapped[int] = mapped_column(Integer)
    started_at: Mapped[datetime] = mapped_column(DateTime)
    duration_ms: Mapped[float] = mapped_column(Float)
    status_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    outcome: Mapped[str] = mapped_column(String(16))
    """delivered (2xx), failed (another status, a timeout, a refused connection), refused (the URL is not allowed)."""
    error: Mapped[str | None] = mapped_column(Text, nullable=True)


PROVIDER_BATCH_OPEN = ("submitting", "open")


class ProviderBatch(Base):
    """A provider batch (OpenAI Batch API, Anthropic Message Batches) holding judgments of a batch-mode run
    (workers.batches). ``submitting``: stored with its judgments before the provider is asked (a worker killed
    before it recorded the provider's id leaves it so: the poller looks it up by its ``custom_id`` prefix);
    ``open``: at the provider; ``ended``: every result stored or sent back to be retried."""

    __tablename__ = "provider_batches"
    __table_args__ = (Index("ix_provider_batches_status_poll", "status", "next_poll_at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    provider: Mapped[str] = mapped_column(String(32))
    judge: Mapped[str] = mapped_column(String(300))
    provider_batch_id: Mapped[str | None] = mapped_column(String(200), nullable=True)
    input_file_id: Mapped[str | None] = mapped_column(String(200), nullable=True)
    status: Mapped[str] = mapped_column(String(16), default="submitting")
    provider_status: Mapped[str | None] = mapped_column(String(32), nullable=True)
    requests: Mapped[int] = mapped_column(Integer, default=0)
    judgments: Mapped[int] = mapped_column(Integer, default=0)
    result_counts: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    submitted_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    ended_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    next_poll_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    cancel_requested_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    cancel_sent_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)


class ProviderBatchJudgment(Base):
    """Which judgments a provider batch holds, under which request (``custom_id``; judgments with one judge-cache
    key share a request). Indexed by judgment: is it inside a batch, which one."""

    __tablename__ = "provider_batch_judgments"

    batch_pk: Mapped[int] = mapped_column(ForeignKey("provider_batches.id", ondelete="CASCADE"), primary_key=True)
    judgment_id: Mapped[int] = mapped_column(
        ForeignKey("judgments.id", ondelete="CASCADE"), primary_key=True, index=True
    )
    custom_id: Mapped[str] = mapped_column(String(64))


class MonitorRuleState(Base):
    """The running test of a monitor's compare rule (``by`` version, system or segment; issue 36 finding 1): the
    confidence sequence's state (``judge_api.stats.alerts.CompareState``) after every verdict of the rule's stream up
    to ``counted_id`` (a high-water mark: judgments are counted once, in id order, up to the first one not finished),
    for the candidate stream after ``start_id``. Updated with only the verdicts after ``counted_id``, so retention
    deleting old verdicts does not change the test; a rule edited (``definition``) or an alert opened or resolved
    (``start_id``) starts a fresh state from the verdicts still kept."""

    __tablename__ = "monitor_rule_states"

    monitor_id: Mapped[str] = mapped_column(ForeignKey("monitors.id", ondelete="CASCADE"), primary_key=True)
    rule: Mapped[str] = mapped_column(String(64), primary_key=True)
    definition: Mapped[str] = mapped_column(String(16))
    rubric_id: Mapped[str] = mapped_column(String(64))
    aspect: Mapped[str] = mapped_column(String(64))
    judge: Mapped[str] = mapped_column(String(300))
    """The stream the rule reads: retention keeps its judgments above ``counted_id``."""
    start_id: Mapped[int] = mapped_column(Integer, default=0)
    counted_id: Mapped[int] = mapped_column(Integer, default=0)
    state: Mapped[dict[str, Any]] = mapped_column(JSON)
    worst: Mapped[list[Any]] = mapped_column(JSON, default=list)
    """The worst candidate verdicts counted (with their response's id, slice keys and time; no text)."""
    updated_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)


class MonitorAlert(Base):
    """An alert of a monitor's rule (judge_api/alerts.py): opened when the rule decides a regression (a compare
    rule) or a breach (a floor rule), with the evidence; resolved when it no longer holds. ``start_id`` /
    ``last_id`` are the judgment ids bounding the candidate stream that decided it: the check for resolution reads
    the verdicts after ``last_id``."""

    __tablename__ = "monitor_alerts"
    __table_args__ = (
        UniqueConstraint("monitor_id", "rule", "definition", "epoch", "start_id", name="uq_monitor_alerts_stream"),
        Index("ix_monitor_alerts_rule", "monitor_id", "rule", "opened_at"),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    monitor_id: Mapped[str] = mapped_column(ForeignKey("monitors.id", ondelete="CASCADE"))
    rule: Mapped[str] = mapped_column(String(64))
    kind: Mapped[str] = mapped_column(String(16))
    definition: Mapped[str] = mapped_column(String(16))
    """A hash of the rule as it was when the alert opened: an edited rule starts afresh."""
    status: Mapped[str] = mapped_column(String(16))
    epoch: Mapped[int] = mapped_column(Integer, default=0)
    """Time-window rules: the candidate window's index (its start / its length); 0 for the others."""
    start_id: Mapped[int] = mapped_column(Integer, default=0)
    last_id: Mapped[int] = mapped_column(Integer, default=0)
    resolved_last_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    opened_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    resolved_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    evidence: Mapped[dict[str, Any]] = mapped_column(JSON)
    resolution: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)


class OtlpSpan(Base):
    """An LLM span received over OTLP (issue 38): kept as its conversation's history (later spans' dialogues are
    rebuilt from it) and, while earlier turns it refers to are missing, ``waiting`` until ``release_after``; then
    ``released``: its response was handed to the monitor's ingestion (stored once per response id there too)."""

    __tablename__ = "otlp_spans"
    __table_args__ = (
        UniqueConstraint("monitor_id", "response_id", name="uq_otlp_spans_response"),
        Index("ix_otlp_spans_conversation", "monitor_id", "conversation_id", "started_at"),
        Index("ix_otlp_spans_waiting", "status", "release_after"),
        Index("ix_otlp_spans_received", "received_at"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    monitor_id: Mapped[str] = mapped_column(ForeignKey("monitors.id", ondelete="CASCADE"))
    response_id: Mapped[str] = mapped_column(String(200))
    conversation_id: Mapped[str] = mapped_column(String(200), default="")
    started_at: Mapped[datetime] = mapped_column(DateTime)
    received_at: Mapped[datetime] = mapped_column(DateTime)
    release_after: Mapped[datetime] = mapped_column(DateTime)
    status: Mapped[str] = mapped_column(String(16))
    call: Mapped[dict[str, Any]] = mapped_column(JSON)
    """The span as read (judge_api.otlp.genai.LlmCall.to_json): messages, output, instructions, slice keys."""
