"""Issue 36 finding 1: a monitor's version rule stays anytime-valid when retention deletes its oldest verdicts.

The issue's simulation at a small scale, through the service's own evaluator (``judge_api.alerts.evaluate_rule``,
its looks and its state) with the repository replaced by an in-memory one that retention prunes: no true change
(both versions score ``N(72, 15^2)`` on 1-100), 100 verdicts a day per version, 90 days, one look a day, only the
last 4 days of verdicts kept. Recomputing the test from the kept verdicts at each look (the old evaluator) made
about 40 % of monitors alarm; the kept state must hold the stated 5 %, and give the same decision as with no
retention at all."""

from __future__ import annotations

from datetime import datetime, timedelta
from types import SimpleNamespace
from typing import Any, cast

import numpy as np
import pytest

from judge_api import alerts
from judge_api.models import Monitor, MonitorAlert
from judge_api.schemas.monitors import AlertRule

TARGET = alerts.Target("rsum-single", "consistency", "openai:gpt-4o", "mean", 1.0, 100.0)
RULE = AlertRule.model_validate(
    {"name": "v", "compare": {"by": "version", "baseline": "v1", "candidate": "v2"}, "aspect": "consistency"}
)
START = datetime(2026, 1, 1)


class MemoryStore:
    """What judge_api.alerts reads and writes of judge_api.repository.alerts, for one monitor, in memory."""

    def __init__(self) -> None:
        self.alerts: list[MonitorAlert] = []
        self.states: dict[str, Any] = {}

    def latest_alert(self, session: Any, monitor_id: str, rule: str) -> MonitorAlert | None:
        return self.alerts[-1] if self.alerts else None

    def open_alerts(self, session: Any, monitor_id: str) -> list[MonitorAlert]:
        return [a for a in self.alerts if a.status == "open"]

    def new_alert_id(self) -> str:
        return f"alr_{len(self.alerts)}"

    def responses_of(self, session: Any, monitor: Any, ids: Any) -> dict[int, dict[str, Any]]:
        return {}

    def rule_states(self, session: Any, monitor_id: str) -> dict[str, Any]:
        return dict(self.states)

    def save_rule_state(self, session: Any, monitor_id: str, rule: str, **fields: Any) -> None:
        rubric_id, aspect, judge = fields.pop("stream_key")  # the columns the repository stores it in
        self.states[rule] = SimpleNamespace(rule=rule, rubric_id=rubric_id, aspect=aspect, judge=judge, **fields)

    def drop_rule_states(self, session: Any, monitor_id: str, keep: Any = ()) -> None:
        self.states = {k: v for k, v in self.states.items() if k in keep}


class MemorySession:
    def __init__(self, store: MemoryStore) -> None:
        self.store = store

    def add(self, alert: MonitorAlert) -> None:
        self.store.alerts.append(alert)

    def flush(self) -> None:
        pass


def simulate(
    rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch, keep_days: int | None, drop: float = 0.0
) -> int | None:
    """One monitor (v2 scoring ``drop`` below v1): the day its version rule first opened an alert, or None."""
    days, per_day = 90, 100
    store = MemoryStore()
    monkeypatch.setattr(alerts, "store", store)
    session = cast(Any, MemorySession(store))
    monitor = cast(Monitor, SimpleNamespace(id="mon_sim", run_id="run_sim", callback_url=None, callback_secret=None))
    levels = np.where(np.arange(2 * per_day) % 2, 72.0, 72.0 - drop)  # odd: v1, even: v2
    scores = np.clip(np.round(rng.normal(levels, 15.0, (days, 2 * per_day))), 1, 100)
    rows: list[dict[str, Any]] = []
    offsets = [timedelta(seconds=k) for k in range(2 * per_day)]
    next_id = 1
    for day in range(days):
        day_start = START + timedelta(days=day)
        for k in range(2 * per_day):
            rows.append(
                {
                    "id": next_id,
                    "status": "done",
                    "score": float(scores[day, k]),
                    "contradiction_rate": None,
                    "response_id": f"r{next_id}",
                    "ts": day_start + offsets[k],
                    "system": "bot",
                    "version": "v1" if k % 2 else "v2",
                    "segment": "",
                }
            )
            next_id += 1
        if keep_days is not None:  # retention: the verdicts of the days before the last keep_days are deleted
            cutoff = day_start - timedelta(days=keep_days - 1)
            rows = [r for r in rows if r["ts"] >= cutoff]
        now = day_start + timedelta(days=1)
        if alerts.evaluate_rule(session, monitor, RULE, rows, TARGET, now) == "opened":
            return day
    return None


@pytest.mark.slow  # about 30 s of CPU
@pytest.mark.soak
def test_version_rule_false_alarms_stay_at_the_stated_rate_under_retention(monkeypatch: pytest.MonkeyPatch) -> None:
    monitors = 200
    rng = np.random.default_rng(2036)
    alarmed = sum(simulate(rng, monkeypatch, keep_days=4) is not None for _ in range(monitors))
    assert alarmed / monitors <= 1 - RULE.confidence, f"{alarmed} of {monitors} monitors alarmed with no change"


def test_retention_does_not_change_the_decision(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same verdicts (v2 3 points worse), with and without retention: the alert opens on the same day."""
    days = []
    for seed in range(6):
        kept = simulate(np.random.default_rng(seed), monkeypatch, keep_days=2, drop=3.0)
        whole = simulate(np.random.default_rng(seed), monkeypatch, keep_days=None, drop=3.0)
        assert kept == whole
        days.append(whole)
    assert all(day is not None for day in days)  # the drop is found
