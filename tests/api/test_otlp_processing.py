"""The OTLP processing step (judge_api.otlp.intake.process_received) apart from the request: two processors at once
judge every stored span exactly once (PostgreSQL: FOR UPDATE SKIP LOCKED; SQLite: the claim's compare-and-set under
its one writer), and a processor that dies between its claim and the ingestion leaves the spans to the next one,
with nothing judged twice."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from judge_api.config import get_settings
from judge_api.db import session_factory
from judge_api.models import utcnow
from judge_api.otlp import intake
from judge_api.repository import otlp as spans_store
from tests.api.conftest import Api, ApiFactory
from tests.api.test_monitors import monitor_body
from tests.otlp.spans import SpanSpec, current, encoded, export

PATH = "/v1/otlp/v1/traces"
CONVERSATIONS = 40
TURNS = 4


def conversation(conv: int) -> list[SpanSpec]:
    """A conversation's spans, each carrying the whole history before it."""
    specs = []
    for turn in range(TURNS):
        messages = [("system", "You are Max.")]
        for earlier in range(turn):
            messages += [("user", f"c{conv} u{earlier}"), ("assistant", f"c{conv} b{earlier}")]
        messages.append(("user", f"c{conv} u{turn}"))
        specs.append(
            SpanSpec(1000 + conv, turn + 1, start_s=turn * 60, attrs=current(messages, f"c{conv} b{turn}", f"k{conv}"))
        )
    return specs


def scalar(api: Api, query: str, **params: Any) -> int:
    engine = create_engine(api.database_url)
    try:
        with engine.connect() as connection:
            return int(connection.execute(text(query), params).scalar_one())
    finally:
        engine.dispose()


def stored_api(api_factory: ApiFactory, database_url: str) -> tuple[Api, list[str], int]:
    """An app on the database, two monitors sampling everything, and their spans exported shuffled and stored (not
    processed: no Redis, no sweeper)."""
    api = api_factory(auth=False, database_url=database_url, DJ_OTLP_PROCESS="workers")  # the tests process
    monitors = []
    for name in ("first", "second"):
        body = monitor_body(
            name=name, sample_rate=1.0, daily_budget_usd=None, alerts=[], callback_url=None, callback_secret=None
        )
        created = api.client.post("/v1/monitors", json=body)
        assert created.status_code == 201, created.text
        monitors.append(str(created.json()["id"]))
    specs = [(monitors[conv % 2], s) for conv in range(CONVERSATIONS) for s in conversation(conv)]
    random.Random(7).shuffle(specs)  # a conversation's spans out of order, in separate exports
    for monitor in monitors:
        mine = [spec for m, spec in specs if m == monitor]
        for start in range(0, len(mine), 20):
            payload, headers = encoded(
                export(mine[start : start + 20], {"dialogue_judge.monitor": monitor}), "protobuf"
            )
            assert api.client.post(PATH, content=payload, headers=headers).status_code == 200
    assert scalar(api, "SELECT COUNT(*) FROM otlp_spans WHERE status = 'received'") == len(specs)
    assert scalar(api, "SELECT COUNT(*) FROM monitor_responses") == 0
    return api, monitors, len(specs)


def assert_judged_once(api: Api, spans: int) -> None:
    assert scalar(api, "SELECT COUNT(*) FROM monitor_responses") == spans
    assert scalar(api, "SELECT COUNT(DISTINCT response_id) FROM monitor_responses") == spans
    assert scalar(api, "SELECT COUNT(*) FROM items") == spans
    assert scalar(api, "SELECT COUNT(DISTINCT item_key) FROM items") == spans
    per_item = scalar(api, "SELECT MAX(c) FROM (SELECT COUNT(*) AS c FROM judgments GROUP BY item_pk) AS j")
    assert scalar(api, "SELECT COUNT(*) FROM judgments") == spans * per_item  # no item planned twice
    assert scalar(api, "SELECT COUNT(*) FROM otlp_spans WHERE status <> 'released'") == 0


def test_two_processors_at_once_judge_every_span_exactly_once(
    api_factory: ApiFactory, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    api, _, spans = stored_api(api_factory, db_url)
    claimers: Counter[str] = Counter()
    claim = spans_store.claim_received
    ingest = intake.ingest

    def recording_claim(session: Any, monitor_id: str, limit: int) -> list[int]:
        claimed = claim(session, monitor_id, limit)
        claimers[threading.current_thread().name] += len(claimed)
        return claimed

    def slow_ingest(*args: Any, **kwargs: Any) -> Any:
        threading.Event().wait(0.02)  # inside the claiming transaction: the other processor runs meanwhile
        return ingest(*args, **kwargs)

    monkeypatch.setattr(spans_store, "claim_received", recording_claim)
    monkeypatch.setattr(intake, "ingest", slow_ingest)
    settings = get_settings()
    start = threading.Barrier(2)
    handed: dict[str, int] = {}
    errors: list[BaseException] = []

    def processor(name: str) -> None:
        try:
            start.wait()
            handed[name] = intake.process_received(session_factory(), settings, batch=8)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=processor, args=(f"p{k}",), name=f"p{k}") for k in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors, errors
    assert sum(handed.values()) == spans  # every response handed over once, by one of them
    assert sum(claimers.values()) == spans  # every span claimed once
    if db_url.startswith("postgresql"):
        assert set(claimers) == {"p0", "p1"}, claimers  # both really ran at once (each a monitor at a time)
    assert_judged_once(api, spans)
    assert intake.process_received(session_factory(), settings) == 0


def test_a_processor_killed_between_claim_and_ingest_leaves_the_spans_to_the_next(
    api_factory: ApiFactory, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    api, monitors, spans = stored_api(api_factory, pg_url)
    settings = get_settings()

    def killed(*_: Any, **__: Any) -> Any:
        raise SystemExit("killed between the claim and the ingestion")

    monkeypatch.setattr(intake, "ingest", killed)
    with pytest.raises(SystemExit):
        intake.process_received(session_factory(), settings)
    monkeypatch.undo()
    assert scalar(api, "SELECT COUNT(*) FROM otlp_spans WHERE status = 'received'") == spans
    assert scalar(api, "SELECT COUNT(*) FROM monitor_responses") == 0

    # a process dies holding a claim: its connection drops, PostgreSQL rolls its transaction back
    dying = session_factory()()
    held = spans_store.claim_received(dying, monitors[0], 10)
    assert len(held) == 10
    handed = intake.process_received(session_factory(), settings)  # meanwhile: takes the others, skips the held
    assert handed <= spans - 10
    assert scalar(api, "SELECT COUNT(*) FROM otlp_spans WHERE status = 'received'") == 10
    dying.connection().invalidate()  # the connection is gone, not returned: nothing of its claim is committed
    dying.close()
    assert intake.process_received(session_factory(), settings) == spans - handed
    assert_judged_once(api, spans)


def test_without_redis_the_apps_own_processor_handles_an_export_within_seconds(
    api_factory: ApiFactory, sqlite_url: str
) -> None:
    """No Redis, no sweeper: the API still starts its OTLP processor (DJ_OTLP_PROCESS=all), woken by the export."""
    api = api_factory(auth=False, database_url=sqlite_url)
    body = monitor_body(sample_rate=1.0, daily_budget_usd=None, alerts=[], callback_url=None, callback_secret=None)
    monitor = str(api.client.post("/v1/monitors", json=body).json()["id"])
    payload, headers = encoded(export(conversation(1), {"dialogue_judge.monitor": monitor}), "protobuf")
    answered = time.monotonic()
    assert api.client.post(PATH, content=payload, headers=headers).status_code == 200
    while scalar(api, "SELECT COUNT(*) FROM monitor_responses") < TURNS:
        assert time.monotonic() - answered < 5.0, "not processed within 5 s"
        time.sleep(0.05)
    status = api.client.get(f"/v1/monitors/{monitor}").json()["status"]["otlp"]
    assert status["responses"] == TURNS and status["received"] == 0


def test_without_redis_a_response_whose_earlier_turns_never_arrive_is_judged_after_the_wait(
    api_factory: ApiFactory, sqlite_url: str
) -> None:
    """No Redis, no sweeper: the API's own processor releases a response whose wait ran out, within about a second
    of DJ_OTLP_WAIT, with no later span of the monitor to trigger it (it used to wait for the next export)."""
    api = api_factory(auth=False, database_url=sqlite_url, DJ_OTLP_WAIT="1")
    body = monitor_body(sample_rate=1.0, daily_budget_usd=None, alerts=[], callback_url=None, callback_secret=None)
    monitor = str(api.client.post("/v1/monitors", json=body).json()["id"])
    last = conversation(3)[-1]  # its three earlier exchanges never arrive
    payload, headers = encoded(export([last], {"dialogue_judge.monitor": monitor}), "protobuf")
    answered = time.monotonic()
    assert api.client.post(PATH, content=payload, headers=headers).status_code == 200
    while scalar(api, "SELECT COUNT(*) FROM monitor_responses") < 1:
        assert time.monotonic() - answered < 4.0, "a waiting response not released within DJ_OTLP_WAIT + 3 s"
        time.sleep(0.05)
    assert time.monotonic() - answered >= 1.0
    status = api.client.get(f"/v1/monitors/{monitor}").json()["status"]["otlp"]
    assert status["responses"] == 1 and status["waited"] == 1 and status["waiting"] == 0


def test_a_fault_with_one_monitors_spans_neither_stops_the_others_nor_spins(
    api_factory: ApiFactory, sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An unexpected error in one monitor's step (a stored span a newer version cannot read, a constraint...) used
    to abort the whole processing call: every monitor sorted after it was never processed again. Now the monitor is
    left aside (its spans kept ``received``) for BLOCKED_RETRY_S, the others are processed, and it is not retried at
    every look."""
    api, monitors, spans = stored_api(api_factory, sqlite_url)
    broken = min(monitors)  # processed first: sorted by id
    settings = get_settings()
    original = intake.ingest
    tries: Counter[str] = Counter()

    def faulty(session: Any, monitor: Any, responses: Any, settings: Any, **options: Any) -> Any:
        tries[monitor.id] += 1
        if monitor.id == broken:
            raise KeyError("a stored span this version cannot read")
        return original(session, monitor, responses, settings, **options)

    monkeypatch.setattr(intake, "ingest", faulty)
    handed = intake.process_received(session_factory(), settings)
    assert handed == spans // 2  # the other monitor's, all of them
    broken_received = "SELECT COUNT(*) FROM otlp_spans WHERE status = 'received' AND monitor_id = :m"
    assert scalar(api, broken_received, m=broken) == spans // 2  # nothing of the broken one lost
    assert intake.process_received(session_factory(), settings) == 0
    assert tries[broken] == 1  # left aside, not tried again at once
    monkeypatch.setattr(intake, "ingest", original)
    monkeypatch.setattr(intake, "_blocked", {})  # BLOCKED_RETRY_S later
    assert intake.process_received(session_factory(), settings) == spans // 2
    assert_judged_once(api, spans)


def test_a_monitor_left_aside_is_tried_again_at_once_when_its_config_changes(
    api_factory: ApiFactory, sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A monitor whose step failed waited BLOCKED_RETRY_S (30 s) even after a PATCH that fixed it; a changed config
    is now tried at the next look."""
    api, monitors, spans = stored_api(api_factory, sqlite_url)
    broken = min(monitors)
    settings = get_settings()
    original = intake.ingest

    def faulty(session: Any, monitor: Any, responses: Any, settings: Any, **options: Any) -> Any:
        if monitor.id == broken and monitor.config["aspects"] == ["consistency"]:
            raise KeyError("this config cannot be ingested")
        return original(session, monitor, responses, settings, **options)

    monkeypatch.setattr(intake, "ingest", faulty)
    assert intake.process_received(session_factory(), settings) == spans // 2
    assert intake.process_received(session_factory(), settings) == 0  # left aside
    patched = api.client.patch(f"/v1/monitors/{broken}", json={"aspects": ["coherence"]})
    assert patched.status_code == 200, patched.text
    assert intake.process_received(session_factory(), settings) == spans // 2  # at once, not 30 s later


def test_the_daily_budget_pauses_sampling_within_a_processing_step(api_factory: ApiFactory, sqlite_url: str) -> None:
    """A processing step ingests up to PROCESS_BATCH spans (and every response due): the budget was looked at once
    for the whole step, so an export of 20 responses to a monitor with 3.5 responses' worth of budget left sampled
    all 20. Now sampling pauses at the response that reaches it, as if each had been posted alone."""
    api = api_factory(auth=False, database_url=sqlite_url, DJ_OTLP_PROCESS="workers")  # the test processes
    judge = "anthropic:claude-sonnet-4-5"
    body = monitor_body(
        judges=[judge], sample_rate=1.0, daily_budget_usd=1000, alerts=[], callback_url=None, callback_secret=None
    )
    monitor = str(api.client.post("/v1/monitors", json=body).json()["id"])
    settings = get_settings()

    def spans(first: int, n: int) -> None:
        specs = [
            SpanSpec(5000 + i, 1, attrs=current([("user", f"Hi, I am user {i:03d}.")], f"Hello user {i:03d}!"))
            for i in range(first, first + n)
        ]
        payload, headers = encoded(export(specs, {"dialogue_judge.monitor": monitor}), "protobuf")
        assert api.client.post(PATH, content=payload, headers=headers).status_code == 200
        assert intake.process_received(session_factory(), settings) == n

    spans(0, 1)
    status = api.client.get(f"/v1/monitors/{monitor}").json()["status"]
    per_response = status["queued_estimate_usd"]
    assert per_response > 0 and status["sampled_today"] == 1
    patched = api.client.patch(f"/v1/monitors/{monitor}", json={"daily_budget_usd": round(3.5 * per_response, 9)})
    assert patched.status_code == 200, patched.text
    spans(1, 20)
    status = api.client.get(f"/v1/monitors/{monitor}").json()["status"]
    assert status["responses_today"] == 21
    assert status["sampled_today"] == 4  # 3 x per response is under 3.5: the 4th is sampled, then it pauses
    assert status["state"] == "paused_budget"


def test_spans_no_processor_takes_are_visible_in_readyz_and_metrics(api_factory: ApiFactory, sqlite_url: str) -> None:
    """DJ_OTLP_PROCESS=workers with no worker up (or a processor failing at every look): the spans are kept
    ``received`` and nothing said so outside each monitor's status. /readyz warns once the oldest is 30 s old, and
    /metrics exports their count and age."""
    api, _, spans = stored_api(api_factory, sqlite_url)
    ready = api.client.get("/readyz").json()
    assert ready["otlp_received"] == spans and "otlp_warning" not in ready  # just received: not a stall
    engine = create_engine(api.database_url)
    with engine.begin() as connection:
        connection.execute(text("UPDATE otlp_spans SET received_at = :t"), {"t": utcnow() - timedelta(seconds=90)})
    engine.dispose()
    ready = api.client.get("/readyz").json()
    assert ready["oldest_otlp_received_age_s"] >= 90
    assert f"{spans} OTLP spans are not processed" in ready["otlp_warning"]
    assert "DJ_OTLP_PROCESS=workers" in ready["otlp_warning"]
    exposition = api.client.get("/metrics").text
    assert f"dj_otlp_received_spans {float(spans)}" in exposition
    age = [line for line in exposition.splitlines() if line.startswith("dj_otlp_oldest_received_age")]
    assert age and float(age[0].split()[-1]) >= 90


def test_a_step_over_dj_max_judgments_is_split_not_stuck(api_factory: ApiFactory, sqlite_url: str) -> None:
    """A step hands up to PROCESS_BATCH responses (and every response due) to the monitor at once; planned together
    they may exceed DJ_MAX_JUDGMENTS, which the REST route answers 413 "send fewer per request". No client can send
    fewer here: the spans stayed ``received`` and every later step failed the same. Now the step is ingested in
    smaller parts."""
    api = api_factory(auth=False, database_url=sqlite_url, DJ_OTLP_PROCESS="workers", DJ_MAX_JUDGMENTS="6")
    body = monitor_body(sample_rate=1.0, daily_budget_usd=None, alerts=[], callback_url=None, callback_secret=None)
    monitor = str(api.client.post("/v1/monitors", json=body).json()["id"])
    specs = [SpanSpec(7000 + i, 1, attrs=current([("user", f"Hi {i}")], f"Hello {i}")) for i in range(20)]
    payload, headers = encoded(export(specs, {"dialogue_judge.monitor": monitor}), "protobuf")
    assert api.client.post(PATH, content=payload, headers=headers).status_code == 200
    settings = get_settings()
    handed = 0
    for _ in range(6):  # a few steps at most (the part halves at each 413)
        handed += intake.process_received(session_factory(), settings)
        if handed == 20:
            break
    assert handed == 20
    assert scalar(api, "SELECT COUNT(*) FROM otlp_spans WHERE status = 'received'") == 0
    assert scalar(api, "SELECT COUNT(*) FROM items") == 20
    assert scalar(api, "SELECT COUNT(*) FROM judgments") == 20 * scalar(
        api, "SELECT MAX(c) FROM (SELECT COUNT(*) AS c FROM judgments GROUP BY item_pk) AS j"
    )


def test_a_part_size_learnt_from_a_413_holds_for_its_config_only(api_factory: ApiFactory, sqlite_url: str) -> None:
    """The halved part size used to stay for the process's life: after a PATCH to fewer judges or aspects the
    monitor was still ingested one sampled response at a time. It now holds for the config it was learnt with."""
    api = api_factory(auth=False, database_url=sqlite_url, DJ_OTLP_PROCESS="workers", DJ_MAX_JUDGMENTS="6")
    body = monitor_body(sample_rate=1.0, daily_budget_usd=None, alerts=[], callback_url=None, callback_secret=None)
    monitor = str(api.client.post("/v1/monitors", json=body).json()["id"])
    settings = get_settings()

    def export_and_process(first: int) -> int:
        specs = [SpanSpec(first + i, 1, attrs=current([("user", f"Hi {i}")], f"Hello {i}")) for i in range(8)]
        payload, headers = encoded(export(specs, {"dialogue_judge.monitor": monitor}), "protobuf")
        assert api.client.post(PATH, content=payload, headers=headers).status_code == 200
        return sum(intake.process_received(session_factory(), settings) for _ in range(6))

    assert export_and_process(7100) == 8
    learnt = intake._part_limit[monitor]
    assert learnt[0] < 8  # halved by the 413s
    assert export_and_process(7200) == 8
    assert intake._part_limit[monitor] == learnt  # the same config: kept
    patched = api.client.patch(f"/v1/monitors/{monitor}", json={"aspects": ["consistency", "coherence"]})
    assert patched.status_code == 200, patched.text
    export_and_process(7300)
    assert intake._part_limit.get(monitor, (None, ""))[1] != learnt[1]  # learnt again or gone, never the old one


def test_concurrent_exports_to_one_monitor_do_not_deadlock(api_factory: ApiFactory, pg_url: str) -> None:
    """PostgreSQL: an export's insert of spans takes a KEY SHARE lock on its monitor's row (the foreign key), then
    its counts locked the row FOR UPDATE, which waits for every other KEY SHARE holder: two exports to one monitor
    (two API processes), or an export and the processor's step (its responses reference the monitor too), each
    waited for the other: "deadlock detected", the export answered 503. Found with two API processes on one
    monitor. The counts now lock FOR NO KEY UPDATE (what their UPDATE takes anyway), which a KEY SHARE does not
    block."""
    api = api_factory(auth=False, database_url=pg_url, DJ_OTLP_PROCESS="workers")
    body = monitor_body(sample_rate=1.0, daily_budget_usd=None, alerts=[], callback_url=None, callback_secret=None)
    monitor = str(api.client.post("/v1/monitors", json=body).json()["id"])
    now = utcnow()

    def row(n: int) -> dict[str, Any]:
        return {
            "monitor_id": monitor,
            "response_id": f"otlp-{n}",
            "conversation_id": "",
            "started_at": now,
            "received_at": now,
            "release_after": now,
            "status": spans_store.RECEIVED,
            "call": {},
        }

    first, second = session_factory()(), session_factory()()
    try:
        assert spans_store.insert_spans(first, [row(1)])  # each holds KEY SHARE on the monitor's row
        assert spans_store.insert_spans(second, [row(2)])
        errors: list[BaseException] = []

        def count_first() -> None:
            try:
                spans_store.add_stats(first, [monitor], now.date().isoformat(), {monitor: {"spans": 1}}, {})
                first.commit()
            except BaseException as exc:
                errors.append(exc)
                first.rollback()

        thread = threading.Thread(target=count_first)
        thread.start()
        thread.join(0.5)
        waited = thread.is_alive()
        if waited:  # the old lock: end the second transaction so that the first one finishes
            second.rollback()
            thread.join(10)
        assert not waited, "the first export's counts wait for the second export's transaction"
        spans_store.add_stats(second, [monitor], now.date().isoformat(), {monitor: {"spans": 1}}, {})
        second.commit()
        assert not errors, errors
    finally:
        first.close()
        second.close()
    assert api.client.get(f"/v1/monitors/{monitor}").json()["status"]["otlp"]["spans"] == 2


def test_a_monitor_whose_step_fails_before_its_config_is_read_is_still_left_aside(
    api_factory: ApiFactory, sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review r38c: a step that failed in ``settle`` (a stored span this version cannot read) was blocked with an
    empty config key, which never equals the monitor's config: the next look took it as "config changed" and tried
    it again at once, at every look, instead of after BLOCKED_RETRY_S."""
    api, monitors, spans = stored_api(api_factory, sqlite_url)
    broken = min(monitors)
    settings = get_settings()
    original = intake.settle
    tries: Counter[str] = Counter()

    def faulty(session: Any, monitor: Any, *args: Any, **kwargs: Any) -> Any:
        tries[monitor.id] += 1
        if monitor.id == broken:
            raise KeyError("a stored span this version cannot read")
        return original(session, monitor, *args, **kwargs)

    monkeypatch.setattr(intake, "settle", faulty)
    assert intake.process_received(session_factory(), settings) == spans // 2
    assert intake.process_received(session_factory(), settings) == 0
    intake.release_due(session_factory(), settings, utcnow() + timedelta(hours=1), purge=False)
    assert tries[broken] == 1  # left aside, not tried again at once
    broken_received = "SELECT COUNT(*) FROM otlp_spans WHERE status = 'received' AND monitor_id = :m"
    assert scalar(api, broken_received, m=broken) == spans // 2  # nothing of it lost
