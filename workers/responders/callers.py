"""The systems under test a responder string names (judge_api.responders), each answering one item.

Every call goes through the judge path's machinery (workers.retries.call_with_retries): the rate limit of the
model or endpoint (``DJ_RATE_LIMITS``), timeouts (``DJ_JUDGE_TIMEOUT``), bounded retries with back-off and
``Retry-After`` (``DJ_MAX_ATTEMPTS``). A failure is an ``Answer`` with the reason, never an empty response.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx

from judge_api.config import Settings
from judge_api.judges import JudgeSpec
from judge_api.responders import ResponderSpec, ResponderSpecError
from judge_api.strategies import Strategy, StrategyError, StrategyRegistry
from workers.billing import CallTally
from workers.clients import JudgeCallError, JudgeClient, JudgeReply, JudgeRequest, client_for
from workers.ratelimit import LocalRateLimiter, RateLimiter
from workers.responders.pipeline import StrategyRunError, run_strategy
from workers.retries import call_with_retries
from workers.stash import ReplyStash


@dataclass
class Answer:
    """What a responder made of one item: a response (and the memory it generated), or the reason it has none."""

    response: str | None = None
    memory: str | None = None
    error: str | None = None
    trace: list[dict[str, Any]] = field(default_factory=list)
    tally: CallTally = field(default_factory=CallTally)
    cached_calls: int = 0
    latency_ms: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None


class Responder(Protocol):
    spec: ResponderSpec

    @property
    def version(self) -> str:
        """What besides the responder string decides its answers (a strategy's folder hash); part of the cache key."""
        ...

    def respond(self, item: dict[str, Any]) -> Answer: ...


@dataclass
class PaidReplies:
    """The replies a generation's claim paid for, stashed (workers.stash) the moment each arrives and kept until the
    generation is stored: the generation re-sent after a worker kill or a failed write takes them instead of calling
    the model again (and records their calls, as the claim that stores the generation). Keys are the generation's
    own (``gen:<id>:<request>``), so a reply is never another generation's."""

    stash: ReplyStash
    token: str
    generation_id: int
    keys: list[str] = field(default_factory=list)  # stashed replies this claim records
    # does the claim still hold? asked before each call: a generation whose run was deleted starts none (issue 43)
    holds: Callable[[], bool] | None = None

    def before_send(self) -> None:
        if self.holds is not None and not self.holds():
            raise JudgeCallError(
                "gone",
                f"generation {self.generation_id} is gone (its run was deleted) or no longer claimed: not sent",
                retryable=False,
                reached_provider=False,
            )

    def _key(self, request_key: str) -> str:
        return f"gen:{self.generation_id}:{request_key}"

    def take(self, request_key: str, tally: CallTally) -> JudgeReply | None:
        stashed = self.stash.take(self._key(request_key), self.token, self.generation_id)
        if stashed is None:
            return None
        if stashed.counted_here:
            tally.provider_calls += stashed.provider_calls
            tally.attempts += stashed.provider_calls
            self.keys.append(self._key(request_key))
        return stashed.reply

    def stasher(self, request_key: str, tally: CallTally) -> Callable[[JudgeReply], None]:
        """What ``call_with_retries`` calls with the reply the moment it arrives (before the call is counted)."""
        before = tally.provider_calls

        def stash_now(reply: JudgeReply) -> None:
            key = self._key(request_key)
            self.stash.put(key, reply, tally.provider_calls - before + 1, 0.0, self.token, self.generation_id)
            self.keys.append(key)

        return stash_now

    def settle(self, written: bool) -> None:
        """The generation is stored (``written``) or another claim stored it: the stashes are no longer needed."""
        if written:
            self.stash.settle([(key, self.token) for key in self.keys])
        else:  # whoever stored it took over what it needed; the lost claim's calls are not recorded (as before)
            self.stash.release_lost(self.keys, self.token)


class CallCache:
    """Chat replies by request within a process: an earlier session's memory iteration is the same call for every
    item cut from one dialogue, so it is asked once (concurrent askers wait for the first)."""

    def __init__(self) -> None:
        self._replies: dict[str, JudgeReply] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()

    def get_or_call(self, key: str, call: Callable[[], JudgeReply]) -> tuple[JudgeReply, bool]:
        with self._lock:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            if key in self._replies:
                return self._replies[key], True
            reply = call()
            self._replies[key] = reply
            return reply, False


def _request_key(model: JudgeSpec, request: JudgeRequest) -> str:
    material = {
        "model": model.key,
        "messages": request.messages,
        "max_tokens": request.max_tokens,
        "temperature": request.temperature,
        "seed": request.seed,
    }
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()


class ChatResponder:
    """A chat model behind a memory strategy."""

    def __init__(
        self,
        spec: ResponderSpec,
        strategy: Strategy,
        settings: Settings,
        limiter: RateLimiter,
        cache: CallCache,
        client_factory: Callable[[JudgeSpec, Settings], JudgeClient] = client_for,
        max_tokens: int | None = None,
        paid: PaidReplies | None = None,
    ) -> None:
        assert spec.model is not None
        self.spec, self.strategy, self.settings, self.limiter, self.cache = spec, strategy, settings, limiter, cache
        self.client_factory = client_factory
        self.max_tokens = max_tokens
        self.paid = paid

    @property
    def version(self) -> str:
        return f"{self.strategy.version}/max_tokens={self.max_tokens}"

    def respond(self, item: dict[str, Any]) -> Answer:
        assert self.spec.model is not None
        model = self.spec.model
        answer = Answer()

        def ask(messages: list[dict[str, str]], max_tokens: int) -> str:
            request = JudgeRequest(
                messages, temperature=0.0, max_tokens=min(max_tokens, self.max_tokens or max_tokens), seed=0
            )

            key = _request_key(model, request)

            def call() -> JudgeReply:
                client = self.client_factory(model, self.settings)
                stash = self.paid.stasher(key, answer.tally) if self.paid is not None else None
                check = self.paid.before_send if self.paid is not None else None
                return call_with_retries(
                    client,
                    model.key,
                    request,
                    self.settings,
                    self.limiter,
                    answer.tally,
                    on_reply=stash,
                    before_send=check,
                )

            stashed = self.paid.take(key, answer.tally) if self.paid is not None else None
            if stashed is not None:  # paid for by an earlier claim of this generation
                answer.tally.add(stashed, from_cache=False)
                return stashed.text
            reply, cached = self.cache.get_or_call(key, call)
            answer.cached_calls += int(cached)
            answer.tally.add(reply, from_cache=cached)
            return reply.text

        try:
            result = run_strategy(self.strategy, item, ask)
        except JudgeCallError as exc:
            answer.error = str(exc)
            return answer
        except StrategyRunError as exc:
            answer.error = f"strategy: {exc}"
            return answer
        answer.trace, answer.memory = result.trace, result.memory
        if not result.response.strip():
            answer.error = f"empty response: {model.key} answered nothing for strategy {self.strategy.id!r}"
        else:
            answer.response = result.response
        return answer


class _HttpCall:
    """The item POSTed to a team's service, as a client of call_with_retries (so retries and limits are the judges')."""

    def __init__(self, client: httpx.Client, url: str, item: dict[str, Any]) -> None:
        self.client, self.url, self.item = client, url, item

    def complete(self, request: JudgeRequest) -> JudgeReply:
        started = time.perf_counter()
        try:
            response = self.client.post(self.url, json=self.item)
        except httpx.TimeoutException as exc:
            raise JudgeCallError("timeout", f"{self.url}: {type(exc).__name__}", True) from None
        except httpx.HTTPError as exc:
            raise JudgeCallError("connection_error", f"{self.url}: {type(exc).__name__}: {exc}"[:500], True) from None
        if response.status_code >= 400:
            retryable = response.status_code in (408, 409, 429) or response.status_code >= 500
            kind = (
                "rate_limited" if response.status_code == 429 else "server_error" if retryable else "request_rejected"
            )
            raise JudgeCallError(kind, f"{self.url}: {response.text[:300]}", retryable, None, response.status_code)
        try:
            body = response.json()
        except ValueError:
            raise JudgeCallError("malformed_response", f"{self.url}: the reply is not JSON", True) from None
        if not isinstance(body, dict) or not isinstance(body.get("response"), str):
            raise JudgeCallError("malformed_response", f'{self.url}: the reply has no "response" text', True)
        memory = body.get("memory")
        structured = {"memory": memory if isinstance(memory, str) or memory is None else json.dumps(memory)}
        return JudgeReply(body["response"], None, 0, 0, (time.perf_counter() - started) * 1000, structured)


class HttpResponder:
    def __init__(
        self, spec: ResponderSpec, settings: Settings, limiter: RateLimiter, paid: PaidReplies | None = None
    ) -> None:
        assert spec.url is not None
        self.spec, self.settings, self.limiter = spec, settings, limiter
        self.client = httpx.Client(timeout=settings.judge_timeout_s)
        self.paid = paid

    version = ""

    def respond(self, item: dict[str, Any]) -> Answer:
        assert self.spec.url is not None
        answer = Answer()
        url = self.spec.url

        reply = self.paid.take("http", answer.tally) if self.paid is not None else None  # paid for by an earlier claim
        try:
            if reply is None:
                stash = self.paid.stasher("http", answer.tally) if self.paid is not None else None
                check = self.paid.before_send if self.paid is not None else None
                client = _HttpCall(self.client, url, item)
                request = JudgeRequest([], max_tokens=0)
                reply = call_with_retries(
                    client,
                    self.spec.key,
                    request,
                    self.settings,
                    self.limiter,
                    answer.tally,
                    on_reply=stash,
                    before_send=check,
                )
        except JudgeCallError as exc:
            answer.error = str(exc)
            return answer
        answer.tally.add(reply, from_cache=False)
        answer.memory = (reply.structured or {}).get("memory")
        if reply.text.strip():
            answer.response = reply.text
        else:
            answer.error = f"empty response from {self.spec.url}"
        return answer


class PythonResponder:
    """An in-process callable ``function(item) -> str | {"response": str, "memory": str}``. It runs in its own
    thread: past ``DJ_JUDGE_TIMEOUT`` the item is recorded as timed out (the thread cannot be stopped and finishes
    in the background)."""

    def __init__(self, spec: ResponderSpec, settings: Settings) -> None:
        assert spec.module is not None and spec.function is not None
        self.spec, self.settings = spec, settings
        try:
            module = importlib.import_module(spec.module)
        except Exception as exc:  # an import error of the user's module is bad input
            raise ResponderSpecError(f"responder {spec.key!r}: cannot import {spec.module!r}: {exc}") from None
        function = getattr(module, spec.function, None)
        if not callable(function):
            raise ResponderSpecError(f"responder {spec.key!r}: {spec.module!r} has no function {spec.function!r}")
        self.function: Callable[[dict[str, Any]], Any] = function

    version = ""

    def respond(self, item: dict[str, Any]) -> Answer:
        answer = Answer()
        outcome: dict[str, Any] = {}

        def target() -> None:
            try:
                outcome["value"] = self.function(json.loads(json.dumps(item)))
            except Exception as exc:
                outcome["error"] = f"python_error: {type(exc).__name__}: {exc}"[:2000]

        started = time.perf_counter()
        thread = threading.Thread(target=target, daemon=True, name=f"dj-responder-{self.spec.function}")
        thread.start()
        thread.join(self.settings.judge_timeout_s)
        answer.latency_ms = (time.perf_counter() - started) * 1000
        answer.tally.attempts = answer.tally.provider_calls = 1
        if thread.is_alive():
            answer.error = f"timeout: {self.spec.key} did not answer within {self.settings.judge_timeout_s:g}s"
            return answer
        if "error" in outcome:
            answer.error = outcome["error"]
            return answer
        value = outcome.get("value")
        if isinstance(value, dict):
            response, memory = value.get("response"), value.get("memory")
            answer.memory = memory if isinstance(memory, str) or memory is None else json.dumps(memory)
        else:
            response = value
        if not isinstance(response, str):
            answer.error = (
                f"malformed_response: {self.spec.key} returned {type(response).__name__}, not the response text"
            )
        elif not response.strip():
            answer.error = f"empty response from {self.spec.key}"
        else:
            answer.response = response
        return answer


def build_responder(
    spec: ResponderSpec,
    settings: Settings,
    strategies: StrategyRegistry,
    *,
    limiter: RateLimiter | None = None,
    cache: CallCache | None = None,
    client_factory: Callable[[JudgeSpec, Settings], JudgeClient] = client_for,
    max_tokens: int | None = None,
    paid: PaidReplies | None = None,
) -> Responder:
    """The responder a spec names; ResponderSpecError when it cannot be built (unknown strategy, module missing).
    ``paid``: stash the replies of a stored generation's claim (runs with systems)."""
    limiter = limiter or LocalRateLimiter()
    if spec.kind == "http":
        return HttpResponder(spec, settings, limiter, paid)
    if spec.kind == "python":
        return PythonResponder(spec, settings)
    assert spec.strategy is not None
    try:
        strategy = strategies.get(spec.strategy)
    except StrategyError as exc:
        raise ResponderSpecError(f"responder {spec.key!r}: {exc}") from None
    return ChatResponder(spec, strategy, settings, limiter, cache or CallCache(), client_factory, max_tokens, paid)
