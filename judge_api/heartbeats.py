"""Worker heartbeats in Redis: each worker process refreshes a key with a time-to-live; a worker that died stops
refreshing and its key expires. ``/readyz`` and the metrics count the keys that are still there."""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from typing import Any

import redis

log = logging.getLogger(__name__)

PREFIX = "dj:heartbeat:"
INTERVAL_S = 10.0
TTL_S = 3 * INTERVAL_S  # three missed beats: gone


def beat(client: redis.Redis, name: str, info: dict[str, Any] | None = None, ttl_s: float = TTL_S) -> None:
    payload = {"name": name, "pid": os.getpid(), "host": socket.gethostname(), "at": time.time(), **(info or {})}
    client.set(PREFIX + name, json.dumps(payload), px=int(ttl_s * 1000))


def forget(client: redis.Redis, name: str) -> None:
    client.delete(PREFIX + name)


def alive(client: redis.Redis) -> list[dict[str, Any]]:
    """The workers whose heartbeat has not expired, with their last beat's age in seconds."""
    keys = list(client.scan_iter(match=PREFIX + "*", count=500))
    if not keys:
        return []
    now = time.time()
    workers = []
    for raw in client.mget(keys):
        if raw is None:  # expired between the scan and the read
            continue
        entry = json.loads(raw)
        entry["age_s"] = round(max(0.0, now - float(entry.get("at", now))), 3)
        workers.append(entry)
    return sorted(workers, key=lambda w: str(w.get("name")))


class Heartbeat(threading.Thread):
    """Refreshes one worker's key every ``interval_s`` until stopped (a Redis outage skips beats, never crashes)."""

    def __init__(
        self, client: redis.Redis, name: str, info: dict[str, Any] | None = None, interval_s: float = INTERVAL_S
    ) -> None:
        super().__init__(name="dj-heartbeat", daemon=True)
        self.client = client
        self.worker_name = name
        self.info = info or {}
        self.interval_s = interval_s
        self.stop_event = threading.Event()

    def run(self) -> None:
        while True:
            try:
                beat(self.client, self.worker_name, self.info, ttl_s=3 * self.interval_s)
            except Exception as exc:
                log.warning("heartbeat failed: %s", exc)
            if self.stop_event.wait(self.interval_s):
                break
        try:
            forget(self.client, self.worker_name)
        except Exception as exc:
            log.warning("could not remove the heartbeat of %s: %s", self.worker_name, exc)
