"""Re-enqueue work the queue lost: judgments pending but not recently enqueued, and judgments whose worker died
holding the claim. Runs in every worker and API process (one at a time, under a Redis lock) and on demand
(``dialogue-judge requeue``). A Redis restart (new server run id) triggers an immediate full re-enqueue of pending
work. It needs only the database and the broker, so it lives in ``judge_api`` beside the queue code.
"""

from __future__ import annotations

import contextlib
import logging
import threading

import redis

from judge_api import queue, repository
from judge_api.config import Settings
from judge_api.db import session_scope

log = logging.getLogger(__name__)


def requeue_stale(settings: Settings, *, everything_pending: bool = False, queue_drained: bool = True) -> int:
    """Send lost work again. Pending judgments whose message may still wait in the queue are re-sent only once the
    queue has drained (``queue_drained``), so a long run is not duplicated at every sweep; after a Redis restart
    (``everything_pending``) all of them are re-sent at once."""
    with session_scope() as session:
        if everything_pending:
            ids = repository.stale_judgment_ids(session, 0.0, settings.claim_lease_s)
        else:
            ids = repository.stale_judgment_ids(
                session, settings.requeue_after_s, settings.claim_lease_s, include_pending=queue_drained
            )
        if not ids:
            return 0
        sent = queue.enqueue(settings, ids)
        repository.mark_enqueued(session, ids)
    log.info("re-enqueued %d judgments", sent)
    return sent


class Sweeper(threading.Thread):
    def __init__(self, settings: Settings, client: redis.Redis) -> None:
        super().__init__(name="dj-sweeper", daemon=True)
        self.settings = settings
        self.client = client
        self.stop_event = threading.Event()
        self._redis_run_id: str | None = None

    def _redis_restarted(self) -> bool:
        run_id = str(self.client.info("server").get("run_id"))
        restarted = self._redis_run_id is not None and run_id != self._redis_run_id
        self._redis_run_id = run_id
        return restarted

    def sweep_once(self) -> int:
        restarted = self._redis_restarted()
        lock = self.client.lock("dj:sweeper", timeout=max(10, int(self.settings.sweep_interval_s * 4)), blocking=False)
        if not lock.acquire():
            return 0
        try:
            if restarted:
                log.warning("Redis restarted (new run id): re-enqueueing all pending judgments")
            drained = int(self.client.llen(queue.JUDGE_QUEUE)) == 0
            return requeue_stale(self.settings, everything_pending=restarted, queue_drained=drained)
        finally:
            with contextlib.suppress(redis.exceptions.LockError):
                lock.release()

    def run(self) -> None:
        while not self.stop_event.wait(self.settings.sweep_interval_s):
            try:
                self.sweep_once()
            except Exception as exc:  # Redis or the database is down: try again next round
                log.warning("sweep failed: %s", exc)
