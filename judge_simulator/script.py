"""Behaviour script of the judge simulator: what it answers, how slowly, and how it fails.

The script is a pydantic model so that it can be loaded from JSON or YAML (``--script FILE``),
replaced at runtime (``PUT /_sim/script``) and echoed back (``GET /_sim/script``) with the same
validation everywhere. Every random choice the simulator makes is derived from ``seed``, so a
script plus a request sequence fully determines the simulator's answers.

Example (JSON)::

    {
      "seed": 7,
      "position_bias": 0.3,
      "latency": "lognormal(0.2, 0.5)",
      "rate_limit_rpm": 500,
      "faults": [
        {"kind": "rate_limit", "first_n": 2, "retry_after": 1},
        {"kind": "server_error", "status": 503, "every_k": 10},
        {"kind": "malformed", "probability": 0.05, "model": "^gpt-4o-mini$"}
      ],
      "rules": [
        {"name": "always-42", "match": "ALWAYS_42", "kind": "single", "score": 42}
      ]
    }

Omitted fields take their defaults; in particular an omitted ``rules`` keeps :func:`default_rules`.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .caching import PromptCaching
from .protocols import EXTRACT_PROTOCOL, FACT_PROTOCOL, MEMORY_PROTOCOL

FaultKind = Literal["rate_limit", "server_error", "hang", "malformed", "truncated", "invalid_json"]
Provider = Literal["openai", "anthropic"]

_LATENCY_SHORTHAND = re.compile(r"^\s*(fixed|uniform|lognormal|none)\s*(?:\(([^)]*)\))?\s*$", re.IGNORECASE)


def _check_regex(value: str | None) -> str | None:
    """Reject invalid regular expressions when the script is loaded, not at request time."""
    if value is not None:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"invalid regex {value!r}: {exc}") from exc
    return value


class _Strict(BaseModel):
    """Base for script models: unknown keys are errors so that typos in a script are caught."""

    model_config = ConfigDict(extra="forbid")


class BatchFault(_Strict):
    """A request of a batch that errors or expires instead of being answered. Counted over every batch request
    the simulator processes (so a retried request is a later one): ``first_n``, ``every_k``, or each request
    whose prompt matches ``match`` (at most ``times`` times, if set)."""

    kind: Literal["error", "expire"]
    status: int = Field(default=500, ge=400, le=599, description="error: the request's HTTP status")
    first_n: int | None = Field(default=None, ge=1)
    every_k: int | None = Field(default=None, ge=1)
    match: str | None = None
    times: int | None = Field(default=None, ge=1)

    @field_validator("match")
    @classmethod
    def _regex(cls, value: str | None) -> str | None:
        if value is not None:
            re.compile(value)
        return value


class BatchBehaviour(_Strict):
    completion_seconds: float = Field(default=0.0, ge=0, description="how long a batch takes to end")
    faults: list[BatchFault] = Field(default_factory=list)
    max_requests: int | None = Field(
        default=None,
        ge=1,
        description="requests one batch may hold (None: the provider's, OpenAI 50,000, Anthropic "
        "100,000); a larger batch is refused with 400",
    )
    max_bytes: int | None = Field(
        default=None,
        ge=1,
        description="bytes of a batch's input file (OpenAI) or request body (Anthropic) (None: "
        "the provider's, 200 MB and 256 MB); a larger one is refused (OpenAI 400, Anthropic 413)",
    )


class Latency(_Strict):
    """Response delay distribution, sampled with a seeded RNG and applied with ``asyncio.sleep``.

    Also accepts a number (fixed seconds) or a shorthand string: ``"fixed(0.5)"``,
    ``"uniform(0.1, 0.3)"``, ``"lognormal(0.2, 0.5)"`` (median seconds, sigma), ``"none"``.
    """

    kind: Literal["none", "fixed", "uniform", "lognormal"] = "none"
    seconds: float = Field(default=0.0, ge=0, description="fixed: the delay")
    lo: float = Field(default=0.0, ge=0, description="uniform: lower bound")
    hi: float = Field(default=0.0, ge=0, description="uniform: upper bound")
    median: float = Field(default=0.0, ge=0, description="lognormal: median delay")
    sigma: float = Field(default=0.0, ge=0, description="lognormal: sigma of the underlying normal")
    max_seconds: float | None = Field(default=None, ge=0, description="cap on any sampled delay")

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        if isinstance(value, bool):
            raise ValueError("latency must be an object, a number or a shorthand string")
        if isinstance(value, (int, float)):
            return {"kind": "fixed", "seconds": float(value)}
        if isinstance(value, str):
            m = _LATENCY_SHORTHAND.match(value)
            if not m:
                raise ValueError(f"bad latency shorthand {value!r}")
            kind = m.group(1).lower()
            args = [float(a) for a in (m.group(2) or "").split(",") if a.strip()]
            expected = {"none": 0, "fixed": 1, "uniform": 2, "lognormal": 2}[kind]
            if len(args) != expected:
                raise ValueError(f"latency {kind} takes {expected} argument(s), got {value!r}")
            names = {
                "none": [],
                "fixed": ["seconds"],
                "uniform": ["lo", "hi"],
                "lognormal": ["median", "sigma"],
            }
            return {"kind": kind, **dict(zip(names[kind], args, strict=True))}
        return value

    @model_validator(mode="after")
    def _bounds(self) -> Latency:
        if self.kind == "uniform" and self.hi < self.lo:
            raise ValueError("uniform latency needs lo <= hi")
        return self


class Fault(_Strict):
    """One injected failure and when it fires.

    Eligibility: a call is *eligible* when it matches all given filters (``model`` and ``match``
    are regexes searched in the model name / full prompt text, ``endpoint`` the wire format).
    Schedules count eligible calls from 1 (since the script was installed or the last reset) and
    are OR-ed: ``first_n`` (calls 1..N), ``every_k`` (calls k, 2k, ...), ``calls`` (explicit
    numbers), ``probability`` (a seeded Bernoulli draw per eligible call). ``max_count`` caps how
    often the fault fires in total. Faults are tried in order; the first that fires wins.
    """

    kind: FaultKind
    probability: float = Field(default=0.0, ge=0.0, le=1.0)
    first_n: int = Field(default=0, ge=0)
    every_k: int = Field(default=0, ge=0)
    calls: list[int] = Field(default_factory=list)
    max_count: int | None = Field(default=None, ge=0)
    model: str | None = None
    match: str | None = None
    endpoint: Provider | None = None
    status: int = Field(default=500, ge=400, le=599, description="server_error: HTTP status (500, 502, 503, 529 ...)")
    retry_after: float | None = Field(
        default=1.0, ge=0, description="rate_limit: seconds for Retry-After (None omits the header)"
    )
    hang_seconds: float = Field(default=30.0, ge=0, description="hang: delay before answering normally")
    text: str = Field(default="I cannot decide.", description="malformed: the reply content")
    keep_fraction: float = Field(default=0.5, ge=0.0, lt=1.0, description="truncated: share of the reply kept")

    @field_validator("model", "match")
    @classmethod
    def _regex(cls, value: str | None) -> str | None:
        return _check_regex(value)


class VerdictTexts(_Strict):
    """The verdict strings a pairwise rule emits. ``graded_*`` for the "Response 1 is better"
    family (5 options, or 3 when the prompt never says "slightly"), ``fastchat_*`` for MT-Bench
    style ``[[A]]``/``[[B]]``/``[[C]]``."""

    graded_better_1: str = "Response 1 is better"
    graded_slightly_1: str = "Response 1 is slightly better"
    graded_tie: str = "Both responses are equally good"
    graded_slightly_2: str = "Response 2 is slightly better"
    graded_better_2: str = "Response 2 is better"
    fastchat_a: str = "[[A]]"
    fastchat_b: str = "[[B]]"
    fastchat_tie: str = "[[C]]"


class Rule(_Strict):
    """A reply rule: the first rule whose ``match`` (regex searched in the full prompt text, case
    insensitive, dot matches newline) and ``model`` (regex searched in the model name) both match
    decides the reply.

    ``kind`` says how ``{score}``/``{verdict}`` are computed:

    * ``single``: the judged response is located with ``response_regex`` (its last match; named
      group ``response``) or else the built-in locators of ``behaviour.SINGLE_LOCATORS``, tried
      in tiers: hardened ``<untrusted-response ...>`` fences, then ``[The Start of ... Answer]``
      blocks, then ``<response>`` tags, then ``Response:``-style labels (inline: to the end of
      the line; on a line of their own: to the next blank line) together with fenced code
      blocks; the last match in the first tier that matches wins. The score is the last
      ``<<q=NN>>`` marker in that response; if the response has none, the last marker anywhere
      in the prompt; else a stable hash of the response text (the whole prompt when nothing was
      located) mapped into ``[scale_min, scale_max]``. ``score`` pins a fixed value.
    * ``pairwise``: the two responses are located with ``response_regex`` (groups ``response_1``
      and ``response_2``) or built-in locators (two ``<untrusted-response>`` fences, MT-Bench pair
      blocks, ``<response_1>`` tags, ``Response 1:``/``Response 2:`` labels, else the last two
      ``<<q=NN>>`` markers in the prompt), each scored like a single response. Their
      scores are compared: equal within ``tie_margin`` -> tie, difference below ``clear_margin``
      -> "slightly better" (only if the prompt mentions "slightly"), else "better". A tie is only
      answered when the prompt offers it (FastChat ``[[C]]``, or the ``graded_tie`` phrase appears
      in the prompt); otherwise a seeded coin flip on the prompt picks the weakest preference.
      ``pairwise_format`` ``auto`` picks FastChat when the prompt mentions ``[[A]]``/``[[B]]``
      and the graded phrases otherwise. ``score`` pins the preference (+2..-2).
    * ``facts``: the fact-check protocol of ``judge_simulator/facts.py`` (labels scripted by ``<<f:ID=L>>``
      markers in the response); ``reply`` and ``score`` are not used.
    * ``memory``: the memory-audit protocol of ``judge_simulator/facts.py`` (``<<g:ID>>`` recalled gold facts,
      ``<<m:s|f|w>>`` generated facts in the judged memory); ``reply`` and ``score`` are not used.
    * ``extract``: the fact-extract protocol of ``judge_simulator/facts.py`` (``<<x>>``, ``<<x=TEXT>>``,
      ``<<x@SOURCE>>``, ``<<x!>>`` markers in the listed sources script the extracted facts); ``reply`` and
      ``score`` are not used.

    ``reply`` is a plain template: ``{score}`` (pairwise: the preference), ``{verdict}``,
    ``{explanation}``, ``{json}`` (a compact JSON object with explanation and score/verdict),
    ``{rule}`` and ``{model}`` are substituted; any other brace is kept literally.
    """

    name: str = "rule"
    match: str | None = None
    model: str | None = None
    kind: Literal["single", "pairwise", "facts", "memory", "extract"] = "single"
    reply: str | None = None
    response_regex: str | None = None
    score: float | None = None
    scale_min: int = 1
    scale_max: int = 100
    pairwise_format: Literal["auto", "graded", "fastchat"] = "auto"
    tie_margin: float = Field(default=0.0, ge=0)
    clear_margin: float = Field(default=10.0, ge=0)
    position_bias: float | None = Field(default=None, ge=0.0, le=1.0, description="overrides the script's")
    verdicts: VerdictTexts = Field(default_factory=VerdictTexts)

    @field_validator("match", "model", "response_regex")
    @classmethod
    def _regex(cls, value: str | None) -> str | None:
        return _check_regex(value)

    @model_validator(mode="after")
    def _scale(self) -> Rule:
        if self.scale_max < self.scale_min:
            raise ValueError("scale_max must be >= scale_min")
        return self


def default_rules() -> list[Rule]:
    """Rules emulating a judge for dialogue-judge's rubrics, most specific first.

    * ``fact-extract``: the prompt lists sources as ``[source:NAME] TEXT`` lines to split into atomic facts (the
      fact-extract rubric) -> one JSON list of facts with source and quote, scripted by ``<<x...>>`` markers
      (``judge_simulator/facts.py``).
    * ``memory-audit``: the prompt audits a "Generated memory" against gold facts (the memory-audit rubric) -> gold
      facts recalled / missing and generated facts supported / fabricated / wrong relationship, scripted by
      ``<<g:ID>>`` and ``<<m:s|f|w>>`` markers (``judge_simulator/facts.py``).
    * ``fact-check``: the prompt lists facts as ``[fact:ID] (SOURCE) TEXT`` lines (the fact-check rubric) -> one
      JSON label per fact, scripted by ``<<f:ID=L>>`` markers (``judge_simulator/facts.py``).
    * ``pairwise-fastchat``: the prompt mentions ``[[A]]`` (mtbench-pair-v2) -> ``[[A]]/[[B]]/[[C]]``.
    * ``pairwise-graded``: the prompt mentions "Response 1/2 is (slightly) better" (rsum-pairwise)
      -> one of those phrases.
    * ``single-json``: the prompt asks for one JSON object (memory-faithfulness) -> a JSON object
      ``{"explanation": ..., "score": N}``.
    * ``single-score``: the prompt asks for ``[[score]]``/``[[rating]]`` (rsum-single,
      dj-consistency, memochat-consistency) -> "<explanation> Rating: [[N]]".

    Requests matching none of them get :data:`FALLBACK_RULE` (the single-score behaviour).
    """
    return [
        Rule(name="fact-extract", match=EXTRACT_PROTOCOL, kind="extract"),
        Rule(name="memory-audit", match=MEMORY_PROTOCOL, kind="memory"),
        Rule(name="fact-check", match=FACT_PROTOCOL, kind="facts"),
        Rule(name="pairwise-fastchat", match=r"\[\[A\]\]", kind="pairwise", pairwise_format="fastchat"),
        Rule(name="pairwise-graded", match=r"Response [12] is (?:slightly )?better", kind="pairwise"),
        Rule(
            name="single-json",
            match=r"(?:answer|respond|reply) with (?:one|a|only one|a single) JSON object",
            kind="single",
            reply="{json}",
        ),
        Rule(name="single-score", match=r"\[\[\s*(?:score|rating|\d+)\s*\]\]", kind="single"),
    ]


FALLBACK_RULE = Rule(name="fallback", kind="single")
"""Used when no rule matches: a single-score judge with the default reply template."""


class Script(_Strict):
    """The whole behaviour of the simulator (see the module docstring for an example)."""

    seed: int = 0
    rules: list[Rule] = Field(default_factory=default_rules)
    position_bias: float = Field(
        default=0.0,
        ge=0.0,
        le=1.0,
        description="pairwise: probability of preferring the response shown first",
    )
    sample_jitter: float = Field(
        default=0.0,
        ge=0.0,
        description="max +- score offset per sample when temperature > 0 (self-consistency)",
    )
    latency: Latency = Field(default_factory=Latency)
    logprob_spread: dict[int, float] = Field(
        default_factory=dict,
        description="logprobs: the single score's alternatives, offset -> probability (the score keeps the rest)",
    )
    digit_tokens: Literal["whole", "single"] = Field(
        default="whole", description="logprobs: a number is one token, or one token per digit"
    )

    @field_validator("logprob_spread")
    @classmethod
    def _spread_is_a_distribution(cls, value: dict[int, float]) -> dict[int, float]:
        if 0 in value:
            raise ValueError("logprob_spread: offset 0 is the score itself (it keeps the remaining probability)")
        if any(not 0.0 < p < 1.0 for p in value.values()) or sum(value.values()) >= 1.0:
            raise ValueError("logprob_spread: probabilities must be in (0, 1) and sum to less than 1")
        return value

    faults: list[Fault] = Field(default_factory=list)
    rate_limit_rpm: int | None = Field(default=None, ge=1, description="max requests per model per window")
    rate_limit_window_seconds: float = Field(default=60.0, gt=0, description="sliding window of rate_limit_rpm")
    prompt_cache: PromptCaching = Field(
        default_factory=PromptCaching,
        description="provider-style prompt caching and the bill (judge_simulator.caching)",
    )
    batch: BatchBehaviour = Field(
        default_factory=BatchBehaviour,
        description="the batch protocols: how long a batch takes, per-request errors and expirations",
    )
    models: list[str] = Field(
        default_factory=lambda: ["gpt-4o", "gpt-4o-mini", "gpt-4.1", "claude-sonnet-4-5", "sim-judge"],
        description="ids listed by GET /v1/models (any model name is accepted by the endpoints)",
    )

    @field_validator("sample_jitter")
    @classmethod
    def _finite(cls, value: float) -> float:
        if not math.isfinite(value):
            raise ValueError("sample_jitter must be finite")
        return value

    @classmethod
    def from_file(cls, path: str | Path) -> Script:
        """Load a script from a ``.json``, ``.yaml`` or ``.yml`` file."""
        p = Path(path)
        text = p.read_text(encoding="utf-8")
        if p.suffix.lower() in {".yaml", ".yml"}:
            import yaml  # local import: PyYAML is only needed for YAML scripts

            data = yaml.safe_load(text) or {}
        else:
            data = json.loads(text)
        return cls.model_validate(data)
