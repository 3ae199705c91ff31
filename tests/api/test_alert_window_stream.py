"""A rule that reads a window (a floor with a window, a ``compare.by: time`` rule) reads its window's verdicts from
the database, not the monitor's whole run (review r56b: every verdict of the rule's rubric, aspect and judge was
read into Python at every evaluation, each minute). The look must be exactly the whole stream's: the same
evidence, the same verdicts used, the same end of the settled prefix (an alert's bookkeeping), with responses
whose time is not their sampling order, verdicts not settled yet (old and recent), failures, and a late old one."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from judge_api import alerts
from judge_api.db import session_scope
from judge_api.models import Monitor
from judge_api.repository import alerts as store
from judge_api.rubrics import get_registry
from judge_api.schemas.monitors import AlertRule

from .conftest import Api, ApiFactory
from .test_monitors import ingest, response, sampling_monitor

RULES = [
    {"name": "floor-1h", "floor": {"below": 40, "min_n": 1, "window": "1h"}},
    {"name": "floor-1d", "floor": {"below": 40, "min_n": 1, "window": "1d"}},
    {"name": "floor-3d", "floor": {"below": 60, "min_n": 2, "window": "3d"}},
    {"name": "time-1h-1d", "compare": {"by": "time", "candidate": "1h", "baseline": "1d"}},
    {"name": "time-1d-7d", "compare": {"by": "time", "candidate": "1d", "baseline": "7d"}},
]
N = 60


def _monitor(api: Api, now: datetime, rng: random.Random) -> tuple[str, str]:
    monitor_id, run_id = sampling_monitor(api, RULES)
    ages = [timedelta(minutes=rng.choice([1, 20, 50, 70, 300, 1500, 3000, 6000, 12000])) for _ in range(N)]
    # sampling order is not time order: late old responses among new ones
    ingest(api, monitor_id, [response(i, timestamp=(now - age).isoformat()) for i, age in enumerate(ages)])
    return monitor_id, run_id


def _settle(url: str, run_id: str, rng: random.Random, unsettled: float) -> None:
    engine = create_engine(url)
    try:
        with engine.begin() as connection:
            ids = [r[0] for r in connection.execute(text("SELECT id FROM judgments WHERE run_id = :r"), {"r": run_id})]
            for jid in ids:
                roll = rng.random()
                status = "pending" if roll < unsettled else "failed" if roll < unsettled + 0.1 else "done"
                score = float(rng.randint(1, 100)) if status == "done" else None
                connection.execute(
                    text("UPDATE judgments SET status = :s, score = :v WHERE id = :i"),
                    {"s": status, "v": score, "i": jid},
                )
    finally:
        engine.dispose()


def _look(rule: AlertRule, target: Any, rows: list[dict[str, Any]], now: datetime, start_id: int) -> Any:
    if rule.floor is not None:
        look = alerts.look_floor(rule, target, rows, now)
    else:
        look = alerts.look_compare(rule, target, rows, start_id, now)
    return look.evidence, [r["id"] for r in look.used], look.last_id, look.epoch, look.slices


@pytest.mark.parametrize("db_url", ["sqlite", "postgres"], indirect=True)
@pytest.mark.parametrize(("seed", "unsettled"), [(1, 0.0), (2, 0.05), (3, 0.2), (4, 0.5)])
def test_a_window_rule_reads_its_window_and_looks_as_on_the_whole_stream(
    api_factory: ApiFactory, db_url: str, seed: int, unsettled: float
) -> None:
    rng = random.Random(seed)
    api = api_factory(database_url=db_url)
    now = datetime.now(UTC).replace(microsecond=0, tzinfo=None)
    monitor_id, run_id = _monitor(api, now, rng)
    _settle(api.database_url, run_id, rng, unsettled)
    registry = get_registry()
    with session_scope() as session:
        monitor = session.get(Monitor, monitor_id)
        assert monitor is not None
        for rule_dict in monitor.alerts or []:
            rule = AlertRule.model_validate(rule_dict)
            target = alerts.target_of(rule, monitor, registry)
            key = (target.rubric_id, target.aspect, target.judge)
            whole = store.stream(session, monitor, *key)
            since = alerts.stream_since(rule, now)
            assert since is not None, rule.name
            window = store.stream(session, monitor, *key, since=since, settled=alerts.TERMINAL)
            assert len(window) < len(whole) or all(r["ts"] >= since for r in whole), rule.name
            for start_id in (0, whole[len(whole) // 3]["id"]):
                assert _look(rule, target, window, now, start_id) == _look(rule, target, whole, now, start_id), (
                    rule.name,
                    start_id,
                )


def test_a_rule_that_keeps_state_or_reads_every_verdict_has_no_window() -> None:
    now = datetime(2026, 11, 30, 12, 0)
    kept = AlertRule.model_validate(
        {"name": "v", "aspect": "consistency", "compare": {"by": "version", "baseline": "a", "candidate": "b"}}
    )
    every = AlertRule.model_validate({"name": "f", "aspect": "consistency", "floor": {"below": 3, "min_n": 1}})
    assert alerts.stream_since(kept, now) is None and alerts.stream_since(every, now) is None
    timed = AlertRule.model_validate(
        {"name": "t", "aspect": "consistency", "compare": {"by": "time", "candidate": "1d", "baseline": "7d"}}
    )
    assert alerts.stream_since(timed, now) == datetime(2026, 11, 23)  # the candidate day's start, 7 days back
