"""Every paid reply is kept until its verdict and cache entry are stored.

The moment a provider call returns, its reply (text, tokens, the calls and cost it took) is stashed in Redis under
its cache key, before anything touches the database. The verdict writer removes the stash once the transaction
holding the reply's cache entry has committed. Until then, whoever needs that key again - the same judgment
re-sent after a database outage, a lost claim or a killed worker, or another judgment with the identical request -
uses the stashed reply instead of calling the provider a second time.

Counting. A stash has a *taker*: the claim (token, judgment id) that will record its calls and cost. The payer is
the first taker. Another claim of the same judgment (the payer's claim lapsed and the judgment was re-sent) takes
it over and records the calls with its verdict; a different judgment with the same key uses the reply as a cache
hit (the payer records the calls). A claim that loses its judgment gives its stash up (:meth:`release_lost`): if
it was still the taker it records the calls on the row itself (``claims.add_unused_calls``), else the new taker
does. So every provider call is counted once, whichever claim's verdict is used.

Settling keeps a *tombstone* (the taker without the reply) for ``SETTLED_TTL_S``: a payer whose claim was taken
over may come to give its stash up after the new taker's verdict is committed, and must still learn that the calls
were counted there (without the tombstone it would find nothing and count them a second time).

Redis down: stashing is skipped with a warning (the reply still goes to the database with its verdict; only the
protection against a second call while both are down is lost). :meth:`release_lost` answers None when Redis
cannot say who counts: the caller counts nothing then and asks again later (never twice; at worst, if Redis stays
away until the process ends, not at all).

Generations (runs with systems, ``workers.responders``) stash their chat replies here too, under keys of their own
(:func:`generation_key`), with the generation's claim as the taker.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import redis

from workers.clients import JudgeReply

log = logging.getLogger(__name__)

STASH_TTL_S = 7 * 86_400  # longer than any outage worth riding out; a stash is normally gone within a second
SETTLED_TTL_S = 3_600  # a settled stash's tombstone: far longer than a taken-over payer takes to give its stash up

_PUT = """
redis.call('HSET', KEYS[1], 'payload', ARGV[1], 'taker', ARGV[2], 'jid', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return 1
"""

# ARGV: token, judgment id. Returns nil, or {payload, 1 if the caller now records the calls else 0}
_TAKE = """
local p = redis.call('HMGET', KEYS[1], 'payload', 'taker', 'jid')
if not p[1] then return nil end  -- none, or a tombstone
if (not p[2]) or p[2] == ARGV[1] or p[3] == ARGV[2] then
  redis.call('HSET', KEYS[1], 'taker', ARGV[1], 'jid', ARGV[2])
  return {p[1], 1}
end
return {p[1], 0}
"""

# KEYS: stashes, ARGV: tombstone ttl ms, then the claim token of each. Those their claim still takes become
# tombstones (the reply dropped, the taker kept); returns how many
_SETTLE = """
local n = 0
for i = 1, #KEYS do
  if redis.call('HGET', KEYS[i], 'taker') == ARGV[i + 1] then
    redis.call('HDEL', KEYS[i], 'payload')
    redis.call('PEXPIRE', KEYS[i], ARGV[1])
    n = n + 1
  end
end
return n
"""

# ARGV: token; KEYS: stashes. Give them up: 1 if every one was still this claim's (it records the calls), else 0.
# A stash that is gone (never stored: Redis was down at the put; or expired) counts as this claim's.
_RELEASE_LOST = """
local mine = 1
for i = 1, #KEYS do
  local taker = redis.call('HGET', KEYS[i], 'taker')
  if taker == ARGV[1] then redis.call('DEL', KEYS[i]) elseif taker then mine = 0 end
end
return mine
"""

# KEYS: stashes. 1 for each that holds a reply (not a tombstone), else 0
_PRESENT = """
local found = {}
for i = 1, #KEYS do found[i] = redis.call('HEXISTS', KEYS[i], 'payload') end
return found
"""

_UNTAKE = """
for i = 1, #KEYS do
  if redis.call('HGET', KEYS[i], 'taker') == ARGV[1] then redis.call('HDEL', KEYS[i], 'taker', 'jid') end
end
return 1
"""


@dataclass(frozen=True)
class Stashed:
    reply: JudgeReply
    provider_calls: int  # calls (attempts included) the reply took
    cost_usd: float
    counted_here: bool  # this claim records the calls and cost with its verdict


class ReplyStash(Protocol):
    def put(self, key: str, reply: JudgeReply, calls: int, cost: float, token: str, judgment_id: int) -> None: ...

    def present(self, keys: Sequence[str]) -> set[str]: ...

    def take(self, key: str, token: str, judgment_id: int) -> Stashed | None: ...

    def settle(self, stashes: Sequence[tuple[str, str]]) -> None:
        """(key, claim token) pairs whose verdicts and cache entries are committed: drop the stashes."""
        ...

    def release_lost(self, keys: Sequence[str], token: str) -> bool | None:
        """A claim lost its judgment: give its stashes up. True: the calls are still this claim's to record; False:
        another claim took them over and records them; None: it cannot be known now (Redis unreachable)."""
        ...

    def untake(self, keys: Sequence[str], token: str) -> None: ...


def _encode(reply: JudgeReply, calls: int, cost: float) -> str:
    return json.dumps(
        {
            "text": reply.text,
            "finish_reason": reply.finish_reason,
            "input_tokens": reply.input_tokens,
            "output_tokens": reply.output_tokens,
            "latency_ms": reply.latency_ms,
            "structured": reply.structured,
            "logprobs": reply.logprobs,
            "cached_input_tokens": reply.cached_input_tokens,
            "cache_write_tokens": reply.cache_write_tokens,
            "calls": calls,
            "cost": cost,
        }
    )


def _decode(payload: str | bytes, counted: bool) -> Stashed:
    data: dict[str, Any] = json.loads(payload)
    reply = JudgeReply(
        data["text"],
        data["finish_reason"],
        int(data["input_tokens"]),
        int(data["output_tokens"]),
        float(data.get("latency_ms") or 0.0),
        data.get("structured"),
        data.get("logprobs"),
        int(data.get("cached_input_tokens") or 0),
        int(data.get("cache_write_tokens") or 0),
    )
    return Stashed(reply, int(data["calls"]), float(data["cost"]), counted)


class RedisReplyStash:
    def __init__(self, client: redis.Redis, ttl_s: float = STASH_TTL_S) -> None:
        self.client = client
        self.ttl_ms = int(ttl_s * 1000)
        self._put = client.register_script(_PUT)
        self._take = client.register_script(_TAKE)
        self._settle = client.register_script(_SETTLE)
        self._release_lost = client.register_script(_RELEASE_LOST)
        self._untake = client.register_script(_UNTAKE)
        self._present = client.register_script(_PRESENT)  # a script, not a pipeline: a pipeline copies 170 callbacks
        self._local = threading.local()
        self._put_sha = hashlib.sha1(_PUT.encode()).hexdigest()  # as register_script names it

    @staticmethod
    def _key(key: str) -> str:
        return f"dj:paid:{key}"

    def _tombstone_ms(self) -> int:
        return min(self.ttl_ms, SETTLED_TTL_S * 1000)

    def put(self, key: str, reply: JudgeReply, calls: int, cost: float, token: str, judgment_id: int) -> None:
        keys, args = [self._key(key)], [_encode(reply, calls, cost), token, judgment_id, self.ttl_ms]
        try:
            if not self._put_on_own_connection(keys, args):
                self._put(keys=keys, args=args)  # the pool's path: loads the script, retries a broken connection
        except redis.RedisError as exc:
            log.warning("could not stash a paid reply (%s); it is kept only until its verdict is written", exc)

    def _put_on_own_connection(self, keys: list[str], args: list[Any]) -> bool:
        """The put on this thread's own connection: every paid reply makes one, right after the reply, and the
        pool's checkout (a lock, a readiness poll of the socket, its bookkeeping) and retry wrapper cost more CPU
        than the command. False when it could not be done here (the script is not loaded on the server, or the
        connection broke): the caller sends it the usual way. The script is idempotent, so a put that ran but
        whose answer was lost may run again."""
        local = self._local
        conn = getattr(local, "conn", None)
        if conn is None or local.pid != os.getpid():  # a forked child never shares its parent's socket
            pool = self.client.connection_pool
            conn = local.conn = pool.connection_class(**pool.connection_kwargs)
            local.pid = os.getpid()
        try:
            conn.send_command("EVALSHA", self._put_sha, len(keys), *keys, *args)
            conn.read_response()
        except redis.exceptions.NoScriptError:  # answered in full: the connection stays usable
            return False
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError):
            self._drop_own_connection(conn)
            return False
        except BaseException:
            self._drop_own_connection(conn)
            raise
        return True

    def _drop_own_connection(self, conn: Any) -> None:
        """Mid-exchange: never read a stale answer as the next one."""
        conn.disconnect()
        self._local.conn = None

    def present(self, keys: Sequence[str]) -> set[str]:
        """Which of these cache keys have a stashed reply (one round trip)."""
        if not keys:
            return set()
        try:
            found = self._present(keys=[self._key(key) for key in keys])
            return {key for key, n in zip(keys, found, strict=True) if n}
        except redis.RedisError as exc:
            log.warning("could not read the reply stash (%s)", exc)
            return set()

    def take(self, key: str, token: str, judgment_id: int) -> Stashed | None:
        try:
            found = self._take(keys=[self._key(key)], args=[token, judgment_id])
        except redis.RedisError as exc:
            log.warning("could not read the reply stash (%s)", exc)
            return None
        if not found:
            return None
        return _decode(found[0], bool(int(found[1])))

    def settle(self, stashes: Sequence[tuple[str, str]]) -> None:
        if stashes:
            try:
                self._settle(
                    keys=[self._key(k) for k, _ in stashes], args=[self._tombstone_ms(), *(t for _, t in stashes)]
                )
            except redis.RedisError as exc:  # the stash expires on its own; the cache entry is stored
                log.warning("could not clear %d stashed replies (%s)", len(stashes), exc)

    def release_lost(self, keys: Sequence[str], token: str) -> bool | None:
        if not keys:
            return True
        try:
            return bool(int(self._release_lost(keys=[self._key(k) for k in keys], args=[token])))
        except redis.RedisError as exc:  # another claim may have taken the reply over: counting here could be twice
            log.warning("could not release stashed replies (%s); who counts their calls is decided later", exc)
            return None

    def untake(self, keys: Sequence[str], token: str) -> None:
        if keys:
            try:
                self._untake(keys=[self._key(k) for k in keys], args=[token])
            except redis.RedisError as exc:
                log.warning("could not hand stashed replies back (%s)", exc)


class LocalReplyStash:
    """The same rules in one process (the standalone runner, which has no Redis)."""

    def __init__(self, settled_ttl_s: float = SETTLED_TTL_S) -> None:
        self._lock = threading.Lock()
        self._items: dict[str, dict[str, Any]] = {}
        self._settled_ttl_s = settled_ttl_s
        self._tombstones: dict[str, float] = {}  # key -> monotonic deadline

    def put(self, key: str, reply: JudgeReply, calls: int, cost: float, token: str, judgment_id: int) -> None:
        with self._lock:
            self._items[key] = {"payload": _encode(reply, calls, cost), "taker": token, "jid": str(judgment_id)}
            self._tombstones.pop(key, None)

    def present(self, keys: Sequence[str]) -> set[str]:
        with self._lock:
            return {key for key in keys if self._items.get(key, {}).get("payload") is not None}

    def take(self, key: str, token: str, judgment_id: int) -> Stashed | None:
        with self._lock:
            item = self._items.get(key)
            if item is None or item["payload"] is None:
                return None
            counted = item["taker"] in (None, token) or item["jid"] == str(judgment_id)
            if counted:
                item.update(taker=token, jid=str(judgment_id))
            return _decode(item["payload"], counted)

    def settle(self, stashes: Sequence[tuple[str, str]]) -> None:
        with self._lock:
            now = time.monotonic()
            for key, token in stashes:
                if key in self._items and self._items[key]["taker"] == token:
                    self._items[key]["payload"] = None
                    self._tombstones.pop(key, None)  # in order of their deadlines: the lapsed ones come first
                    self._tombstones[key] = now + self._settled_ttl_s
            lapsed = []
            for key, deadline in self._tombstones.items():
                if deadline > now:
                    break
                lapsed.append(key)
            for key in lapsed:
                del self._tombstones[key]
                if key in self._items and self._items[key]["payload"] is None:
                    del self._items[key]

    def release_lost(self, keys: Sequence[str], token: str) -> bool | None:
        mine = True
        with self._lock:
            for key in keys:
                item = self._items.get(key)
                if item is None:
                    continue
                if item["taker"] == token:
                    del self._items[key]
                elif item["taker"] is not None:
                    mine = False
        return mine

    def untake(self, keys: Sequence[str], token: str) -> None:
        with self._lock:
            for key in keys:
                item = self._items.get(key)
                if item is not None and item["taker"] == token:
                    item.update(taker=None, jid=None)
