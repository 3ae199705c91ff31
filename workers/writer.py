"""Group commit for verdicts: judgments that called the provider finish at their own pace, one by one; writing each
in its own transaction costs a connection checkout, a ping, the statements and a commit per judgment. The writer
thread takes what has finished, sleeps ``DJ_WRITE_LINGER_MS`` while other judgments of this process are still being
asked (never when nothing else is under way, so a lone judgment is written at once), takes what arrived meanwhile
(at most ``DJ_WRITE_GROUP``) and writes the group in one transaction: the cache entries the group paid for, then the
verdicts, each a compare-and-set on its claim token. Then it releases the group's single-flight locks in one call.

The caller blocks until its group is committed (a Celery message is acknowledged only after its verdicts are
stored). If the transaction fails, every caller of the group gets the error and hands its judgment back, exactly as
a failed write of its own would.
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

from judge_api import metrics, tracing
from judge_api.repository import claims
from workers.singleflight import Lease, SingleFlight

log = logging.getLogger(__name__)
_IDLE_EXIT_S = 60.0  # a writer thread with nothing to write for this long ends


@dataclass
class VerdictWrite:
    judgment_id: int
    token: str
    values: dict[str, Any]
    cache_rows: Sequence[dict[str, Any]] = ()
    leases: Sequence[Lease] = ()
    written: Future[bool] = field(default_factory=Future)


class VerdictWriter:
    def __init__(self, engine: Engine, flight: SingleFlight, linger_s: float, max_group: int) -> None:
        self.engine = engine
        self.flight = flight
        self.linger_s = linger_s
        self.max_group = max_group
        self._queue: queue.SimpleQueue[VerdictWrite] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._asking = 0  # judgments of this process between their claim and their write
        self._asking_lock = threading.Lock()

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
        """Store the verdict (and its cache entries); True if this claim still held. Raises what the database
        raised; the leases are then still held by the caller."""
        self._queue.put(item)
        self._ensure_started()
        return item.written.result()

    def _ensure_started(self) -> None:
        with self._start_lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="dj-verdict-writer", daemon=True)
                self._thread.start()

    def _loop(self) -> None:
        while True:
            group = self._next_group()
            if not group:  # idle: the thread ends (the next write starts another)
                return
            try:
                with (
                    metrics.verdict_write(len(group)),
                    tracing.span("verdict.write", judgments=len(group)) as current,
                ):
                    if current is not None:
                        tracing.set_attribute(current, "judgment_ids", [item.judgment_id for item in group])
                    written = claims.write_verdicts(
                        self.engine,
                        [(item.judgment_id, item.token, item.values) for item in group],
                        [row for item in group for row in item.cache_rows],
                    )
            except BaseException as exc:  # every caller hands its judgment back and lets its task retry
                for item in group:
                    item.written.set_exception(exc)
                continue
            try:
                self.flight.release([lease for item in group for lease in item.leases], committed=True)
            except Exception:  # the verdicts are stored; unreleased locks lapse with their lease
                log.exception("could not release single-flight locks")
            for item, ok in zip(group, written, strict=True):
                item.written.set_result(ok)

    def _next_group(self) -> list[VerdictWrite]:
        try:
            group = [self._queue.get(timeout=_IDLE_EXIT_S)]
        except queue.Empty:
            with self._start_lock:
                if self._queue.empty():  # a writer that puts now finds no thread and starts one
                    self._thread = None
                    return []
            group = [self._queue.get()]
        if self._asking > 0 and self.linger_s > 0:
            # sleep through the linger instead of waking for every verdict that arrives: one wake-up per group
            time.sleep(self.linger_s)
        while len(group) < self.max_group:
            try:
                group.append(self._queue.get_nowait())
            except queue.Empty:
                break
        return group
