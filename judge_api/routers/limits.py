"""``GET /v1/limits``: the limits this deployment enforces (its settings), so a client can size its requests instead
of learning them from a 413, 422 or 409."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from pydantic import BaseModel

from judge_api.auth import Principal
from judge_api.config import Settings
from judge_api.deps import app_settings, require

router = APIRouter(tags=["limits"])


class Limits(BaseModel):
    """Each limit with the setting that changes it (docs/operations.md)."""

    max_body_bytes: int  # DJ_MAX_BODY_BYTES
    max_items_per_run: int  # DJ_MAX_ITEMS (also responses per monitor request)
    max_turns_per_item: int  # DJ_MAX_TURNS
    max_chars_per_turn: int  # DJ_MAX_CHARS_PER_TURN
    max_judgments_per_run: int  # DJ_MAX_JUDGMENTS
    max_judgments_per_report: int  # DJ_MAX_REPORT_JUDGMENTS (report, agreement, calibrated, label queue)
    runs_per_minute: int  # DJ_RUNS_PER_MINUTE (per API key)
    max_monitors_per_project: int  # DJ_MAX_MONITORS
    max_rules_per_monitor: int  # DJ_MAX_RULES_PER_MONITOR


@router.get("/v1/limits", response_model=Limits)
def get_limits(principal: Principal = Depends(require("read")), settings: Settings = Depends(app_settings)) -> Limits:
    return Limits(
        max_body_bytes=settings.max_body_bytes,
        max_items_per_run=settings.max_items_per_run,
        max_turns_per_item=settings.max_turns_per_item,
        max_chars_per_turn=settings.max_chars_per_turn,
        max_judgments_per_run=settings.max_judgments_per_run,
        max_judgments_per_report=settings.report_judgments_limit,
        runs_per_minute=settings.runs_per_minute,
        max_monitors_per_project=settings.max_monitors_per_project,
        max_rules_per_monitor=settings.max_rules_per_monitor,
    )
