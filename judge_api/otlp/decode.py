"""An OTLP/HTTP traces export read into plain span records (docs/monitoring.md#opentelemetry-traces).

The body is protobuf (``application/x-protobuf``, an ``ExportTraceServiceRequest`` of the ``opentelemetry-proto``
package) or OTLP/JSON (``application/json``: the protobuf's JSON mapping with lowerCamelCase field names, trace and
span ids as hex strings, 64-bit integers as strings or numbers), gzip-compressed or not. Decompression stops at the
size limit (a gzip bomb is a 413, never a full inflate). Errors are ``OtlpError`` with the HTTP status OTLP's
specification asks for: 415 for a content type or encoding it does not define, 413 for a body over the limit, 400 for
one that does not decode.
"""

from __future__ import annotations

import base64
import binascii
import json
import zlib
from dataclasses import dataclass, field
from typing import Any, Literal

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from judge_api.guards import JsonTooDeep, loads_json

Encoding = Literal["protobuf", "json"]
PROTOBUF_TYPES = ("application/x-protobuf", "application/protobuf")
JSON_TYPES = ("application/json",)
MAX_VALUE_DEPTH = 32  # arrays and key-value lists inside an attribute value


class OtlpError(Exception):
    """The export cannot be used at all: nothing of it is stored."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class SpanEvent:
    name: str
    time_ns: int
    attributes: dict[str, Any]


@dataclass(frozen=True)
class SpanRecord:
    """One span with its resource's attributes: ids as lowercase hex ('' when missing or malformed)."""

    trace_id: str
    span_id: str
    name: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    resource: dict[str, Any]
    scope: str = ""
    events: list[SpanEvent] = field(default_factory=list)


def encoding_of(content_type: str | None) -> Encoding:
    """The body's encoding by its Content-Type, or 415."""
    media = (content_type or "").split(";", 1)[0].strip().lower()
    if media in PROTOBUF_TYPES:
        return "protobuf"
    if media in JSON_TYPES:
        return "json"
    raise OtlpError(
        415,
        f"unsupported Content-Type {content_type or '(none)'!r}: send application/x-protobuf or application/json "
        "(OTLP/HTTP)",
    )


def inflate(body: bytes, content_encoding: str | None, limit: int) -> bytes:
    """The body decompressed (gzip, or none), at most ``limit`` bytes: 413 beyond, 400 for a broken gzip stream,
    415 for an encoding OTLP does not define."""
    coding = (content_encoding or "").strip().lower()
    if coding in ("", "identity"):
        if len(body) > limit:
            raise OtlpError(413, f"export of {len(body)} bytes exceeds the limit of {limit} bytes (DJ_OTLP_MAX_BYTES)")
        return body
    if coding != "gzip":
        raise OtlpError(415, f"unsupported Content-Encoding {content_encoding!r}: send gzip or none (OTLP/HTTP)")
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        out = inflater.decompress(body, limit + 1)
    except zlib.error as exc:
        raise OtlpError(400, f"the gzip body does not decompress: {exc}") from None
    if len(out) > limit or inflater.unconsumed_tail:
        raise OtlpError(
            413,
            f"export decompresses to more than the limit of {limit} bytes (DJ_OTLP_MAX_BYTES): send smaller batches",
        )
    if not inflater.eof:
        raise OtlpError(400, "the gzip body is truncated")
    return out


def decode(body: bytes, encoding: Encoding) -> list[SpanRecord]:
    """The export's spans, or 400 naming what does not decode."""
    if encoding == "protobuf":
        return _from_protobuf(body)
    return _from_json(body)


# -- protobuf ----------------------------------------------------------------------------------------------------


def _from_protobuf(body: bytes) -> list[SpanRecord]:
    request = ExportTraceServiceRequest()
    try:
        request.ParseFromString(body)
    except (DecodeError, ValueError, RecursionError) as exc:
        raise OtlpError(400, f"the body is not an OTLP ExportTraceServiceRequest (protobuf): {exc}") from None
    spans: list[SpanRecord] = []
    for resource_spans in request.resource_spans:
        resource = _pb_attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            scope = scope_spans.scope.name
            for span in scope_spans.spans:
                spans.append(
                    SpanRecord(
                        trace_id=_pb_id(span.trace_id, 16),
                        span_id=_pb_id(span.span_id, 8),
                        name=span.name,
                        start_ns=int(span.start_time_unix_nano),
                        end_ns=int(span.end_time_unix_nano),
                        attributes=_pb_attributes(span.attributes),
                        resource=resource,
                        scope=scope,
                        events=[
                            SpanEvent(e.name, int(e.time_unix_nano), _pb_attributes(e.attributes)) for e in span.events
                        ],
                    )
                )
    return spans


def _pb_id(raw: bytes, size: int) -> str:
    return raw.hex() if len(raw) == size and any(raw) else ""


def _pb_attributes(pairs: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pair in pairs:
        assert isinstance(pair, KeyValue)
        out[pair.key] = _pb_value(pair.value, 0)
    return out


def _pb_value(value: AnyValue, depth: int) -> Any:
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind in ("array_value", "kvlist_value") and depth >= MAX_VALUE_DEPTH:
        raise OtlpError(400, f"an attribute value nests deeper than {MAX_VALUE_DEPTH} levels")
    if kind == "array_value":
        return [_pb_value(v, depth + 1) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _pb_value(kv.value, depth + 1) for kv in value.kvlist_value.values}
    return getattr(value, kind)


# -- OTLP/JSON ---------------------------------------------------------------------------------------------------


def _get(obj: dict[str, Any], camel: str, snake: str) -> Any:
    """A field by its lowerCamelCase name (OTLP/JSON), or its proto name (protobuf's JSON parsers accept both)."""
    return obj[camel] if camel in obj else obj.get(snake)


def _from_json(body: bytes) -> list[SpanRecord]:
    try:
        data = loads_json(body.decode("utf-8"))
    except UnicodeDecodeError:
        raise OtlpError(400, "the JSON body is not UTF-8") from None
    except json.JSONDecodeError as exc:
        raise OtlpError(400, f"the body is not JSON: {exc.msg} (line {exc.lineno})") from None
    except JsonTooDeep as exc:
        raise OtlpError(400, str(exc)) from None
    if not isinstance(data, dict):
        raise OtlpError(400, "not an OTLP ExportTraceServiceRequest: the JSON body must be an object")
    resource_spans = _get(data, "resourceSpans", "resource_spans")
    if resource_spans is None:
        if data:
            raise OtlpError(
                400,
                "not an OTLP ExportTraceServiceRequest: no 'resourceSpans' (fields: " + ", ".join(list(data)[:5]) + ")",
            )
        return []
    spans: list[SpanRecord] = []
    for r_index, entry in enumerate(_list(resource_spans, "resourceSpans")):
        where = f"resourceSpans[{r_index}]"
        entry = _object(entry, where)
        resource_obj = _object(entry.get("resource") or {}, f"{where}.resource")
        resource = _json_attributes(resource_obj.get("attributes"), f"{where}.resource.attributes")
        scopes = _get(entry, "scopeSpans", "scope_spans")
        if scopes is None:  # the name before OTLP 0.15
            scopes = _get(entry, "instrumentationLibrarySpans", "instrumentation_library_spans")
        for s_index, scope_spans in enumerate(_list(scopes or [], f"{where}.scopeSpans")):
            s_where = f"{where}.scopeSpans[{s_index}]"
            scope_spans = _object(scope_spans, s_where)
            scope_obj = _object(scope_spans.get("scope") or scope_spans.get("instrumentationLibrary") or {}, s_where)
            scope = str(scope_obj.get("name") or "")
            for index, span in enumerate(_list(scope_spans.get("spans") or [], f"{s_where}.spans")):
                spans.append(_json_span(_object(span, f"{s_where}.spans[{index}]"), resource, scope, s_where, index))
    return spans


def _json_span(span: dict[str, Any], resource: dict[str, Any], scope: str, where: str, index: int) -> SpanRecord:
    at = f"{where}.spans[{index}]"
    events = []
    for e_index, event in enumerate(_list(span.get("events") or [], f"{at}.events")):
        event = _object(event, f"{at}.events[{e_index}]")
        events.append(
            SpanEvent(
                str(event.get("name") or ""),
                _int(_get(event, "timeUnixNano", "time_unix_nano"), f"{at}.events[{e_index}].timeUnixNano"),
                _json_attributes(event.get("attributes"), f"{at}.events[{e_index}].attributes"),
            )
        )
    return SpanRecord(
        trace_id=_hex_id(_get(span, "traceId", "trace_id"), 16),
        span_id=_hex_id(_get(span, "spanId", "span_id"), 8),
        name=str(span.get("name") or ""),
        start_ns=_int(_get(span, "startTimeUnixNano", "start_time_unix_nano"), f"{at}.startTimeUnixNano"),
        end_ns=_int(_get(span, "endTimeUnixNano", "end_time_unix_nano"), f"{at}.endTimeUnixNano"),
        attributes=_json_attributes(span.get("attributes"), f"{at}.attributes"),
        resource=resource,
        scope=scope,
        events=events,
    )


def _list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise OtlpError(400, f"not an OTLP ExportTraceServiceRequest: {where} must be a list")
    return value


def _object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise OtlpError(400, f"not an OTLP ExportTraceServiceRequest: {where} must be an object")
    return value


def _int(value: Any, where: str) -> int:
    """A uint64 / int64 field: a decimal string or a number (OTLP/JSON allows both); missing is 0."""
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int | str | float):
        raise OtlpError(400, f"{where} must be an integer (a decimal string or a number)")
    try:
        number = int(value)
    except (ValueError, OverflowError):  # OverflowError: 1e400 is a JSON number Python reads as infinity
        raise OtlpError(
            400, f"{where} must be an integer (a decimal string or a number), not {_short(value)}"
        ) from None
    if not 0 <= number < 2**64:
        raise OtlpError(400, f"{where} is out of the range of an unsigned 64-bit integer")
    return number


def _short(value: Any) -> str:
    """A value as an error message quotes it: at most 40 characters of it."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _hex_id(value: Any, size: int) -> str:
    """A trace or span id of OTLP/JSON: hex (case-insensitive); '' when missing or malformed (the span is
    rejected, not the export)."""
    if not isinstance(value, str) or len(value) != 2 * size:
        return ""
    try:
        raw = bytes.fromhex(value)
    except ValueError:
        return ""
    return raw.hex() if any(raw) else ""


def _json_attributes(pairs: Any, where: str) -> dict[str, Any]:
    if pairs is None:
        return {}
    out: dict[str, Any] = {}
    for index, pair in enumerate(_list(pairs, where)):
        pair = _object(pair, f"{where}[{index}]")
        key = pair.get("key")
        if not isinstance(key, str):
            raise OtlpError(400, f"{where}[{index}].key must be a string")
        out[key] = _json_value(pair.get("value"), f"{where}[{index}].value", 0)
    return out


def _json_value(value: Any, where: str, depth: int) -> Any:
    if value is None:
        return None
    value = _object(value, where)
    if depth >= MAX_VALUE_DEPTH:
        raise OtlpError(400, f"{where} nests deeper than {MAX_VALUE_DEPTH} levels")
    if "stringValue" in value or "string_value" in value:
        text = _get(value, "stringValue", "string_value")
        if not isinstance(text, str):
            raise OtlpError(400, f"{where}.stringValue must be a string")
        return text
    if "boolValue" in value or "bool_value" in value:
        flag = _get(value, "boolValue", "bool_value")
        if not isinstance(flag, bool):  # bool("false") would be True
            raise OtlpError(400, f"{where}.boolValue must be true or false")
        return flag
    if "intValue" in value or "int_value" in value:
        return _signed(_get(value, "intValue", "int_value"), f"{where}.intValue")
    if "doubleValue" in value or "double_value" in value:
        number = _get(value, "doubleValue", "double_value")
        try:
            return float(number)
        except (TypeError, ValueError):
            raise OtlpError(400, f"{where}.doubleValue must be a number") from None
    if "arrayValue" in value or "array_value" in value:
        array = _object(_get(value, "arrayValue", "array_value") or {}, f"{where}.arrayValue")
        return [
            _json_value(v, f"{where}.arrayValue.values[{i}]", depth + 1)
            for i, v in enumerate(array.get("values") or [])
        ]
    if "kvlistValue" in value or "kvlist_value" in value:
        kvlist = _object(_get(value, "kvlistValue", "kvlist_value") or {}, f"{where}.kvlistValue")
        return {k: v for k, v in _json_kvlist(kvlist.get("values"), f"{where}.kvlistValue.values", depth + 1)}
    if "bytesValue" in value or "bytes_value" in value:
        try:
            return base64.b64decode(str(_get(value, "bytesValue", "bytes_value")), validate=True)
        except (binascii.Error, ValueError):
            raise OtlpError(400, f"{where}.bytesValue must be base64") from None
    return None


def _json_kvlist(pairs: Any, where: str, depth: int) -> list[tuple[str, Any]]:
    out = []
    for index, pair in enumerate(_list(pairs or [], where)):
        pair = _object(pair, f"{where}[{index}]")
        key = pair.get("key")
        if not isinstance(key, str):
            raise OtlpError(400, f"{where}[{index}].key must be a string")
        out.append((key, _json_value(pair.get("value"), f"{where}[{index}].value", depth)))
    return out


def _signed(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise OtlpError(400, f"{where} must be an integer (a decimal string or a number)")
    try:
        number = int(value)
    except ValueError:
        raise OtlpError(400, f"{where} must be an integer, not {_short(value)}") from None
    if not -(2**63) <= number < 2**63:
        raise OtlpError(400, f"{where} is out of the range of a signed 64-bit integer")
    return number
