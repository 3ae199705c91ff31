"""Webhooks: signed callbacks when a run finishes (``run.finished``) and when a monitor's alert opens or resolves
(``alert.opened``, ``alert.resolved``); docs/monitoring.md#webhooks.

The path of an event: it is stored once (``webhook_deliveries``, unique by its event key: a run's
``run.finished:<run id>``, an alert's ``alert.opened:<alert id>``) in the transaction that decides it, or by the
webhook pass over finished runs; then :func:`deliver_due`, called by the :class:`Sender` thread of every API and
worker process (never by the sweeper's loop: a slow receiver must not delay dead-worker checks), claims due
deliveries (compare-and-set, so one process sends a delivery at a time) and POSTs them, each attempt ending by one
deadline (``DJ_WEBHOOK_TIMEOUT``) inside its claim's lease. A 2xx settles a
delivery for good; anything else (another status, a timeout, a refused connection, a URL no longer allowed) is
logged as an attempt and retried with back-off doubling from ``DJ_WEBHOOK_BACKOFF`` up to ``DJ_WEBHOOK_BACKOFF_MAX``
until ``DJ_WEBHOOK_RETRY_FOR`` (24 h) after the event, then the delivery is given up (``failed``).

Signing: the body is JSON carrying the event's ``id`` (the same on every attempt: a receiver's de-duplication key),
the ``attempt`` number and the attempt's ``timestamp`` (Unix seconds). ``X-Dialogue-Judge-Signature`` is
``sha256=<hex HMAC-SHA256 of the raw body, keyed with the callback secret>``, and ``X-Dialogue-Judge-Timestamp``
repeats the body's timestamp. Because the timestamp is inside the signed body, a receiver that checks the signature,
that the header equals the body's timestamp and that it is within 5 minutes of its clock refuses a replayed
request (the role of Stripe's ``t=`` in its signed payload ``t.body``); the event ``id`` catches a duplicate that
arrives in time (a delivery whose 2xx was lost on the way back is sent again).

With auth on, a callback URL must be under a ``DJ_CALLBACK_URL_ALLOWLIST`` prefix or name a host whose every address
is public: a submitter must not make the service POST to its own network (SSRF). The check runs when the URL is
given (422 naming the field) and again at every attempt (DNS may have changed), and the attempt connects to the
addresses it checked (:mod:`judge_api.outbound`: no second resolution, so no DNS rebinding); redirects are not
followed.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from itertools import repeat
from typing import Any
from urllib.parse import urlsplit

import httpx

from judge_api import outbound
from judge_api.config import Settings, url_under_prefixes
from judge_api.db import session_scope
from judge_api.models import WebhookDelivery, utcnow
from judge_api.outbound import Resolver
from judge_api.repository import webhooks as store

log = logging.getLogger(__name__)

SIGNATURE_HEADER = "X-Dialogue-Judge-Signature"
TIMESTAMP_HEADER = "X-Dialogue-Judge-Timestamp"
EVENT_HEADER = "X-Dialogue-Judge-Event"
DELIVERY_HEADER = "X-Dialogue-Judge-Delivery"
REPLAY_TOLERANCE_S = 300
EVENTS = ("run.finished", "alert.opened", "alert.resolved")
FINISHED_RUN_STATUSES = ("done", "budget_exhausted")
SEND_BATCH = 50
SEND_THREADS = 8
USER_AGENT = "dialogue-judge-webhooks/1"

MAX_RESPONSE_BYTES = 64 * 1024  # read of a response at most (its status line and headers; the body is not used)
LEASE_MARGIN_S = 30.0  # a claim outlives its attempt's deadline by this much (recording it, a slow database)


# -- URLs ---------------------------------------------------------------------------------------------------------


class CallbackRefused(Exception):
    """The service may not POST to this URL (the message says why)."""


def callback_addresses(url: str, settings: Settings, resolve: Resolver | None = None) -> list[str]:
    """The addresses to connect to for ``url``: its host resolved once, and with auth on (outside
    ``DJ_CALLBACK_URL_ALLOWLIST``) every one of them public; raises :class:`CallbackRefused` saying why not."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise CallbackRefused(f"{url!r} is not an http(s) URL with a host")
    try:
        addresses = (resolve or outbound.resolve_host)(parts.hostname)
    except (OSError, UnicodeError) as exc:
        raise CallbackRefused(f"the host {parts.hostname!r} does not resolve ({exc.__class__.__name__})") from None
    if not settings.auth_enabled:
        return addresses
    if settings.callback_url_allowlist.strip() and url_under_prefixes(url, settings.callback_url_allowlist):
        return addresses
    private = [a for a in addresses if not outbound.is_public(a)]
    if private or not addresses:
        raise CallbackRefused(
            f"the host {parts.hostname!r} is a private, loopback or reserved address ({', '.join(private)}); with "
            "auth on (DJ_AUTH) callbacks go to public hosts or to URLs under DJ_CALLBACK_URL_ALLOWLIST"
        )
    return addresses


def callback_url_refusal(url: str, settings: Settings, resolve: Resolver | None = None) -> str | None:
    """Why the service may not POST to ``url`` (None: it may). With auth off anything http(s); with auth on a URL
    under ``DJ_CALLBACK_URL_ALLOWLIST`` or on a host whose every address is public."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"{url!r} is not an http(s) URL with a host"
    if not settings.auth_enabled or (
        settings.callback_url_allowlist.strip() and url_under_prefixes(url, settings.callback_url_allowlist)
    ):
        return None  # where it resolves is looked up at each attempt (it may not resolve from here yet)
    try:
        callback_addresses(url, settings, resolve)
    except CallbackRefused as exc:
        return str(exc)
    return None


# -- signing ------------------------------------------------------------------------------------------------------


def sign(body: bytes, secret: str) -> str:
    """The ``X-Dialogue-Judge-Signature`` value of a body."""
    return "sha256=" + hmac.new(secret.encode("utf-8"), body, hashlib.sha256).hexdigest()


def verify(
    body: bytes,
    headers: dict[str, str],
    secret: str,
    *,
    tolerance_s: float = REPLAY_TOLERANCE_S,
    now: float | None = None,
) -> dict[str, Any]:
    """What a receiver does (the tests use it): check the signature, that the timestamp header is the body's and is
    recent; returns the parsed body, or raises ValueError saying what is wrong."""
    lower = {k.lower(): v for k, v in headers.items()}
    given = lower.get(SIGNATURE_HEADER.lower(), "")
    if not hmac.compare_digest(given, sign(body, secret)):
        raise ValueError("the signature does not match the body")
    payload = json.loads(body)
    stamp = lower.get(TIMESTAMP_HEADER.lower(), "")
    if stamp != str(payload.get("timestamp")):
        raise ValueError("the timestamp header is not the signed body's timestamp")
    if abs((time.time() if now is None else now) - int(stamp)) > tolerance_s:
        raise ValueError("the timestamp is too old (or in the future): a replay")
    return dict(payload)


def render(delivery: WebhookDelivery, attempt: int, timestamp: int) -> bytes:
    body = {"id": delivery.id, **delivery.payload, "attempt": attempt, "timestamp": timestamp}
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def backoff_s(settings: Settings, attempt: int) -> float:
    """Wait after the ``attempt``-th failed attempt (1-based): doubling from DJ_WEBHOOK_BACKOFF, capped."""
    return float(min(settings.webhook_backoff_s * 2.0 ** (attempt - 1), settings.webhook_backoff_max_s))


def next_attempt(settings: Settings, created_at: datetime, attempt: int, now: datetime) -> datetime | None:
    """When to try again after a failed attempt; None once the retry window after the event is spent."""
    when = now + timedelta(seconds=backoff_s(settings, attempt))
    return when if when <= created_at + timedelta(seconds=settings.webhook_retry_for_s) else None


# -- sending ------------------------------------------------------------------------------------------------------


def post(url: str, body: bytes, headers: dict[str, str], addresses: list[str], deadline: float) -> int:
    """POST ``body`` to ``url`` connecting only to ``addresses`` (the checked ones), all of it ending by
    ``deadline`` (``time.monotonic()``); returns the status code. Raises httpx.HTTPError."""
    host = urlsplit(url).hostname or ""
    backend = outbound.PinnedBackend(host, addresses, deadline, max_read_bytes=MAX_RESPONSE_BYTES)
    with (
        httpx.Client(transport=outbound.PinnedTransport(backend), follow_redirects=False, trust_env=False) as client,
        client.stream("POST", url, content=body, headers=headers) as response,
    ):
        return response.status_code  # the body is not read: its size and pace do not matter


def send_one(settings: Settings, delivery: WebhookDelivery, deadline: float) -> str:
    """One attempt at a claimed delivery, ending by ``deadline`` (inside the claim's lease), logged and settled;
    returns its outcome."""
    attempt = delivery.attempts + 1
    started = utcnow()
    clock = time.perf_counter()
    status_code: int | None = None
    error: str | None = None
    try:
        addresses = callback_addresses(delivery.url, settings)
    except CallbackRefused as refusal:
        outcome, error = "refused", str(refusal)
    else:
        timestamp = int(time.time())
        body = render(delivery, attempt, timestamp)
        headers = {
            "Content-Type": "application/json",
            "User-Agent": USER_AGENT,
            SIGNATURE_HEADER: sign(body, delivery.secret),
            TIMESTAMP_HEADER: str(timestamp),
            EVENT_HEADER: delivery.event,
            DELIVERY_HEADER: delivery.id,
        }
        try:
            status_code = post(delivery.url, body, headers, addresses, deadline)
            if 200 <= status_code < 300:
                outcome = "delivered"
            else:
                outcome, error = "failed", f"HTTP {status_code}"
        except httpx.HTTPError as exc:
            outcome, error = "failed", f"{exc.__class__.__name__}: {str(exc)[:300]}"
    duration_ms = (time.perf_counter() - clock) * 1000.0
    retry_at = None if outcome == "delivered" else next_attempt(settings, delivery.created_at, attempt, utcnow())
    with session_scope() as session:
        store.record_attempt(
            session,
            delivery.id,
            attempt=attempt,
            started_at=started,
            duration_ms=round(duration_ms, 3),
            status_code=status_code,
            outcome=outcome,
            error=error,
            next_attempt_at=retry_at,
        )
    if outcome != "delivered":
        # the URL's path may carry a token: log the host only
        host = urlsplit(delivery.url).hostname
        state = "given up" if retry_at is None else f"next at {retry_at:%H:%M:%S}"
        log.warning(
            "webhook %s (%s) to %s: attempt %d %s (%s)", delivery.id, delivery.event, host, attempt, outcome, state
        )
    return outcome


def lease_s(settings: Settings) -> float:
    """How long a claim holds a delivery: its attempt's deadline (DJ_WEBHOOK_TIMEOUT) and a margin to record it."""
    return settings.webhook_timeout_s + LEASE_MARGIN_S


def deliver_due(settings: Settings, limit: int = SEND_BATCH) -> dict[str, int]:
    """Send due deliveries, up to ``limit``, ``SEND_THREADS`` at a time; returns outcome counts.

    Each round claims only as many as it sends at once, so every claimed delivery starts at once and its attempt
    ends by its deadline (DJ_WEBHOOK_TIMEOUT from the claim), well inside the claim's lease: no other process can
    claim it while this attempt still runs, and a delivery is never sent twice at the same time."""
    counts: dict[str, int] = {}
    sent = 0
    with ThreadPoolExecutor(SEND_THREADS, thread_name_prefix="dj-webhook") as pool:
        while sent < limit:
            with session_scope() as session:
                claimed = store.claim_due(session, utcnow(), lease_s(settings), min(SEND_THREADS, limit - sent))
            if not claimed:
                break
            deadline = time.monotonic() + settings.webhook_timeout_s
            for outcome in pool.map(send_one, repeat(settings), claimed, repeat(deadline)):
                counts[outcome] = counts.get(outcome, 0) + 1
            sent += len(claimed)
    return counts


class Sender(threading.Thread):
    """Sends due webhooks every ``DJ_SWEEP_INTERVAL``, in its own thread: a slow receiver then delays only other
    deliveries, never the sweeper's loop that finds dead workers and re-sends lost work."""

    def __init__(self, settings: Settings, stop_event: threading.Event) -> None:
        super().__init__(name="dj-webhooks", daemon=True)
        self.settings = settings
        self.stop_event = stop_event

    def run(self) -> None:
        while not self.stop_event.wait(self.settings.sweep_interval_s):
            try:
                # in every process: events are stored once by key, deliveries claimed one by one
                sweep(self.settings)
            except Exception as exc:  # the database is away: the next round tries again
                log.warning("webhook sweep failed: %s", exc)


# -- events -------------------------------------------------------------------------------------------------------


def emit_finished_runs() -> int:
    """Store the ``run.finished`` event of every run with a callback that has finished since the last pass."""
    from judge_api.repository.runs import summarize_runs

    stored = 0
    with session_scope() as session:
        runs = store.runs_awaiting_finish(session)
        if not runs:
            return 0
        for run, summary in zip(runs, summarize_runs(session, runs), strict=True):
            if summary.status not in FINISHED_RUN_STATUSES or not run.callback_url or not run.callback_secret:
                continue
            payload = {
                "event": "run.finished",
                "created_at": utcnow().isoformat() + "Z",
                "run": summary.model_dump(
                    mode="json",
                    include={
                        "id",
                        "name",
                        "status",
                        "created_at",
                        "finished_at",
                        "n_items",
                        "n_judgments",
                        "counts",
                        "cost_usd",
                        "budget_exhausted",
                        "message",
                    },
                ),
                "url": f"/v1/runs/{run.id}",
                "report_url": f"/v1/runs/{run.id}/report",
                "rule": None,
            }
            created = store.add_delivery(
                session,
                event_key=f"run.finished:{run.id}",
                project_id=run.project_id,
                event="run.finished",
                url=run.callback_url,
                secret=run.callback_secret,
                payload=payload,
                run_id=run.id,
            )
            stored += created is not None
    return stored


def sweep(settings: Settings) -> dict[str, int]:
    """The sweeper's webhook pass: store finished runs' events, then send what is due."""
    emitted = emit_finished_runs()
    counts = deliver_due(settings)
    if emitted:
        counts["emitted"] = emitted
    return counts
