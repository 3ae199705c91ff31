"""The OTLP/HTTP traces receiver (docs/monitoring.md#opentelemetry-traces): ``POST /v1/otlp/v1/traces``.

Point an OpenTelemetry exporter at it with two environment variables::

    OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=https://judge.example.org/v1/otlp/v1/traces
    OTEL_EXPORTER_OTLP_TRACES_HEADERS=Authorization=Bearer%20djk_...

(or ``OTEL_EXPORTER_OTLP_ENDPOINT=https://judge.example.org/v1/otlp``: the SDK appends ``/v1/traces``). The key needs
the ``submit`` scope. Answers as an OTLP server: 200 with an ``ExportTraceServiceResponse`` in the request's encoding
(its ``partial_success`` counts and explains the spans not used); 4xx with a ``google.rpc.Status`` in the request's
encoding (JSON: ``{"code", "message", "details"}``, plus ``detail`` naming the field as every error of this API):
400 for a body that does not decode or has nothing usable, 401/403 for the key, 413 over DJ_OTLP_MAX_BYTES (checked
on the decompressed size) or DJ_MAX_ITEMS spans, 415 for a content type or encoding OTLP does not define; 503 with
Retry-After when the database is away (nothing stored: the exporter retries), 500 for a fault of ours, both in the same
Status shape.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from fastapi import APIRouter, HTTPException, Request, Response
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTracePartialSuccess,
    ExportTraceServiceResponse,
)
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from judge_api.config import Settings
from judge_api.db import session_factory
from judge_api.deps import authorize
from judge_api.errors import is_database_outage
from judge_api.otlp.decode import Encoding, OtlpError, decode, encoding_of, inflate
from judge_api.otlp.intake import Outcome, export_in_flight, receive, received_event

router = APIRouter(tags=["otlp"])
log = logging.getLogger(__name__)

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
GRPC_CODES = {400: 3, 401: 16, 403: 7, 404: 5, 409: 10, 413: 8, 415: 3, 429: 8, 500: 13, 503: 14}  # google.rpc.Code


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def status_body(code: int, message: str, encoding: Encoding) -> tuple[bytes, str]:
    """A ``google.rpc.Status`` (code, message) in the request's encoding: protobuf fields 1 (int32) and 2 (string)."""
    rpc = GRPC_CODES.get(code, 2)
    if encoding == "protobuf":
        text = message.encode()
        return b"\x08" + _varint(rpc) + b"\x12" + _varint(len(text)) + text, PROTOBUF
    payload = {
        "code": rpc,
        "message": message,
        "details": [],
        "detail": [{"loc": ["body"], "msg": message, "type": "value_error"}],
    }
    return json.dumps(payload).encode(), JSON


def error_response(code: int, message: str, encoding: Encoding, headers: dict[str, str] | None = None) -> Response:
    body, media = status_body(code, message, encoding)
    return Response(body, status_code=code, media_type=media, headers=headers)


def outage_response(request: Request, exc: Exception, encoding: Encoding) -> Response:
    """503 with Retry-After, in OTLP's shape: the database is away, nothing was stored, the exporter retries."""
    log.warning("database unavailable during %s %s: %s", request.method, request.url.path, type(exc).__name__)
    message = "the database is unavailable right now; nothing was stored, retry shortly"
    return error_response(503, message, encoding, {"Retry-After": "2"})


def success_response(outcome: Outcome, encoding: Encoding) -> Response:
    """200 with an ExportTraceServiceResponse; ``partial_success`` when some spans were not used."""
    answer = ExportTraceServiceResponse()
    if outcome.rejected:
        answer.partial_success.CopyFrom(
            ExportTracePartialSuccess(rejected_spans=outcome.rejected, error_message=outcome.message())
        )
    if encoding == "protobuf":
        return Response(answer.SerializeToString(), media_type=PROTOBUF)
    body: dict[str, Any] = {}
    if outcome.rejected:
        body["partialSuccess"] = {"rejectedSpans": str(outcome.rejected), "errorMessage": outcome.message()}
    return Response(json.dumps(body).encode(), media_type=JSON)


async def read_limited(request: Request, limit: int) -> bytes:
    """The raw body, refusing (413) past ``limit`` bytes as it streams in."""
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > limit:
        raise OtlpError(413, f"export of {int(length)} bytes exceeds the limit of {limit} bytes (DJ_OTLP_MAX_BYTES)")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise OtlpError(413, f"export exceeds the limit of {limit} bytes (DJ_OTLP_MAX_BYTES)")
        chunks.append(chunk)
    return b"".join(chunks)


_BODY = {
    "requestBody": {
        "content": {
            PROTOBUF: {"schema": {"type": "string", "format": "binary"}},
            JSON: {"schema": {"type": "object", "description": "OTLP/JSON ExportTraceServiceRequest"}},
        },
        "required": True,
    }
}


@router.post(
    "/v1/otlp/v1/traces",
    openapi_extra=_BODY,
    responses={
        200: {"description": "ExportTraceServiceResponse (partial_success when some spans were not used)"},
        400: {"description": "google.rpc.Status: undecodable, or nothing usable"},
        413: {"description": "google.rpc.Status: over DJ_OTLP_MAX_BYTES or DJ_MAX_ITEMS"},
        415: {"description": "google.rpc.Status: not protobuf or JSON, or not gzip"},
    },
)
async def export_traces(request: Request) -> Response:
    """OTLP/HTTP traces: each LLM span becomes a response of its monitor (``dialogue_judge.monitor``, else the
    project's default), its dialogue rebuilt from its conversation's spans; an exporter's retry is a duplicate. The
    request stores the usable spans and answers; the processors rebuild and ingest them within seconds
    (judge_api.otlp.intake)."""
    settings: Settings = request.app.state.settings
    unsupported: OtlpError | None = None
    encoding: Encoding = "json"
    try:
        encoding = encoding_of(request.headers.get("content-type"))
    except OtlpError as exc:  # answered after the key is checked: without a key the answer is 401, whatever the body
        unsupported = exc
    session = session_factory()()
    try:
        try:
            principal = await run_in_threadpool(authorize, request, session, "submit")
        except HTTPException as exc:
            return error_response(exc.status_code, str(exc.detail), encoding, dict(exc.headers or {}))
        except Exception as exc:
            if not is_database_outage(exc):
                raise
            return outage_response(request, exc, encoding)
        if unsupported is not None:
            return error_response(unsupported.status, unsupported.message, "json")
        try:
            # end the key's transaction before the body streams in: a slow upload must not hold a pooled connection
            # (a few slow exporters would starve every other request of the pool)
            await run_in_threadpool(session.commit)
            with export_in_flight():
                body = await read_limited(request, settings.otlp_max_bytes)
                outcome = await run_in_threadpool(
                    _receive,
                    body,
                    request.headers.get("content-encoding"),
                    encoding,
                    principal.project_id,
                    session,
                    settings,
                )
        except OtlpError as exc:
            return error_response(exc.status, exc.message, encoding)
        except HTTPException as exc:
            detail = exc.detail if isinstance(exc.detail, str) else json.dumps(exc.detail)
            return error_response(exc.status_code, detail, encoding)
        except Exception as exc:
            if is_database_outage(exc):  # the spans' transaction was not committed: the exporter retries a 503
                return outage_response(request, exc, encoding)
            # a fault of ours: still an OTLP answer, never a bare text 500
            log.exception("OTLP export failed (%d bytes)", int(request.headers.get("content-length") or 0))
            return error_response(500, "the export could not be processed (a server error; it was logged)", encoding)
    finally:
        session.close()
    if outcome.stored:
        received_event.set()  # this process's processor takes them at once
    return success_response(outcome, encoding)


def _receive(
    body: bytes,
    content_encoding: str | None,
    encoding: Encoding,
    project_id: str,
    session: Session,
    settings: Settings,
) -> Outcome:
    """Decompress, decode, classify and store the usable spans in one transaction, off the event loop (protobuf
    parsing of a large export takes a while). A refusal stores nothing but the monitors' counts of spans skipped."""
    spans = decode(inflate(body, content_encoding, settings.otlp_max_bytes), encoding)
    try:
        outcome = receive(session, project_id, spans, settings)
        session.commit()
    except OtlpError:
        session.commit()  # only the counts of the spans skipped (the monitor's status says why)
        raise
    except BaseException:
        session.rollback()
        raise
    return outcome
