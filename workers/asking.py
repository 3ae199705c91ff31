"""Asking the judge for a claimed judgment, on a call slot: its request prepared from the rubric the run was planned
with, the reply through the judge cache / single-flight, the reply stash, the run's budget and the retry policy
(workers.retries), re-asks of an unparseable reply, and the verdict handed to the write stage (workers.writer). The
judge engine (workers.execute) builds on this with the batch path.
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import redis
from sqlalchemy import Engine, update
from sqlalchemy.orm import Session, sessionmaker

from judge_api import logs, repository, tracing
from judge_api.cachekeys import request_options
from judge_api.config import Settings
from judge_api.dberrors import hand_back
from judge_api.judges import JudgeSpec, JudgeSpecError, parse_judge
from judge_api.models import Run, utcnow
from judge_api.pricing import bill, load_prices
from judge_api.reach import judge_refusal
from judge_api.reference_metrics import is_reference_judge
from judge_api.repository import cache, claims
from judge_api.repository.claims import JudgmentTask
from judge_api.rubrics import Rubric, RubricError, RubricRegistry
from workers.billing import CallTally, reply_usage
from workers.clients import JudgeCallError, JudgeClient, JudgeReply, JudgeRequest, client_for
from workers.dbwait import DatabaseGate
from workers.injection import scan_item
from workers.judgecache import cache_key, cache_mode, cache_row, cache_scope, cached_reply
from workers.keywait import HeldKeyWaiter
from workers.leases import LeaseKeeper
from workers.prompting import TemplateRefused, parse_context, render
from workers.ratelimit import RateLimiter
from workers.reference import reference_values
from workers.retries import call_with_retries
from workers.singleflight import KeyHeld, SingleFlight
from workers.stages import Asked, Loaded, Paid, Prepared
from workers.stash import ReplyStash
from workers.verdicts import parse_scored, reask_request, verdict_values
from workers.writer import VerdictWrite, VerdictWriter

# the judge path's log lines keep the logger name they had before execute.py was split (log filters match on it)
log = logging.getLogger("workers.execute")

BUILD_LOCK = threading.Lock()  # guards the lazy building of an engine's call pool, writer, keepers and batch stage


@dataclass
class Asker:
    """The judge engine's state and its call-slot side; ``workers.execute.JudgeEngine`` adds the batch path."""

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
    _snapshots: dict[tuple[str, str, str], Rubric] = field(default_factory=dict, repr=False)
    stash: ReplyStash | None = None  # paid replies kept until their verdicts are stored (workers.stash)
    holder: str = ""  # this process's instance id in its claim tokens (judge_api.heartbeats.INSTANCE)
    _gate: DatabaseGate | None = field(default=None, repr=False)
    _waiter: HeldKeyWaiter | None = field(default=None, repr=False)

    @property
    def db(self) -> Engine:
        bind = self.sessions.kw["bind"]
        assert isinstance(bind, Engine)
        return bind

    def _judge_claimed(self, loaded: Loaded, token: str) -> Asked:
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
            except KeyHeld:  # parked off the slot (workers.keywait), still claimed: asked again once the key is free
                raise
            except BaseException:
                self.lease_keeper().drop(judgment_id)
                raise

    def _ask(self, loaded: Loaded, token: str) -> Asked:
        judgment_id = loaded.judgment.id
        paid = Paid(token=token, judgment_id=judgment_id, known_miss=loaded.known_miss, stashed=loaded.stashed)
        if loaded.lock_tried:  # the batch tried the lock (_take_locks): held from here, released with the verdict
            paid.lock_tried, paid.leases = True, [loaded.lock] if loaded.lock is not None else []
        writer = self.verdict_writer()
        try:
            with writer.asking():
                values = loaded.settled or self._evaluate(loaded, paid)
        except KeyHeld:  # nothing paid or taken yet: the judgment waits off the slot for the key's holder
            raise
        except Exception as exc:
            if hand_back(exc) or isinstance(exc, redis.exceptions.ConnectionError | redis.exceptions.TimeoutError):
                # the database or Redis went away mid-judgment: not a verdict. Hand the judgment back (if the
                # database lets us) and let the task retry (celery autoretry_for) - the sweeper re-sends it after the
                # lease if not. A reply already paid for stays in the stash for the retry.
                self._hand_back(judgment_id, token, paid)
                raise
            log.exception("judgment %s crashed", judgment_id)  # a bug must not leave the judgment claimed forever
            values = {"status": "failed", "error": f"internal error: {type(exc).__name__}: {exc}"[:2000]}
        write = VerdictWrite(judgment_id, token, values, paid.cache_rows, paid.leases, paid.stash_keys)
        writer.submit(write)
        return Asked(write, paid)

    def _hand_back(self, judgment_id: int, token: str, paid: Paid) -> None:
        self.flight.release(paid.leases, committed=False)
        if self.stash is not None:
            self.stash.untake(paid.stash_keys, token)  # the next claim of this judgment counts the stashed calls
        with contextlib.suppress(Exception), self.sessions() as session:
            claims.release_judgment(session, judgment_id, token, {})

    def database_gate(self) -> DatabaseGate:
        with BUILD_LOCK:
            if self._gate is None:
                self._gate = DatabaseGate(self.db)
            return self._gate

    def lease_keeper(self) -> LeaseKeeper:
        with BUILD_LOCK:
            if self._leases is None:
                self._leases = LeaseKeeper(self.db, self.settings.claim_lease_s)
            return self._leases

    def verdict_writer(self) -> VerdictWriter:
        with BUILD_LOCK:
            if self._writer is None:
                self._writer = VerdictWriter(
                    self.db, self.flight, self.settings.write_linger_ms / 1000, self.settings.write_group, self.stash
                )
            return self._writer

    def held_key_waiter(self) -> HeldKeyWaiter:
        with BUILD_LOCK:
            if self._waiter is None:
                self._waiter = HeldKeyWaiter(self.flight)
            return self._waiter

    def call_pool(self) -> ThreadPoolExecutor:
        with BUILD_LOCK:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.settings.call_concurrency, thread_name_prefix="dj-judge")
            return self._pool

    def _prepare(self, loaded: Loaded) -> Prepared | dict[str, Any]:
        """The request and cache key of a judgment, or the values of a judgment that cannot be asked."""
        judgment = loaded.judgment
        if is_reference_judge(judgment.judge):  # a reference metric: computed here, no judge to ask
            return reference_values(judgment, self.settings)
        item = judgment.item
        try:
            rubric = self._rubric(judgment.project_id, judgment.rubric_id, judgment.rubric_version)
        except RubricError as exc:
            return {"status": "failed", "error": str(exc)}
        try:
            spec = parse_judge(judgment.judge)
        except JudgeSpecError as exc:  # a row stored by another path than the validated submission
            return {"status": "failed", "error": str(exc)}
        refusal = judge_refusal(spec, self.settings)  # a row stored by any path: checked again before anything runs
        if refusal is not None:
            return {"status": "failed", "error": f"judge refused by the worker: {refusal}"}
        systems = [judgment.system_a] + ([judgment.system_b] if judgment.system_b else [])
        candidates = item["candidates"]
        if judgment.order == "ba":
            first, second = candidates[judgment.system_b], candidates[judgment.system_a]
        else:
            first = candidates[judgment.system_a]
            second = candidates[judgment.system_b] if judgment.system_b else None
        try:
            prompt = render(rubric, item, judgment.aspect, first, second)
        except TemplateRefused as exc:  # the sandbox refused the template, or it cannot render: never asked
            return {"status": "failed", "error": str(exc)}
        flags = scan_item(item, systems)
        request = JudgeRequest(
            messages=prompt.messages, **request_options(rubric, judgment.judge_params, judgment.sample_index)
        )
        key = cache_key(rubric, spec, request, judgment.sample_index, 0, cache_scope(judgment, self.settings))
        base: dict[str, Any] = {"prompt_hash": prompt.prompt_hash, "cache_key": key, "injection_flags": flags}
        return Prepared(rubric, spec, request, key, base, parse_context(rubric, item, first))

    def _evaluate(self, loaded: Loaded, paid: Paid) -> dict[str, Any]:
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
            reply = self._reply(
                judgment, spec, request, key, tally, paid, fast=paid.known_miss, park=loaded.park_when_held, first=True
            )
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
            request_again = reask_request(rubric, request, reply, parsed)
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

    def _rubric(self, project_id: str, rubric_id: str, version: str) -> Rubric:
        """The rubric version the judgment was planned with: from the folders when they still hold it (re-read
        once when it is unknown or changed: a rubric added or edited after this worker started), else the snapshot
        the run's project stored, so a run in flight keeps its prompts when the rubric is edited. A stored row
        claiming a version the folders hold is never used: the folders' text is."""
        if rubric_id in self.registry and self.registry.get(rubric_id).version == version:
            return self.registry.get(rubric_id)
        snapshot = self._snapshots.get((project_id, rubric_id, version))
        if snapshot is not None:
            return snapshot
        self.registry = RubricRegistry(self.settings.rubric_dirs())
        if rubric_id in self.registry and self.registry.get(rubric_id).version == version:
            return self.registry.get(rubric_id)
        with self.sessions() as session:
            snapshot = repository.rubric_snapshot(session, project_id, rubric_id, version)
        if snapshot is None:
            try:
                now = f"the folders have version {self.registry.get(rubric_id).version}"
            except RubricError as exc:
                now = str(exc)
            raise RubricError(
                f"rubric {rubric_id!r} version {version} is not stored and the folders no longer hold it ({now}); "
                "re-submit the run"
            )
        self._snapshots[(project_id, rubric_id, version)] = snapshot
        return snapshot

    def _reply(
        self,
        run: JudgmentTask,
        spec: JudgeSpec,
        request: JudgeRequest,
        key: str,
        tally: CallTally,
        paid: Paid,
        fast: bool = False,
        park: bool = False,
        first: bool = False,
    ) -> JudgeReply | None:
        """The reply to ``request``: from the cache, the stash or a paid call under the key's single-flight lock.
        ``park``: a key another request holds raises ``KeyHeld`` (the caller is on a call slot and waits off it)
        rather than waiting here; only a judgment's first request parks, before anything is paid or taken. ``first``:
        ``key`` is the judgment's own cache key (not a re-ask's)."""
        # a re-ask's key is named by no judgment's cache_key: recorded first, so deleting the run finds its entry
        if not first and not claims.record_cache_keys(self.db, run.id, [key]):
            raise JudgeCallError(
                "gone", f"judgment {run.id} is gone (its run was deleted): not re-asked", False, reached_provider=False
            )
        mode = cache_mode(run)
        if mode != "use":
            return self._uncached_reply(run, spec, request, key, tally, paid, refresh=mode == "refresh")
        if fast:
            if paid.lock_tried:  # taken (or found held) with the batch's other locks
                paid.lock_tried = False
                lease = paid.leases[0] if paid.leases else None
            else:
                lease = self.flight.acquire(key, self.settings.claim_lease_s)
                if lease is not None:
                    paid.leases.append(lease)
            if lease is not None:
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
            # not stored when the judgment is gone (its run deleted): the reply is stored nowhere (issue 43)
            claims.store_judgment_cache_rows(self.db, run.id, [cache_row(key, spec, stashed)], key if first else None)
            return stashed

        reply, computed = self.flight.run(key, lookup, compute, lease_s=self.settings.claim_lease_s, wait=not park)
        if reply is not None and not computed:
            tally.add(reply, from_cache=True)
        return reply

    def _uncached_reply(
        self,
        run: JudgmentTask,
        spec: JudgeSpec,
        request: JudgeRequest,
        key: str,
        tally: CallTally,
        paid: Paid,
        refresh: bool,
    ) -> JudgeReply | None:
        """``options.cache`` 'refresh' or 'off': ask the provider without looking in the judge cache (no single-flight
        either: it waits for a cache entry). 'refresh' writes the reply over the key's entry with the verdict; 'off'
        writes nothing. A reply paid for and stashed by an earlier claim of this judgment is still used, not paid
        again."""
        reply = self._take_stashed(key, tally, paid)
        if reply is None:
            if run.budget_usd is not None and self._budget_exhausted(run):
                return None
            reply = self._paid_call(spec, request, key, tally, paid)
            tally.add(reply, from_cache=False)
        if refresh:
            paid.cache_rows.append({**cache_row(key, spec, reply), cache.REPLACE: True})
        return reply

    def _paid_call(self, spec: JudgeSpec, request: JudgeRequest, key: str, tally: CallTally, paid: Paid) -> JudgeReply:
        """Call the provider and stash the reply the moment the client returns it (issue 26.6: a worker killed
        between the reply and the stash pays for it again), with the calls it took and what it cost. The price
        table is read before the call, so nothing but the stash write stands between the reply and its stash."""
        stash = self.stash

        def claim_holds() -> None:  # a judgment whose run was deleted, or whose claim was lost, starts no call
            if not claims.claim_holds(self.db, paid.judgment_id, paid.token):
                raise JudgeCallError(
                    "gone",
                    f"judgment {paid.judgment_id} is gone (its run was deleted) or no longer claimed: not sent",
                    retryable=False,
                    reached_provider=False,
                )

        check = claim_holds if paid.token else None
        if stash is None:
            return self._call_with_retries(spec, request, tally, before_send=check)
        price = load_prices(str(self.settings.prices_file) if self.settings.prices_file else None).for_spec(spec)
        before = tally.provider_calls

        def stash_now(reply: JudgeReply) -> None:  # the call that brought it is not counted yet: + 1
            stash.put(key, reply, tally.provider_calls - before + 1, bill(price, reply_usage(reply)), *paid.claim)

        reply = self._call_with_retries(spec, request, tally, stash_now, check)
        paid.stash_keys.append(key)
        return reply

    def _take_stashed(self, key: str, tally: CallTally, paid: Paid) -> JudgeReply | None:
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

    def _call_with_retries(
        self,
        spec: JudgeSpec,
        request: JudgeRequest,
        tally: CallTally,
        on_reply: Callable[[JudgeReply], None] | None = None,
        before_send: Callable[[], None] | None = None,
    ) -> JudgeReply:
        client = self.client_factory(spec, self.settings)
        return call_with_retries(
            client, spec.key, request, self.settings, self.limiter, tally, self.sleep, self.rng, on_reply, before_send
        )
