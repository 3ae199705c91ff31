"""The Celery application. A judgment is a task; the database row is the truth, the message only a pointer.

``acks_late`` + ``reject_on_worker_lost``: a worker killed mid-task leaves its message unacknowledged, Redis hands
it out again after the visibility timeout, and the claim/compare-and-set in workers.execute keeps the judgment
single. The sweeper covers what Redis itself loses (a restart without persistence).
"""

from __future__ import annotations

import gc
import logging
from typing import Any

import redis
from celery import Celery, signals
from kombu.transport import redis as kombu_redis
from sqlalchemy.exc import InterfaceError, OperationalError

from judge_api.config import get_settings
from judge_api.db import reset_engines
from judge_api.queue import JUDGE_BATCH_TASK, JUDGE_QUEUE, JUDGE_TASK, celery_config
from workers import runtime
from workers.sweeper import Sweeper

log = logging.getLogger(__name__)


def _survive_restore_without_broker() -> None:
    """kombu (5.x): when Redis goes away, closing the worker's channel tries to put its unacknowledged messages
    back through the connection that is already gone, raises AttributeError and kills the worker. Those messages
    come back anyway (the visibility timeout, or the sweeper once Redis is up again), so the worker logs it and
    stays alive to reconnect."""
    original = kombu_redis.QoS.restore_unacked
    if getattr(original, "_dj_tolerant", False):
        return

    def restore_unacked(self: Any, client: Any = None) -> Any:
        try:
            return original(self, client)
        except (AttributeError, redis.exceptions.ConnectionError, OSError) as exc:
            log.warning("could not restore unacknowledged messages while Redis is down (%r); the sweeper will", exc)
            return None

    restore_unacked._dj_tolerant = True  # type: ignore[attr-defined]
    kombu_redis.QoS.restore_unacked = restore_unacked  # type: ignore[method-assign]


_survive_restore_without_broker()
# the HTTP clients under the SDKs log every request at INFO: one line per provider call is noise (the judgment row
# records the call) and costs CPU on the hot path
for _name in ("httpx", "httpx2", "httpcore"):
    logging.getLogger(_name).setLevel(logging.WARNING)
app = Celery("dialogue_judge")
app.conf.update(celery_config(get_settings()) if get_settings().resolved_redis_url() else {})
app.conf.task_default_queue = JUDGE_QUEUE

_sweeper: Sweeper | None = None


@app.task(
    name=JUDGE_TASK,
    bind=True,
    acks_late=True,
    reject_on_worker_lost=True,
    autoretry_for=(OperationalError, InterfaceError),
    retry_backoff=True,
    retry_backoff_max=60,
    max_retries=None,
)
def judge(self: Any, judgment_id: int) -> str:
    return runtime.engine().judge(judgment_id)


@app.task(
    name=JUDGE_BATCH_TASK,
    bind=True,
    acks_late=True,
    reject_on_worker_lost=True,
    autoretry_for=(OperationalError, InterfaceError),
    retry_backoff=True,
    retry_backoff_max=60,
    max_retries=None,
)
def judge_batch(self: Any, judgment_ids: list[int]) -> dict[str, int]:
    return runtime.engine().judge_many(judgment_ids)


@signals.worker_process_init.connect
def _fresh_connections(**_: Any) -> None:
    reset_engines()  # a forked pool process must not reuse the parent's database connections
    runtime.reset()


@signals.worker_ready.connect
def _start_sweeper(**_: Any) -> None:
    global _sweeper
    settings = get_settings()
    runtime.engine()  # migrate and build once before taking work
    # everything loaded so far lives as long as the process: keep it out of the collector's full passes, which
    # otherwise walk hundreds of thousands of module-level objects again and again on the hot path
    gc.collect()
    gc.freeze()
    _sweeper = Sweeper(settings, runtime.redis_client(settings))
    try:
        _sweeper.sweep_once()
    except Exception as exc:
        log.warning("initial sweep failed: %s", exc)
    _sweeper.start()


@signals.worker_shutdown.connect
def _stop_sweeper(**_: Any) -> None:
    if _sweeper is not None:
        _sweeper.stop_event.set()
