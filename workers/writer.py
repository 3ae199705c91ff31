"""Group commit for verdicts: judgments that called the provider finish at their own pace, one by one; writing each
in its own transaction costs a connection checkout, a ping, the statements and a commit per judgment. The writer
thread takes what has finished, sleeps ``DJ_WRITE_LINGER_MS`` while other judgments of this process are still being
asked (never when nothing else is under way, so a lone judgment is written at once), takes what arrived meanwhile
(at most ``DJ_WRITE_GROUP``) and writes the group in one transaction: the verdicts, each a compare-and-set on its
claim token, then the cache entries the group paid for (none of a judgment that is gone: its run was deleted).
Then it releases the group's single-flight locks in one call.

The write is a stage of its own: a provider-call slot hands its verdict over (:meth:`VerdictWriter.submit`) and
takes the next call at once, so the linger and the commit never hold provider concurrency. The Celery task that
owns the batch waits for ``VerdictWrite.written`` (a message is acknowledged only after its verdicts are stored), at
most ``workers.execute.WRITE_BACKSTOP_LEASES`` claim leases: then it hands the claims back and retries.

The database unreachable (what :func:`judge_api.dberrors.database_unreachable` recognises: no connection, a server
shutting down, a deadlock, a locked SQLite file): the writer retries the group with back-off (``_RETRY_BASE_S``
doubling up to ``_RETRY_MAX_S``) for as long as it takes (any other ``OperationalError``, such as SQLite's missing
table, and a transaction the server ended, 25P03/25P04, which the same group may meet on every try, reach the
callers after ``_PERMANENT_TRIES``); the replies are stashed in Redis
(:mod:`workers.stash`) meanwhile, so even if this process dies nothing paid is lost or paid again. After a commit
it clears the group's stashes; a judgment whose claim was lost gives its stash up and, if the calls are still its
own to count, adds them to the row (``claims.add_unused_calls``): every provider call is counted once (when Redis
cannot say whose they are, the claim is asked about again every second until it can; nothing is counted meanwhile,
so a call is never counted twice). Any other
error reaches every caller of the group, who hands its judgment back. Once a group is committed, every caller gets
its result even if releasing the locks, settling the stashes or counting lost claims' calls fails (a caller waiting
on it never hangs), and none of these steps is skipped because another failed.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.exc import InterfaceError, InternalError, OperationalError

from judge_api import metrics, tracing
from judge_api.dberrors import database_unreachable, hand_back
from judge_api.models import utcnow
from judge_api.repository import claims
from workers.singleflight import Lease, SingleFlight
from workers.stash import ReplyStash

log = logging.getLogger(__name__)
_IDLE_EXIT_S = 60.0  # a writer thread with nothing to write for this long ends
_RETRY_BASE_S = 0.25  # the database unreachable: retry a group after this, doubling
_RETRY_MAX_S = 1.0  # the database back: the group is written within a second
_PERMANENT_TRIES = 3  # an OperationalError that is not the database being away: tries before the callers get it
_UNDECIDED_RETRY_S = 1.0  # a lost claim Redis could not answer about is asked again after this


@dataclass
class VerdictWrite:
    judgment_id: int
    token: str
    values: dict[str, Any]
    cache_rows: Sequence[dict[str, Any]] = ()
    leases: Sequence[Lease] = ()
    stash_keys: Sequence[str] = ()  # stashed replies this claim records (cleared once committed)
    # a lost claim's calls are added to its row (they were paid and nobody else counts them); not so for a provider
    # batch's result, which whoever holds the batch's claim writes, calls included (workers.batches)
    count_lost: bool = True
    written: Future[bool] = field(default_factory=Future)


class VerdictWriter:
    def __init__(
        self,
        engine: Engine,
        flight: SingleFlight,
        linger_s: float,
        max_group: int,
        stash: ReplyStash | None = None,
        sleep: Any = time.sleep,
    ) -> None:
        self.engine = engine
        self.flight = flight
        self.stash = stash
        self.sleep = sleep
        self.linger_s = linger_s
        self.max_group = max_group
        self._queue: queue.SimpleQueue[VerdictWrite] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._asking = 0  # judgments of this process between their claim and their write
        self._asking_lock = threading.Lock()
        self._undecided: list[VerdictWrite] = []  # lost claims whose stash Redis could not release yet
        self._undecided_lock = threading.Lock()
        self._undecided_next = 0.0

    @contextmanager
    def asking(self) -> Iterator[None]:
        """Around the evaluation of a claimed judgment: while any are under way, a group is worth waiting for."""
        with self._asking_lock:
            self._asking += 1
        try:
            yield
        finally:
            with self._asking_lock:
                self._asking -= 1

    def write(self, item: VerdictWrite) -> bool:
        """Store the verdict (and its cache entries) and wait; True if this claim still held. Raises what the
        database raised (other than its being unreachable, which is retried); the leases are then still held."""
        return self.submit(item).result()

    def submit(self, item: VerdictWrite) -> Future[bool]:
        """Hand the verdict to the write stage without waiting: ``item.written`` resolves once it is committed."""
        self._queue.put(item)
        self._ensure_started()
        return item.written

    def _ensure_started(self) -> None:
        with self._start_lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="dj-verdict-writer", daemon=True)
                self._thread.start()

    def _loop(self) -> None:
        while True:
            try:
                group = self._next_group()
            except BaseException:  # never: a queue read does not fail; the next write starts another thread
                log.exception("the verdict writer could not take its next group")
                with self._start_lock:
                    self._thread = None
                return
            if not group:  # idle: the thread ends (the next write starts another)
                return
            try:
                self._finish(group)
            except BaseException as exc:  # every caller still waiting hands its judgment back; its task retries
                for item in group:
                    if not item.written.done():
                        item.written.set_exception(exc)

    def _finish(self, group: list[VerdictWrite]) -> None:
        """Write the group, then the bookkeeping after the commit. Whatever the bookkeeping raises, every future of
        a committed group resolves with its result (a caller waiting on it must never hang)."""
        written = self._write_group(group)
        try:
            self.flight.release([lease for item in group for lease in item.leases], committed=True)
        except Exception:  # the verdicts are stored; unreleased locks lapse with their lease
            log.exception("could not release single-flight locks")
        try:
            try:
                self._settle_stashes(group, written)
            except Exception:  # the verdicts are stored; uncleared stashes lapse with their time to live
                log.exception("could not settle the stashed replies of %d verdicts", len(group))
            # counted whatever settling did: the calls of a lost claim were paid, and nothing else records them
            lost = [item for item, ok in zip(group, written, strict=True) if not ok]
            try:
                self._count_lost(lost + self._undecided_due())
            except Exception:
                log.exception("could not count the calls of %d lost claims", len(lost))
        finally:
            for item, ok in zip(group, written, strict=True):
                item.written.set_result(ok)

    def _write_group(self, group: list[VerdictWrite]) -> list[bool]:
        delay = _RETRY_BASE_S
        permanent_failures = 0
        stamp = utcnow()  # the same on every try: a commit cut mid-way is recognised on the retry (no double count)
        while True:
            try:
                with (
                    metrics.verdict_write(len(group)),
                    tracing.span("verdict.write", judgments=len(group)) as current,
                ):
                    if current is not None:
                        tracing.set_attribute(current, "judgment_ids", [item.judgment_id for item in group])
                    return claims.write_verdicts(
                        self.engine,
                        [(item.judgment_id, item.token, item.values) for item in group],
                        stamp=stamp,
                        paid_rows=[item.cache_rows for item in group],
                    )
            except (OperationalError, InterfaceError, InternalError) as exc:
                if not hand_back(exc):
                    raise  # a bug, not the database: the callers hand their judgments back
                if not database_unreachable(exc):
                    permanent_failures += 1
                    if permanent_failures >= _PERMANENT_TRIES:
                        raise  # not the database being away: the callers hand their judgments back
                # unreachable: the replies wait (and are stashed) for as long as it takes
                log.warning("could not write %d verdicts (%s); retrying in %.2fs", len(group), exc, delay)
                self.sleep(delay)
                delay = min(_RETRY_MAX_S, delay * 2)

    def _settle_stashes(self, group: list[VerdictWrite], written: list[bool]) -> None:
        """Committed: the stashes of the written verdicts are no longer needed (a lost claim's are given up by
        :meth:`_count_lost`, which adds its calls to the row, so the provider's bill and the database agree)."""
        if self.stash is not None:
            self.stash.settle(
                [(key, item.token) for item, ok in zip(group, written, strict=True) if ok for key in item.stash_keys]
            )

    def _count_lost(self, lost: list[VerdictWrite]) -> None:
        """Add the calls of lost claims to their rows where they are still the claims' to count. When Redis cannot
        say whether another claim took a stashed reply over (and counts it), nothing is counted now: the claim is
        asked about again later (a call counted twice is worse than one counted late)."""
        unused: list[dict[str, Any]] = []
        for item in lost:
            if not item.count_lost:
                continue
            if self.stash is not None:
                mine = self.stash.release_lost(item.stash_keys, item.token)
                if mine is None:
                    with self._undecided_lock:
                        self._undecided.append(item)
                    continue
                if not mine:
                    continue  # another claim of this judgment took the reply over and counts it
            if int(item.values.get("provider_calls") or 0) > 0:
                unused.append(
                    {
                        "jid": item.judgment_id,
                        "calls": int(item.values.get("provider_calls") or 0),
                        "cost": float(item.values.get("cost_usd") or 0.0),
                    }
                )
        if not unused:
            return
        delay = _RETRY_BASE_S
        for _ in range(20):
            try:
                claims.add_unused_calls(self.engine, unused)
                log.info("recorded the provider calls of %d judgments whose claims were lost", len(unused))
                return
            except (OperationalError, InterfaceError, InternalError) as exc:
                if not hand_back(exc):
                    raise
                log.warning("could not record unused provider calls (%s); retrying in %.2fs", exc, delay)
                self.sleep(delay)
                delay = min(_RETRY_MAX_S, delay * 2)
        log.error("provider calls of judgments %s not recorded", [u["jid"] for u in unused])

    def _undecided_due(self) -> list[VerdictWrite]:
        """The lost claims to ask about again (at most every ``_UNDECIDED_RETRY_S``)."""
        now = time.monotonic()
        with self._undecided_lock:
            if not self._undecided or now < self._undecided_next:
                return []
            due, self._undecided = self._undecided, []
            self._undecided_next = now + _UNDECIDED_RETRY_S
        return due

    def undecided(self) -> int:
        """Lost claims whose calls wait for Redis to say who counts them."""
        with self._undecided_lock:
            return len(self._undecided)

    def _next_group(self) -> list[VerdictWrite]:
        idle_until = time.monotonic() + _IDLE_EXIT_S
        while True:
            waiting = self.undecided() > 0  # no writes come: ask about the undecided lost claims meanwhile
            try:
                group = [self._queue.get(timeout=_UNDECIDED_RETRY_S if waiting else _IDLE_EXIT_S)]
                break
            except queue.Empty:
                if waiting:
                    try:
                        self._count_lost(self._undecided_due())
                    except Exception:
                        log.exception("could not count the calls of lost claims")
                if waiting and time.monotonic() < idle_until:
                    continue
                with self._start_lock:
                    if self._queue.empty():  # a writer that puts now finds no thread and starts one
                        self._thread = None
                        return []
                group = [self._queue.get()]
                break
        if self._asking > 0 and self.linger_s > 0:
            # sleep through the linger instead of waking for every verdict that arrives: one wake-up per group
            time.sleep(self.linger_s)
        while len(group) < self.max_group:
            try:
                group.append(self._queue.get_nowait())
            except queue.Empty:
                break
        return group
