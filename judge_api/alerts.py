"""Evaluating monitors' alert rules as verdicts arrive (docs/monitoring.md#alerts): the sweeper calls
:func:`evaluate_all` every round (under its lock, so one process at a time); a monitor with no new verdict since the
last round is skipped.

The stream a rule reads: the monitor's judgments of the rule's (rubric, aspect, judge) in judgment order (the order
the responses were sampled), up to the first one not finished yet: a verdict that arrives late never changes what
came before it.

* **compare** (``by: version | system | segment``): the candidate slice's verdicts after the test's start, paired
  in order with the baseline slice's verdicts, decided by the confidence sequence at the rule's confidence. The test
  is kept as running state (``monitor_rule_states``, :class:`judge_api.stats.alerts.CompareState`) with a
  high-water mark: each look adds only the verdicts after it, so retention deleting old verdicts never changes the
  test (issue 36 finding 1), and retention keeps the verdicts above the smallest mark. A fresh state (a new rule, an
  edited one, one moved to another judge's or rubric's stream by an edit of the monitor, the first look after the
  upgrade, or a new test after an alert opened or resolved) starts from the verdicts still kept. A regression opens
  an alert (its evidence: the difference, the confidence sequence's interval, the pair count, the means, the worst
  candidate responses).
* **compare** (``by: time``, e.g. ``candidate: 24h``, ``baseline: 7d``): the candidate window is the current one of
  consecutive windows of the candidate length (UTC, aligned to the Unix epoch: ``24h`` = UTC days), the baseline
  the ``baseline`` length before it, shuffled by response id and averaged in blocks of ``baseline / candidate``
  verdicts. Each window is a fresh test, so the false-alarm guarantee is per window.
* **floor**: the mean of the last ``window`` (or of every verdict kept) over at least ``min_n`` verdicts below the
  floor opens an alert.

Resolution: an open compare alert is resolved once the verdicts judged after it opened (a fresh stream from the
alert's last verdict; the current window for a time rule) number as many pairs as the alert needed and do not decide
a regression; if they do, the check starts again after them. A floor alert resolves when the same mean over at
least ``min_n`` verdicts is back at or above the floor. An alert of an edited or removed rule is resolved at once
(the reason says so). Opening and resolving store a webhook event (``alert.opened``, ``alert.resolved``) when the
monitor has a callback, and ``dialogue_judge_monitor_alert{monitor,rule}`` reads the open alerts at every scrape.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.orm import Session

from judge_api.db import session_scope
from judge_api.judges import parse_judge
from judge_api.models import Monitor, MonitorAlert, MonitorRuleState, utcnow
from judge_api.repository import alerts as store
from judge_api.repository import webhooks as hooks
from judge_api.rubrics import RubricRegistry, get_registry
from judge_api.schemas.monitors import AlertRule
from judge_api.stats import alerts as stats

log = logging.getLogger(__name__)

WORST = 5
EXCERPT = 300
TERMINAL = ("done", "failed", "unparseable", "cancelled")
_UNITS = {"h": 3600, "d": 86400, "w": 604800}
_seen: dict[str, tuple[Any, ...]] = {}
"""monitor id -> what it looked like when last evaluated (verdict count, rules, the minute for time rules)."""


def window_seconds(text: str) -> int:
    return int(text[:-1]) * _UNITS[text[-1]]


def definition_hash(rule: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(rule, sort_keys=True).encode("utf-8")).hexdigest()[:16]


def _excerpt(text: Any) -> str | None:
    if not text:
        return None
    flat = " ".join(str(text).split())
    return flat if len(flat) <= EXCERPT else flat[: EXCERPT - 1] + "…"


@dataclass
class Target:
    """What a rule reads: its rubric, aspect, judge, metric and the scale of the metric."""

    rubric_id: str
    aspect: str
    judge: str
    metric: str
    low: float
    high: float

    @property
    def higher_is_worse(self) -> bool:
        return self.metric == "contradiction_rate"

    def value(self, row: dict[str, Any]) -> float | None:
        if row["status"] != "done":
            return None
        return row["contradiction_rate"] if self.metric == "contradiction_rate" else row["score"]


def target_of(rule: AlertRule, monitor: Monitor, registry: RubricRegistry) -> Target:
    rubric_id = rule.rubric or monitor.config["rubrics"][0]
    judge = parse_judge(rule.judge or monitor.config["judges"][0]).key
    low, high = 0.0, 1.0
    if rule.metric == "mean":
        rubric = registry.get(rubric_id)
        if rubric.scale is not None:
            low, high = float(rubric.scale[0]), float(rubric.scale[1])
    return Target(rubric_id, rule.aspect, judge, rule.metric, low, high)


def settled_prefix(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The stream up to (not including) its first judgment not finished yet."""
    for index, row in enumerate(rows):
        if row["status"] not in TERMINAL:
            return rows[:index]
    return rows


def _matches(rule: AlertRule, row: dict[str, Any]) -> bool:
    where = rule.where
    return all(
        getattr(where, key) is None or row[key] == getattr(where, key) for key in ("system", "version", "segment")
    )


@dataclass
class Look:
    """One evaluation of a rule: its evidence, the candidate rows it used, the stream's end and its window."""

    evidence: stats.CompareEvidence | stats.FloorEvidence
    used: list[dict[str, Any]]
    last_id: int
    epoch: int
    slices: dict[str, Any]


def look_compare(rule: AlertRule, target: Target, rows: list[dict[str, Any]], start_id: int, now: datetime) -> Look:
    assert rule.compare is not None
    compare = rule.compare
    prefix = [r for r in settled_prefix(rows) if _matches(rule, r)]
    last_id = rows_last_id(settled_prefix(rows), start_id)
    valued = [(r, v) for r in prefix if (v := target.value(r)) is not None]
    block, epoch = 1, 0
    if compare.by == "time":
        width, before = window_seconds(compare.candidate), window_seconds(compare.baseline)
        epoch, start, end, base_start = _time_windows(compare.candidate, compare.baseline, now)
        cand = [(r, v) for r, v in valued if start <= r["ts"] < end and r["id"] > start_id]
        base = [(r, v) for r, v in valued if base_start <= r["ts"] < start]
        base.sort(key=lambda rv: hashlib.sha256(str(rv[0]["response_id"]).encode()).hexdigest())
        block = max(1, before // width)
        slices = {
            "candidate": {"from": start.isoformat() + "Z", "to": end.isoformat() + "Z"},
            "baseline": {"from": base_start.isoformat() + "Z", "to": start.isoformat() + "Z"},
            "block": block,
        }
    else:
        cand = [(r, v) for r, v in valued if r[compare.by] == compare.candidate and r["id"] > start_id]
        base = [(r, v) for r, v in valued if r[compare.by] == compare.baseline]
        slices = {"by": compare.by, "baseline": compare.baseline, "candidate": compare.candidate}
    evidence = stats.compare(
        [v for _, v in base],
        [v for _, v in cand],
        low=target.low,
        high=target.high,
        confidence=rule.confidence,
        margin=rule.margin,
        higher_is_worse=target.higher_is_worse,
        block=block,
    )
    return Look(evidence, [r | {"value": v} for r, v in cand[: evidence.n]], last_id, epoch, slices)


def kept(rule: AlertRule) -> bool:
    """A rule whose test is kept as running state across looks (the compare rules but time rules)."""
    return rule.compare is not None and rule.compare.by != "time"


def _stored_row(row: dict[str, Any]) -> dict[str, Any]:
    return row | {"ts": row["ts"].isoformat()}


def _loaded_row(row: dict[str, Any]) -> dict[str, Any]:
    return row | {"ts": datetime.fromisoformat(row["ts"])}


def look_kept(
    session: Session,
    monitor: Monitor,
    rule: AlertRule,
    target: Target,
    rows: list[dict[str, Any]],
    start_id: int,
    definition: str,
) -> Look:
    """The compare look of a ``by: version | system | segment`` rule on its kept state: only the verdicts after
    the state's high-water mark are added (``rows`` holds at least those), the state is stored again."""
    assert rule.compare is not None
    compare = rule.compare
    saved = store.rule_states(session, monitor.id).get(rule.name)
    if saved is not None and state_fits(saved, definition, target) and saved.start_id == start_id:
        state, counted, worst_rows = stats.CompareState.from_dict(saved.state), saved.counted_id, list(saved.worst)
    else:
        state = stats.CompareState.start(
            low=target.low,
            high=target.high,
            confidence=rule.confidence,
            margin=rule.margin,
            higher_is_worse=target.higher_is_worse,
        )
        counted, worst_rows = 0, []
    prefix = settled_prefix([r for r in rows if r["id"] > counted])
    base: list[float] = []
    cand: list[dict[str, Any]] = []
    for row in prefix:
        value = target.value(row) if _matches(rule, row) else None
        if value is None:
            continue
        if row[compare.by] == compare.baseline:
            base.append(value)
        elif row[compare.by] == compare.candidate and row["id"] > start_id:
            cand.append(row | {"value": value})
    state.add(base, [r["value"] for r in cand])
    ranked = [_loaded_row(r) for r in worst_rows] + cand
    ranked.sort(key=lambda r: (-r["value"] if target.higher_is_worse else r["value"], r["id"]))
    last_id = rows_last_id(prefix, counted)
    store.save_rule_state(
        session,
        monitor.id,
        rule.name,
        definition=definition,
        stream_key=(target.rubric_id, target.aspect, target.judge),
        start_id=start_id,
        counted_id=last_id,
        state=state.as_dict(),
        worst=[_stored_row(r) for r in ranked[:WORST]],
    )
    slices = {"by": compare.by, "baseline": compare.baseline, "candidate": compare.candidate}
    return Look(state.evidence(), ranked[:WORST], last_id, 0, slices)


def _time_windows(candidate: str, baseline: str, now: datetime) -> tuple[int, datetime, datetime, datetime]:
    """A time rule's window number, its candidate window's start and end, and its baseline's start."""
    width, before = window_seconds(candidate), window_seconds(baseline)
    epoch = int(_seconds(now) // width)
    start = _utc(epoch * width)
    return epoch, start, start + timedelta(seconds=width), start - timedelta(seconds=before)


def _floor_since(rule: AlertRule, now: datetime) -> datetime | None:
    assert rule.floor is not None
    return now - timedelta(seconds=window_seconds(rule.floor.window)) if rule.floor.window else None


def stream_since(rule: AlertRule, now: datetime) -> datetime | None:
    """The oldest response time a rule's look reads, for a rule that keeps no state and reads a window (a floor
    with a window, a time rule: its baseline's start); None: every verdict (the stream is read whole)."""
    if rule.floor is not None:
        return _floor_since(rule, now)
    if rule.compare is not None and rule.compare.by == "time":
        return _time_windows(rule.compare.candidate, rule.compare.baseline, now)[3]
    return None


def look_floor(rule: AlertRule, target: Target, rows: list[dict[str, Any]], now: datetime) -> Look:
    assert rule.floor is not None
    since = _floor_since(rule, now)
    prefix = settled_prefix(rows)
    used = [
        r | {"value": v}
        for r in prefix
        if _matches(rule, r) and (since is None or r["ts"] >= since) and (v := target.value(r)) is not None
    ]
    evidence = stats.floor([r["value"] for r in used], below=rule.floor.below, min_n=rule.floor.min_n)
    slices = {"window": rule.floor.window, "since": since.isoformat() + "Z" if since else None}
    return Look(evidence, used, rows_last_id(prefix, 0), 0, slices)


EPOCH = datetime(1970, 1, 1)


def _utc(seconds: int) -> datetime:
    return EPOCH + timedelta(seconds=seconds)


def _seconds(moment: datetime) -> float:
    """Seconds since the Unix epoch of a naive UTC datetime (``datetime.timestamp`` would read it as local time)."""
    return (moment - EPOCH).total_seconds()


def rows_last_id(prefix: list[dict[str, Any]], default: int) -> int:
    return int(prefix[-1]["id"]) if prefix else default


def worst(session: Session, monitor: Monitor, target: Target, used: list[dict[str, Any]]) -> list[dict[str, Any]]:
    ranked = sorted(used, key=lambda r: (-r["value"] if target.higher_is_worse else r["value"], r["id"]))[:WORST]
    texts = store.responses_of(session, monitor, [r["id"] for r in ranked])
    return [
        {
            "response_id": r["response_id"],
            "system": r["system"],
            "version": r["version"],
            "segment": r["segment"] or None,
            "timestamp": r["ts"].isoformat() + "Z",
            target.metric if target.metric != "mean" else "score": r["value"],
            "explanation": _excerpt(texts.get(r["id"], {}).get("explanation")),
            "response": _excerpt(texts.get(r["id"], {}).get("response")),
        }
        for r in ranked
    ]


def evidence_of(session: Session, monitor: Monitor, target: Target, look: Look) -> dict[str, Any]:
    return {
        **look.evidence.as_dict(),
        "metric": target.metric,
        "rubric": target.rubric_id,
        "aspect": target.aspect,
        "judge": target.judge,
        "slices": look.slices,
        "worst": worst(session, monitor, target, look.used),
        "evaluated_at": utcnow().isoformat() + "Z",
    }


def alert_out(alert: MonitorAlert) -> dict[str, Any]:
    return {
        "id": alert.id,
        "monitor_id": alert.monitor_id,
        "rule": alert.rule,
        "kind": alert.kind,
        "status": alert.status,
        "opened_at": alert.opened_at.isoformat() + "Z",
        "resolved_at": alert.resolved_at.isoformat() + "Z" if alert.resolved_at else None,
        "evidence": alert.evidence,
        "resolution": alert.resolution,
    }


def notify(session: Session, monitor: Monitor, alert: MonitorAlert, event: str, rule: dict[str, Any] | None) -> None:
    """Store the alert's webhook event (sent by the sweepers) when the monitor has a callback."""
    if not monitor.callback_url or not monitor.callback_secret:
        return
    hooks.add_delivery(
        session,
        event_key=f"{event}:{alert.id}",
        project_id=monitor.project_id,
        event=event,
        url=monitor.callback_url,
        secret=monitor.callback_secret,
        payload={
            "event": event,
            "created_at": utcnow().isoformat() + "Z",
            "monitor": {"id": monitor.id, "name": monitor.name},
            "rule": rule,
            "alert": alert_out(alert),
            "url": f"/v1/monitors/{monitor.id}/alerts",
        },
        monitor_id=monitor.id,
    )


def resolve(
    session: Session, monitor: Monitor, alert: MonitorAlert, resolution: dict[str, Any], rule: dict[str, Any] | None
) -> None:
    alert.status = "resolved"
    alert.resolved_at = utcnow()
    alert.resolution = resolution
    alert.resolved_last_id = int(resolution.get("last_id") or alert.last_id)
    session.flush()
    notify(session, monitor, alert, "alert.resolved", rule)
    log.info("monitor %s: alert %s of rule %s resolved (%s)", monitor.id, alert.id, alert.rule, resolution["reason"])


def _look(
    session: Session,
    monitor: Monitor,
    rule: AlertRule,
    target: Target,
    rows: list[dict[str, Any]],
    start_id: int,
    now: datetime,
    definition: str,
) -> Look:
    if kept(rule):
        return look_kept(session, monitor, rule, target, rows, start_id, definition)
    return look_compare(rule, target, rows, start_id, now)


def state_fits(saved: MonitorRuleState, definition: str, target: Target) -> bool:
    """Is a kept state the test of this rule on this stream? Editing the monitor's rubrics or judges moves a rule
    that names none to another stream (another judge's verdicts, maybe another scale) without editing the rule:
    its test starts afresh there, never pairing one judge's waiting verdicts with another's."""
    stream = (saved.rubric_id, saved.aspect, saved.judge) == (target.rubric_id, target.aspect, target.judge)
    scale = (saved.state.get("low"), saved.state.get("high")) == (target.low, target.high)
    return saved.definition == definition and stream and scale


def needs_from(session: Session, monitor: Monitor, rule: AlertRule, target: Target) -> int:
    """The judgment id after which the rule needs the stream: its state's high-water mark when it has a usable
    state, else 0 (every verdict kept)."""
    if not kept(rule):
        return 0
    saved = store.rule_states(session, monitor.id).get(rule.name)
    if saved is None or not state_fits(saved, definition_hash(rule.model_dump(mode="json")), target):
        return 0
    latest = store.latest_alert(session, monitor.id, rule.name)
    if latest is not None and latest.definition == saved.definition:
        start = latest.last_id if latest.status == "open" else int(latest.resolved_last_id or latest.last_id)
    else:
        start = 0
    return saved.counted_id if saved.start_id == start else 0


def evaluate_rule(
    session: Session, monitor: Monitor, rule: AlertRule, rows: list[dict[str, Any]], target: Target, now: datetime
) -> str | None:
    """Open or resolve the rule's alert as its verdicts say; returns "opened", "resolved" or None."""
    rule_dict = rule.model_dump(mode="json")
    definition = definition_hash(rule_dict)
    latest = store.latest_alert(session, monitor.id, rule.name)
    if latest is not None and latest.definition != definition:
        if latest.status == "open":
            resolve(session, monitor, latest, {"reason": "the rule was edited", "last_id": latest.last_id}, rule_dict)
        latest = None
    if latest is not None and latest.status == "open":
        if rule.floor is not None:
            look = look_floor(rule, target, rows, now)
            if look.evidence.decision == "ok":
                resolution = {"reason": "the mean is back at or above the floor", "last_id": look.last_id}
                resolve(
                    session, monitor, latest, {**resolution, **evidence_of(session, monitor, target, look)}, rule_dict
                )
                return "resolved"
            return None
        look = _look(session, monitor, rule, target, rows, latest.last_id, now, definition)
        needed = max(1, int(latest.evidence.get("n") or 1))
        if look.evidence.decision == "regression":
            latest.last_id = look.last_id  # still worse: the check starts again after these verdicts
        elif look.evidence.n >= needed:
            reason = f"{look.evidence.n} pairs judged since the alert opened show no regression (it needed {needed})"
            evidence = evidence_of(session, monitor, target, look)
            resolve(session, monitor, latest, {"reason": reason, "last_id": look.last_id, **evidence}, rule_dict)
            return "resolved"
        return None
    start = int(latest.resolved_last_id or latest.last_id) if latest is not None else 0
    if rule.floor is not None:
        look = look_floor(rule, target, rows, now)
        fired = look.evidence.decision == "breach"
        start = look.last_id
    else:
        look = _look(session, monitor, rule, target, rows, start, now, definition)
        fired = look.evidence.decision == "regression"
    if not fired:
        return None
    alert = MonitorAlert(
        id=store.new_alert_id(),
        monitor_id=monitor.id,
        rule=rule.name,
        kind=rule.kind,
        definition=definition,
        status="open",
        epoch=look.epoch,
        start_id=start,
        last_id=look.last_id,
        opened_at=utcnow(),
        evidence={"rule": rule_dict, **evidence_of(session, monitor, target, look)},
    )
    session.add(alert)
    session.flush()
    notify(session, monitor, alert, "alert.opened", rule_dict)
    log.warning("monitor %s: rule %s opened alert %s", monitor.id, rule.name, alert.id)
    return "opened"


def evaluate_monitor(session: Session, monitor: Monitor, now: datetime, registry: RubricRegistry) -> dict[str, int]:
    counts = {"opened": 0, "resolved": 0}
    rules = [AlertRule.model_validate(r) for r in monitor.alerts or []]
    names = {rule.name for rule in rules}
    for alert in store.open_alerts(session, monitor.id):
        if alert.rule not in names:
            resolve(session, monitor, alert, {"reason": "the rule was removed", "last_id": alert.last_id}, None)
            counts["resolved"] += 1
    streams: dict[tuple[str, str, str, int, datetime | None], list[dict[str, Any]]] = {}
    stateful: list[str] = []
    for rule in rules:
        try:
            target = target_of(rule, monitor, registry)
        except Exception as exc:  # the rubric or judge is gone: nothing to read
            log.warning("monitor %s: rule %s cannot be evaluated: %s", monitor.id, rule.name, exc)
            continue
        if kept(rule):
            stateful.append(rule.name)
        # a rule that reads a window gets its window's verdicts (and the settled prefix's end), not the whole run
        since = stream_since(rule, now)
        key = (target.rubric_id, target.aspect, target.judge, needs_from(session, monitor, rule, target), since)
        if key not in streams:
            streams[key] = store.stream(session, monitor, *key[:3], after_id=key[3], since=since, settled=TERMINAL)
        outcome = evaluate_rule(session, monitor, rule, streams[key], target, now)
        if outcome is not None:
            counts[outcome] += 1
    store.drop_rule_states(session, monitor.id, stateful)  # a removed rule's mark must not hold retention back
    return counts


def _fingerprint(session: Session, monitor: Monitor, now: datetime) -> tuple[Any, ...]:
    timed = any((r.get("compare") or {}).get("by") == "time" or r.get("floor") for r in monitor.alerts or [])
    minute = int(_seconds(now) // 60) if timed else 0
    return (store.run_signature(session, monitor.run_id), json.dumps(monitor.alerts, sort_keys=True), minute)


def evaluate_all(now: datetime | None = None, *, force: bool = False) -> dict[str, int]:
    """Evaluate every monitor's rules that has new verdicts (or a rule whose window moves); each monitor in a
    transaction of its own."""
    now = now or utcnow()
    registry = get_registry()
    totals = {"opened": 0, "resolved": 0, "evaluated": 0}
    with session_scope() as session:
        monitor_ids = [m.id for m in store.monitors_with_rules(session)]
    for monitor_id in monitor_ids:
        try:
            with session_scope() as session:
                monitor = session.get(Monitor, monitor_id)
                if monitor is None:
                    continue
                fingerprint = _fingerprint(session, monitor, now)
                if not force and _seen.get(monitor_id) == fingerprint:
                    continue
                counts = evaluate_monitor(session, monitor, now, registry)
            _seen[monitor_id] = fingerprint
            totals["evaluated"] += 1
            totals["opened"] += counts["opened"]
            totals["resolved"] += counts["resolved"]
        except Exception as exc:  # this monitor retries next round; the others go on
            log.warning("alert evaluation of monitor %s failed: %s", monitor_id, exc)
    return totals
