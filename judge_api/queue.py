"""Enqueue judgments by Celery task name (the API does not import the workers package).

The database is the source of truth: a judgment that could not be enqueued (Redis down) stays ``pending`` and the
sweeper (:mod:`judge_api.sweeper`) or ``dialogue-judge requeue`` sends it again later.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from celery import Celery

from judge_api.config import Settings

log = logging.getLogger(__name__)

JUDGE_TASK = "dialogue_judge.judge"
JUDGE_BATCH_TASK = "dialogue_judge.judge_batch"
JUDGE_QUEUE = "judgments"
GENERATE_TASK = "dialogue_judge.generate"
POLL_BATCHES_TASK = "dialogue_judge.poll_batches"


def celery_config(settings: Settings) -> dict[str, object]:
    broker = settings.resolved_redis_url()
    if broker is None:
        raise RuntimeError("REDIS_URL is not set: start the stack with 'dialogue-judge up' or set REDIS_URL")
    return {
        "broker_url": broker,
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "task_ignore_result": True,
        # no unstarted work held by a worker: a killed worker leaves only what it had started, and that is claimed
        # (its lease lapses and the sweeper re-sends it within seconds), not parked in its prefetch buffer
        "worker_prefetch_multiplier": 1,
        "task_default_queue": JUDGE_QUEUE,
        "broker_connection_retry_on_startup": True,
        "broker_transport_options": {
            "visibility_timeout": settings.visibility_timeout_s,
            "socket_timeout": 10,
            "socket_connect_timeout": 5,
            "retry_on_timeout": True,
        },
        "task_serializer": "json",
        "accept_content": ["json"],
        "worker_hijack_root_logger": False,
        "worker_cancel_long_running_tasks_on_connection_loss": False,
    }


_producers: dict[str, Celery] = {}


def producer(settings: Settings) -> Celery:
    broker = settings.resolved_redis_url() or ""
    app = _producers.get(broker)
    if app is None:
        app = Celery("dialogue_judge_producer")
        app.conf.update(celery_config(settings))
        _producers[broker] = app
    return app


def enqueue(settings: Settings, judgment_ids: Sequence[int]) -> int:
    """Send the judgments as tasks of ``DJ_TASK_BATCH`` ids each (1: one task per judgment); returns how many
    judgments were sent. Raises if the broker is unreachable.

    Batching is what keeps the service's own CPU per judgment low: one message, one row read and one cache query
    serve a whole batch, while every judgment is still claimed and written on its own."""
    app = producer(settings)
    ids = [int(i) for i in judgment_ids]
    size = max(1, settings.task_batch)
    with app.producer_or_acquire() as prod:
        for start in range(0, len(ids), size):
            chunk = ids[start : start + size]
            if len(chunk) == 1:
                app.send_task(JUDGE_TASK, args=[chunk[0]], queue=JUDGE_QUEUE, producer=prod)
            else:
                app.send_task(JUDGE_BATCH_TASK, args=[chunk], queue=JUDGE_QUEUE, producer=prod)
    return len(ids)


def enqueue_generations(settings: Settings, generation_ids: Sequence[int]) -> int:
    """Send generations (runs with systems) as tasks of one id each: a generation is a chat pipeline of possibly many
    calls, so each is its own task and the workers' concurrency spreads them. Raises if the broker is unreachable."""
    app = producer(settings)
    ids = [int(i) for i in generation_ids]
    with app.producer_or_acquire() as prod:
        for generation_id in ids:
            app.send_task(GENERATE_TASK, args=[generation_id], queue=JUDGE_QUEUE, producer=prod)
    return len(ids)


def request_batch_poll(settings: Settings) -> None:
    """Ask a worker to poll the provider batches that are due (workers.batches). Raises if the broker is
    unreachable."""
    producer(settings).send_task(POLL_BATCHES_TASK, queue=JUDGE_QUEUE)
