"""The Celery application. A judgment is a task; the database row is the truth, the message only a pointer.

``acks_late`` + ``reject_on_worker_lost``: a worker killed mid-task leaves its message unacknowledged, Redis hands
it out again after the visibility timeout, and the claim/compare-and-set in workers.execute keeps the judgment
single. The sweeper covers what Redis itself loses (a restart without persistence).
"""

from __future__ import annotations

import gc
import logging
import os
from typing import Any

import click
import kombu
import redis
from celery import Celery, bootsteps, signals
from kombu.transport import redis as kombu_redis
from kombu.transport import virtual as kombu_virtual
from sqlalchemy.exc import InterfaceError, InternalError, OperationalError

from judge_api import heartbeats, logs, metrics, tracing
from judge_api.adaptive import steps
from judge_api.config import get_settings
from judge_api.db import reset_engines
from judge_api.queue import (
    GENERATE_TASK,
    JUDGE_BATCH_TASK,
    JUDGE_QUEUE,
    JUDGE_TASK,
    POLL_BATCHES_TASK,
    celery_config,
)
from judge_api.sweeper import Sweeper, redis_client
from workers import runtime
from workers.execute import HandedBack, JudgeEngine
from workers.responders.stored import generate_stored

log = logging.getLogger(__name__)


def _broker_gone(qos: Any, exc: BaseException) -> bool:
    """The error says the channel's connection is closed or Redis cannot be reached (not a bug to let through)."""
    if isinstance(exc, redis.exceptions.ConnectionError | OSError):
        return True
    transport = getattr(qos.channel, "connection", None)  # None once the channel is closed
    return isinstance(exc, AttributeError) and (transport is None or getattr(transport, "client", None) is None)


def _survive_broker_loss() -> None:
    """kombu (5.x) on a Redis outage or restart:

    - closing the worker's channel tries to put its unacknowledged messages back through the connection that is
      already gone, raises AttributeError and kills the worker;
    - a task that was running across the reconnect is acknowledged through its old, closed channel, which raises
      AttributeError inside the consumer loop: Celery calls it unrecoverable and the worker stops consuming for
      good (the sweeper's re-sent messages then wait for a consumer that never comes).

    Both are bookkeeping for messages of a channel that no longer exists: they come back anyway (the visibility
    timeout, or the sweeper once Redis is up again) and the claim's compare-and-set makes a second delivery a
    no-op. So the worker logs it, drops the message from its own books (freeing the prefetch slot) and keeps
    consuming."""
    qos_class = kombu_redis.QoS
    if getattr(qos_class.ack, "_dj_tolerant", False):
        return
    restore_unacked, ack, reject = qos_class.restore_unacked, qos_class.ack, qos_class.reject
    forget = kombu_virtual.QoS.ack  # the in-process part of an ack: no Redis call

    def tolerant_restore_unacked(self: Any, client: Any = None) -> Any:
        try:
            return restore_unacked(self, client)
        except (AttributeError, redis.exceptions.ConnectionError, OSError) as exc:
            if not _broker_gone(self, exc):
                raise
            log.warning("could not restore unacknowledged messages while Redis is down (%r); the sweeper will", exc)
            return None

    def tolerant_ack(self: Any, delivery_tag: Any) -> None:
        try:
            ack(self, delivery_tag)
        except (AttributeError, redis.exceptions.ConnectionError, OSError) as exc:
            if not _broker_gone(self, exc):
                raise
            log.warning("message %s: its channel is gone (%r); acknowledged locally only", delivery_tag, exc)
            forget(self, delivery_tag)

    def tolerant_reject(self: Any, delivery_tag: Any, requeue: bool = False) -> None:
        try:
            reject(self, delivery_tag, requeue=requeue)
        except (AttributeError, redis.exceptions.ConnectionError, OSError) as exc:
            if not _broker_gone(self, exc):
                raise
            log.warning("message %s: its channel is gone (%r); rejected locally only", delivery_tag, exc)
            forget(self, delivery_tag)

    methods: dict[str, Any] = {
        "restore_unacked": tolerant_restore_unacked,
        "ack": tolerant_ack,
        "reject": tolerant_reject,
    }
    for name, method in methods.items():
        method._dj_tolerant = True
        setattr(qos_class, name, method)


_survive_broker_loss()


def _reconnect_promptly() -> None:
    """Celery's consumer reaches a lost broker with kombu's default back-off (2 s, then 4, 6, ... up to 30 s), so a
    Redis back after a 3 s restart was reconnected to 3 s later (the issue's Redis restart cost). Start at 0.5 s and
    grow by 0.25 s (a 3 s outage is reconnected within about 1 s); with Celery's 100 attempts the worker still keeps
    trying for about 20 minutes before it gives up."""
    ensure = kombu.Connection.ensure_connection
    if getattr(ensure, "_dj_prompt", False):
        return

    def prompt(self: Any, *args: Any, **kwargs: Any) -> Any:
        if len(args) <= 2:  # (errback, max_retries) as Celery passes them; explicit intervals are kept
            kwargs.setdefault("interval_start", 0.5)
            kwargs.setdefault("interval_step", 0.25)
        return ensure(self, *args, **kwargs)

    prompt._dj_prompt = True  # type: ignore[attr-defined]
    kombu.Connection.ensure_connection = prompt  # type: ignore[method-assign]


_reconnect_promptly()


def _reuse_channel_client() -> None:
    """kombu builds a new ``redis.Redis`` for each message's bookkeeping (the unacked entry when a message arrives,
    its removal at the ack): every one copies redis-py's ~170 response callbacks, twice a task message (issue 26:
    service CPU). One client a channel and pool does the same: a client is only its pool's front, and is safe to share
    between threads. A new channel (a reconnect) or a new pool gets a client of its own."""
    channel_class = kombu_redis.Channel
    create = channel_class._create_client
    if getattr(create, "_dj_reused", False):
        return

    def reused(self: Any, asynchronous: bool = False) -> Any:
        if asynchronous:
            return create(self, asynchronous)
        cached = self.__dict__.get("_dj_client")
        pool = self.pool
        if cached is None or cached.connection_pool is not pool:
            cached = self.__dict__["_dj_client"] = create(self, False)
        return cached

    reused._dj_reused = True  # type: ignore[attr-defined]
    channel_class._create_client = reused  # type: ignore[method-assign]


_reuse_channel_client()
# the HTTP clients under the SDKs log every request at INFO: one line per provider call is noise (the judgment row
# records the call) and costs CPU on the hot path
for _name in ("httpx", "httpx2", "httpcore"):
    logging.getLogger(_name).setLevel(logging.WARNING)
app = Celery("dialogue_judge")
app.conf.update(celery_config(get_settings()) if get_settings().resolved_redis_url() else {})
app.conf.task_default_queue = JUDGE_QUEUE

_sweeper: Sweeper | None = None
_heartbeat: heartbeats.Heartbeat | None = None
_metrics_port: int | None = None


class _MetricsPortOption(bootsteps.Step):
    """``celery worker --metrics-port N`` (also ``DJ_METRICS_PORT``): serve this worker's /metrics on port N."""

    def __init__(self, parent: Any, metrics_port: int | None = None, **options: Any) -> None:
        global _metrics_port
        _metrics_port = metrics_port
        super().__init__(parent, **options)


app.user_options["worker"].add(
    click.Option(["--metrics-port"], type=int, default=None, help="serve Prometheus /metrics on this port")
)
app.steps["worker"].add(_MetricsPortOption)


# a message is acknowledged only once its work is stored, and a database that is away is waited for, not failed on
DURABLE_TASK: dict[str, Any] = {
    "bind": True,
    "acks_late": True,
    "reject_on_worker_lost": True,
    # InternalError: a transaction the server ended (25P03/25P04, dberrors.hand_back), and an internal error of the
    # server, retried too: a task's work is delayed, never dropped
    "autoretry_for": (OperationalError, InterfaceError, InternalError, HandedBack),
    "retry_backoff": True,
    "retry_backoff_max": 60,
    "max_retries": None,
}


@app.task(name=JUDGE_TASK, **DURABLE_TASK)
def judge(self: Any, judgment_id: int) -> str:
    engine = runtime.engine()
    result = engine.run_batch([judgment_id])
    if result.planning:
        _step_adaptive_runs(engine, [judgment_id])
    return result.statuses.get(judgment_id, "skipped")


@app.task(name=JUDGE_BATCH_TASK, **DURABLE_TASK)
def judge_batch(self: Any, judgment_ids: list[int]) -> dict[str, int]:
    engine = runtime.engine()
    result = engine.run_batch(judgment_ids)
    if result.planning:  # a run whose planning is closed (or never open) has no step to take: no query for it
        _step_adaptive_runs(engine, judgment_ids)
    return dict(result.counts)


@app.task(name=POLL_BATCHES_TASK, **DURABLE_TASK)
def poll_batches(self: Any) -> int:
    """Poll the provider batches that are due and store the results of those that ended (workers.batches)."""
    return runtime.engine().batch_stage().poll_due()


@app.task(name=GENERATE_TASK, **DURABLE_TASK)
def generate(self: Any, generation_id: int) -> str:
    """One (item, system) response of a run with systems; its item's judgments follow once all are settled."""
    engine = runtime.engine()
    return generate_stored(generation_id, engine.settings, engine.sessions, engine.limiter, engine.stash)


def _step_adaptive_runs(engine: JudgeEngine, judgment_ids: list[int]) -> None:
    """Plan what adaptive runs need next now that these verdicts are stored (more samples, the next batch of
    comparisons). A failure here loses nothing: the verdicts are stored and the sweeper steps the run later."""
    try:
        steps.after_verdicts(engine.settings, engine.sessions, judgment_ids)
    except Exception:
        log.exception("planning step after judgments %s failed; the sweeper will take it", judgment_ids[:5])


@signals.worker_process_init.connect
def _fresh_connections(**_: Any) -> None:
    reset_engines()  # a forked pool process must not reuse the parent's database connections
    runtime.reset()
    tracing.reset()  # a forked child exports its own spans (the parent's exporter thread is not copied)
    tracing.setup("dialogue-judge-worker")


@signals.after_setup_logger.connect
@signals.after_setup_task_logger.connect
def _log_format(logger: logging.Logger | None = None, **_: Any) -> None:
    if get_settings().log_format == "json" and logger is not None:
        logs.use_json(logger)


@signals.worker_process_shutdown.connect
def _forget_process_metrics(pid: int | None = None, **_: Any) -> None:
    if pid is not None:
        metrics.process_died(pid)  # prefork: the child's live gauges leave the sum


@signals.worker_ready.connect
def _start_sweeper(sender: Any = None, **_: Any) -> None:
    global _sweeper, _heartbeat
    settings = get_settings()
    tracing.setup("dialogue-judge-worker")
    port = _metrics_port or settings.metrics_port
    if port:
        metrics.start_http_server(port)
        log.info("metrics on :%d/metrics", port)
    runtime.engine()  # migrate and build once before taking work
    runtime.warm_tokenizer(settings)  # and the OpenAI vocabulary cache-aware dispatch counts prefixes with
    # everything loaded so far lives as long as the process: keep it out of the collector's full passes, which
    # otherwise walk hundreds of thousands of module-level objects again and again on the hot path
    gc.collect()
    gc.freeze()
    # beating before the first claims are taken: a worker that dies is then known, and its claims released early
    name = str(getattr(sender, "hostname", None) or f"worker-{os.getpid()}")
    _heartbeat = heartbeats.Heartbeat(redis_client(settings), name, {"metrics_port": port})
    _heartbeat.start()
    _sweeper = Sweeper(settings, redis_client(settings))
    try:
        _sweeper.sweep_once()
    except Exception as exc:
        log.warning("initial sweep failed: %s", exc)
    _sweeper.start()


@signals.worker_shutdown.connect
def _stop_sweeper(**_: Any) -> None:
    if _sweeper is not None:
        _sweeper.stop_event.set()
    if _heartbeat is not None:
        _heartbeat.stop_event.set()
        _heartbeat.join(timeout=5)
