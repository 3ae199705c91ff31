"""Judge stored judgments: the path every judgment takes, whether a Celery worker or the in-process runner
(standalone CI gate) executes it.

claim (compare-and-set on the row) -> render the rubric -> cache lookup / single-flight -> rate-limited provider
call with retries -> parse -> optional re-ask -> compare-and-set write of the verdict. A judgment is written exactly
once: a duplicate task finds the row claimed or finished and does nothing.

This module is the batch path (``JudgeEngine``: load, settle cache hits in bulk, claim, hand batch runs' judgments to
the batch stage, dispatch the rest to the call slots, wait for the verdicts' writes). It builds on
workers.asking (one claimed judgment asked), workers.dispatch (cache-aware dispatch), workers.stages (what the
stages hand each other), workers.retries (the retry policy), workers.billing (calls, tokens and cost),
workers.judgecache (cache keys and rows) and workers.verdicts (a reply read as a verdict).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future, wait
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.exc import InterfaceError, InternalError, OperationalError

from judge_api import logs, metrics
from judge_api.dberrors import database_unreachable, hand_back
from judge_api.judges import parse_judge
from judge_api.models import TERMINAL_STATUSES
from judge_api.reference_metrics import is_reference_judge
from judge_api.repository import cache, claims
from workers.asking import BUILD_LOCK, Asker
from workers.batch_clients import batchable
from workers.billing import CallTally
from workers.dispatch import dispatch
from workers.judgecache import cache_mode, cached_reply
from workers.stages import Asked, BatchStagePort, Loaded, Prepared
from workers.verdicts import parse_scored, verdict_values
from workers.writer import VerdictWrite

log = logging.getLogger(__name__)

# a batch waits for its verdicts' writes at most this many claim leases (a write that never resolves must not hold
# the task for good while the lease keeper renews its claims): the claims are then handed back and the task retries
WRITE_BACKSTOP_LEASES = 2.0


class HandedBack(Exception):
    """A batch handed its claims back after an infrastructure failure that is not the database being away (say the
    verdict writer failed, or a write did not resolve within ``WRITE_BACKSTOP_LEASES`` claim leases): the task is
    retried at once with back-off (``DURABLE_TASK``) so the judgments are re-sent within the claim lease, not left
    pending until the sweeper's requeue delay."""


@dataclass
class JudgeEngine(Asker):
    batch_stage_factory: Callable[[JudgeEngine], BatchStagePort] | None = field(default=None, repr=False)
    """Builds the batch stage of batch runs (``workers.batches.BatchStage``; workers.runtime gives it)."""
    _batches: BatchStagePort | None = field(default=None, repr=False)

    def judge(self, judgment_id: int) -> str:
        """Run one judgment; returns what happened (``done``, ``unparseable``, ``failed``, ``cancelled``,
        ``skipped`` when it is finished or held by another live worker, ``lost-claim``)."""
        return self.run_batch([judgment_id]).statuses.get(judgment_id, "skipped")

    def judge_many(self, judgment_ids: list[int]) -> dict[str, int]:
        """Judge a batch; returns how many judgments ended how (``cached``: settled from the cache in bulk;
        ``batched``: handed to a provider batch, workers.batches)."""
        return dict(self.run_batch(judgment_ids).counts)

    def judge_realtime(self, judgment_ids: list[int]) -> dict[str, int]:
        """Judge in real time even when their run is a batch run (``batch_retry: realtime``)."""
        return dict(self.run_batch(judgment_ids, realtime=True).counts)

    def batch_stage(self) -> BatchStagePort:
        with BUILD_LOCK:
            if self._batches is None:
                if self.batch_stage_factory is None:
                    raise RuntimeError("this engine has no batch stage (workers.runtime.build_engine gives one)")
                self._batches = self.batch_stage_factory(self)
            return self._batches

    # -- the batch path ----------------------------------------------------------------------------------------

    def run_batch(self, judgment_ids: list[int], realtime: bool = False) -> BatchResult:
        """Judge a batch; the database away, wait for it here (workers.dbwait) and go on with what is left under
        the same claim token (claims whose hand-back failed are taken again, not left to lapse)."""
        result = BatchResult()
        token = claims.new_token(self.holder)
        remaining = judgment_ids
        while True:
            try:
                self._run_batch_once(remaining, token, result, realtime)
                return result
            except (OperationalError, InterfaceError, InternalError) as exc:
                failed_at = time.monotonic()
                if not database_unreachable(exc):
                    raise
                # what this token gathered and holds goes on too (claim_many takes back what a token holds)
                remaining = [i for i in remaining if i not in result.statuses]
                remaining += sorted(result.gathered - result.statuses.keys() - set(remaining))
                log.warning("the database is away (%s); %d judgments wait for it", type(exc).__name__, len(remaining))
                if not self.database_gate().wait(failed_at):
                    raise

    def _run_batch_once(self, judgment_ids: list[int], token: str, result: BatchResult, realtime: bool) -> None:
        """One read for the rows, one cache query for their keys, one statement for the cache hits' verdicts, one
        statement to claim the rest; then each claimed judgment is asked (on the call pool when there are several)
        and its verdict written together with the cache entry it paid for. Judgments of batch runs go to provider
        batches instead (workers.batches), with their run's other pending judgments of the same judge."""
        rows = self._load(judgment_ids)
        result.planning |= {loaded.judgment.run_id for loaded in rows if loaded.judgment.plan_open}
        gathered: set[int] = set()
        if not realtime and any(loaded.judgment.execution == "batch" for loaded in rows):
            extra, gathered, lost = self._gather(rows, token)
            result.gathered |= gathered
            rows = [loaded for loaded in rows if loaded.judgment.id not in lost] + extra  # lost: skipped below
        try:
            mine = self._claim_prepared(judgment_ids, rows, gathered, token, result, realtime)
        except BaseException:
            for judgment_id in gathered:  # their claims lapse; the sweeper sends them again
                self.lease_keeper().drop(judgment_id)
            raise
        if not mine:
            return
        self._ask_claimed(mine, token, result)

    def _claim_prepared(
        self,
        judgment_ids: list[int],
        rows: list[Loaded],
        gathered: set[int],
        token: str,
        result: BatchResult,
        realtime: bool,
    ) -> list[Loaded]:
        """Prepare the pending judgments (and those ``gathered``, already claimed), settle the cache hits, claim the
        rest; hand batch runs' to provider batches. Returns the claimed judgments to ask now."""
        for missing in set(judgment_ids) - {loaded.judgment.id for loaded in rows}:
            result.record(missing, "skipped")
        to_claim: list[Loaded] = []
        prepared: list[Loaded] = []
        for loaded in rows:
            status = loaded.judgment.status
            if status in TERMINAL_STATUSES:
                result.record(loaded.judgment.id, "skipped")
                continue
            if status == "pending" or loaded.judgment.id in gathered:
                ready = self._prepare(loaded)
                if isinstance(ready, Prepared):
                    loaded.ready = ready
                    prepared.append(loaded)
                    continue
                loaded.settled = ready
            to_claim.append(loaded)  # a lapsed claim, or a judgment that cannot be asked
        if prepared:
            # options.cache 'refresh' / 'off': the judge cache is not read, so these are asked whatever it holds
            reading = [loaded for loaded in prepared if cache_mode(loaded.judgment) == "use"]
            to_claim += [loaded for loaded in prepared if cache_mode(loaded.judgment) != "use"]
            if reading:
                to_claim += self._settle_cache_hits(reading, result, gathered, token)
        if not to_claim:
            return []
        token, claimed = claims.claim_many(
            self.db, [loaded.judgment.id for loaded in to_claim], self.settings.claim_lease_s, token
        )
        mine = [loaded for loaded in to_claim if loaded.judgment.id in claimed]
        self.lease_keeper().hold([loaded.judgment.id for loaded in mine], token)
        for loaded in to_claim:
            if loaded.judgment.id not in claimed:
                self.lease_keeper().drop(loaded.judgment.id)
                result.record(loaded.judgment.id, "skipped")
        self._find_stashed(mine)
        if not realtime:
            mine = self._to_batches(mine, token, result)
        return mine

    def _ask_claimed(self, mine: list[Loaded], token: str, result: BatchResult) -> None:
        self._take_locks(mine)
        # a call slot asks and hands the verdict to the write stage; this (Celery) thread waits for the writes
        asked: list[tuple[Loaded, Future[Asked]]] = []
        if len(mine) == 1:
            single: Future[Asked] = Future()
            try:
                single.set_result(self._judge_claimed(mine[0], token))
            except BaseException as exc:
                single.set_exception(exc)
            asked.append((mine[0], single))
        else:
            asked = dispatch(self.call_pool(), mine, token, self._judge_claimed, self.settings, self.held_key_waiter())
            wait([future for _, future in asked])
        failure: BaseException | None = None
        deadline = time.monotonic() + WRITE_BACKSTOP_LEASES * self.settings.claim_lease_s
        for loaded, future in asked:
            error = future.exception()
            if error is None:
                error = self._finish(loaded, token, future.result(), result, deadline)
            else:  # never asked (the call pool shut down under a parked judgment) or failed: its claim may lapse
                self.lease_keeper().drop(loaded.judgment.id)
            if error is not None and failure is None:
                failure = error
        if failure is not None:  # the infrastructure failed (claims handed back where possible): the task retries
            if hand_back(failure) or not isinstance(failure, Exception):
                raise failure  # the database away (Celery's retry), or a shutdown (SystemExit, KeyboardInterrupt)
            raise HandedBack(f"{type(failure).__name__}: {failure}") from failure

    def _gather(self, rows: list[Loaded], token: str) -> tuple[list[Loaded], set[int], set[int]]:
        """A batch run's other pending judgments of the judges in hand, up to a provider batch's size: one batch
        for the run rather than one per task message. They and the task's own pending ones of those judges are
        claimed before they are prepared, so the run's other task messages, arriving meanwhile, find them taken
        instead of each preparing all of them again (16 threads made that 16 preparations of every judgment: ~50 ms
        of CPU a judgment, and 800 judgments submitted after ~40 s instead of ~3 s). Returns the other judgments
        (loaded), every judgment claimed here, and the task's own that another claim took first."""
        own: list[int] = []
        extra: list[int] = []
        known = {loaded.judgment.id for loaded in rows}
        pairs = {
            (loaded.judgment.run_id, loaded.judgment.judge)
            for loaded in rows
            if loaded.judgment.execution == "batch" and loaded.judgment.status == "pending"
        }
        for run_id, judge in sorted(pairs):
            if is_reference_judge(judge) or not batchable(parse_judge(judge)):
                continue
            own += [
                loaded.judgment.id
                for loaded in rows
                if (loaded.judgment.run_id, loaded.judgment.judge) == (run_id, judge)
                and loaded.judgment.execution == "batch"
                and loaded.judgment.status == "pending"
            ]
            extra += [
                jid
                for jid in claims.pending_of_judge(self.db, run_id, judge, self.settings.batch_max_requests)
                if jid not in known
            ]
        if not own and not extra:
            return [], set(), set()
        _, taken = claims.claim_many(self.db, own + extra, self.settings.claim_lease_s, token)
        self.lease_keeper().hold(sorted(taken), token)
        others = sorted(taken - set(own))
        return (self._load(others) if others else []), taken, set(own) - taken

    def _to_batches(self, mine: list[Loaded], token: str, result: BatchResult) -> list[Loaded]:
        """Hand the claimed judgments of batch runs to the batch stage; return those to ask in real time."""
        rest: list[Loaded] = []
        batch: list[Loaded] = []
        for loaded in mine:
            if loaded.judgment.execution != "batch" or loaded.settled is not None or loaded.stashed:
                rest.append(loaded)
                continue
            if loaded.ready is None:  # a lapsed claim: prepared here (not looked up in the cache)
                ready = self._prepare(loaded)
                if not isinstance(ready, Prepared):
                    loaded.settled = ready
                    rest.append(loaded)
                    continue
                loaded.ready = ready
            (batch if batchable(loaded.ready.spec) else rest).append(loaded)
        if not batch:
            return rest
        submitted = self.batch_stage().submit(batch, token)
        self.lease_keeper().hold([loaded.judgment.id for loaded in submitted.realtime], token)
        for judgment_id in submitted.batched:
            result.record(judgment_id, "batched")
        for judgment_id, status in submitted.settled.items():
            result.record(judgment_id, status)
        return rest + submitted.realtime

    def _take_locks(self, mine: list[Loaded]) -> None:
        """The single-flight locks of the claimed judgments the batch has just missed in the cache, in one round trip
        for the batch rather than one per judgment on its call slot (issue 26: service CPU); each is used by its
        judgment's first request and released with its verdict, or on hand-back, as before. A key another worker
        holds or has just filled goes the slow way (``SingleFlight.run``) on the call slot, as before."""
        fresh = [
            loaded
            for loaded in mine
            if loaded.known_miss
            and loaded.ready is not None
            and loaded.settled is None
            and cache_mode(loaded.judgment) == "use"
        ]
        if not fresh:
            return
        keys = [loaded.ready.key for loaded in fresh if loaded.ready is not None]
        for loaded, lease in zip(fresh, self.flight.acquire_many(keys, self.settings.claim_lease_s), strict=True):
            loaded.lock = lease
            loaded.lock_tried = True

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

    def _finish(
        self, loaded: Loaded, token: str, asked: Asked, result: BatchResult, deadline: float
    ) -> BaseException | None:
        """Wait for a verdict's write (never on a call slot) until ``deadline`` (``time.monotonic``) and record what
        happened; a write that failed or did not resolve in time hands the judgment back."""
        judgment_id = loaded.judgment.id
        try:
            written = asked.write.written.result(timeout=max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            self._hand_back(judgment_id, token, asked.paid)
            backstop = WRITE_BACKSTOP_LEASES * self.settings.claim_lease_s
            return TimeoutError(f"the verdict write of judgment {judgment_id} did not resolve within {backstop:g} s")
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

    def _settle_cache_hits(
        self, prepared: list[Loaded], result: BatchResult, claimed: set[int] | None = None, token: str = ""
    ) -> list[Loaded]:
        """Write the verdicts of cached judgments in one statement (those already ``claimed`` by ``token``, which a
        batch run's task gathered, through the verdict writer with their claim); return the rest (misses, re-asks
        to make)."""
        entries = cache.cache_entries(self.db, [loaded.ready.key for loaded in prepared if loaded.ready])
        rest: list[Loaded] = []
        writes: list[dict[str, Any]] = []
        held: list[VerdictWrite] = []
        for loaded in prepared:
            assert loaded.ready is not None
            entry = entries.get(loaded.ready.key)
            values = self._settle_from_cache(loaded, loaded.ready, entry) if entry is not None else None
            if values is None:
                loaded.known_miss = entry is None
                rest.append(loaded)
            elif claimed and loaded.judgment.id in claimed:
                held.append(VerdictWrite(loaded.judgment.id, token, values))
            else:
                writes.append({"jid": loaded.judgment.id, **values})
        if held:
            self._write_claimed_hits(held, prepared, result)
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

    def _write_claimed_hits(self, held: list[VerdictWrite], prepared: list[Loaded], result: BatchResult) -> None:
        writer = self.verdict_writer()
        for write in held:
            writer.submit(write)
        by_id = {loaded.judgment.id: loaded.judgment.judge for loaded in prepared}
        try:
            for write in held:
                if write.written.result():
                    metrics.judgment_finished(by_id[write.judgment_id], write.values)
                    result.record(write.judgment_id, "cached")
                else:
                    result.record(write.judgment_id, "lost-claim")
        finally:
            for write in held:
                self.lease_keeper().drop(write.judgment_id)

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


@dataclass
class BatchResult:
    statuses: dict[int, str] = field(default_factory=dict)
    counts: Counter[str] = field(default_factory=Counter)
    gathered: set[int] = field(default_factory=set)  # a batch run's judgments this token claimed beyond its own
    planning: set[str] = field(default_factory=set)  # runs whose planning was open when their judgments were read

    def record(self, judgment_id: int, status: str) -> None:
        self.statuses[judgment_id] = status
        self.counts[status] += 1
