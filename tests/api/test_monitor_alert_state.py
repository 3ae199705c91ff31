"""Issue 36 finding 1 with the real repository: a compare rule's test is kept as running state with a high-water
mark, so retention deleting the verdicts it counted does not change it; retention keeps the verdicts the rule has
not counted yet; a verdict that finishes late is counted once, in judgment order; a time rule whose windows do not
fit in retention_days is refused."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from sqlalchemy import create_engine, text

from tests.api.conftest import JUDGE, Api
from tests.api.test_monitors import _judge_all, create, response, table_counts

RULE = {
    "name": "v-regression",
    "compare": {"by": "version", "baseline": "v1", "candidate": "v2"},
    "aspect": "consistency",
    "confidence": 0.95,
}


def rule_state(database_url: str) -> tuple[int, dict[str, Any]]:
    engine = create_engine(database_url)
    try:
        with engine.connect() as connection:
            counted, state = connection.execute(text("SELECT counted_id, state FROM monitor_rule_states")).one()
            max_id = connection.execute(text("SELECT MAX(id) FROM judgments")).scalar_one()
    finally:
        engine.dispose()
    state = json.loads(state) if isinstance(state, str) else state
    return int(counted) - int(max_id or 0), state


def post(api: Api, monitor: dict[str, Any], first: int, count: int) -> list[dict[str, Any]]:
    batch = [response(i, version="v1" if i % 2 else "v2") for i in range(first, first + count)]
    answer = api.client.post(f"/v1/monitors/{monitor['id']}/responses", json=batch)
    assert answer.status_code == 202 and answer.json()["sampled"] == count, answer.text
    return batch


def test_the_rule_state_survives_retention_and_counts_each_verdict_once(api: Api) -> None:
    from judge_api import alerts, monitor_retention
    from judge_api.models import utcnow

    monitor = create(api, sample_rate=1.0, retention_days=1, alerts=[RULE], daily_budget_usd=None)
    first = post(api, monitor, 0, 40)
    _judge_all(api.database_url, {r["id"]: 5.0 for r in first})
    alerts.evaluate_all(force=True)
    behind, state = rule_state(api.database_url)
    assert behind == 0 and state["pairs"] == 20

    second = post(api, monitor, 40, 40)
    _judge_all(api.database_url, {r["id"]: 5.0 for r in second if r["id"] != "resp-45"})  # resp-45 finishes late
    alerts.evaluate_all(force=True)
    behind, state = rule_state(api.database_url)
    # the stream waits at resp-45: of 40..44, v1 41 and 43 and v2 40, 42 and 44 are counted (22 and 23 in all)
    assert behind < 0 and state["pairs"] == 22

    # 25 h later: what the rule counted goes (0..44); resp-45 (pending) and what comes after it stay
    later = utcnow() + timedelta(hours=25)
    assert monitor_retention.apply(now=later) == 45
    assert table_counts(api.database_url)["judgments"] == 35

    _judge_all(api.database_url, {"resp-45": 5.0})
    alerts.evaluate_all(force=True)
    behind, state = rule_state(api.database_url)
    assert behind == 0 and state["pairs"] == 40  # 20 + 20: the deleted verdicts still count, none twice
    assert state["n_baseline"] == state["n_candidate"] == 40

    assert monitor_retention.apply(now=later) == 35  # now counted: they go
    alerts.evaluate_all(force=True)
    assert rule_state(api.database_url)[1]["pairs"] == 40  # nothing kept, nothing lost, nothing counted again


def test_a_time_rule_must_fit_in_the_retention(api: Api) -> None:
    rule = {"name": "daily", "compare": {"by": "time", "candidate": "24h", "baseline": "7d"}, "aspect": "consistency"}
    refused = api.client.post(
        "/v1/monitors",
        json={
            "name": "short",
            "rubrics": ["rsum-single"],
            "judges": [JUDGE],
            "sample_rate": 0.5,
            "retention_days": 3,
            "alerts": [rule],
        },
    )
    assert refused.status_code == 422, refused.text
    assert refused.json()["detail"][0]["loc"] == ["body", "alerts", 0, "compare"]
    assert "retention_days to at least 8" in refused.json()["detail"][0]["msg"]
    monitor = create(api, retention_days=8, alerts=[rule], daily_budget_usd=None)
    patched = api.client.patch(f"/v1/monitors/{monitor['id']}", json={"retention_days": 2})
    assert patched.status_code == 422 and patched.json()["detail"][0]["loc"] == ["body", "alerts", 0, "compare"]


def test_two_processes_evaluating_at_once_open_one_alert_and_count_once(
    api_factory: Any, pg_url: str, monkeypatch: Any
) -> None:
    """The sweeper's Redis lock lapses after 4 sweep intervals (a long retention pass, a slow database): another
    process's sweeper may then evaluate the same monitor at the same time, both reading "no alert open" (issue 36
    review). The alerts' unique key on the rule's stream makes the second one's transaction fail (it looks again
    next round): one alert, one webhook, and the rule's state counts each verdict once."""
    import contextlib
    import threading

    from judge_api import alerts
    from judge_api.repository import alerts as alert_store

    api = api_factory(database_url=pg_url)
    monitor = create(api, sample_rate=1.0, alerts=[RULE], daily_budget_usd=None)
    first = post(api, monitor, 0, 10)
    _judge_all(api.database_url, {r["id"]: 50.0 for r in first})
    assert alerts.evaluate_all(force=True)["opened"] == 0  # the rule's state row exists: the looks below update it
    batch = post(api, monitor, 10, 80)
    _judge_all(api.database_url, {r["id"]: (100.0 if r["version"] == "v1" else 1.0) for r in batch})

    both_read = threading.Barrier(2, timeout=3)
    latest_alert = alert_store.latest_alert

    def meet_then_read(session: Any, monitor_id: str, rule: str) -> Any:
        with contextlib.suppress(threading.BrokenBarrierError):
            both_read.wait()  # both evaluations read the alerts before either writes
        return latest_alert(session, monitor_id, rule)

    monkeypatch.setattr(alert_store, "latest_alert", meet_then_read)
    totals: list[dict[str, int]] = []
    threads = [threading.Thread(target=lambda: totals.append(alerts.evaluate_all(force=True))) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sum(t["opened"] for t in totals) == 1, totals
    engine = create_engine(api.database_url)
    try:
        with engine.connect() as connection:
            opened = connection.execute(text("SELECT COUNT(*) FROM monitor_alerts WHERE status='open'")).scalar_one()
    finally:
        engine.dispose()
    assert opened == 1
    assert rule_state(api.database_url)[1]["pairs"] == 45  # 5 + 40: each verdict counted once


def test_a_kept_state_is_not_carried_to_another_judges_verdicts(api: Api) -> None:
    """A rule naming no judge reads the monitor's first judge. PATCHing the monitor's judges moves the rule to
    another judge's stream; the kept state (the first judge's baseline verdicts still waiting for a partner) went on
    and paired them with the new judge's candidates: a harsher judge, with no change between the versions, opened a
    regression (issue 36 review). A state belongs to its stream: another stream starts a fresh test."""
    from judge_api import alerts

    monitor = create(api, sample_rate=1.0, alerts=[RULE], daily_budget_usd=None)
    url = f"/v1/monitors/{monitor['id']}/responses"
    old = [response(i, version="v1") for i in range(60)]
    assert api.client.post(url, json=old).status_code == 202
    _judge_all(api.database_url, {r["id"]: 100.0 for r in old})  # the lenient judge: every v1 answer 100
    assert alerts.evaluate_all(force=True)["opened"] == 0
    harsher = JUDGE.replace("sim-judge@", "sim-judge-2@")
    patched = api.client.patch(f"/v1/monitors/{monitor['id']}", json={"judges": [harsher]})
    assert patched.status_code == 200, patched.text
    new = [response(i, version="v2") for i in range(60, 120)]
    assert api.client.post(url, json=new).status_code == 202
    _judge_all(api.database_url, {r["id"]: 50.0 for r in new})  # the harsher judge scores v2 50
    assert alerts.evaluate_all(force=True)["opened"] == 0  # its stream has no v1 verdict: nothing to compare
    _, state = rule_state(api.database_url)
    assert state["n_baseline"] == 0 and state["n_candidate"] == 60
