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

Redis down: stashing is skipped with a warning (the reply still goes to the database with its verdict; only the
protection against a second call while both are down is lost).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import redis

from workers.clients import JudgeReply

log = logging.getLogger(__name__)

STASH_TTL_S = 7 * 86_400  # longer than any outage worth riding out; a stash is normally gone within a second

_PUT = """
redis.call('HSET', KEYS[1], 'payload', ARGV[1], 'taker', ARGV[2], 'jid', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return 1
"""

# ARGV: token, judgment id. Returns nil, or {payload, 1 if the caller now records the calls else 0}
_TAKE = """
local p = redis.call('HMGET', KEYS[1], 'payload', 'taker', 'jid')
if not p[1] then return nil end
if (not p[2]) or p[2] == ARGV[1] or p[3] == ARGV[2] then
  redis.call('HSET', KEYS[1], 'taker', ARGV[1], 'jid', ARGV[2])
  return {p[1], 1}
end
return {p[1], 0}
"""

# KEYS: stashes, ARGV: the claim token of each. Delete those their claim still takes; returns how many
_SETTLE = """
local n = 0
for i = 1, #KEYS do
  if redis.call('HGET', KEYS[i], 'taker') == ARGV[i] then redis.call('DEL', KEYS[i]); n = n + 1 end
end
return n
"""

# ARGV: token; KEYS: stashes. Give them up: 1 if every one was still this claim's (it records the calls), else 0
_RELEASE_LOST = """
local mine = 1
for i = 1, #KEYS do
  local taker = redis.call('HGET', KEYS[i], 'taker')
  if taker == ARGV[1] then redis.call('DEL', KEYS[i]) elseif taker then mine = 0 end
end
return mine
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

    def release_lost(self, keys: Sequence[str], token: str) -> bool: ...

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

    @staticmethod
    def _key(key: str) -> str:
        return f"dj:paid:{key}"

    def put(self, key: str, reply: JudgeReply, calls: int, cost: float, token: str, judgment_id: int) -> None:
        try:
            self._put(keys=[self._key(key)], args=[_encode(reply, calls, cost), token, judgment_id, self.ttl_ms])
        except redis.RedisError as exc:
            log.warning("could not stash a paid reply (%s); it is kept only until its verdict is written", exc)

    def present(self, keys: Sequence[str]) -> set[str]:
        """Which of these cache keys have a stashed reply (one round trip)."""
        try:
            pipe = self.client.pipeline(transaction=False)
            for key in keys:
                pipe.exists(self._key(key))
            return {key for key, n in zip(keys, pipe.execute(), strict=True) if n}
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
                self._settle(keys=[self._key(k) for k, _ in stashes], args=[t for _, t in stashes])
            except redis.RedisError as exc:  # the stash expires on its own; the cache entry is stored
                log.warning("could not clear %d stashed replies (%s)", len(stashes), exc)

    def release_lost(self, keys: Sequence[str], token: str) -> bool:
        if not keys:
            return True
        try:
            return bool(int(self._release_lost(keys=[self._key(k) for k in keys], args=[token])))
        except redis.RedisError as exc:
            log.warning("could not release stashed replies (%s); counting their calls here", exc)
            return True

    def untake(self, keys: Sequence[str], token: str) -> None:
        if keys:
            try:
                self._untake(keys=[self._key(k) for k in keys], args=[token])
            except redis.RedisError as exc:
                log.warning("could not hand stashed replies back (%s)", exc)


class LocalReplyStash:
    """The same rules in one process (the standalone runner, which has no Redis)."""

    def __init__(self) -> None:
        import threading

        self._lock = threading.Lock()
        self._items: dict[str, dict[str, Any]] = {}

    def put(self, key: str, reply: JudgeReply, calls: int, cost: float, token: str, judgment_id: int) -> None:
        with self._lock:
            self._items[key] = {"payload": _encode(reply, calls, cost), "taker": token, "jid": str(judgment_id)}

    def present(self, keys: Sequence[str]) -> set[str]:
        with self._lock:
            return {key for key in keys if key in self._items}

    def take(self, key: str, token: str, judgment_id: int) -> Stashed | None:
        with self._lock:
            item = self._items.get(key)
            if item is None:
                return None
            counted = item["taker"] in (None, token) or item["jid"] == str(judgment_id)
            if counted:
                item.update(taker=token, jid=str(judgment_id))
            return _decode(item["payload"], counted)

    def settle(self, stashes: Sequence[tuple[str, str]]) -> None:
        with self._lock:
            for key, token in stashes:
                if key in self._items and self._items[key]["taker"] == token:
                    del self._items[key]

    def release_lost(self, keys: Sequence[str], token: str) -> bool:
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
