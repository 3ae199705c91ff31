"""Webhook deliveries: one row per event (unique by its event key, so an event is stored and sent once) and one
row per attempt. The sending is ``judge_api/webhooks.py``; this is only storage."""

from __future__ import annotations

import secrets as _secrets
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import exc as sa_exc
from sqlalchemy import exists, func, or_, select, update
from sqlalchemy.orm import Session

from judge_api.models import Run, WebhookAttempt, WebhookDelivery, utcnow


def new_delivery_id() -> str:
    return "evt_" + _secrets.token_hex(12)


def add_delivery(
    session: Session,
    *,
    event_key: str,
    project_id: str,
    event: str,
    url: str,
    secret: str,
    payload: dict[str, Any],
    run_id: str | None = None,
    monitor_id: str | None = None,
) -> str | None:
    """Store an event to deliver in the caller's transaction (a savepoint); None when its key is stored already
    (another process, or an earlier sweep, recorded the same event)."""
    if session.scalar(select(WebhookDelivery.id).where(WebhookDelivery.event_key == event_key)) is not None:
        return None
    delivery_id = new_delivery_id()
    now = utcnow()
    try:
        with session.begin_nested():
            session.add(
                WebhookDelivery(
                    id=delivery_id,
                    event_key=event_key,
                    project_id=project_id,
                    event=event,
                    run_id=run_id,
                    monitor_id=monitor_id,
                    url=url,
                    secret=secret,
                    payload=payload,
                    status="pending",
                    attempts=0,
                    next_attempt_at=now,
                    created_at=now,
                )
            )
    except sa_exc.IntegrityError:  # a concurrent sweeper stored the same event first
        return None
    return delivery_id


def runs_awaiting_finish(session: Session, limit: int = 200) -> list[Run]:
    """Runs with a callback (URL and secret) whose ``run.finished`` event is not stored yet (finished or not)."""
    sent = exists().where(WebhookDelivery.run_id == Run.id, WebhookDelivery.event == "run.finished")
    # a run imported from a bundle has its callback URL and no secret (bundles never carry it): nothing to sign with
    signed = Run.callback_url.is_not(None) & Run.callback_secret.is_not(None)
    query = select(Run).where(signed, ~sent).order_by(Run.created_at).limit(limit)
    return list(session.scalars(query))


def claim_due(session: Session, now: datetime, lease_s: float, limit: int) -> list[WebhookDelivery]:
    """Claim pending deliveries whose time has come (compare-and-set on ``claimed_until``, so two processes never
    send the same delivery at once); commits the claims."""
    due = list(
        session.scalars(
            select(WebhookDelivery.id)
            .where(
                WebhookDelivery.status == "pending",
                WebhookDelivery.next_attempt_at <= now,
                or_(WebhookDelivery.claimed_until.is_(None), WebhookDelivery.claimed_until < now),
            )
            .order_by(WebhookDelivery.next_attempt_at)
            .limit(limit)
        )
    )
    until = now + timedelta(seconds=lease_s)
    claimed: list[str] = []
    for delivery_id in due:
        result = session.execute(
            update(WebhookDelivery)
            .where(
                WebhookDelivery.id == delivery_id,
                WebhookDelivery.status == "pending",
                or_(WebhookDelivery.claimed_until.is_(None), WebhookDelivery.claimed_until < now),
            )
            .values(claimed_until=until)
        )
        if result.rowcount == 1:  # type: ignore[attr-defined]
            claimed.append(delivery_id)
    session.commit()
    if not claimed:
        return []
    rows = list(session.scalars(select(WebhookDelivery).where(WebhookDelivery.id.in_(claimed))))
    for row in rows:
        session.expunge(row)
    return rows


def record_attempt(
    session: Session,
    delivery_id: str,
    *,
    attempt: int,
    started_at: datetime,
    duration_ms: float,
    status_code: int | None,
    outcome: str,
    error: str | None,
    next_attempt_at: datetime | None,
) -> None:
    """Log the attempt and settle the delivery: delivered on a 2xx, else pending until ``next_attempt_at`` or, with
    none, failed (given up). Only a pending delivery changes: a delivered one is never reopened."""
    session.add(
        WebhookAttempt(
            delivery_id=delivery_id,
            attempt=attempt,
            started_at=started_at,
            duration_ms=duration_ms,
            status_code=status_code,
            outcome=outcome,
            error=error,
        )
    )
    values: dict[str, Any] = {"attempts": attempt, "claimed_until": None, "last_error": error}
    if outcome == "delivered":
        values.update(status="delivered", delivered_at=utcnow())
    elif next_attempt_at is None:
        values.update(status="failed")
    else:
        values.update(next_attempt_at=next_attempt_at)
    session.execute(
        update(WebhookDelivery)
        .where(WebhookDelivery.id == delivery_id, WebhookDelivery.status == "pending")
        .values(**values)
    )


def list_deliveries(
    session: Session,
    *,
    run_id: str | None = None,
    monitor_id: str | None = None,
    offset: int = 0,
    limit: int = 100,
) -> tuple[int, list[tuple[WebhookDelivery, list[WebhookAttempt]]]]:
    """A run's or a monitor's deliveries, newest first, each with its attempts in order."""
    condition = WebhookDelivery.run_id == run_id if run_id is not None else WebhookDelivery.monitor_id == monitor_id
    total = int(session.scalar(select(func.count(WebhookDelivery.id)).where(condition)) or 0)
    rows = list(
        session.scalars(
            select(WebhookDelivery)
            .where(condition)
            .order_by(WebhookDelivery.created_at.desc(), WebhookDelivery.id)
            .offset(offset)
            .limit(limit)
        )
    )
    attempts: dict[str, list[WebhookAttempt]] = {row.id: [] for row in rows}
    if rows:
        for attempt in session.scalars(
            select(WebhookAttempt)
            .where(WebhookAttempt.delivery_id.in_(list(attempts)))
            .order_by(WebhookAttempt.delivery_id, WebhookAttempt.attempt, WebhookAttempt.id)
        ):
            attempts[attempt.delivery_id].append(attempt)
    return total, [(row, attempts[row.id]) for row in rows]


def delete_for_monitor(session: Session, monitor_ids: Sequence[str]) -> int:
    """Delete a deleted monitor's deliveries (their attempts go by ON DELETE CASCADE)."""
    from sqlalchemy import delete

    if not monitor_ids:
        return 0
    result = session.execute(delete(WebhookDelivery).where(WebhookDelivery.monitor_id.in_(list(monitor_ids))))
    return int(result.rowcount)  # type: ignore[attr-defined]
