"""Review r56c of 5d8b78b: window alert rules that read their window from the database (``store.stream(...,
since=)``) and the DJ_MAX_REPORT_JUDGMENTS refusals. The findings failed on 5d8b78b and are fixed (session 56): the
window read no longer holds a backlog of unsettled verdicts (only the first one, where the settled prefix ends);
``/item-scores`` with ``rated=true`` or ``item_id`` answers past the limit (bounded in SQL); ``/items`` reads one
page; the run export pages its cache keys; a time window with a trailing newline is refused (``re.fullmatch``).
What held passes."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import create_engine, event, select, text
from sqlalchemy.engine import Engine

from judge_api import alerts
from judge_api.db import session_scope
from judge_api.models import Monitor, MonitorAlert
from judge_api.repository import alerts as store
from judge_api.rubrics import get_registry
from judge_api.schemas.monitors import AlertRule

from .conftest import ApiFactory, run_body
from .test_monitors import ingest, monitor_body, response, sampling_monitor

NOW = datetime(2026, 11, 30, 12, 34, 56, 123456)  # microseconds: the window's edge is not on a second


def _iso(moment: datetime) -> str:
    return moment.isoformat() + "Z"


def _monitor(api: Any, rules: list[dict[str, Any]], times: list[datetime], slices: list[dict[str, str]]) -> tuple:
    monitor_id, run_id = sampling_monitor(api, rules)
    ingest(
        api, monitor_id, [response(i, id=f"resp-{i:03d}", timestamp=_iso(t), **slices[i]) for i, t in enumerate(times)]
    )
    return monitor_id, run_id


def _set(url: str, run_id: str, states: list[tuple[str, float | None]]) -> None:
    """The judgments' statuses and scores, in judgment (sampling) order."""
    engine = create_engine(url)
    try:
        with engine.begin() as connection:
            ids = [
                r[0]
                for r in connection.execute(
                    text("SELECT id FROM judgments WHERE run_id = :r ORDER BY id"), {"r": run_id}
                )
            ]
            assert len(ids) == len(states)
            for jid, (status, score) in zip(ids, states, strict=True):
                connection.execute(
                    text("UPDATE judgments SET status = :s, score = :v WHERE id = :i"),
                    {"s": status, "v": score, "i": jid},
                )
    finally:
        engine.dispose()


def _alerts_after(session: Any, monitor: Monitor, now: datetime) -> list[tuple[Any, ...]]:
    counts = alerts.evaluate_monitor(session, monitor, now, get_registry())
    session.flush()
    rows = session.scalars(select(MonitorAlert).where(MonitorAlert.monitor_id == monitor.id)).all()
    out = [
        (
            a.rule,
            a.status,
            a.epoch,
            a.start_id,
            a.last_id,
            a.resolved_last_id,
            {k: v for k, v in (a.evidence or {}).items() if k != "evaluated_at"},
        )
        for a in rows
    ]
    return [tuple(sorted(counts.items())), *sorted(out, key=lambda t: t[0])]


def _old_and_new(monitor_id: str, now: datetime, monkeypatch: pytest.MonkeyPatch) -> tuple[list, list]:
    """evaluate_monitor on the same database: with the window reads (new) and with the whole stream (as at
    5d8b78b~1), each in a transaction rolled back."""
    with session_scope() as session:
        monitor = session.get_one(Monitor, monitor_id)
        new = _alerts_after(session, monitor, now)
        session.rollback()
    whole = store.stream

    def every_verdict(*args: Any, since: Any = None, settled: Any = (), **kwargs: Any) -> Any:
        return whole(*args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(store, "stream", every_verdict)
        with session_scope() as session:
            monitor = session.get_one(Monitor, monitor_id)
            old = _alerts_after(session, monitor, now)
            session.rollback()
    return old, new


# -- what held ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("db_url", ["sqlite", "postgres"], indirect=True)
def test_held_responses_exactly_at_the_window_edge_open_the_same_alerts(
    api_factory: ApiFactory, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Responses whose time is exactly the floor's ``now - window`` (to the microsecond) and exactly a time rule's
    baseline start, a where-filter on the segment, failures, a cancelled and a late unsettled judgment, responses
    dated in the future: the window read opens the same alerts (evidence, last_id, epoch) as the whole stream."""
    floor_edge = NOW - timedelta(hours=1)
    base_start = datetime(2026, 11, 29, 12)  # 1h candidate from 12:00, 1d baseline
    times = (
        [floor_edge - timedelta(microseconds=1)] * 3
        + [floor_edge] * 4
        + [base_start - timedelta(microseconds=1)] * 3
        + [base_start] * 6
        + [NOW - timedelta(minutes=m) for m in (1, 2, 3, 4, 5, 6)]
        + [NOW + timedelta(days=2)] * 2
        + [NOW - timedelta(days=30)] * 2
    )
    states: list[tuple[str, float | None]] = (
        [("done", 100.0)] * 3
        + [("done", 1.0)] * 4
        + [("done", 1.0)] * 3
        + [("done", 100.0), ("done", 100.0), ("failed", None), ("cancelled", None), ("done", 100.0), ("done", 90.0)]
        + [("done", 2.0)] * 6
        + [("done", 1.0), ("unparseable", None)]
        + [("done", 1.0), ("pending", None)]
    )
    slices = [{"segment": "eu"} if i % 3 else {"segment": "us"} for i in range(len(times))]
    rules = [
        {"name": "floor-1h", "floor": {"below": 40, "min_n": 1, "window": "1h"}},
        {"name": "floor-1h-eu", "floor": {"below": 40, "min_n": 1, "window": "1h"}, "where": {"segment": "eu"}},
        {"name": "floor-2d", "floor": {"below": 60, "min_n": 2, "window": "2d"}},
        {"name": "floor-all", "floor": {"below": 60, "min_n": 2}},
        {"name": "time-1h-1d", "compare": {"by": "time", "candidate": "1h", "baseline": "1d"}},
    ]
    api = api_factory(database_url=db_url)
    monitor_id, run_id = _monitor(api, rules, times, slices)
    _set(api.database_url, run_id, states)
    old, new = _old_and_new(monitor_id, NOW, monkeypatch)
    assert new == old
    opened = {row[0] for row in new[1:]}
    assert {"floor-1h", "floor-1h-eu"} <= opened  # the edge's low scores were read


@pytest.mark.parametrize("db_url", ["sqlite", "postgres"], indirect=True)
def test_held_an_open_floor_alert_resolves_on_the_same_verdicts(
    api_factory: ApiFactory, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An open floor alert whose window has moved on: resolved (or not) the same way, with the same last_id."""
    rules = [{"name": "floor-1h", "floor": {"below": 40, "min_n": 2, "window": "1h"}}]
    times = [NOW - timedelta(minutes=m) for m in (50, 40, 30, 20)]
    api = api_factory(database_url=db_url)
    monitor_id, run_id = _monitor(api, rules, times, [{}] * len(times))
    _set(api.database_url, run_id, [("done", 1.0), ("done", 2.0), ("pending", None), ("pending", None)])
    with session_scope() as session:
        monitor = session.get_one(Monitor, monitor_id)
        assert alerts.evaluate_monitor(session, monitor, NOW - timedelta(minutes=25), get_registry())["opened"] == 1
    _set(api.database_url, run_id, [("done", 1.0), ("done", 2.0), ("done", 90.0), ("done", 95.0)])
    later = NOW + timedelta(minutes=15)  # the two low ones left the window
    old, new = _old_and_new(monitor_id, later, monkeypatch)
    assert new == old
    assert new[0] == (("opened", 0), ("resolved", 1))


# -- findings -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("db_url", ["sqlite", "postgres"], indirect=True)
def test_a_window_read_does_not_hold_a_backlog_of_unsettled_verdicts_in_memory(
    api_factory: ApiFactory, db_url: str
) -> None:
    """The window read returns every judgment not settled, of any age: a monitor whose judge is down (or behind)
    for a day at a high sample rate reads its whole backlog into Python at every evaluation, each minute, for each
    window rule. The look needs the settled prefix's end and its first unsettled judgment only (nothing after it is
    read by ``settled_prefix``): two rows here, the window holding no verdict."""
    rules = [{"name": "floor-1h", "floor": {"below": 40, "min_n": 1, "window": "1h"}}]
    n = 40
    times = [NOW - timedelta(days=3)] * n
    api = api_factory(database_url=db_url)
    monitor_id, run_id = _monitor(api, rules, times, [{}] * n)
    _set(api.database_url, run_id, [("done", 50.0)] * 5 + [("pending", None)] * (n - 5))
    with session_scope() as session:
        monitor = session.get_one(Monitor, monitor_id)
        rule = AlertRule.model_validate(monitor.alerts[0])
        target = alerts.target_of(rule, monitor, get_registry())
        key = (target.rubric_id, target.aspect, target.judge)
        since = alerts.stream_since(rule, NOW)
        window = store.stream(session, monitor, *key, since=since, settled=alerts.TERMINAL)
        whole = store.stream(session, monitor, *key)
        assert (
            alerts.look_floor(rule, target, window, NOW).last_id == alerts.look_floor(rule, target, whole, NOW).last_id
        )
        assert len(window) <= 2, f"{len(window)} rows read for a window holding no verdict (a backlog of {n - 5})"


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_a_time_window_with_a_trailing_newline_is_refused_or_does_not_block_the_other_rules(
    api_factory: ApiFactory, db_url: str
) -> None:
    """``compare.candidate`` is checked with Python's ``re.match(WINDOW_PATTERN)``, whose ``$`` also matches before a
    trailing newline: ``"1h\\n"`` is stored, then ``window_seconds`` reads its unit ``"\\n"`` (KeyError) in
    ``stream_since`` for every evaluation: the whole monitor's evaluation fails each round and its floor never
    opens. The rule should be refused (422) like ``floor.window: "1h\\n"`` is."""
    rules = [
        {"name": "floor-1h", "floor": {"below": 40, "min_n": 1, "window": "1h"}},
        {"name": "time", "compare": {"by": "time", "candidate": "1h\n", "baseline": "1d"}},
    ]
    api = api_factory(database_url=db_url)
    body = monitor_body(
        sample_rate=1.0, daily_budget_usd=None, callback_url=None, callback_secret=None,
        alerts=[{**rule, "aspect": "consistency"} for rule in rules],
    )  # fmt: skip
    created = api.client.post("/v1/monitors", json=body)
    if created.status_code == 422:
        return
    assert created.status_code == 201, created.text
    monitor_id = created.json()["id"]
    ingested = api.client.post(
        f"/v1/monitors/{monitor_id}/responses",
        json=[
            {
                "id": "resp-0",
                "dialogue": [{"speaker": "user", "text": "My dog is called Rex.", "session": 1}],
                "response": "Your dog is Rex.",
                "system": "bot",
                "version": "v1",
                "timestamp": _iso(NOW - timedelta(minutes=5)),
            }
        ],
    )
    assert ingested.status_code in (200, 202), ingested.text
    _set(api.database_url, created.json()["run_id"], [("done", 1.0)])
    with session_scope() as session:
        monitor = session.get_one(Monitor, monitor_id)
        counts = alerts.evaluate_monitor(session, monitor, NOW, get_registry())
    assert counts["opened"] == 1


# -- DJ_MAX_REPORT_JUDGMENTS: a route still reading a whole run ----------------------------------------------------


def _statements_of(request: Any) -> list[str]:
    statements: list[str] = []

    def seen(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool) -> None:
        statements.append(" ".join(statement.split()))

    event.listen(Engine, "before_cursor_execute", seen)
    try:
        request()
    finally:
        event.remove(Engine, "before_cursor_execute", seen)
    return statements


def test_the_items_page_does_not_read_every_item_of_a_run_over_the_limit(api_factory: ApiFactory) -> None:
    """``GET /v1/runs/{id}/items`` (the Annotate page's item list, every page it draws) calls
    ``repository.get_items(session, run_id, None)``: ``SELECT items.payload FROM items WHERE items.run_id = ?``
    without a LIMIT, every item's dialogue, memory and responses read into the API's memory, then sliced to ``limit`` in
    Python. A run over DJ_MAX_REPORT_JUDGMENTS (a monitor's run: every sampled response's dialogue) is read whole at
    every page. It should page in the database (or be refused like the other whole-run readers)."""
    api = api_factory(DJ_MAX_REPORT_JUDGMENTS="3")
    run_id = api.submit(body=run_body(6))["id"]
    answers: list[Any] = []
    statements = _statements_of(
        lambda: answers.append(api.client.get(f"/v1/runs/{run_id}/items", params={"offset": 1, "limit": 2}))
    )
    response = answers[0]
    assert response.status_code in (200, 409), response.text
    if response.status_code == 200:
        assert len(response.json()["items"]) == 2
    whole = [s for s in statements if "FROM items" in s and "payload" in s and "LIMIT" not in s.upper()]
    assert not whole, f"a run over the limit read whole: {whole}"


def test_the_run_export_does_not_hold_every_cache_key_of_a_run_over_the_limit(api_factory: ApiFactory) -> None:
    """``GET /v1/runs/{id}/export`` streams its rows in chunks (``yield_per``), but ``retention.export_run`` first
    reads ``SELECT DISTINCT judgments.cache_key FROM judgments WHERE run_id = ?`` whole into a sorted Python list
    (one 64-character key a judgment: ~100 MB for a million-judgment monitor run) before chunking the cache entries
    by it: the one route documented as the way out of DJ_MAX_REPORT_JUDGMENTS still holds a run-sized list. The keys
    should be read in pages too (keyset on the key, in the database's order)."""
    api = api_factory(DJ_MAX_REPORT_JUDGMENTS="3")
    run_id = api.submit(body=run_body(3))["id"]
    engine = create_engine(api.database_url)
    try:
        with engine.begin() as connection:
            connection.execute(
                text("UPDATE judgments SET cache_key = 'k' || id, status = 'done', score = 5 WHERE run_id = :r"),
                {"r": run_id},
            )
    finally:
        engine.dispose()
    answers: list[Any] = []
    statements = _statements_of(lambda: answers.append(api.client.get(f"/v1/runs/{run_id}/export")))
    assert answers[0].status_code == 200, answers[0].text
    whole = [s for s in statements if "cache_key" in s and "DISTINCT" in s.upper() and "LIMIT" not in s.upper()]
    assert not whole, f"every cache key of the run read at once: {whole}"


@pytest.mark.parametrize("db_url", ["sqlite", "postgres"], indirect=True)
@pytest.mark.parametrize("seed", [11, 12])
def test_held_alert_histories_over_rounds_are_the_whole_streams(
    api_factory: ApiFactory, db_url: str, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rounds 40 minutes apart while verdicts settle out of order (failures, cancellations, a backlog): at each
    round the new evaluation (window reads, streams shared by key) opens and resolves exactly what the whole
    stream's does on the same database; the new one is kept and the next round goes on from it."""
    import random

    rng = random.Random(seed)
    start = NOW - timedelta(hours=4)
    n = 70
    times = [start - timedelta(minutes=rng.choice([5, 50, 200, 700, 1500, 3000, 9000])) for _ in range(n)]
    times += [start + timedelta(minutes=rng.randint(0, 240)) for _ in range(n // 2)]
    slices = [{"version": rng.choice(["v1", "v2"]), "segment": rng.choice(["eu", "us"])} for _ in times]
    rules: list[dict[str, Any]] = [
        {"name": "floor-1h", "floor": {"below": 50, "min_n": 2, "window": "1h"}},
        {"name": "floor-1d-eu", "floor": {"below": 50, "min_n": 3, "window": "1d"}, "where": {"segment": "eu"}},
        {"name": "floor-all", "floor": {"below": 45, "min_n": 5}},
        {"name": "time-1h-1d", "compare": {"by": "time", "candidate": "1h", "baseline": "1d"}, "confidence": 0.8},
        {"name": "time-1d-7d", "compare": {"by": "time", "candidate": "1d", "baseline": "7d"}, "confidence": 0.8},
        {"name": "ver", "compare": {"by": "version", "baseline": "v1", "candidate": "v2"}, "confidence": 0.8},
    ]
    api = api_factory(database_url=db_url)
    monitor_id, run_id = _monitor(api, rules, times, slices)
    states: list[tuple[str, float | None]] = [("pending", None)] * len(times)
    seen: set[str] = set()
    for round_ in range(9):
        now = start + timedelta(minutes=40 * round_, seconds=rng.randint(0, 59), microseconds=rng.randint(0, 999999))
        for i, (status, _) in enumerate(states):
            if status == "pending" and i < 14 * (round_ + 1) and rng.random() < 0.85:  # mostly in order, a backlog
                roll = rng.random()
                low, high = (1, 40) if slices[i]["version"] == "v2" or round_ % 4 == 1 else (70, 100)
                states[i] = (
                    ("failed", None)
                    if roll < 0.08
                    else ("cancelled", None)
                    if roll < 0.12
                    else ("done", float(rng.randint(low, high)))
                )
        _set(api.database_url, run_id, states)
        old, new = _old_and_new(monitor_id, now, monkeypatch)
        assert new == old, round_
        seen.update(f"{row[0]}:{row[1]}" for row in new[1:])
        with session_scope() as session:  # the new evaluation is kept: the next round goes on from it
            alerts.evaluate_monitor(session, session.get_one(Monitor, monitor_id), now, get_registry())
    assert seen, "no alert opened: the rounds decided nothing"


@pytest.mark.parametrize("query", [{"rated": "true"}, {"item_id": "item-0"}])
def test_item_scores_of_the_rated_items_or_one_item_answer_on_a_run_over_the_limit(
    api_factory: ApiFactory, query: dict[str, str]
) -> None:
    """``/item-scores`` is now refused past DJ_MAX_REPORT_JUDGMENTS whatever its filters, but ``rated=true`` (the
    groups of the rated items only, filtered in SQL) and ``item_id`` read no more than the ratings or one item: the
    dashboard's Agreement and Disagreements pages (``api.rated_item_scores``, written to work "without the whole
    run") now fail on any large run with ratings (a monitor's run), while ``/order-outcomes?rated=true``, the same
    kind of read, still answers. Before 5d8b78b both answered."""
    api = api_factory(DJ_MAX_REPORT_JUDGMENTS="3")
    run_id = api.submit(body=run_body(2))["id"]
    engine = create_engine(api.database_url)
    try:
        with engine.begin() as connection:
            connection.execute(text("UPDATE judgments SET status = 'done', score = 5 WHERE run_id = :r"), {"r": run_id})
    finally:
        engine.dispose()
    ratings = [
        {"item_id": "item-0", "system": s, "aspect": "consistency", "rater": "ann", "kind": "score", "value": 5.0,
         "scale_min": 1.0, "scale_max": 10.0}
        for s in ("a", "b")
    ]  # fmt: skip
    assert api.client.post(f"/v1/runs/{run_id}/human-ratings", json={"ratings": ratings}).status_code == 201
    outcomes = api.client.get(f"/v1/runs/{run_id}/order-outcomes", params={"rated": "true"})
    assert outcomes.status_code == 200, outcomes.text
    scores = api.client.get(f"/v1/runs/{run_id}/item-scores", params=query)
    assert scores.status_code == 200, scores.text
    assert {row["item_id"] for row in scores.json()["items"]} == {"item-0"}
