"""Provider batch APIs over the official SDKs: OpenAI's Files + Batch API (``openai:`` judges and
``openai-compatible:`` servers that implement it) and Anthropic's Message Batches.

A request line is built by the judge client's own ``request_body`` and a result read by its ``read_reply``, so a
batched judgment is asked and read exactly as a real-time one. Provider errors of the batch calls themselves
(upload, create, retrieve, cancel) are ``JudgeCallError`` like any call's; a 404/405 on the batch endpoints of an
``openai-compatible`` server is ``kind="unsupported"`` (no batch API there: the judgments go real-time).
"""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

import anthropic
import openai

from judge_api.config import Settings
from judge_api.judges import JudgeSpec
from workers.clients import (
    AnthropicJudgeClient,
    JudgeCallError,
    JudgeReply,
    JudgeRequest,
    OpenAIJudgeClient,
    _scrub,
    _status_error,
)

BATCH_PROVIDERS = ("openai", "openai-compatible", "anthropic")
# the providers' limits per batch (requests, bytes of the request file / body)
PROVIDER_LIMITS: dict[str, tuple[int, int]] = {
    "openai": (50_000, 200 * 1024 * 1024),
    "openai-compatible": (50_000, 200 * 1024 * 1024),
    "anthropic": (100_000, 256 * 1024 * 1024),
}
RETRYABLE_STATUS = (408, 409, 429)
RETRYABLE_ANTHROPIC_ERRORS = ("api_error", "overloaded_error", "rate_limit_error", "timeout_error")
METADATA_KEY = "dialogue_judge_batch"
FOREIGN = "foreign"  # a result whose custom_id is none of the batch row's requests


@dataclass
class BatchState:
    """A provider batch as polled: its own status, whether processing has ended, counts by outcome."""

    status: str
    ended: bool
    counts: dict[str, int] = field(default_factory=dict)
    output_file_id: str | None = None
    error_file_id: str | None = None
    ended_at: datetime | None = None


@dataclass
class BatchResult:
    """One request's result: ``succeeded`` (``reply``), ``errored`` (``error``, retryable or not), ``expired`` or
    ``canceled``; ``foreign`` when its custom_id is not one of the row's requests (refused).

    ``billed``: the provider ran the request and charges for it. Both bill only a request the model answered
    (OpenAI: "charged for any completed work"; Anthropic: errored, canceled and expired requests are not billed),
    so an answer that cannot be read is billed and an errored, expired or cancelled request is not."""

    custom_id: str
    kind: str
    reply: JudgeReply | None = None
    error: JudgeCallError | None = None
    billed: bool = False


@dataclass(frozen=True)
class Found:
    """A lookup of a row's lost provider batch: ``batch_id`` when a batch is proven the row's (OpenAI: its metadata
    carries the row's tag; Anthropic: its results carry exactly the row's custom_ids); ``unconfirmed`` when a batch
    that may be the row's cannot be checked yet (Anthropic shows a batch's custom_ids only once it has ended)."""

    batch_id: str | None = None
    unconfirmed: bool = False


class BatchClient(Protocol):
    spec: JudgeSpec

    def line_bytes(self, custom_id: str, request: JudgeRequest) -> int: ...

    def submit(self, requests: list[tuple[str, JudgeRequest]], tag: str) -> tuple[str, str | None]: ...

    def find(self, tag: str, custom_ids: Collection[str], since: datetime, taken: Callable[[str], bool]) -> Found: ...

    def retrieve(self, batch_id: str) -> BatchState: ...

    def results(
        self, batch_id: str, state: BatchState, requests: Mapping[str, JudgeRequest]
    ) -> Iterator[BatchResult]: ...

    def cancel(self, batch_id: str) -> None: ...


def _call_error(exc: Exception, provider: str) -> JudgeCallError:
    if isinstance(exc, openai.APIStatusError | anthropic.APIStatusError):
        if provider == "openai-compatible" and exc.status_code in (404, 405):
            return JudgeCallError("unsupported", "the server has no batch API (HTTP 404/405)", False, None, 404)
        return _status_error(exc, provider)
    if isinstance(exc, openai.APITimeoutError | anthropic.APITimeoutError):
        return JudgeCallError("timeout", _scrub(str(exc)), True)
    if isinstance(exc, openai.APIConnectionError | anthropic.APIConnectionError):
        return JudgeCallError("connection_error", _scrub(str(exc)), True)
    return JudgeCallError("api_error", _scrub(str(exc))[:500], True)


def _ts(value: Any) -> datetime | None:
    if isinstance(value, int | float):
        return datetime.fromtimestamp(value, UTC).replace(tzinfo=None)
    if isinstance(value, datetime):
        return value.astimezone(UTC).replace(tzinfo=None)
    return None


class OpenAIBatchClient:
    """Files (purpose ``batch``) + ``/v1/batches`` over ``/v1/chat/completions``, 24 h window."""

    def __init__(self, spec: JudgeSpec, settings: Settings) -> None:
        self.spec = spec
        self.judge = OpenAIJudgeClient(spec, settings)
        self._client: openai.OpenAI = self.judge._client

    def _line(self, custom_id: str, request: JudgeRequest) -> bytes:
        line = {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions"}
        return (json.dumps({**line, "body": self.judge.request_body(request)}) + "\n").encode("utf-8")

    def line_bytes(self, custom_id: str, request: JudgeRequest) -> int:
        return len(self._line(custom_id, request))

    def submit(self, requests: list[tuple[str, JudgeRequest]], tag: str) -> tuple[str, str | None]:
        content = b"".join(self._line(custom_id, request) for custom_id, request in requests)
        try:
            uploaded = self._client.files.create(file=(f"dj-{tag}.jsonl", io.BytesIO(content)), purpose="batch")
            batch = self._client.batches.create(
                input_file_id=uploaded.id,
                endpoint="/v1/chat/completions",
                completion_window="24h",
                metadata={METADATA_KEY: tag},
            )
        except openai.APIError as exc:
            raise _call_error(exc, self.spec.provider) from None
        return batch.id, uploaded.id

    def find(self, tag: str, custom_ids: Collection[str], since: datetime, taken: Callable[[str], bool]) -> Found:
        """A batch created for ``tag`` (the row and its nonce, in the batch's metadata) whose id was never recorded
        (the worker died right after creating it, or was slow). A server that keeps no metadata (it is optional
        for OpenAI-compatible ones): a batch without it is the row's when its input file holds exactly the row's
        custom_ids (each carries the row and its nonce)."""
        wanted = set(custom_ids)
        try:
            for batch in self._client.batches.list(limit=100):
                label = (batch.metadata or {}).get(METADATA_KEY)
                if label == tag and not taken(batch.id):
                    return Found(batch.id)
                created = _ts(batch.created_at)
                if created is not None and created < since:
                    return Found()
                if label is None and batch.input_file_id and not taken(batch.id):
                    try:  # a file gone or unreadable is not the row's: it must not keep the row from its end
                        sent = {str(line.get("custom_id")) for line in self._lines(batch.input_file_id)}
                    except (JudgeCallError, ValueError, AttributeError):
                        continue
                    if sent == wanted:
                        return Found(batch.id)
        except openai.APIError as exc:
            raise _call_error(exc, self.spec.provider) from None
        return Found()

    def retrieve(self, batch_id: str) -> BatchState:
        try:
            batch = self._client.batches.retrieve(batch_id)
        except openai.APIError as exc:
            raise _call_error(exc, self.spec.provider) from None
        counts = batch.request_counts
        ended = batch.status in ("completed", "failed", "expired", "cancelled")
        return BatchState(
            batch.status,
            ended,
            {"completed": counts.completed, "failed": counts.failed, "total": counts.total} if counts else {},
            batch.output_file_id,
            batch.error_file_id,
            _ts(batch.completed_at or batch.expired_at or batch.cancelled_at or batch.failed_at),
        )

    def _lines(self, file_id: str | None) -> list[dict[str, Any]]:
        if not file_id:
            return []
        try:
            text = self._client.files.content(file_id).text
        except openai.APIError as exc:
            raise _call_error(exc, self.spec.provider) from None
        return [json.loads(line) for line in text.splitlines() if line.strip()]

    def results(self, batch_id: str, state: BatchState, requests: Mapping[str, JudgeRequest]) -> Iterator[BatchResult]:
        lines = self._lines(state.output_file_id) + self._lines(state.error_file_id)
        for line in lines:
            custom_id = str(line.get("custom_id"))
            request = requests.get(custom_id)
            if request is None:  # not one of the row's requests: reported, so the caller refuses it
                yield BatchResult(custom_id, FOREIGN)
                continue
            yield self._result(custom_id, line, request)

    def _result(self, custom_id: str, line: dict[str, Any], request: JudgeRequest) -> BatchResult:
        response = line.get("response")
        error = line.get("error")
        if isinstance(response, dict) and response.get("status_code") == 200:
            try:
                reply = self.judge.read_reply(response.get("body"), request, 0.0)
                return BatchResult(custom_id, "succeeded", reply, billed=True)
            except JudgeCallError as exc:
                return BatchResult(custom_id, "errored", error=exc, billed=True)
        if isinstance(error, dict) and error.get("code") in ("batch_expired", "batch_cancelled"):
            return BatchResult(custom_id, "expired" if error["code"] == "batch_expired" else "canceled")
        status = response.get("status_code") if isinstance(response, dict) else None
        body = response.get("body") if isinstance(response, dict) else None
        detail = (body or {}).get("error") if isinstance(body, dict) else error
        message = _scrub(str((detail or {}).get("message") or detail or "no detail"))[:500]
        retryable = isinstance(status, int) and (status >= 500 or status in RETRYABLE_STATUS)
        kind = "rate_limited" if status == 429 else "server_error" if retryable else "request_rejected"
        if not isinstance(status, int):  # an error line with no HTTP status: the provider's, retried
            kind, retryable = "server_error", True
        return BatchResult(custom_id, "errored", error=JudgeCallError(kind, message, retryable, None, status))

    def cancel(self, batch_id: str) -> None:
        try:
            self._client.batches.cancel(batch_id)
        except openai.APIError as exc:
            raise _call_error(exc, self.spec.provider) from None


class AnthropicBatchClient:
    """``/v1/messages/batches``: create with the requests inline, poll ``processing_status``, stream results."""

    def __init__(self, spec: JudgeSpec, settings: Settings) -> None:
        self.spec = spec
        self.judge = AnthropicJudgeClient(spec, settings)
        self._client: anthropic.Anthropic = self.judge._client

    def line_bytes(self, custom_id: str, request: JudgeRequest) -> int:
        return len(json.dumps({"custom_id": custom_id, "params": self.judge.request_body(request)})) + 1

    def submit(self, requests: list[tuple[str, JudgeRequest]], tag: str) -> tuple[str, str | None]:
        entries: Any = [
            {"custom_id": custom_id, "params": self.judge.request_body(request)} for custom_id, request in requests
        ]
        try:
            batch = self._client.messages.batches.create(requests=entries)
        except anthropic.APIError as exc:
            raise _call_error(exc, "anthropic") from None
        return batch.id, None

    def find(self, tag: str, custom_ids: Collection[str], since: datetime, taken: Callable[[str], bool]) -> Found:
        """Message batches carry no metadata and show their requests' custom_ids only once they have ended: a
        candidate is a batch created since ``since`` with as many requests that no stored row holds (``taken``);
        an ended one is the row's only when its results carry exactly the row's custom_ids (the row and its nonce
        in each); one still processing is ``unconfirmed`` (the caller waits for it to end)."""
        wanted = set(custom_ids)
        unconfirmed = False
        try:
            for batch in self._client.messages.batches.list(limit=100):
                created = _ts(batch.created_at)
                if created is not None and created < since:
                    break
                counts = batch.request_counts
                total = counts.processing + counts.succeeded + counts.errored + counts.canceled + counts.expired
                if total != len(wanted) or taken(batch.id):
                    continue
                if batch.processing_status != "ended":
                    unconfirmed = True
                    continue
                if {entry.custom_id for entry in self._client.messages.batches.results(batch.id)} == wanted:
                    return Found(batch.id)
        except anthropic.APIError as exc:
            raise _call_error(exc, "anthropic") from None
        return Found(unconfirmed=unconfirmed)

    def retrieve(self, batch_id: str) -> BatchState:
        try:
            batch = self._client.messages.batches.retrieve(batch_id)
        except anthropic.APIError as exc:
            raise _call_error(exc, "anthropic") from None
        counts = batch.request_counts
        return BatchState(
            batch.processing_status,
            batch.processing_status == "ended",
            {
                "processing": counts.processing,
                "succeeded": counts.succeeded,
                "errored": counts.errored,
                "canceled": counts.canceled,
                "expired": counts.expired,
            },
            ended_at=_ts(batch.ended_at),
        )

    def results(self, batch_id: str, state: BatchState, requests: Mapping[str, JudgeRequest]) -> Iterator[BatchResult]:
        try:
            decoded = list(self._client.messages.batches.results(batch_id))
        except anthropic.APIError as exc:
            raise _call_error(exc, "anthropic") from None
        for entry in decoded:
            if entry.custom_id not in requests:  # not one of the row's requests: reported, so the caller refuses it
                yield BatchResult(entry.custom_id, FOREIGN)
                continue
            result = entry.result.model_dump(mode="json")
            kind = str(result.get("type"))
            if kind == "succeeded":
                try:
                    reply = self.judge.read_reply(result.get("message"), 0.0)
                    yield BatchResult(entry.custom_id, kind, reply, billed=True)
                except JudgeCallError as exc:
                    yield BatchResult(entry.custom_id, "errored", error=exc, billed=True)
            elif kind == "errored":
                detail = (result.get("error") or {}).get("error") or {}
                etype = str(detail.get("type") or "api_error")
                retryable = etype in RETRYABLE_ANTHROPIC_ERRORS
                message = _scrub(f"{etype}: {detail.get('message') or ''}")[:500]
                error = JudgeCallError("server_error" if retryable else "request_rejected", message, retryable)
                yield BatchResult(entry.custom_id, kind, error=error)
            else:
                yield BatchResult(entry.custom_id, kind)

    def cancel(self, batch_id: str) -> None:
        try:
            self._client.messages.batches.cancel(batch_id)
        except anthropic.APIError as exc:
            raise _call_error(exc, "anthropic") from None


def request_part(prompt_key: str) -> str:
    """A request's own part of its ``custom_id``: a digest of its prompt's judge-cache key, checked again when its
    result is read (a result whose id names another prompt is refused)."""
    return hashlib.sha256(prompt_key.encode("utf-8")).hexdigest()[:16]


def batch_client_for(spec: JudgeSpec, settings: Settings) -> BatchClient | None:
    """The batch client of a judge, or None when its provider has no batch API here (local, reference)."""
    if spec.provider == "anthropic":
        return AnthropicBatchClient(spec, settings)
    if spec.provider in ("openai", "openai-compatible"):
        return OpenAIBatchClient(spec, settings)
    return None


def batchable(spec: JudgeSpec) -> bool:
    """Can this judge's calls go into a provider batch (OpenAI's Batch API, Anthropic's Message Batches)?"""
    return spec.provider in BATCH_PROVIDERS
