"""Worker heartbeats in Redis: each worker process refreshes a key with a time-to-live; a worker that died stops
refreshing and its key expires. ``/readyz`` and the metrics count the keys that are still there.

Each process has an :data:`INSTANCE` id, the holder part of every claim token it takes
(``judge_api.repository.claims.new_token``). A beat also registers the instance in the ``dj:workers`` hash; an
instance registered there whose key has expired is dead (:func:`dead_instances`), and the sweepers release its
claims within seconds (``judge_api.sweeper``) instead of waiting out the claim lease. A Redis restart empties both
together, so it never makes a live worker look dead.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid
from typing import Any

import redis

log = logging.getLogger(__name__)

PREFIX = "dj:heartbeat:"
KNOWN = "dj:workers"  # instance id -> worker name, of every instance that has beaten and not been buried
INTERVAL_S = 2.0
TTL_S = 3 * INTERVAL_S  # three missed beats: gone
# this process's id in claim tokens (16 hex characters); forked children (prefork pool) share their parent's beat
INSTANCE = uuid.uuid4().hex[:16]


def beat(
    client: redis.Redis,
    name: str,
    info: dict[str, Any] | None = None,
    ttl_s: float = TTL_S,
    instance: str = INSTANCE,
) -> None:
    payload = {
        "name": name,
        "instance": instance,
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "at": time.time(),
        **(info or {}),
    }
    # the key before the registration: an instance registered in KNOWN has a key unless it stopped beating
    pipe = client.pipeline(transaction=True)
    pipe.set(_key(name, instance), json.dumps(payload), px=int(ttl_s * 1000))
    pipe.hset(KNOWN, instance, name)
    pipe.execute()


def forget(client: redis.Redis, name: str, instance: str = INSTANCE) -> None:
    pipe = client.pipeline(transaction=True)
    pipe.delete(_key(name, instance))
    pipe.hdel(KNOWN, instance)
    pipe.execute()


def dead_instances(client: redis.Redis) -> dict[str, str]:
    """Instances (id -> worker name) registered by a beat whose heartbeat key has expired. The registrations are
    read before the keys, so a worker that beats for the first time in between is not taken for dead."""
    known = registered(client)
    if not known:
        return {}
    living = {str(w.get("instance")) for w in _beats(client, known)}
    return {instance: name for instance, name in known.items() if instance not in living}


def registered(client: redis.Redis) -> dict[str, str]:
    """Every instance that has beaten and not been buried (id -> worker name)."""
    return {_text(k): _text(v) for k, v in client.hgetall(KNOWN).items()}


# locks whose token begins with the holder's instance id: workers.singleflight's in-flight locks
HELD_LOCKS = ("dj:inflight:*",)

_RELEASE_IF_HELD = """
local n = 0
for i = 1, #KEYS do
  local token = redis.call('GET', KEYS[i])
  if token and string.sub(token, 1, string.len(ARGV[1])) == ARGV[1] then redis.call('DEL', KEYS[i]); n = n + 1 end
end
return n
"""


def release_locks(client: redis.Redis, instance: str) -> int:
    """Free the locks a dead instance held (its waiters take them over now, not when their lease lapses)."""
    if len(instance) < 8:
        return 0
    script = client.register_script(_RELEASE_IF_HELD)
    released = 0
    for pattern in HELD_LOCKS:
        keys = list(client.scan_iter(match=pattern, count=1000))
        for start in range(0, len(keys), 500):
            released += int(script(keys=keys[start : start + 500], args=[instance]))
    return released


def bury(client: redis.Redis, instance: str) -> None:
    """The instance's claims are released: stop reporting it dead."""
    client.hdel(KNOWN, instance)


def _key(name: str, instance: str) -> str:
    # the instance in the key: two processes given the same worker name never refresh each other's beat
    return f"{PREFIX}{name}#{instance}"


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def alive(client: redis.Redis) -> list[dict[str, Any]]:
    """The workers whose heartbeat has not expired, with their last beat's age in seconds."""
    return _beats(client, registered(client))


def _beats(client: redis.Redis, known: dict[str, str]) -> list[dict[str, Any]]:
    """The unexpired beats of the registered instances: their keys are named from the registry and read in one
    MGET. (A SCAN for the key prefix walked the whole keyspace - every reply stash and its hour-long tombstone - on
    every sweeper tick of every process.)"""
    if not known:
        return []
    now = time.time()
    workers = []
    for raw in client.mget([_key(name, instance) for instance, name in known.items()]):
        if raw is None:  # expired: a dead instance (or one that stopped between the two reads)
            continue
        entry = json.loads(raw)
        entry["age_s"] = round(max(0.0, now - float(entry.get("at", now))), 3)
        workers.append(entry)
    return sorted(workers, key=lambda w: str(w.get("name")))


class Heartbeat(threading.Thread):
    """Refreshes one worker's key every ``interval_s`` until stopped (a Redis outage skips beats, never crashes)."""

    def __init__(
        self,
        client: redis.Redis,
        name: str,
        info: dict[str, Any] | None = None,
        interval_s: float = INTERVAL_S,
        instance: str = INSTANCE,
    ) -> None:
        super().__init__(name="dj-heartbeat", daemon=True)
        self.client = client
        self.worker_name = name
        self.info = info or {}
        self.interval_s = interval_s
        self.instance = instance
        self.stop_event = threading.Event()

    def run(self) -> None:
        while True:
            try:
                beat(self.client, self.worker_name, self.info, ttl_s=3 * self.interval_s, instance=self.instance)
            except Exception as exc:
                log.warning("heartbeat failed: %s", exc)
            if self.stop_event.wait(self.interval_s):
                break
        try:
            forget(self.client, self.worker_name, self.instance)
        except Exception as exc:
            log.warning("could not remove the heartbeat of %s: %s", self.worker_name, exc)
