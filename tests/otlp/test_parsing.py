"""Spans read in each convention, from protobuf and OTLP/JSON, gzip or not (judge_api.otlp.decode + genai): the
same conversation in every convention gives the same messages, output, conversation id and slice keys."""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from typing import Any

import pytest

from judge_api.otlp.decode import OtlpError, decode, encoding_of, inflate
from judge_api.otlp.genai import LlmCall, Message, ReadOptions, Skip, read_span

from .spans import (
    Messages,
    SpanSpec,
    current,
    current_event,
    encoded,
    export,
    http_span,
    older_events,
    openinference,
    openllmetry,
    without_content,
)

HISTORY: Messages = [
    ("system", "You are Max, a barista. The user's dog is called Rex."),
    ("user", "Hi, I'm back!"),
    ("assistant", "Welcome back! How is Rex?"),
    ("user", "He is fine. Do you remember his breed?"),
]
OUTPUT = "You told me Rex is a beagle."


def _with_conversation(attrs: dict[str, Any]) -> dict[str, Any]:
    return {**attrs, "gen_ai.conversation.id": "conv-7"}


CONVENTIONS: dict[str, tuple[str, Callable[[], SpanSpec]]] = {
    "gen_ai attributes": ("gen_ai", lambda: SpanSpec(1, 1, attrs=current(HISTORY, OUTPUT, "conv-7"))),
    "gen_ai details event": (
        "gen_ai",
        lambda: SpanSpec(1, 1, attrs=current([], "", "conv-7", on_event=True), events=current_event(HISTORY, OUTPUT)),
    ),
    "gen_ai older events": (
        "gen_ai_events",
        lambda: SpanSpec(
            1,
            1,
            attrs={"gen_ai.system": "openai", "gen_ai.conversation.id": "conv-7"},
            events=older_events(HISTORY, OUTPUT),
        ),
    ),
    "openllmetry": ("openllmetry", lambda: SpanSpec(1, 1, attrs=_with_conversation(openllmetry(HISTORY, OUTPUT)))),
    "openinference": ("openinference", lambda: SpanSpec(1, 1, attrs=openinference(HISTORY, OUTPUT, session="conv-7"))),
}
ENCODINGS = [("protobuf", False), ("protobuf", True), ("json", False), ("json", True)]


def read_all(spec: SpanSpec, encoding: str, gzipped: bool, resource: dict[str, Any] | None = None) -> list[Any]:
    body, headers = encoded(export([spec], resource), encoding, gzipped)
    raw = inflate(body, headers.get("Content-Encoding"), 10_000_000)
    return [read_span(s, ReadOptions()) for s in decode(raw, encoding_of(headers["Content-Type"]))]


@pytest.mark.parametrize("encoding,gzipped", ENCODINGS, ids=[f"{e}{'+gzip' if g else ''}" for e, g in ENCODINGS])
@pytest.mark.parametrize("name", list(CONVENTIONS))
def test_each_convention_reads_the_same_call(name: str, encoding: str, gzipped: bool) -> None:
    convention, build = CONVENTIONS[name]
    [call] = read_all(build(), encoding, gzipped, {"dialogue_judge.monitor": "mon_x"})
    assert isinstance(call, LlmCall), call
    assert call.convention == convention
    assert call.messages == [Message(r, t) for r, t in HISTORY]
    assert call.instructions == HISTORY[0][1]
    assert call.output == OUTPUT
    assert call.conversation_id == "conv-7"
    assert (call.system, call.version, call.monitor) == ("support-bot", "v2.4", "mon_x")
    assert call.response_id == f"otlp-{(1).to_bytes(16, 'big').hex()}-{(1).to_bytes(8, 'big').hex()}"
    assert call.started_ns > 0


def test_content_arrays_and_structured_values_are_read() -> None:
    """OpenLLMetry's newer content (a JSON list of OpenAI parts), OpenInference's contents list, and gen_ai messages
    sent as structured AnyValues rather than JSON strings."""
    parts = json.dumps([{"type": "text", "text": "Part one."}, {"type": "image_url", "image_url": {}}])
    llmetry = SpanSpec(1, 1, attrs={**openllmetry([("user", "x")], "ok"), "gen_ai.prompt.0.content": parts})
    oi_attrs = openinference([], "fine")
    oi_attrs["llm.input_messages.0.message.role"] = "user"
    oi_attrs["llm.input_messages.0.message.contents.0.message_content.type"] = "text"
    oi_attrs["llm.input_messages.0.message.contents.0.message_content.text"] = "From contents."
    structured = SpanSpec(
        1,
        3,
        attrs={
            "gen_ai.operation.name": "chat",
            "gen_ai.input.messages": [{"role": "user", "parts": [{"type": "text", "content": "Structured."}]}],
            "gen_ai.output.messages": [{"role": "assistant", "parts": [{"type": "text", "content": "Yes."}]}],
        },
    )
    for spec, first, output in (
        (llmetry, "Part one.\n[image]", "ok"),  # the picture the user sent is a placeholder in the turn
        (SpanSpec(1, 2, attrs=oi_attrs), "From contents.", "fine"),
        (structured, "Structured.", "Yes."),
    ):
        for encoding in ("protobuf", "json"):
            [call] = read_all(spec, encoding, False)
            assert isinstance(call, LlmCall), call
            assert call.messages[0] == Message("user", first)
            assert call.output == output


SKIPS = [
    ("http span", http_span(1, 1), "not_llm", None),
    ("embeddings", SpanSpec(1, 2, attrs={"gen_ai.operation.name": "embeddings"}), "not_llm", None),
    ("openinference chain", SpanSpec(1, 3, attrs={"openinference.span.kind": "CHAIN"}), "not_llm", None),
    (
        "gen_ai without content",
        without_content(1, 4),
        "no_content",
        "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT",
    ),
    ("openllmetry without content", without_content(1, 5, "openllmetry"), "no_content", "TRACELOOP_TRACE_CONTENT"),
    (
        "openinference without content",
        without_content(1, 6, "openinference"),
        "no_content",
        "OPENINFERENCE_HIDE_INPUTS",
    ),
]


@pytest.mark.parametrize("encoding", ["protobuf", "json"])
@pytest.mark.parametrize("name,spec,kind,switch", SKIPS, ids=[s[0] for s in SKIPS])
def test_spans_not_judged_say_why(name: str, spec: SpanSpec, kind: str, switch: str | None, encoding: str) -> None:
    [skip] = read_all(spec, encoding, False)
    assert isinstance(skip, Skip)
    assert skip.kind == kind
    if switch:
        assert switch in skip.message


def test_configured_attributes_give_system_version_persona_memory_and_conversation() -> None:
    attrs = {
        **current([("user", "Hi")], "Hello"),
        "app.bot": "max",
        "app.release": "r42",
        "app.persona": json.dumps(["I am Max.", "I work at a cafe."]),
        "app.memory": "The user has a dog called Rex.",
        "app.thread": "thread-9",
    }
    options = ReadOptions("app.bot", "app.release", "app.thread", "app.persona", "app.memory")
    body, _ = encoded(export([SpanSpec(1, 1, attrs=attrs)]), "json")
    [call] = [read_span(s, options) for s in decode(body, "json")]
    assert isinstance(call, LlmCall)
    assert (call.system, call.version, call.conversation_id) == ("max", "r42", "thread-9")
    assert call.persona == ["I am Max.", "I work at a cafe."]
    assert call.memory == "The user has a dog called Rex."


def test_otlp_json_as_the_specification_shows_it() -> None:
    """The trace example of the OTLP specification (opentelemetry-proto examples/trace.json), with GenAI
    attributes: hex ids, int64 as strings, an intValue as a string, arrays of values."""
    example = {
        "resourceSpans": [
            {
                "resource": {
                    "attributes": [
                        {"key": "service.name", "value": {"stringValue": "my.service"}},
                        {"key": "dialogue_judge.monitor", "value": {"stringValue": "mon_1"}},
                    ]
                },
                "scopeSpans": [
                    {
                        "scope": {"name": "my.library", "version": "1.0.0", "attributes": []},
                        "spans": [
                            {
                                "traceId": "5B8EFFF798038103D269B633813FC60C",
                                "spanId": "EEE19B7EC3C1B174",
                                "parentSpanId": "EEE19B7EC3C1B173",
                                "name": "I'm a server span",
                                "startTimeUnixNano": "1544712660000000000",
                                "endTimeUnixNano": "1544712661000000000",
                                "kind": 2,
                                "attributes": [
                                    {"key": "my.span.attr", "value": {"stringValue": "some value"}},
                                    {"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
                                    {"key": "gen_ai.usage.input_tokens", "value": {"intValue": "42"}},
                                    {
                                        "key": "gen_ai.response.finish_reasons",
                                        "value": {"arrayValue": {"values": [{"stringValue": "stop"}]}},
                                    },
                                    {
                                        "key": "gen_ai.input.messages",
                                        "value": {
                                            "stringValue": '[{"role":"user","parts":[{"type":"text","content":"Hi"}]}]'
                                        },
                                    },
                                    {
                                        "key": "gen_ai.output.messages",
                                        "value": {
                                            "stringValue": json.dumps(
                                                [
                                                    {
                                                        "role": "assistant",
                                                        "parts": [{"type": "text", "content": "Hello!"}],
                                                    }
                                                ]
                                            )
                                        },
                                    },
                                ],
                            }
                        ],
                    }
                ],
            }
        ]
    }
    [span] = decode(json.dumps(example).encode(), "json")
    assert span.trace_id == "5b8efff798038103d269b633813fc60c" and span.span_id == "eee19b7ec3c1b174"
    assert span.start_ns == 1544712660000000000
    assert span.attributes["gen_ai.usage.input_tokens"] == 42
    assert span.attributes["gen_ai.response.finish_reasons"] == ["stop"]
    call = read_span(span, ReadOptions())
    assert isinstance(call, LlmCall)
    assert call.output == "Hello!" and call.messages == [Message("user", "Hi")] and call.monitor == "mon_1"


BAD = [
    ("protobuf", b"\xff\xff\xff\xff", 400),
    ("json", b"{not json", 400),
    ("json", b"[1, 2]", 400),
    ("json", b'{"spans": []}', 400),
    ("json", b'{"resourceSpans": {"a": 1}}', 400),
    ("json", b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"startTimeUnixNano": "soon"}]}]}]}', 400),
]


@pytest.mark.parametrize("encoding,body,status", BAD)
def test_bodies_that_do_not_decode_are_400(encoding: str, body: bytes, status: int) -> None:
    with pytest.raises(OtlpError) as caught:
        decode(body, encoding)  # type: ignore[arg-type]
    assert caught.value.status == status and caught.value.message


def test_content_types_encodings_and_the_decompressed_size() -> None:
    assert encoding_of("application/x-protobuf") == "protobuf"
    assert encoding_of("application/json; charset=utf-8") == "json"
    for bad in ("text/plain", None, "application/grpc"):
        with pytest.raises(OtlpError) as caught:
            encoding_of(bad)
        assert caught.value.status == 415
    with pytest.raises(OtlpError) as caught:
        inflate(b"x", "br", 100)
    assert caught.value.status == 415
    bomb = gzip.compress(b"\x00" * 5_000_000)  # 5 MB of zeros in about 5 KB
    assert len(bomb) < 10_000
    with pytest.raises(OtlpError) as caught:
        inflate(bomb, "gzip", 1_000_000)
    assert caught.value.status == 413 and "DJ_OTLP_MAX_BYTES" in caught.value.message
    with pytest.raises(OtlpError) as caught:
        inflate(b"\x1f\x8b not gzip", "gzip", 1_000_000)
    assert caught.value.status == 400
    assert inflate(gzip.compress(b"abc"), "gzip", 3) == b"abc"
