"""The OTLP/HTTP traces receiver through the real app and database (no worker): auth, the OTLP error shape (415,
400, 413, 401/403), partial_success, an exporter's retry, spans out of order waiting for their history then judged,
the default monitor, spans without content counted on the monitor's status, another project's monitor unreachable."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any, cast

import pytest
from fastapi import FastAPI
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from sqlalchemy import create_engine, text

from judge_api.config import Settings
from judge_api.db import session_factory
from judge_api.models import utcnow
from judge_api.otlp.decode import decode
from judge_api.otlp.intake import process_received, receive, release_due
from tests.api.conftest import Api
from tests.api.test_monitors import monitor_body
from tests.otlp.spans import SpanSpec, current, encoded, export, http_span, without_content

PATH = "/v1/otlp/v1/traces"
TABLES = ("otlp_spans", "monitor_responses", "items", "judgments")


def counts(api: Api) -> dict[str, int]:
    engine = create_engine(api.database_url)
    try:
        with engine.connect() as connection:
            return {t: int(connection.execute(text(f"SELECT COUNT(*) FROM {t}")).scalar_one()) for t in TABLES}
    finally:
        engine.dispose()


def responses_of(api: Api, monitor_id: str) -> int:
    engine = create_engine(api.database_url)
    try:
        with engine.connect() as connection:
            query = text("SELECT COUNT(*) FROM monitor_responses WHERE monitor_id = :m")
            return int(connection.execute(query, {"m": monitor_id}).scalar_one())
    finally:
        engine.dispose()


@pytest.fixture(scope="module")
def otlp_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    """One app for the module (auth on, keys of two projects; each test makes its own monitors): building an app
    migrates a database and warms the statistics up, seconds a time."""
    from fastapi.testclient import TestClient

    from judge_api.app import create_app
    from judge_api.config import reset_settings_cache
    from judge_api.db import reset_engines
    from judge_api.migrate import upgrade

    home = tmp_path_factory.mktemp("otlp")
    url = f"sqlite:///{home / 'api.db'}"
    with pytest.MonkeyPatch.context() as env:
        for name, value in {
            "DJ_HOME": str(home / "home"),
            "DATABASE_URL": url,
            "DJ_AUTH": "true",
            "DJ_RUNS_PER_MINUTE": "100000",
            "DJ_JUDGE_URL_ALLOWLIST": "http://127.0.0.1:9/v1",
            "DJ_OTLP_MAX_BYTES": "2000000",
            "DJ_OTLP_PROCESS": "workers",  # no processor thread: the tests take the processing step (process)
        }.items():
            env.setenv(name, value)
        env.delenv("REDIS_URL", raising=False)
        reset_settings_cache()
        reset_engines()
        upgrade(url)
        with TestClient(create_app(), raise_server_exceptions=False) as client:
            built = Api(client, url)
            built.create_key("alpha", ["submit", "read"], "alpha")
            built.create_key("alpha", ["read"], "alpha-read")
            built.create_key("beta", ["submit", "read"], "beta")
            yield built
    reset_settings_cache()
    reset_engines()


def create_monitor(api: Api, key: str | None = "alpha", **overrides: Any) -> str:
    body = monitor_body(sample_rate=1.0, daily_budget_usd=None, alerts=[], callback_url=None, callback_secret=None)
    body.update(overrides)
    answer = api.client.post("/v1/monitors", json=body, headers=api.as_key(key))
    assert answer.status_code == 201, answer.text
    return str(answer.json()["id"])


def post(
    api: Api,
    specs: list[SpanSpec],
    key: str | None = "alpha",
    encoding: str = "json",
    gzipped: bool = False,
    monitor: str | None = None,
) -> Any:
    """Export the spans as an exporter would, the resource naming ``monitor`` (when given)."""
    resource = {"dialogue_judge.monitor": monitor} if monitor else {}
    body, headers = encoded(export(specs, resource), encoding, gzipped)
    return api.client.post(PATH, content=body, headers={**headers, **api.as_key(key)})


def settings_of(api: Api) -> Settings:
    app = cast(FastAPI, api.client.app)
    return cast(Settings, app.state.settings)


def process(api: Api) -> int:
    """The processors' step (no Redis here, so no sweeper runs it): the responses handed to monitors."""
    return process_received(session_factory(), settings_of(api))


def exchange_span(n: int, conversation: str, history: list[tuple[str, str]], user: str, bot: str, day: int) -> SpanSpec:
    messages = [("system", "You are Max. The user's dog is Rex.")]
    for u, b in history:
        messages += [("user", u), ("assistant", b)]
    messages.append(("user", user))
    return SpanSpec(n, n, start_s=day * 86_400 + n, attrs=current(messages, bot, conversation))


SCRIPT = [
    ("Hi, my dog is Rex.", "Hello Rex's owner!"),
    ("I'm back.", "Welcome back!"),
    ("What's my dog's name?", "Rex."),
]


def whole_history(conversation: str = "conv-1") -> list[SpanSpec]:
    return [exchange_span(i + 1, conversation, SCRIPT[:i], *SCRIPT[i], day=i) for i in range(len(SCRIPT))]


def items_of(api: Api, monitor_id: str) -> dict[str, dict[str, Any]]:
    monitor = api.client.get(f"/v1/monitors/{monitor_id}", headers=api.as_key("alpha")).json()
    answer = api.client.get(f"/v1/runs/{monitor['run_id']}/items", params={"limit": 100}, headers=api.as_key("alpha"))
    assert answer.status_code == 200, answer.text
    return {i["id"]: i for i in answer.json()["items"]}


def status_of(api: Api, monitor_id: str) -> dict[str, Any]:
    return dict(api.client.get(f"/v1/monitors/{monitor_id}", headers=api.as_key("alpha")).json()["status"])


def test_auth_content_type_and_size_errors_are_in_otlps_shape(otlp_api: Api) -> None:
    monitor = create_monitor(otlp_api)
    spans = whole_history()
    before = counts(otlp_api)
    missing = post(otlp_api, spans, key=None, monitor=monitor)
    assert missing.status_code == 401 and missing.headers["content-type"] == "application/json"
    assert missing.json()["code"] == 16 and "Authorization" in missing.json()["message"]
    read_only = post(otlp_api, spans, key="alpha-read", encoding="protobuf", monitor=monitor)
    assert read_only.status_code == 403 and read_only.headers["content-type"] == "application/x-protobuf"
    assert b"submit" in read_only.content  # a google.rpc.Status: its message names the scope
    wrong_type = otlp_api.client.post(
        PATH, content=b"{}", headers={"Content-Type": "text/plain", **otlp_api.as_key("alpha")}
    )
    assert wrong_type.status_code == 415 and "application/x-protobuf" in wrong_type.json()["message"]
    malformed = otlp_api.client.post(
        PATH, content=b"\xff\xff\xff", headers={"Content-Type": "application/x-protobuf", **otlp_api.as_key("alpha")}
    )
    assert malformed.status_code == 400 and malformed.headers["content-type"] == "application/x-protobuf"
    not_otlp = otlp_api.client.post(PATH, json={"messages": ["hi"]}, headers=otlp_api.as_key("alpha"))
    assert not_otlp.status_code == 400 and "resourceSpans" in not_otlp.json()["message"]
    assert not_otlp.json()["detail"][0]["msg"] == not_otlp.json()["message"]
    big = b'{"resourceSpans": [], "pad": "' + b"x" * 20_000_000 + b'"}'
    too_large = otlp_api.client.post(
        PATH, content=big, headers={"Content-Type": "application/json", **otlp_api.as_key("alpha")}
    )
    assert too_large.status_code == 413 and "DJ_OTLP_MAX_BYTES" in too_large.json()["message"]
    bomb = gzip.compress(big)  # about 20 KB on the wire, 20 MB inflated
    assert len(bomb) < 100_000
    inflated = otlp_api.client.post(
        PATH,
        content=bomb,
        headers={"Content-Type": "application/json", "Content-Encoding": "gzip", **otlp_api.as_key("alpha")},
    )
    assert inflated.status_code == 413 and "decompresses" in inflated.json()["message"]
    assert counts(otlp_api) == before


@pytest.mark.parametrize("encoding,gzipped", [("json", False), ("protobuf", True)])
def test_spans_become_responses_with_their_history_and_a_retry_is_a_duplicate(
    otlp_api: Api, encoding: str, gzipped: bool
) -> None:
    monitor = create_monitor(otlp_api)
    spans = whole_history()
    answer = post(otlp_api, spans, encoding=encoding, gzipped=gzipped, monitor=monitor)
    assert answer.status_code == 200, answer.text
    if encoding == "protobuf":
        assert answer.headers["content-type"] == "application/x-protobuf"
        parsed = ExportTraceServiceResponse.FromString(answer.content)
        assert not parsed.HasField("partial_success")
    else:
        assert answer.json() == {}
    assert responses_of(otlp_api, monitor) == 0  # stored, answered; the processors rebuild and ingest
    assert status_of(otlp_api, monitor)["otlp"]["received"] == 3
    assert process(otlp_api) == 3
    assert status_of(otlp_api, monitor)["otlp"]["received"] == 0
    items = items_of(otlp_api, monitor)
    assert set(items) == {s.response_id for s in spans}
    last = items[spans[2].response_id]
    assert [(t["speaker"], t["text"]) for t in last["dialogue"]] == [
        ("user", "Hi, my dog is Rex."),
        ("bot", "Hello Rex's owner!"),
        ("user", "I'm back."),
        ("bot", "Welcome back!"),
        ("user", "What's my dog's name?"),
    ]
    assert [t["session"] for t in last["dialogue"]] == [1, 1, 2, 2, 3]
    assert last["candidates"] == {"support-bot": "Rex."}
    assert last["memory"] == "You are Max. The user's dog is Rex."
    assert last["meta"]["version"] == "v2.4" and last["meta"]["otlp"]["complete"] is True
    before = counts(otlp_api)
    retry = post(otlp_api, spans, encoding=encoding, gzipped=gzipped, monitor=monitor)
    assert retry.status_code == 200
    assert process(otlp_api) == 0
    assert counts(otlp_api) == before  # nothing stored or judged twice
    status = status_of(otlp_api, monitor)
    assert status["otlp"]["responses"] == 3 and status["otlp"]["duplicates"] == 3


def test_out_of_order_spans_wait_for_their_history_then_are_judged(otlp_api: Api) -> None:
    monitor = create_monitor(otlp_api)
    first, second, third = whole_history()
    assert post(otlp_api, [third], monitor=monitor).status_code == 200
    assert process(otlp_api) == 0
    assert responses_of(otlp_api, monitor) == 0  # its two earlier exchanges have not arrived
    assert status_of(otlp_api, monitor)["otlp"]["waiting"] == 1
    assert post(otlp_api, [first], monitor=monitor).status_code == 200
    assert process(otlp_api) == 1
    assert set(items_of(otlp_api, monitor)) == {first.response_id}
    assert post(otlp_api, [second], monitor=monitor).status_code == 200
    assert process(otlp_api) == 2
    items = items_of(otlp_api, monitor)
    assert set(items) == {first.response_id, second.response_id, third.response_id}
    assert [t["session"] for t in items[third.response_id]["dialogue"]] == [1, 1, 2, 2, 3]
    assert items[third.response_id]["meta"]["otlp"]["complete"] is True


def test_a_response_whose_history_never_arrives_is_judged_after_the_wait_and_says_so(otlp_api: Api) -> None:
    monitor = create_monitor(otlp_api)
    _, second, third = whole_history()
    assert post(otlp_api, [third], monitor=monitor).status_code == 200
    assert process(otlp_api) == 0
    assert release_due(session_factory(), settings_of(otlp_api)) == 0  # not yet: within DJ_OTLP_WAIT
    assert post(otlp_api, [second], monitor=monitor).status_code == 200
    assert process(otlp_api) == 0
    assert responses_of(otlp_api, monitor) == 0
    later = utcnow() + timedelta(seconds=61)
    assert release_due(session_factory(), settings_of(otlp_api), now=later) == 2
    items = items_of(otlp_api, monitor)
    judged = items[third.response_id]
    assert "missing" in judged["meta"]["otlp"]["incomplete"]
    assert [t["text"] for t in judged["dialogue"]][:2] == ["Hi, my dog is Rex.", "Hello Rex's owner!"]
    assert release_due(session_factory(), settings_of(otlp_api), now=later) == 0  # released once
    assert status_of(otlp_api, monitor)["otlp"]["waited"] == 2


def test_partial_success_counts_and_names_what_was_not_used(otlp_api: Api) -> None:
    monitor = create_monitor(otlp_api)
    [first, *_] = whole_history()
    specs = [first, http_span(9, 1), without_content(9, 2)]
    answer = post(otlp_api, specs, monitor=monitor)
    assert answer.status_code == 200
    partial = answer.json()["partialSuccess"]
    assert partial["rejectedSpans"] == "2"
    assert "not LLM calls" in partial["errorMessage"]
    assert "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT" in partial["errorMessage"]
    protobuf = post(otlp_api, specs, encoding="protobuf", monitor=monitor)
    parsed = ExportTraceServiceResponse.FromString(protobuf.content)
    assert parsed.partial_success.rejected_spans == 2
    status = status_of(otlp_api, monitor)
    assert status["otlp"]["no_content"] == 2 and status["otlp"]["not_llm"] == 2
    assert "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT" in status["message"]
    assert process(otlp_api) == 1 and responses_of(otlp_api, monitor) == 1  # the one LLM call, once


def test_spans_without_content_only_are_400_naming_the_switch_and_store_nothing(otlp_api: Api) -> None:
    monitor = create_monitor(otlp_api)
    before = counts(otlp_api)
    answer = post(otlp_api, [without_content(1, 1, "openllmetry")], monitor=monitor)
    assert answer.status_code == 400
    assert "TRACELOOP_TRACE_CONTENT=true" in answer.json()["message"]
    assert counts(otlp_api) == before
    assert status_of(otlp_api, monitor)["otlp"]["no_content"] == 1


def test_monitor_by_attribute_by_default_and_never_another_projects(otlp_api: Api) -> None:
    mine = create_monitor(otlp_api, name="mine")
    theirs = create_monitor(otlp_api, key="beta", name="theirs")
    spans = whole_history()
    before = counts(otlp_api)
    unnamed = post(otlp_api, spans)
    assert unnamed.status_code == 400 and "dialogue_judge.monitor" in unnamed.json()["message"]
    foreign = post(otlp_api, spans, monitor=theirs)
    assert foreign.status_code == 400 and "does not have" in foreign.json()["message"]
    assert counts(otlp_api) == before
    made_default = otlp_api.client.patch(
        f"/v1/monitors/{mine}", json={"otlp_default": True}, headers=otlp_api.as_key("alpha")
    )
    assert made_default.status_code == 200 and made_default.json()["otlp_default"] is True
    assert post(otlp_api, spans).status_code == 200
    assert process(otlp_api) == 3
    assert set(items_of(otlp_api, mine)) == {s.response_id for s in spans}
    other = exchange_span(10, "conv-2", [], "Hello again.", "Hi!", day=0)
    by_name = post(otlp_api, [other], monitor="mine")
    assert by_name.status_code == 200 and process(otlp_api) == 1 and len(items_of(otlp_api, mine)) == 4
    # beta's default is not alpha's: beta's key with no monitor named gets none
    assert post(otlp_api, spans, key="beta").status_code == 400


def test_too_many_spans_is_413_naming_the_limit(otlp_api: Api) -> None:
    monitor = create_monitor(otlp_api)
    limit = settings_of(otlp_api).max_items_per_run
    before = counts(otlp_api)
    spans = [SpanSpec(1, i + 1, name="x") for i in range(limit + 1)]
    answer = post(otlp_api, spans, encoding="protobuf", monitor=monitor)
    assert answer.status_code == 413 and b"DJ_MAX_ITEMS" in answer.content, answer.content[:200]
    assert counts(otlp_api) == before


def test_the_openapi_schema_lists_the_route(otlp_api: Api) -> None:
    schema = otlp_api.client.get("/openapi.json").json()
    assert "application/x-protobuf" in json.dumps(schema["paths"][PATH]["post"]["requestBody"])


def test_hold_always_waits_so_a_late_earlier_session_still_counts(otlp_api: Api) -> None:
    """DJ_OTLP_HOLD=always: an app whose calls carry no history (its earlier sessions kept as memory) cannot say what
    is missing; every response of a conversation waits DJ_OTLP_WAIT, so earlier sessions arriving late still make
    its dialogue."""
    monitor = create_monitor(otlp_api)
    settings = settings_of(otlp_api).model_copy(update={"otlp_hold": "always"})
    last_only = [exchange_span(20 + i, "conv-hold", [], *SCRIPT[i], day=i) for i in range(len(SCRIPT))]
    for spec in (last_only[2], last_only[0], last_only[1]):  # the last session first
        body, _ = encoded(export([spec], {"dialogue_judge.monitor": monitor}), "protobuf")
        with session_factory()() as session:
            receive(session, "alpha", decode(body, "protobuf"), settings)
            session.commit()
        assert process_received(session_factory(), settings) == 0
    assert responses_of(otlp_api, monitor) == 0  # all wait, complete or not
    assert release_due(session_factory(), settings, now=utcnow() + timedelta(seconds=61)) == 3
    items = items_of(otlp_api, monitor)
    last = items[last_only[2].response_id]
    assert [(t["text"], t["session"]) for t in last["dialogue"]] == [
        ("Hi, my dog is Rex.", 1),
        ("Hello Rex's owner!", 1),
        ("I'm back.", 2),
        ("Welcome back!", 2),
        ("What's my dog's name?", 3),
    ]
    assert last["meta"]["otlp"]["complete"] is True


def test_history_is_purged_by_when_it_was_received_not_by_the_spans_own_clock(otlp_api: Api) -> None:
    """Spans stamped long ago (a skewed clock, a replayed export) stay history DJ_OTLP_HISTORY_DAYS after they
    arrived: a sweep in between must not purge the earlier turns a waiting response needs."""
    monitor = create_monitor(otlp_api)
    first, second, third = whole_history("conv-old")  # stamped in 2025, more than DJ_OTLP_HISTORY_DAYS ago
    assert post(otlp_api, [first, third], monitor=monitor).status_code == 200
    assert process(otlp_api) == 1
    assert release_due(session_factory(), settings_of(otlp_api)) == 0  # a sweep: nothing due, history kept
    assert post(otlp_api, [second], monitor=monitor).status_code == 200
    assert process(otlp_api) == 2
    items = items_of(otlp_api, monitor)
    assert len(items) == 3 and items[third.response_id]["meta"]["otlp"]["complete"] is True
    later = utcnow() + timedelta(days=settings_of(otlp_api).otlp_history_days + 1)
    release_due(session_factory(), settings_of(otlp_api), now=later)
    engine = create_engine(otlp_api.database_url)
    with engine.connect() as connection:
        left = connection.execute(text("SELECT COUNT(*) FROM otlp_spans WHERE monitor_id = :m"), {"m": monitor})
        assert left.scalar_one() == 0  # purged once the history window after their receipt is over
    engine.dispose()


def test_a_response_refused_at_release_is_counted_rejected_and_named(otlp_api: Api) -> None:
    """A span stored under one limit and released under a lower one (DJ_MAX_CHARS_PER_TURN changed between): the
    response is not ingested and the monitor's status counts it rejected and says why (it was dropped silently)."""
    monitor = create_monitor(otlp_api)
    long_span = exchange_span(1, "conv-long", [], "x" * 300, "Sure.", day=0)
    assert post(otlp_api, [long_span], monitor=monitor).status_code == 200
    before = status_of(otlp_api, monitor)["otlp"]
    lower = settings_of(otlp_api).model_copy(update={"max_chars_per_turn": 100})
    assert process_received(session_factory(), lower) == 0
    assert responses_of(otlp_api, monitor) == 0
    status = status_of(otlp_api, monitor)
    assert status["otlp"]["rejected"] == before["rejected"] + 1
    assert f"{before['rejected'] + 1} spans rejected today" in status["otlp"]["message"]
    assert (
        "cannot become a response" in status["otlp"]["message"] and "DJ_MAX_CHARS_PER_TURN" in status["otlp"]["message"]
    )
    assert process(otlp_api) == 0 and responses_of(otlp_api, monitor) == 0  # released once: not handed over again


def test_input_messages_parsed_at_receipt_are_stored_parsed_not_as_the_spans_text(otlp_api: Api) -> None:
    """Review r38c: messages over ``raw_within``'s cheap bound (an image sent inline, a long history) are parsed in
    the request to check them, but the span's whole JSON text was stored anyway (``raw_messages``): a 300 kB base64
    image became 300 kB of every span's stored row, parsed again at every processing step of its conversation. What
    the request parsed is stored parsed, as before the change (``[image]``)."""
    monitor = create_monitor(otlp_api)
    spec = exchange_span(9001, "conv-image", [], "look", "A dog.", day=0)
    inputs = [
        {
            "role": "user",
            "parts": [
                {"type": "text", "content": "look"},
                {"type": "blob", "modality": "image", "content": "A" * 300_000},
            ],
        }
    ]
    spec.attrs["gen_ai.input.messages"] = json.dumps(inputs)
    assert post(otlp_api, [spec], monitor=monitor).status_code == 200
    engine = create_engine(otlp_api.database_url)
    with engine.connect() as connection:
        stored = connection.execute(
            text("SELECT call FROM otlp_spans WHERE monitor_id = :m AND response_id = :r"),
            {"m": monitor, "r": f"otlp-{spec.trace_id.hex()}-{spec.span_id.hex()}"},
        ).scalar_one()
    engine.dispose()
    call = stored if isinstance(stored, dict) else json.loads(stored)
    assert "raw_messages" not in call and len(json.dumps(call)) < 10_000
    assert call["messages"][-1] == {"role": "user", "text": "look\n[image]"}
    assert process(otlp_api) == 1
    item = items_of(otlp_api, monitor)[f"otlp-{spec.trace_id.hex()}-{spec.span_id.hex()}"]
    assert item["dialogue"][-1]["text"] == "look\n[image]"


def test_a_response_refused_at_release_is_not_counted_as_judged_after_waiting(otlp_api: Api) -> None:
    """Review r38c: ``waited`` counts the responses judged with earlier turns missing; a response refused at its
    release (counted ``rejected``) was counted ``waited`` as well, though nothing was judged."""
    monitor = create_monitor(otlp_api)
    third = exchange_span(
        8003, "conv-refused-late", [("Hi.", "Hello!"), ("Back.", "Welcome back!")], "x" * 300, "Ok.", 2
    )
    assert post(otlp_api, [third], monitor=monitor).status_code == 200
    lower = settings_of(otlp_api).model_copy(update={"max_chars_per_turn": 100})
    assert process_received(session_factory(), lower) == 0  # waits for its earlier turns
    before = status_of(otlp_api, monitor)["otlp"]
    later = utcnow() + timedelta(seconds=61)
    assert release_due(session_factory(), lower, now=later) == 0
    after = status_of(otlp_api, monitor)["otlp"]
    assert after["rejected"] == before["rejected"] + 1
    assert after["waited"] == before["waited"]  # refused, not judged
    assert responses_of(otlp_api, monitor) == 0
