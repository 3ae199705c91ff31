"""Claims held by this process stay live while their judgments wait for a provider slot.

A batch claims all its misses at once, and under a low provider rate limit the last of them may wait longer than
``DJ_CLAIM_LEASE`` for its turn. Without renewal another worker would then take the claim over (the lease looks
lapsed) and pay for a second call. The keeper renews every held claim every third of the lease with one statement,
so the lease measures whether the worker is alive, not how long the queue is: a killed worker stops renewing and
its claims lapse as before.
"""

from __future__ import annotations

import logging
import threading
import time

from sqlalchemy import Engine

from judge_api.repository import claims

log = logging.getLogger(__name__)


class LeaseKeeper:
    def __init__(self, engine: Engine, lease_s: float) -> None:
        self.engine = engine
        self.interval_s = max(0.05, lease_s / 3)
        self._held: dict[int, str] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def hold(self, judgment_ids: list[int], token: str) -> None:
        with self._lock:
            self._held.update(dict.fromkeys(judgment_ids, token))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="dj-lease-keeper", daemon=True)
                self._thread.start()

    def drop(self, judgment_id: int) -> None:
        with self._lock:
            self._held.pop(judgment_id, None)

    def held(self) -> dict[int, str]:
        with self._lock:
            return dict(self._held)

    def renew_once(self) -> int:
        held = self.held()
        if not held:
            return 0
        try:
            return claims.renew_claims(self.engine, held)
        except Exception as exc:  # the database is away: the claims may lapse, which recovery handles
            log.warning("could not renew %d claims: %s", len(held), exc)
            return 0

    def _run(self) -> None:
        while True:
            time.sleep(self.interval_s)
            if not self.held():
                with self._lock:
                    if not self._held:  # nothing to keep: end (the next hold starts another)
                        self._thread = None
                        return
            self.renew_once()
