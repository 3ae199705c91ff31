"""Wait for the database in place instead of failing the task.

A batch that finds the database away used to raise, and Celery retried the message with an exponential back-off
of up to a minute; during a 15 s outage every message a worker took was parked that way, so after the database
returned the verdicts trickled in as the back-offs ran out (the last ~47 s later). Now the task thread waits here,
one probe (``SELECT 1``) every ``poll_s`` for all the threads of the process, and the batch resumes within a poll of
the database's return. Past ``max_wait_s`` the error goes to Celery's retry as before (the message stays
unacknowledged meanwhile, so nothing is lost either way).
"""

from __future__ import annotations

import logging
import threading
import time

from sqlalchemy import Engine, text
from sqlalchemy.exc import InterfaceError, OperationalError

log = logging.getLogger(__name__)


class DatabaseGate:
    def __init__(self, engine: Engine, poll_s: float = 0.25, max_wait_s: float = 300.0) -> None:
        self.engine = engine
        self.poll_s = poll_s
        self.max_wait_s = max_wait_s
        self._lock = threading.Lock()
        self._up_at = 0.0  # monotonic time of the last probe that reached the database

    def wait(self, failed_at: float) -> bool:
        """Block until the database answers a probe made after ``failed_at`` (monotonic); False after
        ``max_wait_s``. Threads waiting together share one probe per poll."""
        deadline = time.monotonic() + self.max_wait_s
        while True:
            with self._lock:
                if self._up_at > failed_at:
                    return True
                if self._probe():
                    self._up_at = time.monotonic()
                    return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(self.poll_s)

    def _probe(self) -> bool:
        try:
            with self.engine.connect() as connection:
                connection.execute(text("SELECT 1"))
            return True
        except (OperationalError, InterfaceError):
            return False
