"""A run's request (RunCreate and its options) and what the API answers about runs."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationInfo, field_validator, model_validator

from judge_api.reference_metrics import DEFAULT_METRICS, REFERENCE_JUDGE, MetricName
from judge_api.reference_tokens import DEFAULT_TOKENIZE, Tokenize
from judge_api.responders import ResponderSpecError, parse_responder
from judge_api.schemas.common import (
    ADAPTIVE_MAX_SAMPLES,
    MAX_BUDGET_USD,
    MAX_JUDGE_SEED,
    MAX_SCORE,
    MAX_SEED,
    SYSTEM_PATTERN,
    Mode,
    check_callback_secret,
    check_callback_url,
)
from judge_api.schemas.items import Item


class JudgeOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    max_tokens: int = Field(default=512, ge=1, le=32_000)
    seed: int | None = Field(default=0, ge=0, le=MAX_JUDGE_SEED)
    samples: int | Literal["adaptive"] = Field(
        default=1,
        description="self-consistency samples per judgment, or 'adaptive': another sample only while the samples "
        "drawn disagree or sit near a decision boundary, up to max_samples",
    )
    max_samples: int | None = Field(default=None, ge=2, le=16, description="samples='adaptive': at most (5)")
    min_samples: int | None = Field(
        default=None, ge=1, le=16, description="samples='adaptive': drawn at once (single mode 2, pairwise 1)"
    )
    sample_margin: float | None = Field(
        default=None,
        gt=0,
        le=MAX_SCORE,
        allow_inf_nan=False,
        description="samples='adaptive', single mode: scores this close agree (default 5% of the rubric's scale)",
    )
    sample_boundaries: list[Annotated[float, Field(ge=-MAX_SCORE, le=MAX_SCORE, allow_inf_nan=False)]] | None = Field(
        default=None,
        max_length=20,
        description="samples='adaptive', single mode: decisive scores (e.g. a pass mark) near which to sample more",
    )
    structured_output: bool = Field(default=False, description="ask for JSON schema / tool output where supported")
    reask: int = Field(default=0, ge=0, le=3, description="re-ask an unparseable reply at most this many times")
    scoring: Literal["parsed", "expected"] | None = Field(
        default=None,
        description="single scores: 'expected' = probability-weighted over the judge's token log-probabilities "
        "(G-Eval), 'parsed' = the integer it wrote; default: the rubric's 'scoring'",
    )
    cache: Literal["use", "refresh", "off"] = Field(
        default="use",
        description="the judge cache: 'use' = a request asked before is answered from the cache; 'refresh' = ask "
        "again and replace the cache entries (e.g. after fixing a judge whose replies were unparseable); 'off' = "
        "neither read nor write it",
    )

    @field_validator("samples")
    @classmethod
    def _sample_count(cls, value: int | str) -> int | str:
        if isinstance(value, int) and not 1 <= value <= 16:
            raise ValueError("samples must be 1-16 or 'adaptive'")
        return value

    @model_validator(mode="after")
    def _sampling_needs_temperature(self) -> JudgeOptions:
        if self.samples == "adaptive":
            if self.temperature == 0:
                raise ValueError("samples: 'adaptive' needs temperature > 0 (identical samples say nothing)")
            if self.min_samples is not None and self.min_samples > self.max_sample_count:
                raise ValueError(f"min_samples: {self.min_samples} is above max_samples ({self.max_sample_count})")
            return self
        for name in ("max_samples", "min_samples", "sample_margin", "sample_boundaries"):
            if getattr(self, name) is not None:
                raise ValueError(f"{name}: only with samples='adaptive'")
        if isinstance(self.samples, int) and self.samples > 1 and self.temperature == 0:
            raise ValueError("samples > 1 needs temperature > 0 (identical samples say nothing)")
        return self

    @property
    def max_sample_count(self) -> int:
        """Samples a judgment can take: the fixed count, or adaptive's maximum."""
        if self.samples == "adaptive":
            return self.max_samples or ADAPTIVE_MAX_SAMPLES
        return self.samples

    @property
    def first_samples(self) -> dict[str, int]:
        """Samples planned up front per judgment, by mode."""
        if self.samples != "adaptive":
            return {"single": self.samples, "pairwise": self.samples}
        if self.min_samples is not None:
            return {"single": self.min_samples, "pairwise": self.min_samples}
        return {"single": min(2, self.max_sample_count), "pairwise": 1}


class AdaptiveOptions(BaseModel):
    """pairing='adaptive': which comparisons to judge and when to stop."""

    model_config = ConfigDict(extra="forbid")

    confidence: float = Field(
        default=0.95, ge=0.5, le=0.999, description="stop once every adjacent pair is separated at this confidence"
    )
    max_calls: int | None = Field(default=None, ge=1, le=10_000_000, description="call budget (pairwise judge calls)")
    top_k: int | None = Field(default=None, ge=1, le=10_000, description="stop once the top k are separated")
    batch: int = Field(default=16, ge=1, le=1000, description="comparisons planned per step")
    warmup: int = Field(default=1, ge=0, le=100, description="comparisons of every pair before choosing")
    seed: int = Field(default=0, ge=0, le=MAX_SEED, description="orders each pair's items")


class PanelOptions(BaseModel):
    """The run's judge panel: which judges form it and how their verdicts are aggregated."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(default=True, description="add the 'panel' pseudo-judge when two or more judges take part")
    judges: list[str] | None = Field(
        default=None, min_length=2, max_length=10, description="the members (default: every judge of the run)"
    )
    aggregate: Literal["mean", "median"] = Field(
        default="mean", description="single scores: mean or median of the members; pairwise: always the majority"
    )
    quorum: int | None = Field(
        default=None,
        ge=1,
        le=10,
        description="members that must give a unit a verdict for the panel to have one (default: a majority of the "
        "members); units below it are left out of the panel's scores, paired tests and ranking",
    )


class RunCreate(BaseModel):
    """POST /v1/runs body."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(default=None, max_length=200)
    items: list[Item] = Field(min_length=1)
    rubrics: list[str] = Field(
        default_factory=list, max_length=20, description="[] only with judges ['reference'] (reference metrics only)"
    )
    judges: list[str] = Field(
        min_length=1,
        max_length=10,
        description="['reference'] alone: a run of reference metrics only, no rubric, no judge call, no cost",
    )
    mode: list[Mode] = Field(default_factory=lambda: list[Mode](["single"]), min_length=1)
    aspects: list[str] | None = Field(default=None, description="subset of the rubric's aspects")
    pairing: Literal["all", "baseline", "adaptive"] = Field(
        default="all",
        description="pairwise: all pairs, each system against a baseline, or 'adaptive' (comparisons chosen by how "
        "much they can still change the ranking, until it is settled)",
    )
    baseline: str | None = None
    adaptive: AdaptiveOptions | None = Field(default=None, description="pairing='adaptive': its options")
    orders: Literal["both", "random"] = Field(
        default="both", description="pairwise: both presentation orders, or one seeded-random order"
    )
    order_seed: int = Field(default=0, ge=0, le=MAX_SEED, description="orders='random': the seed of the orders")
    options: JudgeOptions = Field(default_factory=JudgeOptions)
    outcome_map: dict[str, Literal["win", "tie", "loss"]] | None = Field(
        default=None, description="pairwise: graded preference ('2','1','0','-1','-2') -> outcome"
    )
    budget_usd: float | None = Field(default=None, gt=0, le=MAX_BUDGET_USD, allow_inf_nan=False)
    metrics: list[MetricName] = Field(
        default_factory=lambda: list(DEFAULT_METRICS),
        max_length=4,
        description="reference metrics computed (no judge call) for every candidate of an item with a reference; "
        "'bertscore' needs DJ_BERTSCORE_MODEL on the workers; [] for none",
    )
    tokenize: Tokenize = Field(
        default=DEFAULT_TOKENIZE,
        description="how F1 and BLEU split text into tokens: 'whitespace' (ParlAI's), 'char' (each CJK character a "
        "token, other words split on whitespace) or 'auto' (char for an item whose reference is mostly CJK, else "
        "whitespace); stored in the metric's version",
    )
    panel: PanelOptions = Field(default_factory=PanelOptions)
    systems: dict[str, str] | None = Field(
        default=None,
        max_length=20,
        description="systems under test to generate responses with before judging: name -> responder string "
        "(docs/generation.md); their responses join each item's candidates",
    )
    meta: dict[str, Any] = Field(default_factory=dict)
    callback_url: str | None = Field(
        default=None,
        max_length=2000,
        description="POSTed a signed 'run.finished' event when the run finishes (docs/monitoring.md#webhooks)",
    )
    callback_secret: SecretStr | None = Field(
        default=None,
        max_length=500,
        validate_default=True,
        description="the HMAC-SHA256 key of the callbacks' X-Dialogue-Judge-Signature; never returned",
    )

    @field_validator("callback_url")
    @classmethod
    def _callback_url(cls, value: str | None) -> str | None:
        return check_callback_url(value)

    @field_validator("callback_secret")
    @classmethod
    def _callback_secret(cls, value: SecretStr | None, info: ValidationInfo) -> SecretStr | None:
        return check_callback_secret(value, info.data.get("callback_url"))

    execution: Literal["realtime", "batch"] = Field(
        default="realtime",
        description="'batch': the judge calls go through the provider's batch API (OpenAI Batch, Anthropic Message "
        "Batches) at the batch price, results within the provider's window (24 h, usually much sooner); judges "
        "without one (local, reference metrics) stay real-time. Adaptive runs are real-time only",
    )
    batch_retry: Literal["batch", "realtime"] = Field(
        default="batch",
        description="execution='batch': where a request the provider errored or let expire is retried: in a later "
        "batch, or in real time (full price, no wait)",
    )

    @field_validator("execution")
    @classmethod
    def _batch_allowed(cls, value: str, info: ValidationInfo) -> str:
        if value != "batch":
            return value
        options = info.data.get("options")
        if info.data.get("pairing") == "adaptive" or (options is not None and options.samples == "adaptive"):
            what = "pairing='adaptive'" if info.data.get("pairing") == "adaptive" else "options.samples='adaptive'"
            raise ValueError(
                f"'batch' is refused with {what}: an adaptive run plans each step from the verdicts of the last, "
                "which a provider batch returns hours later; adaptive runs are real-time only"
            )
        if "gate" in (info.data.get("meta") or {}):
            raise ValueError(
                "'batch' is refused for a CI gate run (meta.gate): the gate decides from verdicts as they arrive, "
                "look by look; the gate is real-time only"
            )
        if options is not None and options.reask:
            raise ValueError(
                "'batch' is refused with options.reask: a re-ask is a second turn sent after the reply is read; set "
                "reask to 0, or use execution='realtime'"
            )
        return value

    @field_validator("batch_retry")
    @classmethod
    def _retry_of_batch(cls, value: str, info: ValidationInfo) -> str:
        if value != "batch" and info.data.get("execution") != "batch":
            raise ValueError("only with execution='batch'")
        return value

    @field_validator("systems")
    @classmethod
    def _parse_systems(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        if value is None:
            return None
        if not value:
            raise ValueError("systems: name at least one system, or leave 'systems' out")
        for name, responder in value.items():
            if not re.match(SYSTEM_PATTERN, name):
                raise ValueError(f"systems.{name}: a system name must be 1-100 letters, digits or _.:@/+- ")
            try:
                parse_responder(responder)
            except ResponderSpecError as exc:
                raise ValueError(f"systems.{name}: {exc}") from None
        return value

    @field_validator("metrics")
    @classmethod
    def _unique_metrics(cls, value: list[MetricName]) -> list[MetricName]:
        return list(dict.fromkeys(value))

    @field_validator("mode")
    @classmethod
    def _unique_modes(cls, value: list[str]) -> list[str]:
        return list(dict.fromkeys(value))

    @model_validator(mode="after")
    def _check_items(self) -> RunCreate:
        seen: set[str] = set()
        systems = self.systems or {}
        for index, item in enumerate(self.items):
            if item.id in seen:
                raise ValueError(f"items[{index}].id: duplicate item id {item.id!r}")
            seen.add(item.id)
        self._check_reference_only()
        if systems and (self.pairing == "adaptive" or self.options.samples == "adaptive"):
            raise ValueError(
                "systems: a run with systems plans its judgments item by item as the responses are generated; "
                "adaptive pairing and adaptive samples are not supported with it (generate with the CLI first)"
            )
        if self.pairing == "baseline" and not self.baseline:
            raise ValueError("baseline: pairing='baseline' needs a baseline system name")
        if self.pairing == "adaptive":
            if "pairwise" not in self.mode:
                raise ValueError("pairing: 'adaptive' ranks systems pairwise; add 'pairwise' to mode")
            if self.orders != "both":
                raise ValueError("orders: adaptive pairing judges both presentation orders of every comparison")
            if self.baseline is not None:
                raise ValueError("baseline: only with pairing='baseline'")
            if self.adaptive is None:
                self.adaptive = AdaptiveOptions()
        elif self.adaptive is not None:
            raise ValueError("adaptive: only with pairing='adaptive'")
        if self.baseline is not None:
            for index, item in enumerate(self.items):
                if self.baseline not in item.candidates and self.baseline not in systems:
                    raise ValueError(f"items[{index}].candidates: baseline {self.baseline!r} is missing")
        if "pairwise" in self.mode and all(len(item.candidates) + len(systems) < 2 for item in self.items):
            raise ValueError("mode: pairwise needs at least two candidates in some item")
        return self

    def _check_reference_only(self) -> None:
        """judges ['reference']: the reference metrics alone (issue 26.1), computed by the workers without a call."""
        if REFERENCE_JUDGE not in self.judges:
            if not self.rubrics:
                raise ValueError(
                    "rubrics: name at least one rubric, or use judges ['reference'] for reference metrics only"
                )
            return
        if self.judges != [REFERENCE_JUDGE]:
            raise ValueError(
                "judges: 'reference' (the reference metrics) stands alone; with other judges the metrics are "
                "computed anyway (see 'metrics')"
            )
        if self.rubrics:
            raise ValueError("rubrics: judges ['reference'] computes reference metrics only; leave 'rubrics' out")
        if not self.metrics:
            raise ValueError("metrics: judges ['reference'] needs at least one reference metric")
        if self.mode != ["single"]:
            raise ValueError("mode: reference metrics score each candidate alone; use mode ['single']")
        if not any(item.reference and item.reference.strip() for item in self.items):
            raise ValueError("items: reference metrics need items with a 'reference'; none of the items has one")


class RunCounts(BaseModel):
    pending: int = 0
    running: int = 0
    done: int = 0
    failed: int = 0
    unparseable: int = 0
    cancelled: int = 0


class RankedSystem(BaseModel):
    system: str
    rank: int
    strength: float = Field(description="centred Bradley-Terry log strength (the report's 'strength')")
    ci_low: float | None = Field(description="confidence-sequence interval at the run's confidence")
    ci_high: float | None
    comparisons: int


class AdjacentGap(BaseModel):
    upper: str
    lower: str
    diff: float
    z: float | None
    z_needed: float | None = Field(description="the z the stopping rule needs at this much information")
    separated: bool


class PairingEconomy(BaseModel):
    stop: str | None = Field(description="separated, top_k_separated, budget, items_exhausted, inseparable")
    stop_message: str | None
    confidence: float
    top_k: int | None
    max_calls: int | None
    target: dict[str, str] | None = Field(description="the rubric, aspect and judge the ranking is by")
    calls: int = Field(description="pairwise judge calls planned so far")
    round_robin_calls: int = Field(description="what full round robin (every pair, every item) takes")
    share: float | None = Field(description="calls / round_robin_calls")
    comparisons: int
    round_robin_comparisons: int
    ranking: list[RankedSystem]
    gaps: list[AdjacentGap]


class SamplesEconomy(BaseModel):
    judgments: int
    samples: int
    fixed: int = Field(description="the fixed sample count adaptive sampling replaces (max_samples)")
    fixed_samples: int
    saving: float = Field(description="share of the fixed count's samples not drawn")
    histogram: dict[str, int] = Field(description="samples taken -> judgments")


class RunEconomy(BaseModel):
    """Adaptive runs: what was judged against what a fixed plan would judge, and why planning stopped."""

    finished: bool
    rounds: int
    pairing: PairingEconomy | None = None
    samples: SamplesEconomy | None = None


class GenerationCounts(BaseModel):
    """Runs with ``systems``: the (item, system) responses generated before judging."""

    total: int = 0
    generated: int = 0
    failed: int = 0
    pending: int = Field(default=0, description="not generated yet (queued or being generated)")
    running: int = 0
    items_released: int = Field(default=0, description="items whose generations are settled and judgments planned")
    failures: list[dict[str, str]] = Field(
        default_factory=list, description="the failed (item, system) pairs with their reasons (the first 100)"
    )


class BatchCounts(BaseModel):
    open: int = Field(description="provider batches submitted (or being submitted) whose results are not all in")
    done: int = Field(description="provider batches ended, every result stored or sent back to be retried")
    requests: int = Field(description="requests sent in provider batches (one per distinct prompt of a batch)")


RunOutcome = Literal["ok", "partial", "failed"]


class RunSummary(BaseModel):
    id: str
    name: str | None
    status: str
    outcome: RunOutcome | None = Field(
        default=None,
        description="a finished run's result (null until it is finished): 'failed' = nothing usable came back (no "
        "judgment 'done' of those planned), 'partial' = some are 'done' and some 'failed' or 'unparseable', 'ok' = "
        "none failed or unparseable (judgments cancelled, e.g. past a budget, do not make a run partial)",
    )
    created_at: datetime
    finished_at: datetime | None
    rubrics: list[str]
    judges: list[str]
    mode: list[str]
    n_items: int
    n_judgments: int
    counts: RunCounts
    progress: float
    cost_usd: float
    input_tokens: int
    output_tokens: int
    provider_calls: int
    cached: int
    budget_usd: float | None
    budget_exhausted: bool
    message: str | None = None
    economy: RunEconomy | None = None
    generation: GenerationCounts | None = Field(
        default=None, description="runs with systems: generation progress (judging progress is 'counts')"
    )
    callback_url: str | None = Field(default=None, description="where the run.finished webhook goes")
    execution: str = Field(default="realtime", description="'realtime' or 'batch'")
    batches: BatchCounts | None = Field(
        default=None, description="execution='batch': provider batches open and done, requests sent in them"
    )


class RetryRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    unparseable: bool = Field(
        default=False,
        description="also re-ask the judgments whose reply could not be parsed, past the judge cache (the new "
        "replies replace the cached ones); failed and cancelled judgments are always sent again",
    )


class RunCreated(BaseModel):
    id: str
    status: str
    n_items: int
    n_judgments: int = Field(
        description="judgments planned so far (a run with systems plans them as items' responses are generated)"
    )
    url: str
    n_generations: int = Field(default=0, description="runs with systems: the (item, system) responses to generate")


class EstimateCost(BaseModel):
    realtime: float = Field(description="USD at real-time prices, expected prompt-cache hits counted")
    batch: float = Field(description="USD at batch prices (execution: batch), the same cache hits counted")
    list: float = Field(description="USD at list price: no cache hits, real-time")


class ReplyLength(BaseModel):
    rubric: str
    tokens: float = Field(description="output tokens a reply was estimated at (before the run's max_tokens cap)")
    source: Literal["stated", "calibrated"] = Field(
        description="'stated': the rubric's typical_reply_tokens (or a default per kind); 'calibrated': the mean "
        "recorded reply of the project's earlier judgments of this rubric version by this judge"
    )
    earlier_judgments: int = Field(
        description="the project's earlier succeeded judgments of this rubric version by this judge that were read "
        "(calibrated from 20 or more, the most recent 1,000 at most)"
    )


class JudgeEstimate(BaseModel):
    judge: str
    judgments: int
    provider_calls: int
    input_tokens: int
    cached_input_tokens: int
    cache_write_tokens: int
    output_tokens: int
    cost_usd: EstimateCost | None = Field(
        description="None: the judge's model is not in the price table, so its cost is unknown"
    )
    seconds: float | None
    priced: bool = Field(description="the judge's model is in the price table (or is the embedded local model)")
    tokenizer: str = Field(description="the provider's tokenizer used to count input tokens, or the approximation")
    reply_tokens: list[ReplyLength] = Field(default_factory=list, description="per rubric: the reply length used")


class RunEstimate(BaseModel):
    """What a run would cost and take (POST /v1/runs/estimate): nothing stored, nothing called."""

    judgments: int = Field(description="judgments the run plans (as POST /v1/runs would)")
    provider_calls: int = Field(description="calls to make: judgments less judge-cache hits (re-asks not counted)")
    cached_judgments: int = Field(description="judgments the judge cache answers (no call, no cost)")
    input_tokens: int
    cached_input_tokens: int = Field(description="of them, expected to be read from the provider's prompt cache")
    output_tokens: int = Field(
        description="from the project's earlier replies of each rubric and judge (calibrated) or each rubric's "
        "typical_reply_tokens (or a default per kind): per_judge[].reply_tokens says which"
    )
    cost_usd: EstimateCost | None = Field(
        description="None: the cost is unknown, a judge making calls is not in the price table (unpriced_judges)"
    )
    unpriced_judges: list[str] = Field(
        default_factory=list, description="judges making calls whose model the price table does not list"
    )
    seconds: float | None = Field(description="at the configured rate limits (DJ_RATE_LIMITS); None: no limit set")
    per_judge: list[JudgeEstimate]
    notes: list[str]
