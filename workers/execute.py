"""Judge one stored judgment: the path every judgment takes, whether a Celery worker or the in-process runner
(standalone CI gate) executes it.

claim (compare-and-set on the row) -> render the rubric -> cache lookup / single-flight -> rate-limited provider
call with retries -> parse -> optional re-ask -> compare-and-set write of the verdict. A judgment is written exactly
once: a duplicate task finds the row claimed or finished and does nothing.

Retries: a 429 waits what its ``Retry-After`` says (up to MAX_RETRY_AFTER_S) and pauses the judge for every worker
through the rate limiter; 5xx, timeouts, connection errors and malformed responses back off exponentially with full
jitter (``DJ_BACKOFF_BASE`` doubling up to ``DJ_BACKOFF_MAX``), honouring a ``Retry-After`` when one is sent; after
``DJ_MAX_ATTEMPTS`` attempts the judgment is ``failed`` with the last error kept. Other errors (4xx) fail at once.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import redis
from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError, InterfaceError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from judge_api import repository
from judge_api.config import Settings
from judge_api.judges import JudgeSpec, parse_judge
from judge_api.models import TERMINAL_STATUSES, CacheEntry, Judgment, Run, RunItem, utcnow
from judge_api.rubrics import DEFAULT_OUTCOME_MAP, Rubric, RubricError, RubricRegistry
from workers.clients import JudgeCallError, JudgeClient, JudgeReply, JudgeRequest, client_for
from workers.injection import scan_item
from workers.parsing import ParsedVerdict, parse_reply
from workers.pricing import cost_usd
from workers.prompting import render
from workers.ratelimit import RateLimiter, limit_for
from workers.singleflight import SingleFlight

log = logging.getLogger(__name__)

MAX_RETRY_AFTER_S = 300.0  # a longer Retry-After is waited in steps of this, attempt by attempt

REASK_MESSAGE = (
    "Your previous reply could not be read ({error}). Reply again, ending with your verdict strictly in the "
    "required format."
)


@dataclass
class JudgeEngine:
    settings: Settings
    sessions: sessionmaker[Session]
    registry: RubricRegistry
    limiter: RateLimiter
    flight: SingleFlight
    client_factory: Callable[[JudgeSpec, Settings], JudgeClient] = client_for
    sleep: Callable[[float], None] = time.sleep
    rng: random.Random = field(default_factory=random.Random)
    _pool: ThreadPoolExecutor | None = field(default=None, repr=False)

    def judge(self, judgment_id: int, loaded: Loaded | None = None) -> str:
        """Run one judgment; returns what happened (``done``, ``unparseable``, ``failed``, ``skipped`` ...).

        ``loaded`` is the row, item and run read before the claim (by ``judge_many``); they never change after
        planning, so reading them before the claim is safe."""
        with self.sessions() as session:
            token = repository.claim_judgment(session, judgment_id, self.settings.claim_lease_s)
        if token is None:
            return "skipped"
        try:
            values = self._evaluate(loaded or self._load([judgment_id])[0])
        except (OperationalError, InterfaceError, redis.exceptions.ConnectionError, redis.exceptions.TimeoutError):
            # the database or Redis went away mid-judgment: not a verdict. Hand the judgment back (if the database
            # lets us) and let the task retry (celery autoretry_for) - the sweeper re-sends it after the lease if not.
            with contextlib.suppress(Exception), self.sessions() as session:
                repository.release_judgment(session, judgment_id, token, {})
            raise
        except Exception as exc:  # a bug must not leave the judgment claimed forever
            log.exception("judgment %s crashed", judgment_id)
            values = {"status": "failed", "error": f"internal error: {type(exc).__name__}: {exc}"[:2000]}
        with self.sessions() as session:
            written = repository.complete_judgment(session, judgment_id, token, values)
        return values["status"] if written else "lost-claim"

    # -- the steps ---------------------------------------------------------------------------------------------

    def judge_many(self, judgment_ids: list[int]) -> dict[str, int]:
        """Judge a batch: cache hits are settled in bulk (one read, one cache query, one write); the rest go
        through ``judge`` (claim, call, compare-and-set) on the engine's call pool, concurrently."""
        outcomes: Counter[str] = Counter()
        rows = self._load(judgment_ids)
        slow: list[Loaded] = []
        prepared: list[tuple[Loaded, Prepared]] = []
        for loaded in rows:
            if loaded.judgment.status in TERMINAL_STATUSES:
                outcomes["skipped"] += 1
                continue
            ready = self._prepare(loaded) if loaded.judgment.status == "pending" else None
            if isinstance(ready, Prepared):
                loaded.ready = ready
                prepared.append((loaded, ready))
            else:
                slow.append(loaded)
        if prepared:
            with self.sessions() as session:
                keys = [p.key for _, p in prepared]
                entries = {e.key: e for e in session.scalars(select(CacheEntry).where(CacheEntry.key.in_(keys)))}
                session.expunge_all()
            writes: list[dict[str, Any]] = []
            for loaded, ready in prepared:
                entry = entries.get(ready.key)
                values = self._settle_from_cache(loaded, ready, entry) if entry is not None else None
                if values is None:
                    slow.append(loaded)
                else:
                    writes.append({"jid": loaded.judgment.id, **values})
            if writes:
                outcomes["cached"] += repository.complete_pending_many(self.sessions, writes)
        if len(slow) == 1:
            outcomes[self.judge(slow[0].judgment.id, slow[0])] += 1
        elif slow:
            futures = [self.call_pool().submit(self.judge, row.judgment.id, row) for row in slow]
            for future in futures:
                outcomes[future.result()] += 1
        return dict(outcomes)

    def call_pool(self) -> ThreadPoolExecutor:
        with _POOL_LOCK:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.settings.call_concurrency, thread_name_prefix="dj-judge")
            return self._pool

    def _settle_from_cache(self, loaded: Loaded, ready: Prepared, entry: CacheEntry) -> dict[str, Any] | None:
        reply = JudgeReply(
            entry.raw_output, entry.finish_reason, entry.input_tokens, entry.output_tokens, 0.0, entry.structured
        )
        parsed = parse_reply(reply.text, ready.rubric, finish_reason=reply.finish_reason, structured=reply.structured)
        if not parsed.ok and int(loaded.judgment.judge_params.get("reask", 0)) > 0:
            return None  # the re-ask needs the full path
        tally = _Tally()
        tally.add(reply, from_cache=True)
        return {
            **ready.base,
            **tally.values(ready.spec, self.settings),
            **verdict_values(ready.rubric, loaded.judgment, parsed),
            "raw_output": reply.text,
        }

    def _load(self, judgment_ids: list[int]) -> list[Loaded]:
        with self.sessions() as session:
            rows = session.execute(
                select(Judgment, RunItem.payload, Run)
                .join(RunItem, RunItem.id == Judgment.item_pk)
                .join(Run, Run.id == Judgment.run_id)
                .where(Judgment.id.in_(judgment_ids))
            ).all()
            session.expunge_all()
        return [Loaded(judgment, item, run) for judgment, item, run in rows]

    def _prepare(self, loaded: Loaded) -> Prepared | dict[str, Any]:
        """The request and cache key of a judgment, or the values of a judgment that cannot be asked."""
        judgment, item = loaded.judgment, loaded.item
        try:
            rubric = self._rubric(judgment.rubric_id, judgment.rubric_version)
        except RubricError as exc:
            return {"status": "failed", "error": str(exc)}
        if rubric.version != judgment.rubric_version:
            return {
                "status": "failed",
                "error": f"rubric {rubric.id} changed since the run was planned "
                f"(run has {judgment.rubric_version}, now {rubric.version}); re-submit the run",
            }
        spec = parse_judge(judgment.judge)
        systems = [judgment.system_a] + ([judgment.system_b] if judgment.system_b else [])
        candidates = item["candidates"]
        if judgment.order == "ba":
            first, second = candidates[judgment.system_b], candidates[judgment.system_a]
        else:
            first = candidates[judgment.system_a]
            second = candidates[judgment.system_b] if judgment.system_b else None
        prompt = render(rubric, item, judgment.aspect, first, second)
        flags = scan_item(item, systems)
        options = judgment.judge_params
        schema = (
            rubric.structured_output.json_schema
            if (options.get("structured_output") and rubric.structured_output)
            else None
        )
        seed = options.get("seed")
        if seed is not None and judgment.sample_index:
            seed = int(seed) + judgment.sample_index
        request = JudgeRequest(
            messages=prompt.messages,
            temperature=float(options.get("temperature", 0.0)),
            max_tokens=int(options.get("max_tokens", 512)),
            seed=seed,
            json_schema=schema,
            schema_name=rubric.structured_output.name if rubric.structured_output else "verdict",
        )
        base: dict[str, Any] = {"prompt_hash": prompt.prompt_hash, "injection_flags": flags}
        return Prepared(rubric, spec, request, cache_key(rubric, spec, request, judgment.sample_index, 0), base)

    def _evaluate(self, loaded: Loaded) -> dict[str, Any]:
        ready = loaded.ready or self._prepare(loaded)
        if not isinstance(ready, Prepared):
            return ready
        judgment, run = loaded.judgment, loaded.run
        rubric, spec, request, key, base = ready.rubric, ready.spec, ready.request, ready.key, ready.base
        options = judgment.judge_params
        tally = _Tally()
        try:
            reply = self._reply(run, spec, request, key, tally)
        except JudgeCallError as exc:
            return {**base, **tally.values(spec, self.settings), "status": "failed", "error": str(exc)}
        if reply is None:
            return {
                **base,
                **tally.values(spec, self.settings),
                "status": "cancelled",
                "error": f"run budget of ${run.budget_usd} reached before this call",
            }
        parsed = parse_reply(reply.text, rubric, finish_reason=reply.finish_reason, structured=reply.structured)
        raw = reply.text
        for attempt in range(1, int(options.get("reask", 0)) + 1):
            if parsed.ok:
                break
            request_again = self._reask_request(rubric, request, reply, parsed)
            try:
                again = self._reply(
                    run,
                    spec,
                    request_again,
                    cache_key(rubric, spec, request_again, judgment.sample_index, attempt),
                    tally,
                )
            except JudgeCallError as exc:  # the first reply stays the result: unparseable, raw kept
                parsed.error = f"{parsed.error}; re-ask {attempt} failed: {exc}"
                break
            if again is None:
                parsed.error = f"{parsed.error}; re-ask {attempt} not sent: run budget of ${run.budget_usd} reached"
                break
            reply = again
            raw += f"\n\n--- re-ask {attempt} ---\n{again.text}"
            parsed = parse_reply(again.text, rubric, finish_reason=again.finish_reason, structured=again.structured)
        return {
            **base,
            **tally.values(spec, self.settings),
            **verdict_values(rubric, judgment, parsed),
            "raw_output": raw,
        }

    def _rubric(self, rubric_id: str, version: str) -> Rubric:
        """The rubric the judgment was planned with; the folders are re-read once when it is unknown or changed
        (a rubric added or edited after this worker started)."""
        if rubric_id in self.registry and self.registry.get(rubric_id).version == version:
            return self.registry.get(rubric_id)
        self.registry = RubricRegistry(self.settings.rubric_dirs())
        return self.registry.get(rubric_id)

    def _reask_request(
        self, rubric: Rubric, request: JudgeRequest, reply: JudgeReply, parsed: ParsedVerdict
    ) -> JudgeRequest:
        if rubric.extraction_prompt:
            messages = [
                {"role": "system", "content": "You are a helpful assistant."},
                {"role": "user", "content": rubric.extraction_prompt.replace("{judge_result}", reply.text)},
            ]
        else:
            messages = [
                *request.messages,
                {"role": "assistant", "content": reply.text},
                {"role": "user", "content": REASK_MESSAGE.format(error=parsed.error)},
            ]
        return JudgeRequest(
            messages, request.temperature, request.max_tokens, request.seed, request.json_schema, request.schema_name
        )

    def _reply(self, run: Run, spec: JudgeSpec, request: JudgeRequest, key: str, tally: _Tally) -> JudgeReply | None:
        def lookup() -> JudgeReply | None:
            with self.sessions() as session:
                entry = session.get(CacheEntry, key)
                if entry is None:
                    return None
                return JudgeReply(
                    entry.raw_output,
                    entry.finish_reason,
                    entry.input_tokens,
                    entry.output_tokens,
                    0.0,
                    entry.structured,
                )

        def compute() -> JudgeReply | None:
            if run.budget_usd is not None and self._budget_exhausted(run):
                return None
            reply = self._call_with_retries(spec, request, tally)
            self._store_cache(key, spec, reply)
            return reply

        reply, computed = self.flight.run(key, lookup, compute, lease_s=self.settings.claim_lease_s)
        if reply is not None:
            tally.add(reply, from_cache=not computed)
        return reply

    def _budget_exhausted(self, run: Run) -> bool:
        with self.sessions() as session:
            spent = repository.run_spend(session, run.id)
            if run.budget_usd is not None and spent >= run.budget_usd:
                session.execute(
                    update(Run)
                    .where(Run.id == run.id, Run.budget_exhausted_at.is_(None))
                    .values(budget_exhausted_at=utcnow())
                )
                repository.cancel_pending(session, run.id, f"run budget of ${run.budget_usd} reached")
                session.commit()
                return True
        return False

    def _call_with_retries(self, spec: JudgeSpec, request: JudgeRequest, tally: _Tally) -> JudgeReply:
        client = self.client_factory(spec, self.settings)
        limit = limit_for(spec.key, self.settings)
        estimate = sum(len(m["content"]) for m in request.messages) // 4 + request.max_tokens
        attempt = 0
        while True:
            attempt += 1
            tally.attempts += 1
            self.limiter.acquire(spec.key, limit, estimate)
            try:
                reply = client.complete(request)
                tally.provider_calls += 1
                return reply
            except JudgeCallError as exc:
                tally.provider_calls += 1
                tally.errors.append(str(exc))
                if not exc.retryable or attempt >= self.settings.max_attempts:
                    if attempt > 1:
                        exc.message = f"{exc.message} (after {attempt} attempts)"
                    raise
                delay = retry_delay(exc, attempt, self.settings, self.rng)
                if exc.kind == "rate_limited":
                    self.limiter.pause(spec.key, delay)  # every worker holds this judge, not only this one
                log.info("judge %s: %s; retry %d in %.2fs", spec.key, exc, attempt, delay)
                self.sleep(delay)

    def _store_cache(self, key: str, spec: JudgeSpec, reply: JudgeReply) -> None:
        with self.sessions() as session:
            session.add(
                CacheEntry(
                    key=key,
                    judge=spec.key,
                    raw_output=reply.text,
                    finish_reason=reply.finish_reason,
                    structured=reply.structured,
                    input_tokens=reply.input_tokens,
                    output_tokens=reply.output_tokens,
                )
            )
            try:
                session.commit()
            except IntegrityError:
                session.rollback()


@dataclass
class Loaded:
    judgment: Judgment
    item: dict[str, Any]
    run: Run
    ready: Prepared | None = None


@dataclass
class Prepared:
    rubric: Rubric
    spec: JudgeSpec
    request: JudgeRequest
    key: str
    base: dict[str, Any]


_POOL_LOCK = threading.Lock()


@dataclass
class _Tally:
    attempts: int = 0
    provider_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    latency_ms: float = 0.0
    paid_input: int = 0
    paid_output: int = 0
    replies: int = 0
    cached_replies: int = 0
    errors: list[str] = field(default_factory=list)

    def add(self, reply: JudgeReply, from_cache: bool) -> None:
        self.replies += 1
        self.input_tokens += reply.input_tokens
        self.output_tokens += reply.output_tokens
        self.latency_ms += reply.latency_ms
        if from_cache:
            self.cached_replies += 1
        else:
            self.paid_input += reply.input_tokens
            self.paid_output += reply.output_tokens

    def values(self, spec: JudgeSpec, settings: Settings) -> dict[str, Any]:
        prices = str(settings.prices_file) if settings.prices_file else None
        return {
            "attempts": self.attempts,
            "provider_calls": self.provider_calls,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "latency_ms": round(self.latency_ms, 3) if self.replies else None,
            "cost_usd": cost_usd(spec, self.paid_input, self.paid_output, prices),
            "cached": self.replies > 0 and self.cached_replies == self.replies,
        }


def retry_delay(exc: JudgeCallError, attempt: int, settings: Settings, rng: random.Random) -> float:
    """The provider's Retry-After when it sent one, else exponential back-off with full jitter."""
    if exc.retry_after_s is not None:
        return min(exc.retry_after_s, MAX_RETRY_AFTER_S)
    backoff = min(settings.backoff_max_s, settings.backoff_base_s * 2 ** (attempt - 1))
    return rng.uniform(0, backoff)


def cache_key(rubric: Rubric, spec: JudgeSpec, request: JudgeRequest, sample_index: int, reask: int) -> str:
    """Content address of one provider reply: rubric version, rendered prompt, judge, every request parameter,
    the self-consistency sample and the re-ask round."""
    material = {
        "rubric_version": rubric.version,
        "judge": spec.key,
        "messages": request.messages,
        "temperature": request.temperature,
        "max_tokens": request.max_tokens,
        "seed": request.seed,
        "schema": request.json_schema,
        "schema_name": request.schema_name,
        "sample": sample_index,
        "reask": reask,
    }
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()


def verdict_values(rubric: Rubric, judgment: Judgment, parsed: ParsedVerdict) -> dict[str, Any]:
    if not parsed.ok:
        return {"status": "unparseable", "error": parsed.error}
    values: dict[str, Any] = {
        "status": "done",
        "explanation": parsed.explanation,
        "error": None,
        "details": parsed.details or None,
    }
    if rubric.kind == "single":
        values["score"] = parsed.score
        return values
    assert parsed.preference is not None
    preference_for_a = parsed.preference if judgment.order != "ba" else -parsed.preference
    # the run's mapping over the rubric's over the default: every level has an outcome
    outcome_map = {
        **DEFAULT_OUTCOME_MAP,
        **rubric.outcome_map,
        **((judgment.judge_params or {}).get("outcome_map") or {}),
    }
    values.update(
        verdict=parsed.verdict,
        preference=float(preference_for_a),
        outcome=outcome_map[str(preference_for_a)],
    )
    return values
