"""What a run would cost and how long it would take, before anything is stored or called (``POST /v1/runs/estimate``,
``dialogue-judge submit --estimate``).

The run is planned exactly as ``POST /v1/runs`` plans it; every judgment's prompt is rendered as a worker renders
it, its judge-cache key looked up (``cached_judgments``: no call, no cost), and its input tokens counted with the
provider's tokenizer where one is available offline (judge_api.tokens: OpenAI's o200k/cl100k), else a stated
approximation. Output tokens are the rubric's ``typical_reply_tokens`` (or a default per rubric kind), capped by
the run's ``max_tokens``: the length of a reply in the format the rubric's prompt asks for (each shipped rubric
states its figure and how it was counted in its ``rubric.yaml``), an expectation, not a measurement; the notes say
which figure each rubric used and where it comes from.

Calibration from the project's own history: once the project has at least ``MIN_CALIBRATION`` earlier succeeded
judgments of the same rubric version by the same judge (each answered by a call, not by the judge cache), a reply
is the mean of their recorded output tokens (the most recent ``CALIBRATION_WINDOW``) instead of the stated figure.
Input tokens are set against what the provider recorded on the project's most recent ``PROMPT_SAMPLE`` one-call
judgments of those rubrics, their prompts rendered again from the stored items: a judge counted by approximation
gets the characters a token observed there; one counted with its provider's tokenizer keeps it, scaled by the
recorded tokens over the tokenizer's count (what the request adds that the count does not see: a JSON schema, the
chat format). Another project's judgments never count. Both are reads: the estimate still stores
nothing and calls nothing (judge_api.repository.history).

Expected prompt-cache hits follow cache-aware dispatch (judge_api.prefixes): the judgments of one judge, rubric
and item that share a prefix long enough to be cached pay it once (OpenAI: in 128-token steps; Anthropic: a cache
write at 1.25x, then reads at 0.1x) and read it for the rest. ``cost_usd.batch`` is that bill at the batch price.
A judge whose model the price table does not list has no known cost: its ``cost_usd`` and the run's are None (not
0), and ``unpriced_judges`` names it.
``seconds`` is the time the provider calls take at the configured rate limits (``DJ_RATE_LIMITS``; judges run in
parallel, each at its own limit), None where a judge has no limit configured.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.engine import Engine

from judge_api.cachekeys import judge_cache_key, request_options
from judge_api.config import Settings
from judge_api.judges import JudgeSpec, parse_judge
from judge_api.planning import PlannedJudgment, plan_run, with_placeholders
from judge_api.prefixes import CACHING_PROVIDERS, plan_groups
from judge_api.pricing import ModelPrice, PriceTable, Usage, bill, load_prices
from judge_api.prompting import render
from judge_api.ratelimits import limit_for
from judge_api.reference_metrics import is_reference_judge
from judge_api.repository import DEFAULT_PROJECT
from judge_api.repository.cache import cache_entries
from judge_api.repository.history import Pair, Replies, recent_prompts, recent_replies
from judge_api.rubrics import Rubric, RubricRegistry
from judge_api.schemas import RunCreate
from judge_api.tokens import (
    APPROX_CHARS_PER_TOKEN,
    count_messages,
    count_text,
    encoding_name,
    exact,
    request_overhead,
)

BLOCK_TOKENS = 128
# output tokens of one reply when a rubric states none: a short explanation and the verdict
DEFAULT_REPLY_TOKENS = {"single": 120, "pairwise": 200, "facts": 400}
MIN_CALIBRATION = 20  # earlier judgments a calibrated figure needs; with fewer the stated figure is used
CALIBRATION_WINDOW = 1000  # a reply's calibrated length is the mean of this many most recent judgments at most
PROMPT_SAMPLE = 40  # one-call judgments per rubric whose prompts are rendered again to calibrate input tokens


@dataclass
class _JudgeTally:
    judgments: int = 0
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    usages: list[Usage] = field(default_factory=list)


def reply_tokens(rubric: Rubric, params: dict[str, Any]) -> int:
    return min(_stated_reply_tokens(rubric), int(params["max_tokens"]))


@dataclass(frozen=True)
class Calibration:
    """What the project's earlier judgments say about this run's (rubric, judge) pairs (empty: nothing read)."""

    replies: dict[tuple[str, str], Replies] = field(default_factory=dict)  # (rubric id, judge): its history
    chars_per_token: dict[str, tuple[float, int]] = field(default_factory=dict)  # approximated judge: (ratio, prompts)
    input_scale: dict[str, tuple[float, int]] = field(default_factory=dict)  # tokenized: (recorded / counted, prompts)

    def reply_length(self, rubric: Rubric, judge: str) -> float | None:
        """The mean recorded reply of ``judge`` to ``rubric``, None below MIN_CALIBRATION judgments."""
        history = self.replies.get((rubric.id, judge))
        if history is None or history.judgments < MIN_CALIBRATION:
            return None
        return history.output_tokens / history.judgments

    def reply_tokens(self, rubric: Rubric, judge: str, params: dict[str, Any]) -> int:
        length = self.reply_length(rubric, judge)
        expected = _stated_reply_tokens(rubric) if length is None else round(length)
        return min(expected, int(params["max_tokens"]))

    def ratio(self, judge: str) -> float | None:
        found = self.chars_per_token.get(judge)
        return found[0] if found else None

    def count_messages(self, spec: JudgeSpec, messages: list[dict[str, str]]) -> int:
        """A request's input tokens as the judge's earlier requests say the provider counts them."""
        scale = self.input_scale.get(spec.key)
        if scale is not None:
            return round(count_messages(spec, messages) * scale[0])
        return count_messages(spec, messages, self.ratio(spec.key))

    def count_text(self, spec: JudgeSpec, text: str) -> int:
        scale = self.input_scale.get(spec.key)
        if scale is not None:
            return round(count_text(spec, text) * scale[0])
        return count_text(spec, text, self.ratio(spec.key))


def calibrate(
    engine: Engine | None, project_id: str, registry: RubricRegistry, pairs: set[tuple[str, str]]
) -> Calibration:
    """Read ``project_id``'s earlier judgments of each (rubric id, judge) at the rubric's current version: two
    bounded reads (one for every pair's replies, one per approximated judge's rubric for its prompts)."""
    if engine is None or not pairs:
        return Calibration()
    asked = [Pair(rubric_id, registry.get(rubric_id).version, judge) for rubric_id, judge in sorted(pairs)]
    history = recent_replies(engine, project_id, asked, CALIBRATION_WINDOW)
    replies = {(pair.rubric_id, pair.judge): found for pair, found in history.items()}
    ratios: dict[str, tuple[float, int]] = {}
    scales: dict[str, tuple[float, int]] = {}
    for judge in sorted({pair.judge for pair in asked}):
        spec = parse_judge(judge)
        tokenized = exact(spec)
        chars = tokens = prompts = counted = recorded = 0
        for pair in (p for p in asked if p.judge == judge):
            rubric = registry.get(pair.rubric_id)
            for earlier in recent_prompts(engine, project_id, pair, PROMPT_SAMPLE):
                try:
                    messages = judgment_messages(
                        rubric, earlier.item, earlier.aspect, earlier.system_a, earlier.system_b, earlier.order
                    )
                except KeyError:
                    continue  # a response the stored item does not hold (a run with systems): not renderable
                prompts += 1
                if tokenized:
                    counted += count_messages(spec, messages)
                    recorded += earlier.input_tokens
                else:
                    chars += sum(len(m["content"]) for m in messages)
                    tokens += earlier.input_tokens - request_overhead(messages)
        if prompts < MIN_CALIBRATION:
            continue
        if tokenized and counted > 0:
            scales[judge] = (recorded / counted, prompts)
        elif chars > 0 and tokens > 0:
            ratios[judge] = (chars / tokens, prompts)
    return Calibration(replies, ratios, scales)


def _stated_reply_tokens(rubric: Rubric) -> int:
    return rubric.typical_reply_tokens or DEFAULT_REPLY_TOKENS.get(rubric.kind, 200)


def _reply_source(rubric: Rubric) -> str:
    if rubric.typical_reply_tokens:
        return (
            "the typical_reply_tokens its rubric.yaml states: the length of a reply in the format its prompt asks "
            "for, not a measurement"
        )
    return f"no typical_reply_tokens stated, so the default for a {rubric.kind} rubric"


def _reply_notes(rubric: Rubric, caps: dict[str, set[int]], calibration: Calibration) -> list[str]:
    """Where the output tokens of ``rubric``'s replies come from, per judge (``caps``: judge -> max_tokens)."""
    notes = []
    stated = _stated_reply_tokens(rubric)
    uncalibrated: dict[str, int] = {}
    for judge, max_tokens in sorted(caps.items()):
        length = calibration.reply_length(rubric, judge)
        if length is None:
            history = calibration.replies.get((rubric.id, judge))
            uncalibrated[judge] = history.judgments if history else 0
            continue
        capped = sorted(m for m in max_tokens if m < round(length))
        n = calibration.replies[(rubric.id, judge)].judgments
        notes.append(
            f"{rubric.id} by {judge}: {length:.1f} output tokens a reply, calibrated from {n} earlier judgments of "
            f"this rubric version by this judge in this project (the mean of the most recent, {CALIBRATION_WINDOW} "
            f"at most; the rubric states {stated})" + (f", capped at max_tokens {capped[0]}" if capped else "")
        )
    if uncalibrated:
        capped = sorted(m for judge in uncalibrated for m in caps[judge] if m < stated)
        cap = f", capped at max_tokens {capped[0]}" if capped else ""
        counts = ", ".join(f"{judge} {n}" for judge, n in uncalibrated.items())
        notes.append(
            f"{rubric.id}: {stated} output tokens a reply ({_reply_source(rubric)}{cap}); the bill counts the "
            "judge's actual replies, so a judge that writes longer or shorter explanations moves the output cost. "
            f"Not calibrated: the project has fewer than {MIN_CALIBRATION} earlier succeeded judgments of this "
            f"rubric version by the judge to measure a reply on ({counts})"
        )
    return notes


def _reply_lengths(
    judge: str, reply_caps: dict[str, tuple[Rubric, dict[str, set[int]]]], calibration: Calibration
) -> list[dict[str, Any]]:
    """The reply length each rubric's calls of ``judge`` were estimated at, and where it comes from."""
    lengths = []
    for rubric, caps in reply_caps.values():
        if judge not in caps:
            continue
        length = calibration.reply_length(rubric, judge)
        history = calibration.replies.get((rubric.id, judge))
        lengths.append(
            {
                "rubric": rubric.id,
                "tokens": round(_stated_reply_tokens(rubric) if length is None else length, 1),
                "source": "stated" if length is None else "calibrated",
                "earlier_judgments": history.judgments if history else 0,
            }
        )
    return lengths


def _tokenizer(spec: JudgeSpec, calibration: Calibration) -> str:
    name = encoding_name(spec)
    scale = calibration.input_scale.get(spec.key)
    if name is not None and scale is not None:
        return f"{name} x {scale[0]:.3f} (calibrated from {scale[1]} earlier judgments)"
    if name is not None:
        return name
    found = calibration.chars_per_token.get(spec.key)
    if found is not None:
        return f"approximate ({found[0]:.2f} characters a token, calibrated from {found[1]} earlier judgments)"
    return f"approximate ({APPROX_CHARS_PER_TOKEN} characters a token)"


def estimate_run(
    request: RunCreate, registry: RubricRegistry, settings: Settings, engine: Engine | None, project_id: str
) -> dict[str, Any]:
    """The estimate of ``request`` (raises planning.PlanError as POST /v1/runs would)."""
    to_plan = with_placeholders(request) if request.systems else request
    planned = plan_run(to_plan, registry, settings.max_judgments_per_run)
    prices = load_prices(str(settings.prices_file) if settings.prices_file else None)
    items = {item.id: item.model_dump(mode="json") for item in to_plan.items}
    options = request.options.model_dump(mode="json")
    scope = None if (settings.cache_shared or project_id == DEFAULT_PROJECT) else project_id

    asked: list[tuple[PlannedJudgment, Rubric, JudgeSpec, list[dict[str, str]], dict[str, Any], str]] = []
    for p in planned:
        if p.identical or is_reference_judge(p.judge):
            continue  # settled without a judge call
        rubric = registry.get(p.rubric_id)
        spec = parse_judge(p.judge)
        messages = planned_messages(p, rubric, items[p.item_id])
        params = request_options(rubric, options, p.sample_index)
        key = judge_cache_key(rubric.version, spec.key, messages, params, p.sample_index, 0, scope)
        asked.append((p, rubric, spec, messages, params, key))

    reads_cache = request.options.cache == "use"  # 'refresh' and 'off' ask every judgment
    hits = set(cache_entries(engine, [a[5] for a in asked])) if reads_cache and engine is not None and asked else set()
    # identical requests within the run are asked once (single-flight): the rest are judge-cache hits
    seen: set[str] = set()
    to_call: list[int] = []
    for index, entry in enumerate(asked):
        key = entry[5]
        if key not in hits and (key not in seen or not reads_cache):
            to_call.append(index)
        seen.add(key)

    calibration = calibrate(engine, project_id, registry, {(asked[i][1].id, asked[i][0].judge) for i in to_call})
    cached_tokens = _expected_cache_hits(asked, to_call, prices, calibration)
    reply_caps: dict[str, tuple[Rubric, dict[str, set[int]]]] = {}
    for index in to_call:
        p, rubric, params = asked[index][0], asked[index][1], asked[index][4]
        reply_caps.setdefault(rubric.id, (rubric, {}))[1].setdefault(p.judge, set()).add(int(params["max_tokens"]))
    tallies: dict[str, _JudgeTally] = defaultdict(_JudgeTally)
    for entry in asked:
        tallies[entry[2].key].judgments += 1
    for index in to_call:
        p, rubric, spec, messages, params, _key = asked[index]
        tally = tallies[spec.key]
        tokens_in = calibration.count_messages(spec, messages)
        tokens_out = calibration.reply_tokens(rubric, p.judge, params)
        read, write = cached_tokens.get(index, (0, 0))
        tally.calls += 1
        tally.input_tokens += tokens_in
        tally.output_tokens += tokens_out
        tally.usages.append(Usage(tokens_in, tokens_out, min(read, tokens_in), min(write, tokens_in - read)))

    per_judge = []
    total: dict[str, float] | None = {"realtime": 0.0, "batch": 0.0, "list": 0.0}
    seconds: float | None = 0.0
    for judge, tally in sorted(tallies.items()):
        spec = parse_judge(judge)
        priced = prices.is_priced(spec)
        cost = _judge_cost(prices.for_spec(spec), tally.usages) if priced or not tally.calls else None
        judge_seconds = _seconds(judge, tally, settings)
        # one judge of unknown cost makes the run's cost unknown
        total = None if total is None or cost is None else {kind: total[kind] + cost[kind] for kind in total}
        seconds = None if seconds is None or judge_seconds is None else max(seconds, judge_seconds)
        per_judge.append(
            {
                "judge": judge,
                "judgments": tally.judgments,
                "provider_calls": tally.calls,
                "input_tokens": tally.input_tokens,
                "cached_input_tokens": sum(u.cached_input_tokens for u in tally.usages),
                "cache_write_tokens": sum(u.cache_write_tokens for u in tally.usages),
                "output_tokens": tally.output_tokens,
                "cost_usd": cost,
                "seconds": judge_seconds,
                "priced": priced,
                "tokenizer": _tokenizer(spec, calibration),
                "reply_tokens": _reply_lengths(judge, reply_caps, calibration),
            }
        )
    return {
        "judgments": len(planned),
        "provider_calls": sum(t.calls for t in tallies.values()),
        "cached_judgments": len(asked) - len(to_call),
        "input_tokens": sum(t.input_tokens for t in tallies.values()),
        "cached_input_tokens": sum(j["cached_input_tokens"] for j in per_judge),
        "output_tokens": sum(t.output_tokens for t in tallies.values()),
        "cost_usd": total,
        "unpriced_judges": [j["judge"] for j in per_judge if j["cost_usd"] is None],
        "seconds": seconds,
        "per_judge": per_judge,
        "notes": _notes(request, per_judge, calibration)
        + [note for rubric, caps in reply_caps.values() for note in _reply_notes(rubric, caps, calibration)],
    }


def planned_messages(p: PlannedJudgment, rubric: Rubric, item: dict[str, Any]) -> list[dict[str, str]]:
    """The prompt a worker renders for ``p``: the item's responses in the judgment's order."""
    return judgment_messages(rubric, item, p.aspect, p.system_a, p.system_b, p.order)


def judgment_messages(
    rubric: Rubric, item: dict[str, Any], aspect: str, system_a: str, system_b: str | None, order: str | None
) -> list[dict[str, str]]:
    """The prompt of a judgment of ``item`` (a KeyError: the item holds no response of a system)."""
    candidates = item["candidates"]
    if order == "ba" and system_b is not None:
        first, second = candidates[system_b], candidates[system_a]
    else:
        first, second = candidates[system_a], candidates[system_b] if system_b else None
    return render(rubric, item, aspect, first, second).messages


def expected_costs(
    planned: Sequence[PlannedJudgment],
    registry: RubricRegistry,
    items: dict[str, dict[str, Any]],
    options: dict[str, Any],
    prices: PriceTable,
    calibration: Calibration | None = None,
) -> list[float]:
    """Each planned judgment's expected real-time cost in USD, a call counted as :func:`estimate_run` counts it
    (the prompt's tokens with the provider's tokenizer, the rubric's typical reply, both as ``calibration`` says
    the project's earlier judgments of the pair ran) but with no judge-cache or prompt-cache saving, so a queued
    judgment is counted at the most it is expected to cost. A judgment settled without a call (identical responses,
    a reference metric) or on a judge the price table does not list: 0."""
    calibration = calibration or Calibration()
    costs: list[float] = []
    for p in planned:
        spec = _priced_call(p, prices)
        if spec is None:
            costs.append(0.0)
            continue
        rubric = registry.get(p.rubric_id)
        params = request_options(rubric, options, p.sample_index)
        usage = Usage(
            calibration.count_messages(spec, planned_messages(p, rubric, items[p.item_id])),
            calibration.reply_tokens(rubric, p.judge, params),
        )
        costs.append(bill(prices.for_spec(spec), usage))
    return costs


def _priced_call(p: PlannedJudgment, prices: PriceTable) -> JudgeSpec | None:
    """The judge a planned judgment calls at a listed price; None when it is settled without a call (identical
    responses, a reference metric) or its judge is not in the price table."""
    if p.identical or is_reference_judge(p.judge):
        return None
    spec = parse_judge(p.judge)
    return spec if prices.is_priced(spec) else None


def priced_pairs(planned: Sequence[PlannedJudgment], prices: PriceTable) -> set[tuple[str, str]]:
    """The (rubric id, judge) pairs of the planned judgments that :func:`expected_costs` prices with a call."""
    return {(p.rubric_id, p.judge) for p in planned if _priced_call(p, prices) is not None}


CALIBRATION_MAX_AGE_S = 60.0
_recent: dict[tuple[str, str, frozenset[tuple[str, str, str]]], tuple[float, Calibration]] = {}
_recent_lock = threading.Lock()


def recent_calibration(
    engine: Engine,
    project_id: str,
    registry: RubricRegistry,
    pairs: set[tuple[str, str]],
    max_age_s: float = CALIBRATION_MAX_AGE_S,
) -> Calibration:
    """:func:`calibrate`, remembered for ``max_age_s`` per database, project and pairs at their rubrics' versions.
    A monitor prices every sampled batch it queues with it (its daily budget): the history moves slowly, and reading
    it (up to tens of ms on a large table) on each ingestion request would cost more than the batch's planning."""
    if not pairs:
        return Calibration()
    key = (
        engine.url.render_as_string(hide_password=True),
        project_id,
        frozenset((rubric_id, registry.get(rubric_id).version, judge) for rubric_id, judge in pairs),
    )
    now = time.monotonic()
    with _recent_lock:
        found = _recent.get(key)
    if found is not None and now - found[0] < max_age_s:
        return found[1]
    calibration = calibrate(engine, project_id, registry, pairs)
    with _recent_lock:
        if len(_recent) >= 256:
            _recent.clear()
        _recent[key] = (now, calibration)
    return calibration


def _judge_cost(price: ModelPrice, usages: list[Usage]) -> dict[str, float]:
    return {
        "realtime": sum(bill(price, u) for u in usages),
        "batch": sum(bill(price, Usage(*_fields(u), batch=True)) for u in usages),
        "list": sum(bill(price, Usage(u.input_tokens, u.output_tokens)) for u in usages),
    }


def _fields(u: Usage) -> tuple[int, int, int, int]:
    return u.input_tokens, u.output_tokens, u.cached_input_tokens, u.cache_write_tokens


def _expected_cache_hits(
    asked: list[tuple[PlannedJudgment, Rubric, JudgeSpec, list[dict[str, str]], dict[str, Any], str]],
    to_call: list[int],
    prices: PriceTable,
    calibration: Calibration,
) -> dict[int, tuple[int, int]]:
    """(tokens read from the prompt cache, tokens written to it) of each call, as cache-aware dispatch sends
    them: per group sharing a cacheable prefix, the leader misses (Anthropic: writes) and the rest read."""
    keys = []
    prompts = []
    for index in to_call:
        p, _rubric, spec, messages, _params, _key = asked[index]
        cacheable = spec.provider in CACHING_PROVIDERS
        keys.append((p.judge, p.rubric_id, p.item_id) if cacheable else ("alone", index))
        prompts.append(messages)
    prefix_tokens: dict[int, int] = {}

    def long_enough(position: int, text: str) -> bool:
        spec = asked[to_call[position]][2]
        tokens = calibration.count_text(spec, text)
        prefix_tokens[position] = tokens
        return tokens >= prices.min_cache_tokens(spec)

    out: dict[int, tuple[int, int]] = {}
    for group in plan_groups(keys, prompts, long_enough):
        if group.prefix is None:
            continue
        leader = group.members[0]
        tokens = prefix_tokens[leader]
        spec = asked[to_call[leader]][2]
        if spec.provider == "openai":
            tokens = tokens // BLOCK_TOKENS * BLOCK_TOKENS
        else:
            out[to_call[leader]] = (0, tokens)
        for member in group.members[1:]:
            out[to_call[member]] = (tokens, 0)
    return out


def _seconds(judge: str, tally: _JudgeTally, settings: Settings) -> float | None:
    limit = limit_for(judge, settings)
    if not limit.rpm and not limit.tpm:
        return None if tally.calls else 0.0
    by_calls = tally.calls / limit.rpm * 60 if limit.rpm else 0.0
    by_tokens = (tally.input_tokens + tally.output_tokens) / limit.tpm * 60 if limit.tpm else 0.0
    return max(by_calls, by_tokens)


def _notes(request: RunCreate, per_judge: list[dict[str, Any]], calibration: Calibration) -> list[str]:
    notes = []
    for judge in per_judge:
        found = calibration.chars_per_token.get(judge["judge"])
        if found is not None:
            notes.append(
                f"{judge['judge']}: input tokens at {found[0]:.2f} characters a token, calibrated from {found[1]} "
                "earlier judgments in this project (their prompts rendered again from the stored items and set "
                f"against the input tokens the provider recorded; uncalibrated: {APPROX_CHARS_PER_TOKEN})"
            )
        elif judge["judge"] in calibration.input_scale:
            factor, prompts = calibration.input_scale[judge["judge"]]
            notes.append(
                f"{judge['judge']}: input tokens counted with its tokenizer x {factor:.3f}, calibrated from {prompts} "
                "earlier judgments in this project (the provider recorded that many tokens for each one the "
                "tokenizer counts on their prompts, rendered again from the stored items)"
            )
        elif encoding_name(parse_judge(judge["judge"])) is None:
            notes.append(
                f"{judge['judge']}: input tokens approximated at {APPROX_CHARS_PER_TOKEN} characters a token "
                "(no offline tokenizer for this provider; Claude's tokenizer counts ~10-20 % more on English)"
            )
        if judge["cost_usd"] is None:
            notes.append(
                f"{judge['judge']}: cost unknown: the price table (workers/prices.yaml or DJ_PRICES_FILE) does not "
                "list this model, so the run's cost_usd is unknown (null) and a budget_usd is refused; its calls "
                "would be recorded at $0. Add the model's prices to the table"
            )
        if judge["seconds"] is None:
            notes.append(f"{judge['judge']}: no rate limit configured (DJ_RATE_LIMITS), so no duration")
    if request.systems:
        notes.append("a run with systems: responses are not generated yet, their tokens are placeholders")
    if request.pairing == "adaptive":
        notes.append("adaptive pairing: only the first batch of comparisons is planned and estimated")
    if request.execution == "batch":
        notes.append(
            "execution 'batch': the run is billed cost_usd.batch; its duration is the provider's batch turnaround "
            "(within 24 h, usually much sooner), not the rate limits ('seconds' is the real-time figure)"
        )
    return notes
