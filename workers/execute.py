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
import functools
import logging
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import redis
from sqlalchemy import Engine, update
from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from judge_api import logs, metrics, repository, tracing
from judge_api.cachekeys import judge_cache_key, request_options
from judge_api.config import Settings
from judge_api.judges import JudgeSpec, parse_judge
from judge_api.models import TERMINAL_STATUSES, Run, utcnow
from judge_api.prefixes import CACHING_PROVIDERS, dispatch_order, plan_groups
from judge_api.pricing import Usage, list_price_usage, load_prices, price_usage
from judge_api.reference_metrics import is_reference_judge
from judge_api.repository import cache, claims
from judge_api.repository.claims import JudgmentTask
from judge_api.repository.projects import DEFAULT_PROJECT
from judge_api.rubrics import DEFAULT_OUTCOME_MAP, Rubric, RubricError, RubricRegistry
from judge_api.tokens import count_text
from workers.clients import JudgeCallError, JudgeClient, JudgeReply, JudgeRequest, client_for
from workers.injection import scan_item
from workers.leases import LeaseKeeper
from workers.parsing import ParsedVerdict, parse_reply
from workers.prompting import parse_context, render
from workers.ratelimit import RateLimiter, limit_for
from workers.reference import reference_values
from workers.scoring import apply_expected_scoring
from workers.singleflight import Lease, SingleFlight
from workers.stash import ReplyStash
from workers.writer import VerdictWrite, VerdictWriter

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
    _writer: VerdictWriter | None = field(default=None, repr=False)
    _leases: LeaseKeeper | None = field(default=None, repr=False)
    _snapshots: dict[tuple[str, str], Rubric] = field(default_factory=dict, repr=False)
    stash: ReplyStash | None = None  # paid replies kept until their verdicts are stored (workers.stash)

    @property
    def db(self) -> Engine:
        bind = self.sessions.kw["bind"]
        assert isinstance(bind, Engine)
        return bind

    def judge(self, judgment_id: int) -> str:
        """Run one judgment; returns what happened (``done``, ``unparseable``, ``failed``, ``cancelled``,
        ``skipped`` when it is finished or held by another live worker, ``lost-claim``)."""
        return self._run_batch([judgment_id]).statuses.get(judgment_id, "skipped")

    def judge_many(self, judgment_ids: list[int]) -> dict[str, int]:
        """Judge a batch; returns how many judgments ended how (``cached``: settled from the cache in bulk)."""
        return dict(self._run_batch(judgment_ids).counts)

    # -- the batch path ----------------------------------------------------------------------------------------

    def _run_batch(self, judgment_ids: list[int]) -> _BatchResult:
        """One read for the rows, one cache query for their keys, one statement for the cache hits' verdicts, one
        statement to claim the rest; then each claimed judgment is asked (on the call pool when there are several)
        and its verdict written together with the cache entry it paid for."""
        result = _BatchResult()
        rows = self._load(judgment_ids)
        for missing in set(judgment_ids) - {loaded.judgment.id for loaded in rows}:
            result.record(missing, "skipped")
        to_claim: list[Loaded] = []
        prepared: list[Loaded] = []
        for loaded in rows:
            status = loaded.judgment.status
            if status in TERMINAL_STATUSES:
                result.record(loaded.judgment.id, "skipped")
                continue
            if status == "pending":
                ready = self._prepare(loaded)
                if isinstance(ready, Prepared):
                    loaded.ready = ready
                    prepared.append(loaded)
                    continue
                loaded.settled = ready
            to_claim.append(loaded)  # a lapsed claim, or a judgment that cannot be asked
        if prepared:
            to_claim += self._settle_cache_hits(prepared, result)
        if not to_claim:
            return result
        token, claimed = claims.claim_many(
            self.db, [loaded.judgment.id for loaded in to_claim], self.settings.claim_lease_s
        )
        mine = [loaded for loaded in to_claim if loaded.judgment.id in claimed]
        self.lease_keeper().hold([loaded.judgment.id for loaded in mine], token)
        for loaded in to_claim:
            if loaded.judgment.id not in claimed:
                result.record(loaded.judgment.id, "skipped")
        self._find_stashed(mine)
        # a call slot asks and hands the verdict to the write stage; this (Celery) thread waits for the writes
        asked: list[tuple[Loaded, Future[_Asked]]] = []
        if len(mine) == 1:
            single: Future[_Asked] = Future()
            try:
                single.set_result(self._judge_claimed(mine[0], token))
            except BaseException as exc:
                single.set_exception(exc)
            asked.append((mine[0], single))
        else:
            asked = self._dispatch(mine, token)
            wait([future for _, future in asked])
        failure: BaseException | None = None
        for loaded, future in asked:
            error = future.exception()
            if error is None:
                error = self._finish(loaded, token, future.result(), result)
            if error is not None and failure is None:
                failure = error
        if failure is not None:
            raise failure  # the infrastructure failed (claims handed back where possible): the task retries
        return result

    def _dispatch(self, mine: list[Loaded], token: str) -> list[tuple[Loaded, Future[_Asked]]]:
        """Submit the claimed judgments to the call slots, cache-aware (workers.dispatch): a group sharing a
        cacheable prefix sends its leader first and the rest once the leader has answered, carrying the prefix's
        cache key / breakpoint; everything else goes at once and fills the slots meanwhile."""
        pool = self.call_pool()
        futures: dict[int, Future[_Asked]] = {}
        now, followers = self._cache_plan(mine) if self.settings.cache_aware_dispatch else (list(range(len(mine))), {})

        def send(index: int) -> None:
            future = pool.submit(self._judge_claimed, mine[index], token)
            if index in futures:  # a follower: its placeholder takes the result
                placeholder = futures[index]
                future.add_done_callback(lambda done: _chain(done, placeholder))
            else:
                futures[index] = future
            if followers.get(index):
                future.add_done_callback(functools.partial(release, index))

        def release(leader: int, _done: Future[_Asked]) -> None:
            for index in followers[leader]:
                send(index)

        for members in followers.values():
            for index in members:
                futures[index] = Future()
        for index in now:
            send(index)
        return [(loaded, futures[index]) for index, loaded in enumerate(mine)]

    def _cache_plan(self, mine: list[Loaded]) -> tuple[list[int], dict[int, list[int]]]:
        """Which claimed judgments to send now and which after their group's leader (workers.dispatch)."""
        prompts: list[list[dict[str, str]]] = []
        keys: list[Any] = []
        for index, loaded in enumerate(mine):
            ready = loaded.ready
            task = loaded.judgment
            if ready is None or ready.spec.provider not in CACHING_PROVIDERS or loaded.settled is not None:
                keys.append(("alone", index))
                prompts.append([])
                continue
            keys.append((task.run_id, task.judge, task.rubric_id, task.rubric_version, str(task.item.get("id"))))
            prompts.append(ready.request.messages)
        if all(key[0] == "alone" for key in keys):
            return list(range(len(mine))), {}
        prices = load_prices(str(self.settings.prices_file) if self.settings.prices_file else None)

        def long_enough(index: int, prefix: str) -> bool:
            ready = mine[index].ready
            assert ready is not None
            minimum = prices.min_cache_tokens(ready.spec)
            if len(prefix) >= 8 * minimum:  # no tokenizer packs 8 characters a token: long enough, uncounted
                return True
            return count_text(ready.spec, prefix) >= minimum

        groups = plan_groups(keys, prompts, long_enough)
        for group in groups:
            for index in group.members if group.prefix is not None else ():
                ready = mine[index].ready
                assert ready is not None
                ready.request = replace(ready.request, cache_prefix=group.prefix)
        return dispatch_order(groups)

    def _find_stashed(self, mine: list[Loaded]) -> None:
        """Which of the claimed misses have a paid reply waiting (one round trip for the batch)."""
        if self.stash is None:
            return
        keys = [loaded.ready.key for loaded in mine if loaded.known_miss and loaded.ready is not None]
        if not keys:
            return
        found = self.stash.present(keys)
        for loaded in mine:
            if loaded.ready is not None and loaded.ready.key in found:
                loaded.stashed = True

    def _finish(self, loaded: Loaded, token: str, asked: _Asked, result: _BatchResult) -> BaseException | None:
        """Wait for a verdict's write (never on a call slot) and record what happened."""
        judgment_id = loaded.judgment.id
        try:
            written = asked.write.written.result()
        except BaseException as exc:
            self._hand_back(judgment_id, token, asked.paid)
            return exc
        finally:
            self.lease_keeper().drop(judgment_id)
        values = asked.write.values
        if written:
            metrics.judgment_finished(loaded.judgment.judge, values)
            if values["status"] != "done":  # ids and the error only: never the prompt or the reply
                task = loaded.judgment
                with logs.context(run_id=task.run_id, judgment_id=judgment_id, judge=task.judge, attempt=None):
                    log.info("judgment %s %s: %s", judgment_id, values["status"], values.get("error"))
        result.record(judgment_id, str(values["status"]) if written else "lost-claim")
        return None

    def _settle_cache_hits(self, prepared: list[Loaded], result: _BatchResult) -> list[Loaded]:
        """Write the verdicts of cached judgments in one statement; return the rest (misses, re-asks to make)."""
        entries = cache.cache_entries(self.db, [loaded.ready.key for loaded in prepared if loaded.ready])
        rest: list[Loaded] = []
        writes: list[dict[str, Any]] = []
        for loaded in prepared:
            assert loaded.ready is not None
            entry = entries.get(loaded.ready.key)
            values = self._settle_from_cache(loaded, loaded.ready, entry) if entry is not None else None
            if values is None:
                loaded.known_miss = entry is None
                rest.append(loaded)
            else:
                writes.append({"jid": loaded.judgment.id, **values})
        if writes:
            written = claims.complete_pending_many(self.sessions, writes)
            if written == len(writes):  # else which rows were written is unknown: count none rather than guess
                by_id = {loaded.judgment.id: loaded.judgment.judge for loaded in prepared}
                for write in writes:
                    metrics.judgment_finished(by_id[write["jid"]], write)
            result.counts["cached"] += written
            if written < len(writes):
                result.counts["skipped"] += len(writes) - written
            for write in writes:  # exact for a batch of one, which is what judge() reads
                result.statuses[write["jid"]] = write["status"] if written == len(writes) else "skipped"
        return rest

    def _judge_claimed(self, loaded: Loaded, token: str) -> _Asked:
        """On a call slot: ask the judge for a judgment this worker has claimed and hand the verdict to the write
        stage (compare-and-set there); the slot is free for the next call as soon as the reply is in."""
        judgment_id = loaded.judgment.id
        with (
            logs.context(
                run_id=loaded.judgment.run_id, judgment_id=judgment_id, judge=loaded.judgment.judge, attempt=None
            ),
            tracing.span(
                "judgment", run_id=loaded.judgment.run_id, judgment_id=judgment_id, judge=loaded.judgment.judge
            ),
        ):
            try:
                return self._ask(loaded, token)
            except BaseException:
                self.lease_keeper().drop(judgment_id)
                raise

    def _ask(self, loaded: Loaded, token: str) -> _Asked:
        judgment_id = loaded.judgment.id
        paid = _Paid(token=token, judgment_id=judgment_id, known_miss=loaded.known_miss, stashed=loaded.stashed)
        writer = self.verdict_writer()
        try:
            with writer.asking():
                values = loaded.settled or self._evaluate(loaded, paid)
        except (OperationalError, InterfaceError, redis.exceptions.ConnectionError, redis.exceptions.TimeoutError):
            # the database or Redis went away mid-judgment: not a verdict. Hand the judgment back (if the database
            # lets us) and let the task retry (celery autoretry_for) - the sweeper re-sends it after the lease if not.
            # A reply already paid for stays in the stash for the retry.
            self._hand_back(judgment_id, token, paid)
            raise
        except Exception as exc:  # a bug must not leave the judgment claimed forever
            log.exception("judgment %s crashed", judgment_id)
            values = {"status": "failed", "error": f"internal error: {type(exc).__name__}: {exc}"[:2000]}
        write = VerdictWrite(judgment_id, token, values, paid.cache_rows, paid.leases, paid.stash_keys)
        writer.submit(write)
        return _Asked(write, paid)

    def _hand_back(self, judgment_id: int, token: str, paid: _Paid) -> None:
        self.flight.release(paid.leases, committed=False)
        if self.stash is not None:
            self.stash.untake(paid.stash_keys, token)  # the next claim of this judgment counts the stashed calls
        with contextlib.suppress(Exception), self.sessions() as session:
            claims.release_judgment(session, judgment_id, token, {})

    def lease_keeper(self) -> LeaseKeeper:
        with _POOL_LOCK:
            if self._leases is None:
                self._leases = LeaseKeeper(self.db, self.settings.claim_lease_s)
            return self._leases

    def verdict_writer(self) -> VerdictWriter:
        with _POOL_LOCK:
            if self._writer is None:
                self._writer = VerdictWriter(
                    self.db, self.flight, self.settings.write_linger_ms / 1000, self.settings.write_group, self.stash
                )
            return self._writer

    def call_pool(self) -> ThreadPoolExecutor:
        with _POOL_LOCK:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.settings.call_concurrency, thread_name_prefix="dj-judge")
            return self._pool

    def _settle_from_cache(self, loaded: Loaded, ready: Prepared, entry: Any) -> dict[str, Any] | None:
        reply = cached_reply(entry)
        parsed = parse_scored(reply, ready.rubric, ready.request, ready.context)
        if not parsed.ok and int(loaded.judgment.judge_params.get("reask", 0)) > 0:
            return None  # the re-ask needs the full path
        tally = CallTally()
        tally.add(reply, from_cache=True)
        return {
            **ready.base,
            **tally.values(ready.spec, self.settings),
            **verdict_values(ready.rubric, loaded.judgment, parsed),
            "raw_output": reply.text,
        }

    def _load(self, judgment_ids: list[int]) -> list[Loaded]:
        return [Loaded(task) for task in claims.load_tasks(self.db, judgment_ids)]

    def _prepare(self, loaded: Loaded) -> Prepared | dict[str, Any]:
        """The request and cache key of a judgment, or the values of a judgment that cannot be asked."""
        judgment = loaded.judgment
        if is_reference_judge(judgment.judge):  # a reference metric: computed here, no judge to ask
            return reference_values(judgment, self.settings)
        item = judgment.item
        try:
            rubric = self._rubric(judgment.rubric_id, judgment.rubric_version)
        except RubricError as exc:
            return {"status": "failed", "error": str(exc)}
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
        request = JudgeRequest(
            messages=prompt.messages, **request_options(rubric, judgment.judge_params, judgment.sample_index)
        )
        key = cache_key(rubric, spec, request, judgment.sample_index, 0, cache_scope(judgment, self.settings))
        base: dict[str, Any] = {"prompt_hash": prompt.prompt_hash, "cache_key": key, "injection_flags": flags}
        return Prepared(rubric, spec, request, key, base, parse_context(rubric, item, first))

    def _evaluate(self, loaded: Loaded, paid: _Paid) -> dict[str, Any]:
        """The verdict values of a claimed judgment. ``paid.known_miss``: the batch has just missed its key in the
        cache, so the first request takes the single-flight lock without looking again and leaves the reply's cache
        entry (and the lock) to be written (and released) with the verdict."""
        ready = loaded.ready or self._prepare(loaded)
        if not isinstance(ready, Prepared):
            return ready
        judgment = loaded.judgment
        rubric, spec, request, key, base = ready.rubric, ready.spec, ready.request, ready.key, ready.base
        options = judgment.judge_params
        tally = CallTally()
        try:
            reply = self._reply(judgment, spec, request, key, tally, paid, fast=paid.known_miss)
        except JudgeCallError as exc:
            return {**base, **tally.values(spec, self.settings), "status": "failed", "error": str(exc)}
        if reply is None:
            return {
                **base,
                **tally.values(spec, self.settings),
                "status": "cancelled",
                "error": f"run budget of ${judgment.budget_usd} reached before this call",
            }
        parsed = parse_scored(reply, rubric, request, ready.context)
        raw = reply.text
        for attempt in range(1, int(options.get("reask", 0)) + 1):
            if parsed.ok:
                break
            request_again = self._reask_request(rubric, request, reply, parsed)
            try:
                again = self._reply(
                    judgment,
                    spec,
                    request_again,
                    cache_key(
                        rubric,
                        spec,
                        request_again,
                        judgment.sample_index,
                        attempt,
                        cache_scope(judgment, self.settings),
                    ),
                    tally,
                    paid,
                )
            except JudgeCallError as exc:  # the first reply stays the result: unparseable, raw kept
                parsed.error = f"{parsed.error}; re-ask {attempt} failed: {exc}"
                break
            if again is None:
                parsed.error = (
                    f"{parsed.error}; re-ask {attempt} not sent: run budget of ${judgment.budget_usd} reached"
                )
                break
            reply = again
            raw += f"\n\n--- re-ask {attempt} ---\n{again.text}"
            parsed = parse_scored(again, rubric, request_again, ready.context)
        return {
            **base,
            **tally.values(spec, self.settings),
            **verdict_values(rubric, judgment, parsed),
            "raw_output": raw,
        }

    def _rubric(self, rubric_id: str, version: str) -> Rubric:
        """The rubric version the judgment was planned with: from the folders when they still hold it (re-read
        once when it is unknown or changed: a rubric added or edited after this worker started), else the snapshot
        stored with the run, so a run in flight keeps its prompts when the rubric is edited."""
        if rubric_id in self.registry and self.registry.get(rubric_id).version == version:
            return self.registry.get(rubric_id)
        snapshot = self._snapshots.get((rubric_id, version))
        if snapshot is not None:
            return snapshot
        self.registry = RubricRegistry(self.settings.rubric_dirs())
        if rubric_id in self.registry and self.registry.get(rubric_id).version == version:
            return self.registry.get(rubric_id)
        with self.sessions() as session:
            snapshot = repository.rubric_snapshot(session, rubric_id, version)
        if snapshot is None:
            try:
                now = f"the folders have version {self.registry.get(rubric_id).version}"
            except RubricError as exc:
                now = str(exc)
            raise RubricError(
                f"rubric {rubric_id!r} version {version} is not stored and the folders no longer hold it ({now}); "
                "re-submit the run"
            )
        self._snapshots[(rubric_id, version)] = snapshot
        return snapshot

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
            messages,
            request.temperature,
            request.max_tokens,
            request.seed,
            request.json_schema,
            request.schema_name,
            request.top_logprobs,
        )

    def _reply(
        self,
        run: JudgmentTask,
        spec: JudgeSpec,
        request: JudgeRequest,
        key: str,
        tally: CallTally,
        paid: _Paid,
        fast: bool = False,
    ) -> JudgeReply | None:
        if fast:
            lease = self.flight.acquire(key, self.settings.claim_lease_s)
            if lease is not None:
                paid.leases.append(lease)
                stashed = self._take_stashed(key, tally, paid) if paid.stashed else None
                if stashed is not None:
                    paid.cache_rows.append(cache_row(key, spec, stashed))
                    lease.filled = True
                    return stashed
                if run.budget_usd is not None and self._budget_exhausted(run):
                    return None
                paid_reply = self._paid_call(spec, request, key, tally, paid)
                paid.cache_rows.append(cache_row(key, spec, paid_reply))
                lease.filled = True
                tally.add(paid_reply, from_cache=False)
                return paid_reply
            # another worker holds the key, or has just filled it: look it up (or wait for it) below

        def lookup() -> JudgeReply | None:
            entry = cache.cache_entries(self.db, [key]).get(key)
            return cached_reply(entry) if entry is not None else None

        def compute() -> JudgeReply | None:
            stashed = self._take_stashed(key, tally, paid)  # paid for already (e.g. before a database outage)
            if stashed is None:
                if run.budget_usd is not None and self._budget_exhausted(run):
                    return None
                stashed = self._paid_call(spec, request, key, tally, paid)
                tally.add(stashed, from_cache=False)
            cache.store_cache_rows(self.db, [cache_row(key, spec, stashed)])
            return stashed

        reply, computed = self.flight.run(key, lookup, compute, lease_s=self.settings.claim_lease_s)
        if reply is not None and not computed:
            tally.add(reply, from_cache=True)
        return reply

    def _paid_call(self, spec: JudgeSpec, request: JudgeRequest, key: str, tally: CallTally, paid: _Paid) -> JudgeReply:
        """Call the provider and stash the reply at once (before any database write), with what it cost."""
        before = tally.provider_calls
        reply = self._call_with_retries(spec, request, tally)
        if self.stash is not None:
            prices = str(self.settings.prices_file) if self.settings.prices_file else None
            cost = price_usage(spec, reply_usage(reply), prices)
            self.stash.put(key, reply, tally.provider_calls - before, cost, paid.token, paid.judgment_id)
            paid.stash_keys.append(key)
        return reply

    def _take_stashed(self, key: str, tally: CallTally, paid: _Paid) -> JudgeReply | None:
        """A reply paid for earlier and not yet stored: used instead of a second call. Its calls count here when
        this claim is the one that records them (see workers.stash)."""
        if self.stash is None:
            return None
        stashed = self.stash.take(key, paid.token, paid.judgment_id)
        if stashed is None:
            return None
        if stashed.counted_here:
            tally.provider_calls += stashed.provider_calls
            tally.attempts += stashed.provider_calls
            tally.add(stashed.reply, from_cache=False)
            paid.stash_keys.append(key)
        else:
            tally.add(stashed.reply, from_cache=True)
        return stashed.reply

    def _budget_exhausted(self, task: JudgmentTask) -> bool:
        with self.sessions() as session:
            spent = claims.run_spend(session, task.run_id)
            if task.budget_usd is not None and spent >= task.budget_usd:
                session.execute(
                    update(Run)
                    .where(Run.id == task.run_id, Run.budget_exhausted_at.is_(None))
                    .values(budget_exhausted_at=utcnow())
                )
                repository.cancel_pending(session, task.run_id, f"run budget of ${task.budget_usd} reached")
                session.commit()
                return True
        return False

    def _call_with_retries(self, spec: JudgeSpec, request: JudgeRequest, tally: CallTally) -> JudgeReply:
        client = self.client_factory(spec, self.settings)
        return call_with_retries(client, spec.key, request, self.settings, self.limiter, tally, self.sleep, self.rng)


class Completer(Protocol):
    """What call_with_retries calls: a judge client, or anything answering a request the same way (a responder)."""

    def complete(self, request: JudgeRequest) -> JudgeReply: ...


def call_with_retries(
    client: Completer,
    key: str,
    request: JudgeRequest,
    settings: Settings,
    limiter: RateLimiter,
    tally: CallTally,
    sleep: Callable[[float], None] = time.sleep,
    rng: random.Random | None = None,
) -> JudgeReply:
    """One provider reply with the judge path's machinery: the rate limit of ``key`` (``DJ_RATE_LIMITS``), bounded
    retries with back-off and ``Retry-After`` (``DJ_MAX_ATTEMPTS``), a 429 pausing ``key`` for every worker, and the
    metrics and log context of each attempt. Judgments and the responders of systems under test both call it."""
    rng = rng or random.Random()
    limit = limit_for(key, settings)
    estimate = sum(len(m["content"]) for m in request.messages) // 4 + request.max_tokens
    attempt = 0
    while True:
        attempt += 1
        tally.attempts += 1
        limiter.acquire(key, limit, estimate)
        try:
            with (
                metrics.provider_call(key),
                logs.context(attempt=attempt),
                tracing.span("provider.call", judge=key, attempt=attempt),
            ):
                reply = client.complete(request)
            tally.provider_calls += 1
            metrics.call_tokens(key, reply.input_tokens, reply.output_tokens)
            return reply
        except JudgeCallError as exc:
            tally.provider_calls += 1
            tally.errors.append(str(exc))
            metrics.call_failed(key, exc.kind, will_retry=exc.retryable and attempt < settings.max_attempts)
            if not exc.retryable or attempt >= settings.max_attempts:
                if attempt > 1:
                    exc.message = f"{exc.message} (after {attempt} attempts)"
                raise
            delay = retry_delay(exc, attempt, settings, rng)
            if exc.kind == "rate_limited":
                limiter.pause(key, delay)  # every worker holds this judge, not only this one
            with logs.context(attempt=attempt):
                log.info("judge %s: %s; retry %d in %.2fs", key, exc, attempt, delay)
            sleep(delay)


@dataclass
class Loaded:
    judgment: JudgmentTask
    ready: Prepared | None = None
    settled: dict[str, Any] | None = None  # the values of a judgment that cannot be asked (e.g. rubric gone)
    known_miss: bool = False  # its key was just looked up in the cache and was not there
    stashed: bool = False  # a paid reply for its key waits in the stash


@dataclass
class _Paid:
    """Replies a claimed judgment paid for under its own single-flight locks, written with its verdict."""

    token: str = ""
    judgment_id: int = 0
    known_miss: bool = False
    stashed: bool = False
    leases: list[Lease] = field(default_factory=list)
    cache_rows: list[dict[str, Any]] = field(default_factory=list)
    stash_keys: list[str] = field(default_factory=list)  # stashed replies whose calls this claim records


@dataclass
class _Asked:
    """A claimed judgment asked: its verdict handed to the write stage."""

    write: VerdictWrite
    paid: _Paid


@dataclass
class _BatchResult:
    statuses: dict[int, str] = field(default_factory=dict)
    counts: Counter[str] = field(default_factory=Counter)

    def record(self, judgment_id: int, status: str) -> None:
        self.statuses[judgment_id] = status
        self.counts[status] += 1


@dataclass
class Prepared:
    rubric: Rubric
    spec: JudgeSpec
    request: JudgeRequest
    key: str
    base: dict[str, Any]
    context: dict[str, Any] | None = None  # what a parser checks the reply against (fact_check)


_POOL_LOCK = threading.Lock()


@dataclass
class CallTally:
    attempts: int = 0
    provider_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    latency_ms: float = 0.0
    cached_input_tokens: int = 0
    cache_write_tokens: int = 0
    paid: list[Usage] = field(default_factory=list)  # what the provider billed: replies that were not cache hits
    replies: int = 0
    cached_replies: int = 0
    errors: list[str] = field(default_factory=list)

    def add(self, reply: JudgeReply, from_cache: bool, batch: bool = False) -> None:
        self.replies += 1
        self.input_tokens += reply.input_tokens
        self.output_tokens += reply.output_tokens
        self.cached_input_tokens += reply.cached_input_tokens
        self.cache_write_tokens += reply.cache_write_tokens
        self.latency_ms += reply.latency_ms
        if from_cache:
            self.cached_replies += 1
        else:
            self.paid.append(reply_usage(reply, batch))

    def values(self, spec: JudgeSpec, settings: Settings) -> dict[str, Any]:
        prices = str(settings.prices_file) if settings.prices_file else None
        return {
            "attempts": self.attempts,
            "provider_calls": self.provider_calls,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cached_input_tokens": self.cached_input_tokens,
            "cache_write_tokens": self.cache_write_tokens,
            "latency_ms": round(self.latency_ms, 3) if self.replies else None,
            **bill_values(spec, self.paid, prices),
            "cached": self.replies > 0 and self.cached_replies == self.replies,
        }


def bill_values(spec: JudgeSpec, paid: list[Usage], prices: str | None) -> dict[str, float]:
    """A judgment's bill: ``cost_usd`` as the provider bills it, ``list_cost_usd`` the same tokens with no cache
    and no batch discount, ``cache_saved_usd`` what caching saved at real-time prices (the batch discount is the
    rest: list - cost - cache_saved)."""
    cost = sum((price_usage(spec, u, prices) for u in paid), 0.0)
    listed = sum((list_price_usage(spec, u, prices) for u in paid), 0.0)
    realtime = sum((price_usage(spec, replace(u, batch=False), prices) for u in paid), 0.0)
    return {"cost_usd": cost, "list_cost_usd": listed, "cache_saved_usd": max(listed - realtime, 0.0)}


def _chain(done: Future[_Asked], into: Future[_Asked]) -> None:
    error = done.exception()
    if error is not None:
        into.set_exception(error)
    else:
        into.set_result(done.result())


def reply_usage(reply: JudgeReply, batch: bool = False) -> Usage:
    """A reply's tokens as the price table bills them (``batch``: the reply came from a provider batch)."""
    return Usage(reply.input_tokens, reply.output_tokens, reply.cached_input_tokens, reply.cache_write_tokens, batch)


def retry_delay(exc: JudgeCallError, attempt: int, settings: Settings, rng: random.Random) -> float:
    """The provider's Retry-After when it sent one, else exponential back-off with full jitter."""
    if exc.retry_after_s is not None:
        return min(exc.retry_after_s, MAX_RETRY_AFTER_S)
    backoff = min(settings.backoff_max_s, settings.backoff_base_s * 2 ** (attempt - 1))
    return rng.uniform(0, backoff)


def cache_scope(judgment: JudgmentTask, settings: Settings) -> str | None:
    """Whose cache entries a judgment may read and write: its run's project, or None for the unscoped keys (the
    shared cache of a single-tenant deployment, ``DJ_SHARED_CACHE``, and the default project, whose keys stay those
    derived before the cache was scoped, so an existing cache stays valid)."""
    if settings.cache_shared or judgment.project_id == DEFAULT_PROJECT:
        return None
    return judgment.project_id


def cache_key(
    rubric: Rubric, spec: JudgeSpec, request: JudgeRequest, sample_index: int, reask: int, project: str | None = None
) -> str:
    """The judge cache's key of a request (judge_api.cachekeys.judge_cache_key)."""
    params = {
        "temperature": request.temperature,
        "max_tokens": request.max_tokens,
        "seed": request.seed,
        "json_schema": request.json_schema,
        "schema_name": request.schema_name,
        "top_logprobs": request.top_logprobs,
    }
    return judge_cache_key(rubric.version, spec.key, request.messages, params, sample_index, reask, project)


def cache_row(key: str, spec: JudgeSpec, reply: JudgeReply) -> dict[str, Any]:
    return {
        "key": key,
        "judge": spec.key,
        "raw_output": reply.text,
        "finish_reason": reply.finish_reason,
        "structured": reply.structured,
        "input_tokens": reply.input_tokens,
        "output_tokens": reply.output_tokens,
        "created_at": utcnow(),
        "logprobs": reply.logprobs,
    }


def cached_reply(entry: Any) -> JudgeReply:
    """A cache entry (row) as the reply it stores; no latency, nothing paid."""
    return JudgeReply(
        entry.raw_output,
        entry.finish_reason,
        entry.input_tokens,
        entry.output_tokens,
        0.0,
        entry.structured,
        getattr(entry, "logprobs", None),
    )


def parse_scored(
    reply: JudgeReply, rubric: Rubric, request: JudgeRequest, context: dict[str, Any] | None = None
) -> ParsedVerdict:
    """Parse a reply; with expected scoring (log-probabilities asked for) weight the score by them."""
    parsed = parse_reply(
        reply.text, rubric, finish_reason=reply.finish_reason, structured=reply.structured, context=context
    )
    if request.top_logprobs:
        parsed = apply_expected_scoring(parsed, rubric, reply.text, reply.logprobs, reply.structured is not None)
    return parsed


def verdict_values(rubric: Rubric, judgment: JudgmentTask, parsed: ParsedVerdict) -> dict[str, Any]:
    if not parsed.ok:
        return {"status": "unparseable", "error": parsed.error}
    values: dict[str, Any] = {
        "status": "done",
        "explanation": parsed.explanation,
        "error": None,
        "details": parsed.details or None,
    }
    if rubric.mode == "single":
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
