"""What an operator asks of the running service: how deep the queue is, how old the oldest unfinished judgment is,
which workers are alive. ``/readyz`` and the API's ``/metrics`` read it."""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select

from judge_api import heartbeats, queue
from judge_api.config import Settings
from judge_api.db import session_scope
from judge_api.models import Judgment, OtlpSpan, utcnow


def backlog() -> dict[str, Any]:
    """Unfinished judgments (pending or running) and the age in seconds of the oldest (None when there is none)."""
    with session_scope() as session:
        count, oldest = session.execute(
            select(func.count(), func.min(Judgment.created_at)).where(Judgment.status.in_(("pending", "running")))
        ).one()
        spans, oldest_span = session.execute(
            select(func.count(), func.min(OtlpSpan.received_at)).where(OtlpSpan.status == "received")
        ).one()
    now = utcnow()
    age = (now - oldest).total_seconds() if oldest is not None else None
    span_age = (now - oldest_span).total_seconds() if oldest_span is not None else None
    return {
        "pending": int(count),
        "oldest_pending_age_s": round(max(0.0, age), 3) if age is not None else None,
        "otlp_received": int(spans),
        "oldest_otlp_received_age_s": round(max(0.0, span_age), 3) if span_age is not None else None,
    }


OTLP_STALL_S = 30.0
"""OTLP spans received longer ago and not processed: no OTLP processor is running, or it fails."""


def otlp_warning(state: dict[str, Any]) -> str | None:
    """What ``/readyz`` says when the OTLP processors do not keep up (the spans are kept, not judged), or None."""
    age = state.get("oldest_otlp_received_age_s")
    if age is None or age < OTLP_STALL_S:
        return None
    return (
        f"{state.get('otlp_received')} OTLP spans are not processed, the oldest received {age:.0f} s ago: no OTLP "
        "processor is running (DJ_OTLP_PROCESS=workers needs a worker up) or it fails (see the logs)"
    )


def broker_state(settings: Settings) -> dict[str, Any]:
    """Messages waiting in the judgments queue (a message carries up to DJ_TASK_BATCH judgments) and the workers
    with a live heartbeat. Raises if Redis cannot be reached."""
    from judge_api.sweeper import redis_client

    client = redis_client(settings)
    try:
        depth = int(client.llen(queue.JUDGE_QUEUE))
        workers = heartbeats.alive(client)
    finally:
        client.close()
    return {"queue_depth": depth, "workers": workers}


def queue_state(settings: Settings) -> dict[str, float | None]:
    """The figures the API's ``/metrics`` exports (whatever can be read; Redis may be unset or down)."""
    state: dict[str, float | None] = dict(backlog())
    if settings.resolved_redis_url() is not None:
        try:
            broker = broker_state(settings)
        except Exception:
            return state
        state["queue_depth"] = broker["queue_depth"]
        state["workers_alive"] = len(broker["workers"])
    return state


def alert_states() -> list[tuple[str, int, bool]]:
    """(monitor id, rule index, open?) for the ``dialogue_judge_monitor_alert`` gauge."""
    from judge_api.repository import alerts

    with session_scope() as session:
        return alerts.gauge_rows(session)
