"""Judgments waiting for another request's identical call wait here, off the call slots.

A call slot that found its key held (``workers.singleflight.KeyHeld``) gives the slot back at once; the judgment is
parked here with what sends it back to the slots. One thread looks, every ``poll_s``, which parked keys were let go
(one round trip for all of them) and sends their judgments back: they find the holder's cache entry, or take the
lock themselves if the holder's call failed. A holder that died lets its lock lapse within its lease (or the sweeper
frees it at once), so nothing waits for ever; the judgments stay claimed meanwhile (the claim lease keeper renews
them like any other claim in hand).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from workers.singleflight import SingleFlight

log = logging.getLogger(__name__)


class HeldKeyWaiter:
    def __init__(self, flight: SingleFlight, poll_s: float = 0.05) -> None:
        self.flight = flight
        self.poll_s = poll_s
        self._parked: dict[str, list[Callable[[], None]]] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def park(self, key: str, resume: Callable[[], None]) -> None:
        """Call ``resume`` (on this waiter's thread) once ``key``'s lock is no longer held."""
        with self._lock:
            self._parked.setdefault(key, []).append(resume)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="dj-held-keys", daemon=True)
                self._thread.start()

    def parked(self) -> int:
        with self._lock:
            return sum(len(waiting) for waiting in self._parked.values())

    def check_once(self) -> int:
        """Resume the judgments whose keys are free; returns how many were resumed."""
        with self._lock:
            keys = list(self._parked)
        if not keys:
            return 0
        try:
            held = self.flight.held(keys)
        except Exception:  # cannot tell: let them all go back, their next ``run`` finds out
            log.warning("single-flight: could not tell which of %d keys are held", len(keys), exc_info=True)
            held = [False] * len(keys)
        resumed: list[Callable[[], None]] = []
        with self._lock:
            for key, still_held in zip(keys, held, strict=True):
                if not still_held:
                    resumed += self._parked.pop(key, [])
        for resume in resumed:
            try:
                resume()
            except Exception:  # resume settles its judgment's future itself; this only keeps the thread alive
                log.exception("single-flight: resuming a parked judgment failed")
        return len(resumed)

    def _run(self) -> None:
        while True:
            time.sleep(self.poll_s)
            self.check_once()
            with self._lock:
                if not self._parked:  # nothing parked: end (the next park starts another)
                    self._thread = None
                    return
