"""OTLP exports built with the real ``opentelemetry-proto`` messages, in each convention the receiver reads, and
encoded as an exporter sends them: protobuf, or OTLP/JSON (the protobuf JSON mapping with hex trace and span ids, as
the specification's examples show), gzip or not."""

from __future__ import annotations

import base64
import gzip
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from google.protobuf.json_format import MessageToDict
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, InstrumentationScope, KeyValue, KeyValueList
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

BASE_NS = 1_764_000_000_000_000_000  # 2025-11-24


def any_value(value: Any) -> AnyValue:
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    if isinstance(value, str):
        return AnyValue(string_value=value)
    if isinstance(value, list | tuple):
        return AnyValue(array_value=ArrayValue(values=[any_value(v) for v in value]))
    if isinstance(value, dict):
        return AnyValue(
            kvlist_value=KeyValueList(values=[KeyValue(key=k, value=any_value(v)) for k, v in value.items()])
        )
    raise TypeError(value)


def attributes(values: dict[str, Any]) -> list[KeyValue]:
    return [KeyValue(key=k, value=any_value(v)) for k, v in values.items()]


@dataclass
class SpanSpec:
    """One span: its ids (made from numbers), start time (seconds after BASE_NS), attributes and events."""

    trace: int
    span: int
    start_s: float = 0.0
    name: str = "chat gpt-4o-mini"
    attrs: dict[str, Any] = field(default_factory=dict)
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    @property
    def trace_id(self) -> bytes:
        return self.trace.to_bytes(16, "big")

    @property
    def span_id(self) -> bytes:
        return self.span.to_bytes(8, "big")

    @property
    def response_id(self) -> str:
        return f"otlp-{self.trace_id.hex()}-{self.span_id.hex()}"

    def proto(self) -> Span:
        start = BASE_NS + int(self.start_s * 1e9)
        return Span(
            trace_id=self.trace_id,
            span_id=self.span_id,
            name=self.name,
            kind=Span.SPAN_KIND_CLIENT,
            start_time_unix_nano=start,
            end_time_unix_nano=start + 800_000_000,
            attributes=attributes(self.attrs),
            events=[Span.Event(name=n, time_unix_nano=start + 1, attributes=attributes(a)) for n, a in self.events],
        )


def export(specs: Sequence[SpanSpec], resource: dict[str, Any] | None = None) -> ExportTraceServiceRequest:
    resource = {"service.name": "support-bot", "service.version": "v2.4", **(resource or {})}
    return ExportTraceServiceRequest(
        resource_spans=[
            ResourceSpans(
                resource=Resource(attributes=attributes(resource)),
                scope_spans=[
                    ScopeSpans(scope=InstrumentationScope(name="tests.otlp"), spans=[s.proto() for s in specs])
                ],
            )
        ]
    )


def to_json(request: ExportTraceServiceRequest) -> dict[str, Any]:
    """OTLP/JSON: protobuf's JSON mapping (lowerCamelCase, 64-bit integers as strings) with the ids as hex."""
    data = MessageToDict(request)
    for resource_spans in data.get("resourceSpans", []):
        for scope_spans in resource_spans.get("scopeSpans", []):
            for span in scope_spans.get("spans", []):
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = base64.b64decode(span[key]).hex()
    return data


def encoded(request: ExportTraceServiceRequest, encoding: str, gzipped: bool = False) -> tuple[bytes, dict[str, str]]:
    """The body and headers an exporter sends."""
    if encoding == "protobuf":
        body, content_type = request.SerializeToString(), "application/x-protobuf"
    else:
        body, content_type = json.dumps(to_json(request)).encode(), "application/json"
    headers = {"Content-Type": content_type}
    if gzipped:
        body = gzip.compress(body)
        headers["Content-Encoding"] = "gzip"
    return body, headers


# -- the conventions ---------------------------------------------------------------------------------------------

Messages = list[tuple[str, str]]  # (role, text): system, user, assistant


def current(messages: Messages, output: str, conversation: str | None = None, on_event: bool = False) -> dict[str, Any]:
    """OpenTelemetry GenAI, current: JSON-string attributes of messages with parts (or the details event)."""
    system = [{"type": "text", "content": t} for r, t in messages if r == "system"]
    inputs = [{"role": r, "parts": [{"type": "text", "content": t}]} for r, t in messages if r != "system"]
    outputs = [{"role": "assistant", "parts": [{"type": "text", "content": output}], "finish_reason": "stop"}]
    content = {"gen_ai.input.messages": json.dumps(inputs), "gen_ai.output.messages": json.dumps(outputs)}
    if system:
        content["gen_ai.system_instructions"] = json.dumps(system)
    attrs: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-4o-mini",
    }
    if conversation:
        attrs["gen_ai.conversation.id"] = conversation
    if not on_event:
        attrs.update(content)
    return attrs


def current_event(messages: Messages, output: str) -> list[tuple[str, dict[str, Any]]]:
    attrs = current(messages, output)
    return [
        (
            "gen_ai.client.inference.operation.details",
            {k: v for k, v in attrs.items() if k.endswith("messages") or k.endswith("instructions")},
        )
    ]


def older_events(messages: Messages, output: str) -> list[tuple[str, dict[str, Any]]]:
    """The older event form: one event per message, the choice last (bodies as the instrumentations put them)."""
    names = {"system": "gen_ai.system.message", "user": "gen_ai.user.message", "assistant": "gen_ai.assistant.message"}
    events: list[tuple[str, dict[str, Any]]] = [
        (names[r], {"gen_ai.system": "openai", "content": t}) for r, t in messages
    ]
    choice = {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": output}}
    events.append(("gen_ai.choice", {"gen_ai.system": "openai", "gen_ai.event.content": json.dumps(choice)}))
    return events


def openllmetry(messages: Messages, output: str) -> dict[str, Any]:
    attrs: dict[str, Any] = {
        "llm.request.type": "chat",
        "gen_ai.system": "openai",
        "gen_ai.request.model": "gpt-4o-mini",
    }
    for n, (role, text) in enumerate(messages):
        attrs[f"gen_ai.prompt.{n}.role"] = role
        attrs[f"gen_ai.prompt.{n}.content"] = text
    attrs["gen_ai.completion.0.role"] = "assistant"
    attrs["gen_ai.completion.0.content"] = output
    attrs["gen_ai.completion.0.finish_reason"] = "stop"
    return attrs


def openinference(messages: Messages, output: str, session: str | None = None) -> dict[str, Any]:
    attrs: dict[str, Any] = {
        "openinference.span.kind": "LLM",
        "llm.model_name": "gpt-4o-mini",
        "llm.provider": "openai",
    }
    for n, (role, text) in enumerate(messages):
        attrs[f"llm.input_messages.{n}.message.role"] = role
        attrs[f"llm.input_messages.{n}.message.content"] = text
    attrs["llm.output_messages.0.message.role"] = "assistant"
    attrs["llm.output_messages.0.message.content"] = output
    if session:
        attrs["session.id"] = session
    return attrs


def http_span(trace: int, span: int) -> SpanSpec:
    return SpanSpec(trace, span, name="GET /chat", attrs={"http.request.method": "GET", "url.path": "/chat"})


def without_content(trace: int, span: int, kind: str = "gen_ai") -> SpanSpec:
    attrs: dict[str, Any] = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o-mini"}
    if kind == "openllmetry":
        attrs = {"llm.request.type": "chat", "gen_ai.system": "openai"}
    if kind == "openinference":
        attrs = {"openinference.span.kind": "LLM", "llm.model_name": "gpt-4o-mini"}
    return SpanSpec(trace, span, attrs=attrs)
