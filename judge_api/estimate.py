"""What a run would cost and how long it would take, before anything is stored or called (``POST /v1/runs/estimate``,
``dialogue-judge submit --estimate``).

The run is planned exactly as ``POST /v1/runs`` plans it; every judgment's prompt is rendered as a worker renders
it, its judge-cache key looked up (``cached_judgments``: no call, no cost), and its input tokens counted with the
provider's tokenizer where one is available offline (judge_api.tokens: OpenAI's o200k/cl100k), else a stated
approximation. Output tokens are the rubric's ``typical_reply_tokens`` (or a default per rubric kind), capped by
the run's ``max_tokens``.

Expected prompt-cache hits follow cache-aware dispatch (judge_api.prefixes): the judgments of one judge, rubric
and item that share a prefix long enough to be cached pay it once (OpenAI: in 128-token steps; Anthropic: a cache
write at 1.25x, then reads at 0.1x) and read it for the rest. ``cost_usd.batch`` is that bill at the batch price.
``seconds`` is the time the provider calls take at the configured rate limits (``DJ_RATE_LIMITS``; judges run in
parallel, each at its own limit), None where a judge has no limit configured.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.engine import Engine

from judge_api.cachekeys import judge_cache_key, request_options
from judge_api.config import Settings
from judge_api.judges import JudgeSpec, parse_judge
from judge_api.planning import PlannedJudgment, plan_run, with_placeholders
from judge_api.prefixes import CACHING_PROVIDERS, plan_groups
from judge_api.pricing import PriceTable, Usage, bill, load_prices
from judge_api.prompting import render
from judge_api.ratelimits import limit_for
from judge_api.reference_metrics import is_reference_judge
from judge_api.repository import DEFAULT_PROJECT
from judge_api.repository.cache import cache_entries
from judge_api.rubrics import Rubric, RubricRegistry
from judge_api.schemas import RunCreate
from judge_api.tokens import APPROX_CHARS_PER_TOKEN, count_messages, count_text, encoding_name

BLOCK_TOKENS = 128
# output tokens of one reply when a rubric states none: a short explanation and the verdict
DEFAULT_REPLY_TOKENS = {"single": 120, "pairwise": 200, "facts": 400}


@dataclass
class _JudgeTally:
    judgments: int = 0
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    usages: list[Usage] = field(default_factory=list)


def reply_tokens(rubric: Rubric, params: dict[str, Any]) -> int:
    stated = rubric.typical_reply_tokens or DEFAULT_REPLY_TOKENS.get(rubric.kind, 200)
    return min(stated, int(params["max_tokens"]))


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
        item = items[p.item_id]
        candidates = item["candidates"]
        if p.order == "ba" and p.system_b is not None:
            first, second = candidates[p.system_b], candidates[p.system_a]
        else:
            first, second = candidates[p.system_a], candidates[p.system_b] if p.system_b else None
        messages = render(rubric, item, p.aspect, first, second).messages
        params = request_options(rubric, options, p.sample_index)
        key = judge_cache_key(rubric.version, spec.key, messages, params, p.sample_index, 0, scope)
        asked.append((p, rubric, spec, messages, params, key))

    hits = set(cache_entries(engine, [a[5] for a in asked])) if engine is not None and asked else set()
    # identical requests within the run are asked once (single-flight): the rest are judge-cache hits
    seen: set[str] = set()
    to_call: list[int] = []
    for index, entry in enumerate(asked):
        key = entry[5]
        if key not in hits and key not in seen:
            to_call.append(index)
        seen.add(key)

    cached_tokens = _expected_cache_hits(asked, to_call, prices)
    tallies: dict[str, _JudgeTally] = defaultdict(_JudgeTally)
    for entry in asked:
        tallies[entry[2].key].judgments += 1
    for index in to_call:
        p, rubric, spec, messages, params, _key = asked[index]
        tally = tallies[spec.key]
        tokens_in = count_messages(spec, messages)
        tokens_out = reply_tokens(rubric, params)
        read, write = cached_tokens.get(index, (0, 0))
        tally.calls += 1
        tally.input_tokens += tokens_in
        tally.output_tokens += tokens_out
        tally.usages.append(Usage(tokens_in, tokens_out, min(read, tokens_in), min(write, tokens_in - read)))

    per_judge = []
    realtime = batch = listed = 0.0
    seconds: float | None = 0.0
    for judge, tally in sorted(tallies.items()):
        spec = parse_judge(judge)
        price = prices.for_spec(spec)
        cost_rt = sum(bill(price, u) for u in tally.usages)
        cost_batch = sum(bill(price, Usage(*_fields(u), batch=True)) for u in tally.usages)
        cost_list = sum(bill(price, Usage(u.input_tokens, u.output_tokens)) for u in tally.usages)
        judge_seconds = _seconds(judge, tally, settings)
        realtime, batch, listed = realtime + cost_rt, batch + cost_batch, listed + cost_list
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
                "cost_usd": {"realtime": cost_rt, "batch": cost_batch, "list": cost_list},
                "seconds": judge_seconds,
                "priced": prices.get(spec.provider, spec.model) is not None,
                "tokenizer": encoding_name(spec) or f"approximate ({APPROX_CHARS_PER_TOKEN} characters a token)",
            }
        )
    return {
        "judgments": len(planned),
        "provider_calls": sum(t.calls for t in tallies.values()),
        "cached_judgments": len(asked) - len(to_call),
        "input_tokens": sum(t.input_tokens for t in tallies.values()),
        "cached_input_tokens": sum(j["cached_input_tokens"] for j in per_judge),
        "output_tokens": sum(t.output_tokens for t in tallies.values()),
        "cost_usd": {"realtime": realtime, "batch": batch, "list": listed},
        "seconds": seconds,
        "per_judge": per_judge,
        "notes": _notes(request, per_judge),
    }


def _fields(u: Usage) -> tuple[int, int, int, int]:
    return u.input_tokens, u.output_tokens, u.cached_input_tokens, u.cache_write_tokens


def _expected_cache_hits(
    asked: list[tuple[PlannedJudgment, Rubric, JudgeSpec, list[dict[str, str]], dict[str, Any], str]],
    to_call: list[int],
    prices: PriceTable,
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
        tokens = count_text(spec, text)
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


def _notes(request: RunCreate, per_judge: list[dict[str, Any]]) -> list[str]:
    notes = []
    for judge in per_judge:
        if not judge["tokenizer"].endswith("_base"):
            notes.append(
                f"{judge['judge']}: input tokens approximated at {APPROX_CHARS_PER_TOKEN} characters a token "
                "(no offline tokenizer for this provider; Claude's tokenizer counts ~10-20 % more on English)"
            )
        if not judge["priced"]:
            notes.append(f"{judge['judge']}: not in the price table, priced at 0")
        if judge["seconds"] is None:
            notes.append(f"{judge['judge']}: no rate limit configured (DJ_RATE_LIMITS), so no duration")
    if request.systems:
        notes.append("a run with systems: responses are not generated yet, their tokens are placeholders")
    if request.pairing == "adaptive":
        notes.append("adaptive pairing: only the first batch of comparisons is planned and estimated")
    return notes
