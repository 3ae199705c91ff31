"""Webhook deliveries: every event sent (or being retried) for a run, with each attempt (judge_api/webhooks.py).
The callback secret is never part of an answer."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query
from sqlalchemy.orm import Session

from judge_api.auth import Principal
from judge_api.deps import MAX_OFFSET, get_session, require, run_or_404
from judge_api.models import WebhookAttempt, WebhookDelivery
from judge_api.repository import webhooks as store
from judge_api.schemas import Page, WebhookAttemptOut, WebhookDeliveryOut

router = APIRouter(tags=["webhooks"])


def delivery_out(row: WebhookDelivery, attempts: list[WebhookAttempt]) -> WebhookDeliveryOut:
    return WebhookDeliveryOut(
        id=row.id,
        event=row.event,
        status=row.status,
        url=row.url,
        attempts=row.attempts,
        created_at=row.created_at,
        next_attempt_at=row.next_attempt_at if row.status == "pending" else None,
        delivered_at=row.delivered_at,
        last_error=row.last_error,
        payload=dict(row.payload),
        history=[
            WebhookAttemptOut(
                attempt=a.attempt,
                started_at=a.started_at,
                duration_ms=a.duration_ms,
                status_code=a.status_code,
                outcome=a.outcome,
                error=a.error,
            )
            for a in attempts
        ],
    )


@router.get("/v1/runs/{run_id}/deliveries", response_model=Page[WebhookDeliveryOut])
def run_deliveries(
    run_id: str,
    offset: int = Query(0, ge=0, le=MAX_OFFSET),
    limit: int = Query(100, ge=1, le=1000),
    principal: Principal = Depends(require("read")),
    session: Session = Depends(get_session),
) -> Page[WebhookDeliveryOut]:
    """The run's webhook deliveries (its ``run.finished`` event), newest first, with every attempt."""
    run_or_404(session, run_id, principal)
    total, rows = store.list_deliveries(session, run_id=run_id, offset=offset, limit=limit)
    return Page[WebhookDeliveryOut](
        total=total, offset=offset, limit=limit, items=[delivery_out(row, attempts) for row, attempts in rows]
    )


@router.get("/v1/monitors/{monitor_id}/deliveries", response_model=Page[WebhookDeliveryOut])
def monitor_deliveries(
    monitor_id: str,
    offset: int = Query(0, ge=0, le=MAX_OFFSET),
    limit: int = Query(100, ge=1, le=1000),
    principal: Principal = Depends(require("read")),
    session: Session = Depends(get_session),
) -> Page[WebhookDeliveryOut]:
    """The monitor's webhook deliveries (``alert.opened``, ``alert.resolved``), newest first, with every attempt."""
    from judge_api.routers.alerts import monitor_or_404

    monitor_or_404(session, monitor_id, principal)
    total, rows = store.list_deliveries(session, monitor_id=monitor_id, offset=offset, limit=limit)
    return Page[WebhookDeliveryOut](
        total=total, offset=offset, limit=limit, items=[delivery_out(row, attempts) for row, attempts in rows]
    )
