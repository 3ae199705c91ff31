"""A monitor's alerts: opened when a rule decides a regression, resolved when it no longer holds (judge_api/alerts.py,
docs/monitoring.md#alerts), newest first, with their evidence."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Depends, HTTPException, Query
from sqlalchemy.orm import Session

from judge_api.alerts import alert_out
from judge_api.auth import Principal
from judge_api.deps import MAX_OFFSET, get_session, require
from judge_api.models import Monitor
from judge_api.repository import alerts as store
from judge_api.repository.monitors import get_monitor
from judge_api.schemas import Page
from judge_api.schemas.monitors import MonitorAlertOut

router = APIRouter(tags=["alerts"])


def monitor_or_404(session: Session, monitor_id: str, principal: Principal) -> Monitor:
    monitor = get_monitor(session, monitor_id, principal.project_id)
    if monitor is None:
        raise HTTPException(404, f"monitor {monitor_id!r} not found")
    return monitor


@router.get("/v1/monitors/{monitor_id}/alerts", response_model=Page[MonitorAlertOut])
def monitor_alerts(
    monitor_id: str,
    status: Literal["open", "resolved"] | None = None,
    offset: int = Query(0, ge=0, le=MAX_OFFSET),
    limit: int = Query(100, ge=1, le=1000),
    principal: Principal = Depends(require("read")),
    session: Session = Depends(get_session),
) -> Page[MonitorAlertOut]:
    monitor_or_404(session, monitor_id, principal)
    total, rows = store.list_alerts(session, monitor_id, status, offset, limit)
    items = [MonitorAlertOut.model_validate(alert_out(a)) for a in rows]
    return Page[MonitorAlertOut](total=total, offset=offset, limit=limit, items=items)
