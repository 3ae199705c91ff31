"""One provider reply with the judge path's retry policy (``call_with_retries``), shared by judgments and the
responders of systems under test.

A 429 waits what its ``Retry-After`` says (up to MAX_RETRY_AFTER_S) and pauses the judge for every worker through the
rate limiter; 5xx, timeouts, connection errors and malformed responses back off exponentially with full jitter
(``DJ_BACKOFF_BASE`` doubling up to ``DJ_BACKOFF_MAX``), honouring a ``Retry-After`` when one is sent; after
``DJ_MAX_ATTEMPTS`` attempts the judgment is ``failed`` with the last error kept. Other errors (4xx) fail at once.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import Protocol

from judge_api import logs, metrics, tracing
from judge_api.config import Settings
from workers.billing import CallTally
from workers.clients import JudgeCallError, JudgeReply, JudgeRequest
from workers.ratelimit import RateLimiter, limit_for

# the judge path's log lines keep the logger name they had before execute.py was split (log filters match on it)
log = logging.getLogger("workers.execute")

MAX_RETRY_AFTER_S = 300.0  # a longer Retry-After is waited in steps of this, attempt by attempt


class Completer(Protocol):
    """What call_with_retries calls: a judge client, or anything answering a request the same way (a responder)."""

    def complete(self, request: JudgeRequest) -> JudgeReply: ...


def call_with_retries(
    client: Completer,
    key: str,
    request: JudgeRequest,
    settings: Settings,
    limiter: RateLimiter,
    tally: CallTally,
    sleep: Callable[[float], None] = time.sleep,
    rng: random.Random | None = None,
    on_reply: Callable[[JudgeReply], None] | None = None,
    before_send: Callable[[], None] | None = None,
) -> JudgeReply:
    """One provider reply with the judge path's machinery: the rate limit of ``key`` (``DJ_RATE_LIMITS``), bounded
    retries with back-off and ``Retry-After`` (``DJ_MAX_ATTEMPTS``), a 429 pausing ``key`` for every worker, and the
    metrics and log context of each attempt. Judgments and the responders of systems under test both call it.
    ``on_reply`` gets the reply the moment the client returns it, before it is counted or anything else runs (the
    reply stash). ``before_send`` runs before each attempt is sent, after the rate limit let it go; it raises
    (``JudgeCallError``, not retried) when the call must not start: its judgment or generation is gone (issue 43)."""
    rng = rng or random.Random()
    limit = limit_for(key, settings)
    estimate = sum(len(m["content"]) for m in request.messages) // 4 + request.max_tokens
    attempt = 0
    while True:
        attempt += 1
        tally.attempts += 1
        limiter.acquire(key, limit, estimate)
        if before_send is not None:
            before_send()
        try:
            with (
                metrics.provider_call(key),
                logs.context(attempt=attempt),
                tracing.span("provider.call", judge=key, attempt=attempt),
            ):
                reply = client.complete(request)
                if on_reply is not None:
                    on_reply(reply)
            tally.provider_calls += 1
            metrics.call_tokens(key, reply.input_tokens, reply.output_tokens)
            return reply
        except JudgeCallError as exc:
            if exc.reached_provider:  # refused or reset before it was sent: an attempt, not a provider call
                tally.provider_calls += 1
            tally.errors.append(str(exc))
            metrics.call_failed(key, exc.kind, will_retry=exc.retryable and attempt < settings.max_attempts)
            if not exc.retryable or attempt >= settings.max_attempts:
                if attempt > 1:
                    exc.message = f"{exc.message} (after {attempt} attempts)"
                raise
            delay = retry_delay(exc, attempt, settings, rng)
            if exc.kind == "rate_limited":
                limiter.pause(key, delay)  # every worker holds this judge, not only this one
            with logs.context(attempt=attempt):
                log.info("judge %s: %s; retry %d in %.2fs", key, exc, attempt, delay)
            sleep(delay)


def retry_delay(exc: JudgeCallError, attempt: int, settings: Settings, rng: random.Random) -> float:
    """The provider's Retry-After when it sent one, else exponential back-off with full jitter."""
    if exc.retry_after_s is not None:
        return min(exc.retry_after_s, MAX_RETRY_AFTER_S)
    backoff = min(settings.backoff_max_s, settings.backoff_base_s * 2 ** (attempt - 1))
    return rng.uniform(0, backoff)
