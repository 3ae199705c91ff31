"""The providers' batch protocols, so batch execution is tested offline.

OpenAI (Files + Batch API):

* ``POST /v1/files`` (multipart ``file``, ``purpose=batch``), ``GET /v1/files/{id}``, ``GET /v1/files/{id}/content``;
* ``POST /v1/batches`` (``input_file_id``, ``endpoint``, ``completion_window``, ``metadata``), ``GET /v1/batches``,
  ``GET /v1/batches/{id}``, ``POST /v1/batches/{id}/cancel``. Statuses ``validating`` -> ``in_progress`` ->
  ``completed`` (or ``cancelling`` -> ``cancelled``, ``expired``); answered requests go to ``output_file_id`` as
  ``{"id", "custom_id", "response": {"status_code", "request_id", "body"}, "error": null}``, errored ones to
  ``error_file_id`` with their status and error body, expired and cancelled ones with
  ``"response": null, "error": {"code": "batch_expired" | "batch_cancelled", "message"}``.

Anthropic (Message Batches):

* ``POST /v1/messages/batches`` (``requests: [{custom_id, params}]``), ``GET /v1/messages/batches``,
  ``GET /v1/messages/batches/{id}``, ``POST /v1/messages/batches/{id}/cancel``,
  ``GET /v1/messages/batches/{id}/results`` (JSONL ``{"custom_id", "result": {"type": "succeeded", "message"} |
  {"type": "errored", "error": {"type": "error", "error": {type, message}}} | {"type": "canceled"} |
  {"type": "expired"}}``). ``processing_status``: ``in_progress``, ``canceling``, ``ended``.

A batch is processed ``batch.completion_seconds`` after it is created (the script), its requests in file order
through the same judge, prompt cache and bill as real-time calls, billed at the batch price. ``batch.faults`` script
per-request errors and expirations. Every request is logged in ``/_sim/requests`` under the endpoint
``batch:/v1/chat/completions`` or ``batch:/v1/messages`` with its ``custom_id``. A batch over the providers'
limits (requests, bytes of the input file or request body; ``batch.max_requests`` / ``max_bytes`` lower them) is
refused as the provider refuses it: OpenAI 400 at create, Anthropic 400 for the count and 413 for the body.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from .behaviour import approx_tokens
from .caching import CallUsage
from .runtime import Runtime
from .script import BatchFault
from .stats import CallRecord, Stats
from .wire import ParsedRequest, RequestError, error_body, parse_anthropic, parse_openai

# the providers' limits of one batch: requests, bytes of the input file (OpenAI) or request body (Anthropic)
PROVIDER_LIMITS = {"openai": (50_000, 200 * 1024 * 1024), "anthropic": (100_000, 256 * 1024 * 1024)}


class Simulator(Protocol):
    """What the batch protocols use of the simulator (``app.Simulator``, which builds on this module): its runtime,
    its call log and bill, and the reply to one answered call."""

    runtime: Runtime
    stats: Stats

    def _payload(
        self,
        rt: Runtime,
        req: ParsedRequest,
        body: dict[str, Any],
        fault: Any,
        record: CallRecord,
        usage: CallUsage,
        batch: bool = False,
    ) -> dict[str, Any]: ...


BatchKind = Literal["openai", "anthropic"]


@dataclass
class StoredFile:
    id: str
    filename: str
    purpose: str
    content: bytes
    created_at: int

    def object(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "file",
            "bytes": len(self.content),
            "created_at": self.created_at,
            "filename": self.filename,
            "purpose": self.purpose,
            "status": "processed",
        }


@dataclass
class SimBatch:
    id: str
    kind: BatchKind
    requests: list[tuple[str, dict[str, Any]]]  # (custom_id, request body)
    created_at: float
    input_file_id: str | None = None
    endpoint: str = "/v1/chat/completions"
    metadata: dict[str, Any] | None = None
    state: str = "in_progress"  # in_progress, canceling, ended
    outcome: str = "completed"  # completed, cancelled, expired (OpenAI's final status)
    cancel_at: float | None = None
    ended_at: float | None = None
    results: list[dict[str, Any]] = field(default_factory=list)  # (Anthropic shape) per request, once ended
    output_file_id: str | None = None
    error_file_id: str | None = None
    counts: dict[str, int] = field(default_factory=dict)


def _iso(ts: float | None) -> str | None:
    return None if ts is None else datetime.fromtimestamp(ts, UTC).isoformat().replace("+00:00", "Z")


class BatchStore:
    """The simulator's files and batches (in memory, cleared by ``POST /_sim/reset``)."""

    def __init__(self, sim: Simulator) -> None:
        self.sim = sim
        self.files: dict[str, StoredFile] = {}
        self.batches: dict[str, SimBatch] = {}
        self.seen = 0  # batch requests processed (what BatchFault counts)
        self.fault_hits: dict[int, int] = {}
        self._ids = itertools.count(1)
        self._tasks: set[asyncio.Task[None]] = set()

    def reset(self) -> None:
        for task in self._tasks:
            task.cancel()
        self.files.clear()
        self.batches.clear()
        self.seen = 0
        self.fault_hits.clear()

    def _limits(self, provider: Literal["openai", "anthropic"]) -> tuple[int, int]:
        """(requests, bytes) one batch may hold: the script's, else the provider's."""
        script = self.sim.runtime.script.batch
        requests, size = PROVIDER_LIMITS[provider]
        return script.max_requests or requests, script.max_bytes or size

    def timeline(self) -> list[dict[str, Any]]:
        """Per batch, oldest first: its id, protocol, requests and when it was created and ended (epoch seconds,
        ``ended_at`` None while open) - what ``GET /_sim/stats`` shows under ``batches``, so a benchmark can tell the
        provider's turnaround from the client's."""
        return [
            {
                "id": b.id,
                "kind": b.kind,
                "requests": len(b.requests),
                "created_at": b.created_at,
                "ended_at": b.ended_at,
            }
            for b in self.batches.values()
        ]

    def _new_id(self, prefix: str) -> str:
        return f"{prefix}{next(self._ids):06d}"

    # ---- OpenAI files ----------------------------------------------------------------------
    async def upload(self, request: Request) -> Response:
        form = await request.form()
        upload, purpose = form.get("file"), form.get("purpose")
        if upload is None or isinstance(upload, str):
            return _error("openai", 400, "file: a file is required", "file")
        if purpose != "batch":
            return _error("openai", 400, f"purpose: only 'batch' is simulated (got {purpose!r})", "purpose")
        stored = StoredFile(
            self._new_id("file-sim"), upload.filename or "upload.jsonl", "batch", await upload.read(), int(time.time())
        )
        self.files[stored.id] = stored
        self.sim.stats.begin("/v1/files", "-", {"filename": stored.filename, "bytes": len(stored.content)})
        return JSONResponse(stored.object())

    async def file(self, request: Request) -> Response:
        stored = self.files.get(request.path_params["file_id"])
        return JSONResponse(stored.object()) if stored else _error("openai", 404, "No such file")

    async def file_content(self, request: Request) -> Response:
        stored = self.files.get(request.path_params["file_id"])
        if stored is None:
            return _error("openai", 404, "No such file")
        return Response(stored.content, media_type="application/jsonl")

    # ---- OpenAI batches --------------------------------------------------------------------
    async def openai_create(self, request: Request) -> Response:
        body = await _body(request)
        if body is None:
            return _error("openai", 400, "request body must be a JSON object")
        stored = self.files.get(str(body.get("input_file_id")))
        if stored is None:
            return _error("openai", 400, "input_file_id: no such file", "input_file_id")
        endpoint = body.get("endpoint")
        if endpoint != "/v1/chat/completions":
            return _error("openai", 400, f"endpoint: only /v1/chat/completions is simulated (got {endpoint!r})")
        if body.get("completion_window") != "24h":
            return _error("openai", 400, "completion_window: only '24h' is supported", "completion_window")
        requests: list[tuple[str, dict[str, Any]]] = []
        seen: set[str] = set()
        for number, line in enumerate(stored.content.decode("utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
                custom_id, url, params = entry["custom_id"], entry["url"], entry["body"]
            except (ValueError, KeyError, TypeError):
                return _error("openai", 400, f"input file line {number}: not a batch request line")
            if url != endpoint or entry.get("method") != "POST" or custom_id in seen:
                return _error("openai", 400, f"input file line {number}: wrong url/method or a repeated custom_id")
            seen.add(custom_id)
            requests.append((str(custom_id), params))
        max_requests, max_bytes = self._limits("openai")
        if len(requests) > max_requests:
            return _error("openai", 400, f"a batch holds at most {max_requests:,} requests (got {len(requests):,})")
        if len(stored.content) > max_bytes:
            return _error(
                "openai",
                400,
                f"input_file_id: the file has {len(stored.content):,} bytes, a batch at most {max_bytes:,}",
            )
        batch = SimBatch(
            self._new_id("batch_sim"),
            "openai",
            requests,
            time.time(),
            input_file_id=stored.id,
            endpoint=endpoint,
            metadata=body.get("metadata"),
        )
        self._start(batch)
        return JSONResponse(self.openai_object(batch))

    def openai_object(self, batch: SimBatch) -> dict[str, Any]:
        status = {"in_progress": "in_progress", "canceling": "cancelling"}.get(batch.state, batch.outcome)
        total = len(batch.requests)
        failed = batch.counts.get("errored", 0) + batch.counts.get("expired", 0) + batch.counts.get("canceled", 0)
        return {
            "id": batch.id,
            "object": "batch",
            "endpoint": batch.endpoint,
            "errors": None,
            "input_file_id": batch.input_file_id,
            "completion_window": "24h",
            "status": status,
            "output_file_id": batch.output_file_id,
            "error_file_id": batch.error_file_id,
            "created_at": int(batch.created_at),
            "in_progress_at": int(batch.created_at),
            "expires_at": int(batch.created_at) + 86_400,
            "completed_at": int(batch.ended_at) if batch.ended_at and batch.outcome == "completed" else None,
            "cancelling_at": int(batch.cancel_at) if batch.cancel_at else None,
            "cancelled_at": int(batch.ended_at) if batch.ended_at and batch.outcome == "cancelled" else None,
            "expired_at": int(batch.ended_at) if batch.ended_at and batch.outcome == "expired" else None,
            "request_counts": {
                "total": total,
                "completed": batch.counts.get("succeeded", 0),
                "failed": failed,
            },
            "metadata": batch.metadata,
        }

    async def openai_get(self, request: Request) -> Response:
        batch = self._batch(request, "openai")
        return JSONResponse(self.openai_object(batch)) if batch else _error("openai", 404, "No such batch")

    async def openai_list(self, request: Request) -> Response:
        batches = [b for b in self.batches.values() if b.kind == "openai"][::-1]
        data = [self.openai_object(b) for b in batches]
        return JSONResponse(
            {
                "object": "list",
                "data": data,
                "first_id": data[0]["id"] if data else None,
                "last_id": data[-1]["id"] if data else None,
                "has_more": False,
            }
        )

    async def openai_cancel(self, request: Request) -> Response:
        batch = self._batch(request, "openai")
        if batch is None:
            return _error("openai", 404, "No such batch")
        self._cancel(batch)
        return JSONResponse(self.openai_object(batch))

    # ---- Anthropic message batches -----------------------------------------------------------
    async def anthropic_create(self, request: Request) -> Response:
        max_requests, max_bytes = self._limits("anthropic")
        size = len(await request.body())
        if size > max_bytes:
            message = f"request body of {size:,} bytes: a message batch takes at most {max_bytes:,}"
            return _error("anthropic", 413, message)
        body = await _body(request)
        entries = body.get("requests") if body else None
        if not isinstance(entries, list) or not entries:
            return _error("anthropic", 400, "requests: a non-empty list is required")
        if len(entries) > max_requests:
            return _error("anthropic", 400, f"requests: at most {max_requests:,} per batch (got {len(entries):,})")
        requests: list[tuple[str, dict[str, Any]]] = []
        seen: set[str] = set()
        for index, entry in enumerate(entries):
            if not isinstance(entry, dict) or not isinstance(entry.get("params"), dict):
                return _error("anthropic", 400, f"requests.{index}: custom_id and params are required")
            custom_id = str(entry.get("custom_id") or "")
            if not re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", custom_id) or custom_id in seen:
                return _error("anthropic", 400, f"requests.{index}.custom_id: invalid or repeated")
            seen.add(custom_id)
            requests.append((custom_id, entry["params"]))
        batch = SimBatch(self._new_id("msgbatch_sim"), "anthropic", requests, time.time())
        self._start(batch)
        return JSONResponse(self.anthropic_object(batch, request))

    def anthropic_object(self, batch: SimBatch, request: Request) -> dict[str, Any]:
        counts = {k: batch.counts.get(k, 0) for k in ("succeeded", "errored", "canceled", "expired")}
        counts["processing"] = len(batch.requests) - sum(counts.values()) if batch.state != "ended" else 0
        base = str(request.base_url).rstrip("/")
        return {
            "id": batch.id,
            "type": "message_batch",
            "processing_status": batch.state,
            "request_counts": counts,
            "created_at": _iso(batch.created_at),
            "expires_at": _iso(batch.created_at + 86_400),
            "ended_at": _iso(batch.ended_at),
            "cancel_initiated_at": _iso(batch.cancel_at),
            "archived_at": None,
            "results_url": f"{base}/v1/messages/batches/{batch.id}/results" if batch.state == "ended" else None,
        }

    async def anthropic_get(self, request: Request) -> Response:
        batch = self._batch(request, "anthropic")
        return JSONResponse(self.anthropic_object(batch, request)) if batch else _error("anthropic", 404, "Not found")

    async def anthropic_list(self, request: Request) -> Response:
        batches = [b for b in self.batches.values() if b.kind == "anthropic"][::-1]
        data = [self.anthropic_object(b, request) for b in batches]
        return JSONResponse(
            {
                "data": data,
                "has_more": False,
                "first_id": data[0]["id"] if data else None,
                "last_id": data[-1]["id"] if data else None,
            }
        )

    async def anthropic_cancel(self, request: Request) -> Response:
        batch = self._batch(request, "anthropic")
        if batch is None:
            return _error("anthropic", 404, "Not found")
        self._cancel(batch)
        return JSONResponse(self.anthropic_object(batch, request))

    async def anthropic_results(self, request: Request) -> Response:
        batch = self._batch(request, "anthropic")
        if batch is None:
            return _error("anthropic", 404, "Not found")
        if batch.state != "ended":
            return _error("anthropic", 400, "the batch has not ended")
        public = [
            {**r, "result": {k: v for k, v in r["result"].items() if not k.startswith("_")}} for r in batch.results
        ]
        lines = "".join(json.dumps(r) + "\n" for r in public)
        return Response(lines.encode("utf-8"), media_type="application/binary")

    # ---- processing --------------------------------------------------------------------------
    def _batch(self, request: Request, kind: BatchKind) -> SimBatch | None:
        batch = self.batches.get(request.path_params["batch_id"])
        return batch if batch is not None and batch.kind == kind else None

    def _start(self, batch: SimBatch) -> None:
        self.batches[batch.id] = batch
        self.sim.stats.begin(f"/v1/{'messages/' if batch.kind == 'anthropic' else ''}batches", "-", {"id": batch.id})
        task = asyncio.ensure_future(self._process(batch))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _cancel(self, batch: SimBatch) -> None:
        if batch.state == "in_progress":
            batch.state = "canceling"
            batch.cancel_at = time.time()

    async def _process(self, batch: SimBatch) -> None:
        delay = self.sim.runtime.script.batch.completion_seconds
        deadline = batch.created_at + delay
        while time.time() < deadline and batch.state == "in_progress":
            await asyncio.sleep(min(0.05, max(deadline - time.time(), 0.0)))
        cancelled = batch.state == "canceling"
        for custom_id, params in batch.requests:
            if cancelled:
                batch.results.append({"custom_id": custom_id, "result": {"type": "canceled"}})
                batch.counts["canceled"] = batch.counts.get("canceled", 0) + 1
                continue
            result = self._answer(batch.kind, custom_id, params)
            batch.results.append({"custom_id": custom_id, "result": result})
            batch.counts[result["type"]] = batch.counts.get(result["type"], 0) + 1
            await asyncio.sleep(0)  # let polls in between the requests of a large batch
        batch.outcome = "cancelled" if cancelled else "completed"
        if batch.kind == "openai":
            self._openai_files(batch)
        batch.state = "ended"
        batch.ended_at = time.time()

    def _fault(self, prompt: str) -> BatchFault | None:
        self.seen += 1
        for index, fault in enumerate(self.sim.runtime.script.batch.faults):
            if fault.times is not None and self.fault_hits.get(index, 0) >= fault.times:
                continue
            hit = (
                (fault.first_n is not None and self.seen <= fault.first_n)
                or (fault.every_k is not None and self.seen % fault.every_k == 0)
                or (fault.match is not None and re.search(fault.match, prompt) is not None)
            )
            if hit:
                self.fault_hits[index] = self.fault_hits.get(index, 0) + 1
                return fault
        return None

    def _answer(self, kind: BatchKind, custom_id: str, params: dict[str, Any]) -> dict[str, Any]:
        """One request of a batch, as an Anthropic result object (the OpenAI files are written from these)."""
        sim = self.sim
        endpoint = "batch:/v1/messages" if kind == "anthropic" else "batch:/v1/chat/completions"
        record = sim.stats.begin(endpoint, str(params.get("model", "")), {"custom_id": custom_id, **params})
        status = 200
        try:
            try:
                parsed = parse_anthropic(params) if kind == "anthropic" else parse_openai(params)
            except RequestError as exc:
                status = 400
                return _errored(kind, 400, exc.message)
            fault = self._fault(parsed.prompt)
            if fault is not None:
                record.fault = f"batch_{fault.kind}"
                if fault.kind == "expire":
                    status = 0
                    return {"type": "expired"}
                status = fault.status
                return _errored(kind, fault.status, None)
            rt = sim.runtime
            usage = rt.cache.lookup(kind, parsed.model, parsed.prompt, params, approx_tokens(parsed.prompt))
            payload = sim._payload(rt, parsed, params, None, record, usage, batch=True)
            return {"type": "succeeded", "message": payload}
        finally:
            sim.stats.finish(record, status)

    def _openai_files(self, batch: SimBatch) -> None:
        outputs: list[str] = []
        errors: list[str] = []
        for number, entry in enumerate(batch.results, 1):
            result = entry["result"]
            line: dict[str, Any] = {"id": f"batch_req_{batch.id}_{number}", "custom_id": entry["custom_id"]}
            if result["type"] == "succeeded":
                line["response"] = {"status_code": 200, "request_id": f"req_{number}", "body": result["message"]}
                line["error"] = None
                outputs.append(json.dumps(line))
                continue
            if result["type"] == "errored":
                line["response"] = {
                    "status_code": result["_status"],
                    "request_id": f"req_{number}",
                    "body": result["_body"],
                }
                line["error"] = None
            else:
                code = "batch_expired" if result["type"] == "expired" else "batch_cancelled"
                message = (
                    "This request could not be executed before the completion window expired."
                    if code == "batch_expired"
                    else "This request was cancelled before it was executed."
                )
                line["response"] = None
                line["error"] = {"code": code, "message": message}
            errors.append(json.dumps(line))
        if batch.counts.get("expired"):
            batch.outcome = "expired"  # OpenAI: a batch whose window ran out is 'expired', answered requests kept
        for lines, attr in ((outputs, "output_file_id"), (errors, "error_file_id")):
            if lines:
                stored = StoredFile(
                    self._new_id("file-sim"),
                    f"{batch.id}_{attr}.jsonl",
                    "batch_output",
                    ("\n".join(lines) + "\n").encode("utf-8"),
                    int(time.time()),
                )
                self.files[stored.id] = stored
                setattr(batch, attr, stored.id)


def _errored(kind: BatchKind, status: int, message: str | None) -> dict[str, Any]:
    """An errored result; ``_status``/``_body`` (the OpenAI error line's) are not part of Anthropic's JSONL."""
    body = error_body(kind, status, message)
    return {"type": "errored", "error": body, "_status": status, "_body": body}


def _error(provider: BatchKind, status: int, message: str, param: str | None = None) -> Response:
    return JSONResponse(error_body(provider, status, message, param), status_code=status)


async def _body(request: Request) -> dict[str, Any] | None:
    try:
        body = json.loads(await request.body())
    except ValueError:
        return None
    return body if isinstance(body, dict) else None
