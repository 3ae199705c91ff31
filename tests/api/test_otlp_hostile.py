"""Hostile review of the OTLP receiver (issue 38) through the real app on PostgreSQL: values PostgreSQL cannot store,
numbers JSON can spell but 64 bits cannot hold, a database failure mid-export, a conversation id two services share,
a tool-call turn; each answered in OTLP's shape, nothing stored half-way."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from sqlalchemy import create_engine, text

from tests.api.conftest import Api
from tests.api.test_monitors import monitor_body
from tests.conftest import PG_ADMIN
from tests.otlp.spans import SpanSpec, current, encoded, export, to_json

PATH = "/v1/otlp/v1/traces"
TABLES = ("otlp_spans", "monitor_responses", "items", "judgments")


@pytest.fixture(scope="module")
def pg_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    """One app over a fresh PostgreSQL database for the module (auth on, keys of two projects)."""
    from fastapi.testclient import TestClient

    from judge_api.app import create_app
    from judge_api.config import reset_settings_cache
    from judge_api.db import reset_engines
    from judge_api.migrate import upgrade

    name = f"dj_test_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = PG_ADMIN.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://") + f"/{name}"
    home = tmp_path_factory.mktemp("otlp-hostile")
    try:
        with pytest.MonkeyPatch.context() as env:
            for key, value in {
                "DJ_HOME": str(home / "home"),
                "DATABASE_URL": url,
                "DJ_AUTH": "true",
                "DJ_RUNS_PER_MINUTE": "100000",
                "DJ_JUDGE_URL_ALLOWLIST": "http://127.0.0.1:9/v1",
                "DJ_OTLP_PROCESS": "workers",  # where processing follows the answer: the tests take that step
            }.items():
                env.setenv(key, value)
            env.delenv("REDIS_URL", raising=False)
            reset_settings_cache()
            reset_engines()
            upgrade(url)
            with TestClient(create_app(), raise_server_exceptions=False) as client:
                built = Api(client, url)
                built.create_key("alpha", ["submit", "read"], "alpha")
                built.create_key("beta", ["submit", "read"], "beta")
                yield built
        reset_settings_cache()
        reset_engines()
    finally:
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def counts(api: Api) -> dict[str, int]:
    engine = create_engine(api.database_url)
    try:
        with engine.connect() as connection:
            return {t: int(connection.execute(text(f"SELECT COUNT(*) FROM {t}")).scalar_one()) for t in TABLES}
    finally:
        engine.dispose()


def create_monitor(api: Api, key: str = "alpha", **overrides: Any) -> str:
    body = monitor_body(sample_rate=1.0, daily_budget_usd=None, alerts=[], callback_url=None, callback_secret=None)
    body.update(overrides)
    answer = api.client.post("/v1/monitors", json=body, headers=api.as_key(key))
    assert answer.status_code == 201, answer.text
    return str(answer.json()["id"])


def post_json(api: Api, data: dict[str, Any], key: str = "alpha") -> Any:
    body = json.dumps(data).encode()
    return api.client.post(PATH, content=body, headers={"Content-Type": "application/json", **api.as_key(key)})


def json_export(specs: list[SpanSpec], resource: dict[str, Any]) -> dict[str, Any]:
    return to_json(export(specs, resource))


def protobuf_post(api: Api, specs: list[SpanSpec], resource: dict[str, Any], key: str = "alpha") -> Any:
    body, headers = encoded(export(specs, resource), "protobuf")
    return api.client.post(PATH, content=body, headers={**headers, **api.as_key(key)})


def processed() -> None:
    """Spans ingested: in the request here; where a processing step follows the answer (``process_received``), that
    step taken, as a processor would."""
    from judge_api.config import Settings
    from judge_api.db import session_factory
    from judge_api.otlp import intake

    step = getattr(intake, "process_received", None)
    if step is not None:
        step(session_factory(), Settings())


def items_of(api: Api, monitor_id: str) -> dict[str, dict[str, Any]]:
    processed()
    monitor = api.client.get(f"/v1/monitors/{monitor_id}", headers=api.as_key("alpha")).json()
    answer = api.client.get(f"/v1/runs/{monitor['run_id']}/items", params={"limit": 100}, headers=api.as_key("alpha"))
    assert answer.status_code == 200, answer.text
    return {i["id"]: i for i in answer.json()["items"]}


def spans_of(api: Api, monitor_id: str) -> set[str]:
    engine = create_engine(api.database_url)
    try:
        with engine.connect() as connection:
            query = text("SELECT response_id FROM otlp_spans WHERE monitor_id = :m")
            return {str(r) for r in connection.execute(query, {"m": monitor_id}).scalars()}
    finally:
        engine.dispose()


def test_a_time_json_reads_as_infinity_is_a_400_in_otlps_shape(pg_api: Api) -> None:
    monitor = create_monitor(pg_api)
    data = json_export(
        [SpanSpec(1, 1, attrs=current([("user", "hi")], "hello", "c-inf"))], {"dialogue_judge.monitor": monitor}
    )
    data["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["startTimeUnixNano"] = 12345
    body = json.dumps(data).replace("12345", "1e400").encode()  # valid JSON; Python reads it as infinity
    before = counts(pg_api)
    answer = pg_api.client.post(
        PATH, content=body, headers={"Content-Type": "application/json", **pg_api.as_key("alpha")}
    )
    assert answer.status_code == 400, answer.text
    assert answer.json()["code"] == 3 and "startTimeUnixNano" in answer.json()["message"]
    assert counts(pg_api) == before


SURROGATE = "\\ud800"  # OTLP/JSON can spell an unpaired surrogate; no UTF-8 (nor PostgreSQL) can hold one


@pytest.mark.parametrize(
    "where,attrs",
    [
        ("conversation id (NUL)", current([("user", "hi")], "hello", "conv\x00x")),
        ("conversation id (surrogate)", current([("user", "hi")], "hello", "conv@SURROGATE@")),
        ("model (NUL)", {**current([("user", "hi")], "hello", "c"), "gen_ai.request.model": "gpt\x00"}),
        ("model (surrogate)", {**current([("user", "hi")], "hello", "c"), "gen_ai.request.model": "gpt@SURROGATE@"}),
        ("a message (surrogate)", current([("user", "hi @SURROGATE@")], "hello", "c")),
        ("the output (surrogate)", current([("user", "hi")], "hello @SURROGATE@", "c")),
    ],
)
def test_a_text_that_cannot_be_stored_is_a_rejected_span_never_a_500_nor_a_silent_drop(
    pg_api: Api, where: str, attrs: dict[str, Any]
) -> None:
    monitor = create_monitor(pg_api)
    good = SpanSpec(2, 1, attrs=current([("user", "Hello there")], "Hi!", "c-good"))
    bad = SpanSpec(2, 2, attrs=attrs)
    data = json_export([good, bad], {"dialogue_judge.monitor": monitor})
    body = json.dumps(data).replace("@SURROGATE@", SURROGATE).encode()
    answer = pg_api.client.post(
        PATH, content=body, headers={"Content-Type": "application/json", **pg_api.as_key("alpha")}
    )
    assert answer.status_code == 200, (where, answer.text)
    partial = answer.json()["partialSuccess"]
    assert partial["rejectedSpans"] == "1" and "cannot be stored" in partial["errorMessage"], where
    assert spans_of(pg_api, monitor) == {good.response_id}  # the bad span is not kept, even as history
    assert set(items_of(pg_api, monitor)) == {good.response_id}  # and the run's items still read back
    status = pg_api.client.get(f"/v1/monitors/{monitor}", headers=pg_api.as_key("alpha")).json()["status"]["otlp"]
    assert status["rejected"] == 1 and "cannot be stored" in status["message"], where  # the status names it too


@pytest.mark.parametrize("ref", ["mon\x00", "mon@SURROGATE@", "m" * 5000])
def test_a_monitor_reference_that_cannot_be_stored_is_an_unknown_monitor_not_a_500(pg_api: Api, ref: str) -> None:
    data = json_export([SpanSpec(3, 1, attrs=current([("user", "hi")], "hello", "c"))], {"dialogue_judge.monitor": ref})
    body = json.dumps(data).replace("@SURROGATE@", SURROGATE).encode()
    before = counts(pg_api)
    answer = pg_api.client.post(
        PATH, content=body, headers={"Content-Type": "application/json", **pg_api.as_key("alpha")}
    )
    assert answer.status_code == 400, answer.text
    assert "does not have" in answer.json()["message"]
    assert counts(pg_api) == before


def test_a_database_outage_mid_export_is_a_503_in_otlps_shape_then_the_retry_stores_it_once(
    pg_api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    from google.rpc.status_pb2 import Status
    from sqlalchemy.exc import OperationalError

    from judge_api.repository import otlp as store

    monitor = create_monitor(pg_api)
    resource = {"dialogue_judge.monitor": monitor}
    first = SpanSpec(4, 1, start_s=0, attrs=current([("user", "Hi, my dog is Rex.")], "Hello!", "c-out"))
    second = SpanSpec(
        4, 2, start_s=60,
        attrs=current([("user", "Hi, my dog is Rex."), ("assistant", "Hello!"), ("user", "Name?")], "Rex.", "c-out"),
    )  # fmt: skip
    before = counts(pg_api)

    def lost(*args: Any, **kwargs: Any) -> Any:  # the connection drops after the spans were inserted
        raise OperationalError("UPDATE monitors", {}, Exception("server closed the connection unexpectedly"))

    monkeypatch.setattr(store, "add_stats", lost)
    answer = protobuf_post(pg_api, [first, second], resource)
    assert answer.status_code == 503 and answer.headers["retry-after"] == "2"
    assert answer.headers["content-type"] == "application/x-protobuf"
    status = Status.FromString(answer.content)
    assert status.code == 14 and "retry" in status.message
    assert counts(pg_api) == before  # nothing half-stored
    monkeypatch.undo()
    retried = protobuf_post(pg_api, [first, second], resource)
    assert retried.status_code == 200
    items = items_of(pg_api, monitor)
    assert set(items) == {first.response_id, second.response_id}
    assert [t["text"] for t in items[second.response_id]["dialogue"]] == ["Hi, my dog is Rex.", "Hello!", "Name?"]


def test_an_unexpected_fault_is_a_500_in_otlps_shape(pg_api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    from judge_api.repository import otlp as store

    monitor = create_monitor(pg_api)

    def broken(*args: Any, **kwargs: Any) -> Any:  # after the spans' insert
        raise RuntimeError("a bug")

    monkeypatch.setattr(store, "add_stats", broken)
    before = counts(pg_api)
    answer = post_json(
        pg_api,
        json_export([SpanSpec(5, 1, attrs=current([("user", "hi")], "hello"))], {"dialogue_judge.monitor": monitor}),
    )
    assert answer.status_code == 500 and answer.json()["code"] == 13, answer.text
    assert "a bug" not in answer.text  # the fault is logged, not told
    assert counts(pg_api) == before


def tool_call_span(trace: int, conversation: str) -> SpanSpec:
    """What opentelemetry-instrumentation-openai-v2 records when the model asks for a tool."""
    inputs = [{"role": "user", "parts": [{"type": "text", "content": "Weather in Paris?"}]}]
    outputs = [
        {
            "role": "assistant",
            "parts": [{"type": "tool_call", "id": "call_1", "name": "get_weather", "arguments": {"city": "Paris"}}],
            "finish_reason": "tool_call",
        }
    ]
    attrs = {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "gpt-4o-mini",
        "gen_ai.conversation.id": conversation,
        "gen_ai.response.finish_reasons": ["tool_calls"],
        "gen_ai.input.messages": json.dumps(inputs),
        "gen_ai.output.messages": json.dumps(outputs),
    }
    return SpanSpec(trace, 1, start_s=0, attrs=attrs)


def answer_after_tool_span(trace: int, conversation: str) -> SpanSpec:
    inputs = [
        {"role": "user", "parts": [{"type": "text", "content": "Weather in Paris?"}]},
        {"role": "assistant", "parts": [{"type": "tool_call", "id": "call_1", "name": "get_weather", "arguments": {}}]},
        {"role": "tool", "parts": [{"type": "tool_call_response", "id": "call_1", "response": "sunny, 21 C"}]},
    ]
    outputs = [{"role": "assistant", "parts": [{"type": "text", "content": "Sunny, 21 C."}], "finish_reason": "stop"}]
    attrs = {
        "gen_ai.operation.name": "chat",
        "gen_ai.conversation.id": conversation,
        "gen_ai.input.messages": json.dumps(inputs),
        "gen_ai.output.messages": json.dumps(outputs),
    }
    return SpanSpec(trace, 2, start_s=2, attrs=attrs)


def test_a_tool_call_turn_is_skipped_as_a_tool_call_not_blamed_on_content_capture(pg_api: Api) -> None:
    monitor = create_monitor(pg_api)
    resource = {"dialogue_judge.monitor": monitor}
    alone = post_json(pg_api, json_export([tool_call_span(6, "c-tool")], resource))
    assert alone.status_code == 200, alone.text  # not "no span could be used": content capture is on
    message = alone.json()["partialSuccess"]["errorMessage"]
    assert "tool call" in message and "CAPTURE_MESSAGE_CONTENT" not in message
    answer = post_json(pg_api, json_export([answer_after_tool_span(6, "c-tool")], resource))
    assert answer.status_code == 200 and answer.json() == {}
    items = items_of(pg_api, monitor)
    judged = items[answer_after_tool_span(6, "c-tool").response_id]
    assert [(t["speaker"], t["text"]) for t in judged["dialogue"]] == [("user", "Weather in Paris?")]
    assert judged["candidates"] == {"support-bot": "Sunny, 21 C."}
    status = pg_api.client.get(f"/v1/monitors/{monitor}", headers=pg_api.as_key("alpha")).json()["status"]
    assert status["otlp"]["tool_call"] == 1 and status["otlp"]["no_content"] == 0


def test_two_services_sharing_a_conversation_id_never_get_each_others_history(pg_api: Api) -> None:
    monitor = create_monitor(pg_api)
    support = SpanSpec(7, 1, start_s=0, attrs=current([("user", "My card number is 4111.")], "Noted.", "1"))
    sales = SpanSpec(8, 1, start_s=30, attrs=current([("user", "Any discounts?")], "10 % off today.", "1"))
    assert (
        protobuf_post(pg_api, [support], {"dialogue_judge.monitor": monitor, "service.name": "support-bot"}).status_code
        == 200
    )
    assert (
        protobuf_post(pg_api, [sales], {"dialogue_judge.monitor": monitor, "service.name": "sales-bot"}).status_code
        == 200
    )
    judged = items_of(pg_api, monitor)[sales.response_id]
    assert [(t["speaker"], t["text"]) for t in judged["dialogue"]] == [("user", "Any discounts?")]
    assert judged["candidates"] == {"sales-bot": "10 % off today."}


def test_no_database_connection_is_held_while_the_body_streams_in(pg_api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    """A slow exporter uploading 16 MB must not keep a pooled connection (idle in transaction) the whole time."""
    from judge_api.db import get_engine
    from judge_api.routers import otlp as receiver

    monitor = create_monitor(pg_api)
    held: list[int] = []
    original = receiver.read_limited

    async def reading(request: Any, limit: int) -> bytes:
        held.append(get_engine().pool.checkedout())  # type: ignore[attr-defined]
        return await original(request, limit)

    monkeypatch.setattr(receiver, "read_limited", reading)
    answer = protobuf_post(
        pg_api, [SpanSpec(9, 1, attrs=current([("user", "hi")], "hello"))], {"dialogue_judge.monitor": monitor}
    )
    assert answer.status_code == 200
    assert held == [0]


def test_a_monitor_whose_responses_cannot_be_released_does_not_starve_the_others(
    pg_api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sweeper's round looked at the 2000 longest-waiting spans: a monitor with that many stuck (its config no
    longer plans: each round leaves them waiting) crowded every other monitor out of every round."""
    from datetime import timedelta

    from fastapi import HTTPException

    from judge_api.config import Settings
    from judge_api.db import session_factory
    from judge_api.models import utcnow
    from judge_api.otlp import intake

    stuck, healthy = create_monitor(pg_api), create_monitor(pg_api)

    def waiting_span(trace: int) -> SpanSpec:  # its history's exchange never arrives: it waits DJ_OTLP_WAIT
        history = [("user", "Hi, my dog is Rex."), ("assistant", "Hello!"), ("user", "Name?")]
        return SpanSpec(trace, 1, start_s=60, attrs=current(history, "Rex.", f"c-{trace}"))

    for trace in (20, 21, 22):
        assert protobuf_post(pg_api, [waiting_span(trace)], {"dialogue_judge.monitor": stuck}).status_code == 200
    assert protobuf_post(pg_api, [waiting_span(23)], {"dialogue_judge.monitor": healthy}).status_code == 200
    original = intake.ingest

    def ingest(session: Any, monitor: Any, responses: Any, settings: Any, **options: Any) -> Any:
        if monitor.id == stuck:
            raise HTTPException(409, "the monitor's rubrics: unknown rubric")
        return original(session, monitor, responses, settings, **options)

    processed()  # the spans wait for their history
    monkeypatch.setattr(intake, "ingest", ingest)
    monkeypatch.setattr(intake, "RELEASE_LIMIT", 2)  # as 2000 stuck spans would with the real limit
    settings = Settings()
    later = utcnow() + timedelta(seconds=settings.otlp_wait_s + 5)
    released = intake.release_due(session_factory(), settings, now=later)
    assert released == 1
    assert set(items_of(pg_api, healthy)) == {waiting_span(23).response_id}
