"""Keeps the database and the broker in step (the database is the truth, a message only a pointer).

Publishing a stored run: :func:`mark_run_enqueued` stamps its judgments in the storing transaction, and
:func:`enqueue_run` sends them after the response. Re-sending what the queue lost: judgments pending but not
recently enqueued, and judgments whose worker died holding the claim; the :class:`Sweeper` runs in every worker and
API process (one at a time, under a Redis lock) and on demand (``dialogue-judge requeue``). A Redis restart (new
server run id) triggers an immediate full re-enqueue of pending work. Every sweep also asks a worker to poll the due
provider batches of batch runs and takes the planning step of adaptive runs a killed worker left without one
(``judge_api.adaptive.steps``).

Between sweeps the sweeper looks every heartbeat interval (``judge_api.heartbeats``, 2 s) for what must not wait a
sweep interval: a worker whose heartbeat lapsed (its claims are released and re-sent at once, and once the queue has
drained, what was enqueued before it died and is still pending, i.e. the messages it had taken and not claimed, is
re-sent too), a Redis restart, and a sweep that failed because the database or Redis was away (retried at the next
look, so work resumes within seconds of their return). The claim lease stays the safety net for a worker that is
alive but stuck, and for one that died while Redis was down.

It needs only storage and :mod:`judge_api.queue` (kept free of storage imports: ``dialogue-judge up`` imports it for
the queue name), so it lives in ``judge_api``, not in ``workers``.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from datetime import UTC, datetime
from typing import Any

import redis
from sqlalchemy import update
from sqlalchemy.orm import Session

from judge_api import alerts, heartbeats, metrics, monitor_retention, queue, webhooks
from judge_api.adaptive import steps as adaptive_steps
from judge_api.config import Settings
from judge_api.db import session_factory, session_scope
from judge_api.models import Judgment, utcnow
from judge_api.repository import batches, claims, generations
from judge_api.rubrics import get_registry

log = logging.getLogger(__name__)


def redis_client(settings: Settings) -> redis.Redis:
    """A client of the broker's Redis, for what goes past Celery: the sweeper's lock and queue length (and the
    workers' shared rate limits and single-flight)."""
    url = settings.resolved_redis_url()
    if url is None:
        raise RuntimeError("REDIS_URL is not set")
    return redis.Redis.from_url(url, socket_timeout=10, socket_connect_timeout=5, retry_on_timeout=True)


def mark_run_enqueued(session: Session, run_id: str) -> None:
    """Stamp the run's pending judgments as enqueued, in the transaction that stores (or retries) them.

    A pending judgment with no ``enqueued_at`` is stale to the sweepers at once, so without the stamp a sweep that
    lands while :func:`enqueue_run` is still publishing re-sends the whole run (10,000 duplicate tasks for a
    10,000-judgment run in the benchmark). If the API dies before publishing, the sweepers send the run after
    DJ_REQUEUE_AFTER; if publishing fails, :func:`enqueue_run` clears the stamp so they send it at their next round.
    """
    session.execute(
        update(Judgment).where(Judgment.run_id == run_id, Judgment.status == "pending").values(enqueued_at=utcnow())
    )
    generations.mark_generations_enqueued(session, run_id=run_id)


def enqueue_run(settings: Settings, run_id: str) -> None:
    """Publish a stored run's pending judgments and generations (a background task of the submitting request)."""
    ids: list[int] = []
    generation_ids: list[int] = []
    try:
        with session_scope() as session:
            ids = claims.pending_judgment_ids(session, run_id)
            generation_ids = generations.pending_generation_ids(session, run_id)
        queue.enqueue_generations(settings, generation_ids)
        queue.enqueue(settings, ids)
    except Exception as exc:  # Redis down: the judgments stay pending and the sweeper sends them later
        log.warning("could not enqueue run %s now (%s); the sweeper will retry", run_id, exc)
        with contextlib.suppress(Exception), session_scope() as session:
            session.execute(
                update(Judgment).where(Judgment.run_id == run_id, Judgment.status == "pending").values(enqueued_at=None)
            )
            generations.clear_enqueued(session, run_id)


def publish_released(settings: Settings, judgment_ids: list[int]) -> None:
    """Send the judgments an item's release planned (its responses generated). Unsent (Redis down), they are
    pending and never enqueued, which the next sweep sends."""
    if not judgment_ids:
        return
    try:
        queue.enqueue(settings, judgment_ids)
        with session_scope() as session:
            claims.mark_enqueued(session, judgment_ids)
    except Exception as exc:
        log.warning("could not enqueue %d released judgments now (%s); the sweeper will", len(judgment_ids), exc)


def requeue_stale_generations(
    settings: Settings, *, everything_pending: bool = False, queue_drained: bool = True
) -> int:
    """Runs with systems: re-send generations whose worker died holding the claim, or whose message was lost; then
    release the items whose generations are all settled but whose judgments were never planned (and send those)."""
    with session_scope() as session:
        if everything_pending:
            ids = generations.stale_generation_ids(session, 0.0, settings.claim_lease_s)
        else:
            ids = generations.stale_generation_ids(
                session, settings.requeue_after_s, settings.claim_lease_s, include_pending=queue_drained
            )
        if ids:
            queue.enqueue_generations(settings, ids)
            generations.mark_generations_enqueued(session, ids)
            log.info("re-enqueued %d generations", len(ids))
        items = generations.unreleased_settled_items(session)
    for item_pk in items:
        with session_scope() as session:
            released = generations.release_item(session, item_pk, get_registry())
        publish_released(settings, released)
    return len(ids)


def requeue_stale(
    settings: Settings,
    *,
    everything_pending: bool = False,
    queue_drained: bool = True,
    sent_before: datetime | None = None,
) -> int:
    """Send lost work again. Pending judgments whose message may still wait in the queue are re-sent only once the
    queue has drained (``queue_drained``) and their last send is ``requeue_after_s`` old (default
    ``DJ_REQUEUE_AFTER``), or was before ``sent_before`` (a worker's death: what was sent before it and is still
    pending), so a long run is not duplicated at every sweep; after a Redis restart (``everything_pending``) all of
    them are re-sent at once."""
    with session_scope() as session:
        if everything_pending:
            ids = claims.stale_judgment_ids(session, 0.0, settings.claim_lease_s)
        else:
            ids = claims.stale_judgment_ids(
                session,
                settings.requeue_after_s,
                settings.claim_lease_s,
                include_pending=queue_drained,
                sent_before=sent_before,
            )
        if not ids:
            return 0
        sent = queue.enqueue(settings, ids)
        claims.mark_enqueued(session, ids)
    metrics.resent(sent)
    log.info("re-enqueued %d judgments", sent)
    return sent


def poll_provider_batches(settings: Settings) -> bool:
    """Batch runs: send a worker to poll the provider batches that are due (one message a sweep at most; the
    pollers take each batch by compare-and-set). True if one was sent."""
    try:
        with session_scope() as session:
            due = batches.any_due(session)
        if due:
            queue.request_batch_poll(settings)
        return due
    except Exception as exc:  # the database or Redis is away: the next sweep asks again
        log.warning("provider batch poll request failed: %s", exc)
        return False


DEATH_KEY = "dj:sweeper:death-at"  # epoch seconds: a worker died; what it took before is re-sent once drained


def release_dead_worker(settings: Settings, instance: str) -> int:
    """Hand back the claims of a worker whose heartbeat lapsed and send them again; returns how many. Raises when
    the database or Redis is away: the next look tries again (what was released and not sent, the next sweep sends).

    The release is committed before the re-send: a worker that takes the message at once must find the judgments
    pending. Sent inside the releasing transaction, the message met them still held by the dead worker, the taker
    skipped them, and being stamped as just sent they waited out the requeue delay (DJ_REQUEUE_AFTER, 60 s)."""
    with session_scope() as session:
        ids = claims.release_holder(session, instance, enqueued_at=utcnow())
    if not ids:
        return 0
    try:
        queue.enqueue(settings, ids)
    except Exception:
        with contextlib.suppress(Exception), session_scope() as session:
            claims.clear_enqueued(session, ids)
        raise
    metrics.resent(len(ids))
    return len(ids)


def step_adaptive_runs(settings: Settings) -> int:
    """Take the planning step of every open adaptive run that has nothing in flight (one a killed worker never
    took: its verdicts are stored, the next batch is not). Returns how many judgments were planned."""
    try:
        return adaptive_steps.sweep(settings, session_factory())
    except Exception as exc:  # the database is away: the next sweep tries again
        log.warning("adaptive planning steps failed: %s", exc)
        return 0


OTLP_POLL_S = 1.0
OTLP_PURGE_EVERY_S = 60.0


class OtlpProcessor(threading.Thread):
    """Processes the OTLP spans the receiver stored (judge_api.otlp.intake.process_received): at once in the
    process that received them (the receiver sets ``received_event``), within OTLP_POLL_S in every other process
    with a sweeper. Any number run at once: each span is claimed by one. Each look also releases the responses
    whose wait ran out (DJ_OTLP_WAIT + about a second, with or without Redis) and, every OTLP_PURGE_EVERY_S, purges
    the history past DJ_OTLP_HISTORY_DAYS (the API without Redis has no sweeper to do either)."""

    def __init__(self, settings: Settings, stop_event: threading.Event) -> None:
        super().__init__(name="dj-otlp", daemon=True)
        self.settings = settings
        self.stop_event = stop_event
        self._purged_at = -OTLP_PURGE_EVERY_S

    def run(self) -> None:
        while not self.stop_event.is_set():
            woken = intake_module().received_event.wait(OTLP_POLL_S)
            intake_module().received_event.clear()
            if self.stop_event.is_set():
                return
            try:
                self.look(woken)
            except Exception as exc:  # the database is away: the spans stay received, the next look retries
                log.warning("processing received OTLP spans failed: %s", exc)
                self.stop_event.wait(OTLP_POLL_S)

    def look(self, woken: bool) -> None:
        """One look: process what was received (when woken, or when something is), release what is due."""
        from judge_api.repository import otlp as spans_store

        intake = intake_module()
        factory = session_factory()
        if not woken:
            with session_scope() as session:
                woken = spans_store.any_received(session)
        if woken:
            intake.process_received(factory, self.settings)
        purge = time.monotonic() - self._purged_at >= OTLP_PURGE_EVERY_S
        intake.release_due(factory, self.settings, purge=purge)
        if purge:
            self._purged_at = time.monotonic()


def intake_module() -> Any:
    from judge_api.otlp import intake

    return intake


def release_otlp_responses(settings: Settings) -> int:
    """OTLP responses whose earlier turns did not arrive within DJ_OTLP_WAIT: judged with what arrived
    (judge_api.otlp.intake). Returns how many were handed to their monitors."""
    from judge_api.otlp.intake import release_due

    try:
        return release_due(session_factory(), settings)
    except Exception as exc:  # the database is away: the next sweep tries again
        log.warning("releasing waiting OTLP responses failed: %s", exc)
        return 0


class Sweeper(threading.Thread):
    def __init__(self, settings: Settings, client: redis.Redis, *, otlp: bool = True) -> None:
        super().__init__(name="dj-sweeper", daemon=True)
        self.settings = settings
        self.client = client
        self.stop_event = threading.Event()
        self._redis_run_id: str | None = None
        self._retention_at = -monitor_retention.RETENTION_EVERY_S
        # webhooks go out in their own thread: a slow receiver must not hold up this loop's dead-worker checks
        self.webhook_sender = webhooks.Sender(settings, self.stop_event)
        self.otlp_processor = OtlpProcessor(settings, self.stop_event) if otlp else None

    def start(self) -> None:
        super().start()
        self.webhook_sender.start()
        if self.otlp_processor is not None:
            self.otlp_processor.start()

    def _redis_restarted(self) -> bool:
        run_id = str(self.client.info("server").get("run_id"))
        restarted = self._redis_run_id is not None and run_id != self._redis_run_id
        self._redis_run_id = run_id
        return restarted

    def check_workers(self) -> int:
        """Release and re-send the claims of every worker whose heartbeat lapsed; once the queue has drained after
        a death, re-send what is still pending from before it (the messages the dead worker had taken and not
        claimed yet). Returns how many judgments were sent."""
        if not heartbeats.dead_instances(self.client) and self.client.get(DEATH_KEY) is None:
            return 0  # every tick of every process comes here: no death to act on, so no lock to take and give back
        lock = self.client.lock("dj:sweeper:workers", timeout=60, blocking=False)
        if not lock.acquire():
            return 0
        sent = 0
        try:
            for instance, name in heartbeats.dead_instances(self.client).items():
                found_at = time.time()  # before the re-send below stamps the released judgments as enqueued
                released = release_dead_worker(self.settings, instance)
                heartbeats.release_locks(self.client, instance)
                self.client.set(DEATH_KEY, found_at, nx=True)
                heartbeats.bury(self.client, instance)
                log.warning("worker %s (%s) stopped beating: re-sent its %d claims", name, instance, released)
                sent += released
            died_at = self.client.get(DEATH_KEY)
            if died_at is not None and int(self.client.llen(queue.JUDGE_QUEUE)) == 0:
                # an absolute cut-off: an age measured now would move it past the death by however long this look
                # took, and take the claims released at the death (sent just after it) for unsent ones
                before = datetime.fromtimestamp(float(died_at), UTC).replace(tzinfo=None)
                sent += requeue_stale(self.settings, queue_drained=True, sent_before=before)
                self.client.delete(DEATH_KEY)
            return sent
        finally:
            with contextlib.suppress(redis.exceptions.LockError):
                lock.release()

    def sweep_once(self) -> int:
        restarted = self._redis_restarted()
        lock = self.client.lock("dj:sweeper", timeout=max(10, int(self.settings.sweep_interval_s * 4)), blocking=False)
        if not lock.acquire():
            return 0
        try:
            if restarted:
                log.warning("Redis restarted (new run id): re-enqueueing all pending judgments")
            drained = int(self.client.llen(queue.JUDGE_QUEUE)) == 0
            sent = requeue_stale(self.settings, everything_pending=restarted, queue_drained=drained)
            try:
                sent += requeue_stale_generations(self.settings, everything_pending=restarted, queue_drained=drained)
            except Exception as exc:  # the judgments' sweep is done; this one retries next round
                log.warning("generation sweep failed: %s", exc)
            step_adaptive_runs(self.settings)
            release_otlp_responses(self.settings)
            self._monitor_retention()
            poll_provider_batches(self.settings)
            try:
                alerts.evaluate_all()  # under the lock: one process decides a monitor's alerts at a time
            except Exception as exc:
                log.warning("alert evaluation failed: %s", exc)
            return sent
        finally:
            with contextlib.suppress(redis.exceptions.LockError):
                lock.release()

    def _monitor_retention(self) -> None:
        if time.monotonic() - self._retention_at < monitor_retention.RETENTION_EVERY_S:
            return
        self._retention_at = time.monotonic()
        try:
            monitor_retention.apply()
        except Exception as exc:  # the database is away: the next round tries again
            log.warning("monitor retention failed: %s", exc)

    def run(self) -> None:
        tick = min(self.settings.sweep_interval_s, heartbeats.INTERVAL_S)
        next_sweep = time.monotonic() + self.settings.sweep_interval_s
        while not self.stop_event.wait(tick):
            restarted = False
            try:
                self.check_workers()
                run_id = str(self.client.info("server").get("run_id"))
                restarted = self._redis_run_id is not None and run_id != self._redis_run_id
            except Exception as exc:  # Redis or the database is down: look again next tick
                log.warning("worker check failed: %s", exc)
            if not restarted and time.monotonic() < next_sweep:
                continue
            try:
                self.sweep_once()
                next_sweep = time.monotonic() + self.settings.sweep_interval_s
            except Exception as exc:  # Redis or the database is down: try again next tick, not next round
                log.warning("sweep failed: %s", exc)
                next_sweep = time.monotonic()
