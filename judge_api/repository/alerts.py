"""Monitor alerts: the verdict stream a rule reads (in judgment order, with each response's slice keys), the alert
rows, and what ``/metrics`` and the dashboard read. The decisions are ``judge_api/alerts.py``."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import and_, delete, func, or_, select
from sqlalchemy.orm import Session

from judge_api.models import Judgment, Monitor, MonitorAlert, MonitorResponse, MonitorRuleState, RunItem, utcnow


def new_alert_id() -> str:
    return "alr_" + uuid.uuid4().hex[:16]


def monitors_with_rules(session: Session) -> list[Monitor]:
    return [m for m in session.scalars(select(Monitor).order_by(Monitor.created_at)) if m.alerts]


def run_signature(session: Session, run_id: str) -> tuple[int, int]:
    """(finished judgments, their largest id) of a monitor's run: unchanged means no new verdict."""
    count, largest = session.execute(
        select(func.count(Judgment.id), func.max(Judgment.id)).where(
            Judgment.run_id == run_id, Judgment.status.not_in(("pending", "running"))
        )
    ).one()
    return int(count or 0), int(largest or 0)


def stream(
    session: Session,
    monitor: Monitor,
    rubric_id: str,
    aspect: str,
    judge: str,
    after_id: int = 0,
    *,
    since: datetime | None = None,
    settled: Sequence[str] = (),
) -> list[dict[str, Any]]:
    """Every judgment of the monitor for (rubric, aspect, judge) with an id above ``after_id``, in judgment order
    (the order responses were sampled), with its status, score, contradiction rate (fact-check details) and the
    response's slice keys.

    ``since`` (a rule that reads a window only): what a look reads of the stream, its settled prefix (up to the
    first judgment whose status is not in ``settled``), and only the prefix's judgments of responses at or after
    ``since``, its last judgment whatever its time (the prefix's end), and the first judgment not settled (where the
    prefix ends): the rule's look and the prefix's end are what they are on the whole stream, without reading a
    monitor's every verdict (review r56b) nor a backlog of verdicts not settled yet (review r56c) at every
    evaluation. One statement: one snapshot."""
    keyed = (
        (MonitorResponse.monitor_id == monitor.id) & (MonitorResponse.response_id == Judgment.item_key),
        (
            Judgment.run_id == monitor.run_id,
            Judgment.rubric_id == rubric_id,
            Judgment.aspect == aspect,
            Judgment.judge == judge,
            Judgment.mode == "single",
            Judgment.id > after_id,
        ),
    )
    query = (
        select(
            Judgment.id,
            Judgment.status,
            Judgment.score,
            Judgment.details,
            Judgment.item_key,
            MonitorResponse.ts,
            MonitorResponse.system,
            MonitorResponse.version,
            MonitorResponse.segment,
        )
        .join(MonitorResponse, keyed[0])
        .where(*keyed[1])
        .order_by(Judgment.id)
    )
    if since is not None:
        key = select(Judgment.id, Judgment.status).join(MonitorResponse, keyed[0]).where(*keyed[1]).cte("key_rows")
        boundary = select(func.min(key.c.id)).where(key.c.status.not_in(settled)).scalar_subquery()
        prefix_end = select(func.max(key.c.id)).where(or_(boundary.is_(None), key.c.id < boundary)).scalar_subquery()
        in_prefix = or_(boundary.is_(None), Judgment.id < boundary)
        query = query.where(
            or_(and_(in_prefix, or_(MonitorResponse.ts >= since, Judgment.id == prefix_end)), Judgment.id == boundary)
        )
    out = []
    for row in session.execute(query):
        details = row.details if isinstance(row.details, dict) else {}
        rate = details.get("contradiction_rate") if isinstance(details.get("facts"), list) else None
        out.append(
            {
                "id": int(row.id),
                "status": row.status,
                "score": None if row.score is None else float(row.score),
                "contradiction_rate": float(rate) if isinstance(rate, int | float) else None,
                "response_id": row.item_key,
                "ts": row.ts,
                "system": row.system,
                "version": row.version,
                "segment": row.segment,
            }
        )
    return out


def responses_of(session: Session, monitor: Monitor, judgment_ids: Sequence[int]) -> dict[int, dict[str, Any]]:
    """judgment id -> the judge's explanation and the response text (for an alert's worst responses)."""
    if not judgment_ids:
        return {}
    rows = session.execute(
        select(Judgment.id, Judgment.explanation, Judgment.system_a, RunItem.payload)
        .join(RunItem, RunItem.id == Judgment.item_pk)
        .where(Judgment.run_id == monitor.run_id, Judgment.id.in_(list(judgment_ids)))
    )
    out: dict[int, dict[str, Any]] = {}
    for row in rows:
        candidates = (row.payload or {}).get("candidates") or {}
        out[int(row.id)] = {"explanation": row.explanation, "response": candidates.get(row.system_a)}
    return out


def rule_states(session: Session, monitor_id: str) -> dict[str, MonitorRuleState]:
    """rule name -> its running test's state (compare rules by version, system or segment)."""
    rows = session.scalars(select(MonitorRuleState).where(MonitorRuleState.monitor_id == monitor_id))
    return {row.rule: row for row in rows}


def save_rule_state(
    session: Session,
    monitor_id: str,
    rule: str,
    *,
    definition: str,
    stream_key: tuple[str, str, str],
    start_id: int,
    counted_id: int,
    state: dict[str, Any],
    worst: list[dict[str, Any]],
) -> None:
    row = session.get(MonitorRuleState, (monitor_id, rule))
    if row is None:
        row = MonitorRuleState(monitor_id=monitor_id, rule=rule)
        session.add(row)
    row.definition, row.start_id, row.counted_id = definition, start_id, counted_id
    row.rubric_id, row.aspect, row.judge = stream_key
    row.state, row.worst, row.updated_at = state, worst, utcnow()
    session.flush()


def drop_rule_states(session: Session, monitor_id: str, keep: Sequence[str] = ()) -> None:
    """Forget the states of the monitor's rules not in ``keep`` (removed rules, or rules no longer kept as state)."""
    session.execute(
        delete(MonitorRuleState).where(MonitorRuleState.monitor_id == monitor_id, MonitorRuleState.rule.not_in(keep))
    )


def counted_marks(session: Session, monitor_id: str) -> list[tuple[str, str, str, int]]:
    """(rubric, aspect, judge, high-water mark) of each stream the monitor's rules keep a state on, the smallest
    mark of the stream's rules: retention keeps the stream's judgments above it, which a rule has not counted yet."""
    rows = session.execute(
        select(
            MonitorRuleState.rubric_id,
            MonitorRuleState.aspect,
            MonitorRuleState.judge,
            func.min(MonitorRuleState.counted_id),
        )
        .where(MonitorRuleState.monitor_id == monitor_id)
        .group_by(MonitorRuleState.rubric_id, MonitorRuleState.aspect, MonitorRuleState.judge)
    )
    return [(str(r[0]), str(r[1]), str(r[2]), int(r[3])) for r in rows]


def latest_alert(session: Session, monitor_id: str, rule: str) -> MonitorAlert | None:
    return session.scalars(
        select(MonitorAlert)
        .where(MonitorAlert.monitor_id == monitor_id, MonitorAlert.rule == rule)
        .order_by(MonitorAlert.opened_at.desc(), MonitorAlert.id.desc())
        .limit(1)
    ).first()


def open_alerts(session: Session, monitor_id: str) -> list[MonitorAlert]:
    return list(
        session.scalars(
            select(MonitorAlert).where(MonitorAlert.monitor_id == monitor_id, MonitorAlert.status == "open")
        )
    )


def list_alerts(
    session: Session, monitor_id: str, status: str | None, offset: int, limit: int
) -> tuple[int, list[MonitorAlert]]:
    conditions = [MonitorAlert.monitor_id == monitor_id]
    if status is not None:
        conditions.append(MonitorAlert.status == status)
    total = int(session.scalar(select(func.count(MonitorAlert.id)).where(*conditions)) or 0)
    rows = list(
        session.scalars(
            select(MonitorAlert)
            .where(*conditions)
            .order_by(MonitorAlert.opened_at.desc(), MonitorAlert.id)
            .offset(offset)
            .limit(limit)
        )
    )
    return total, rows


def gauge_rows(session: Session) -> list[tuple[str, int, bool]]:
    """(monitor id, rule index, open?) for every rule of every monitor: the alert gauge's samples (no names: they
    are the tenants' choice, and a label value is a series)."""
    opened = {
        (a, r)
        for a, r in session.execute(
            select(MonitorAlert.monitor_id, MonitorAlert.rule).where(MonitorAlert.status == "open")
        )
    }
    out = []
    for monitor_id, rules in session.execute(select(Monitor.id, Monitor.alerts)):
        for index, rule in enumerate(rules or []):
            out.append((monitor_id, index, (monitor_id, str(rule.get("name"))) in opened))
    return out
