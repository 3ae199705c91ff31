"""The simulator's ASGI app (Starlette): provider endpoints plus ``/_sim`` control endpoints.

Routes:

* ``POST /v1/chat/completions`` - OpenAI Chat Completions wire format.
* ``POST /v1/messages`` - Anthropic Messages wire format.
* ``GET /v1/models`` - model list (Anthropic shape when an ``anthropic-version`` header is sent).
* ``/v1/files``, ``/v1/batches``, ``/v1/messages/batches`` - the batch protocols (judge_simulator.batches).
* ``GET /_sim/stats`` (``batches``: each batch's requests, creation and end times), ``POST /_sim/reset``
  (``?script=1`` also restores the startup script), ``GET|PUT /_sim/script``, ``GET /_sim/requests?limit=N``
  (recent calls with their bodies).

Per model call: count it, apply the rate limiter, let the fault engine pick a fault, sleep the
sampled latency (``asyncio.sleep``, abandoned early if the client disconnects), then answer from
the script's rules. Handlers never block, so one uvicorn worker serves hundreds of concurrent
delayed calls. Rate-limit rejections (scripted or ``rate_limit_rpm``) answer without latency.
"""

from __future__ import annotations

import asyncio
import json
import math
from typing import Any

from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from .batches import BatchStore
from .behaviour import JudgeRequest, approx_tokens, judge
from .caching import CallUsage
from .logprobs import logprobs_object
from .runtime import Runtime
from .script import Fault, Provider, Script
from .stats import CLIENT_CLOSED, CallRecord, Stats
from .structured import default_object, fill_schema
from .wire import (
    ChoiceOut,
    ParsedRequest,
    RequestError,
    anthropic_message,
    error_body,
    models_body,
    openai_completion,
    parse_anthropic,
    parse_openai,
    response_id,
)

ENDPOINTS: dict[Provider, str] = {"openai": "/v1/chat/completions", "anthropic": "/v1/messages"}


class ClientGone(Exception):
    """The client disconnected while the simulator was still sleeping."""


async def _wait_disconnect(request: Request) -> None:
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


async def sleep_unless_disconnected(request: Request, seconds: float) -> None:
    """``asyncio.sleep(seconds)``, raising :class:`ClientGone` as soon as the client hangs up, so a
    hung call does not hold server resources (or the in-flight counter) after a client timeout."""
    if seconds <= 0:
        return
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    sleeper = asyncio.ensure_future(asyncio.sleep(seconds))
    watcher = asyncio.ensure_future(_wait_disconnect(request))
    try:
        done, _ = await asyncio.wait({sleeper, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        sleeper.cancel()
        watcher.cancel()
    if watcher in done:
        if watcher.exception() is None:
            raise ClientGone
        # Could not watch the connection (should not happen): just finish the delay.
        await asyncio.sleep(max(deadline - loop.time(), 0.0))


def _json(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return JSONResponse(body, status_code=status, headers=headers)


def _request_id_headers(provider: Provider, seq: int) -> dict[str, str]:
    rid = f"req_sim_{seq:08d}"
    return {"request-id": rid} if provider == "anthropic" else {"x-request-id": rid}


def rate_limit_response(provider: Provider, retry_after: float | None, seq: int, detail: str) -> Response:
    """429 with ``Retry-After`` (whole seconds, rounded up) and, OpenAI style, ``retry-after-ms``."""
    headers = _request_id_headers(provider, seq)
    if retry_after is not None:
        headers["retry-after"] = str(max(math.ceil(retry_after), 0))
        if provider == "openai":
            headers["retry-after-ms"] = str(max(round(retry_after * 1000), 0))
    message = f"Rate limit reached ({detail})."
    if retry_after is not None:
        message += f" Please try again in {retry_after:.3g}s."
    return _json(error_body(provider, 429, message), 429, headers)


def _truncate_to_tokens(text: str, max_tokens: int) -> str:
    """Longest prefix whose :func:`approx_tokens` is at most ``max_tokens``."""
    return text[: max(4 * max_tokens - 1, 0)]


def _apply_stops(text: str, stops: list[str]) -> tuple[str, str | None]:
    hits = [(text.find(s), s) for s in stops if s and s in text]
    if not hits:
        return text, None
    pos, stop = min(hits)
    return text[:pos], stop


class Simulator:
    """Owns the runtime state and implements the routes."""

    def __init__(self, script: Script | None = None, log_size: int = 1000) -> None:
        self.startup_script = script or Script()
        self.runtime = Runtime.build(self.startup_script)
        self.stats = Stats(log_size)
        self.batches = BatchStore(self)

    # ---- model calls -------------------------------------------------------------------
    async def chat_completions(self, request: Request) -> Response:
        return await self._handle(request, "openai")

    async def messages(self, request: Request) -> Response:
        return await self._handle(request, "anthropic")

    async def _handle(self, request: Request, provider: Provider) -> Response:
        try:
            body = json.loads(await request.body())
            if not isinstance(body, dict):
                raise RequestError("request body must be a JSON object")
            parsed = parse_openai(body) if provider == "openai" else parse_anthropic(body)
        except (ValueError, RequestError) as exc:
            message = exc.message if isinstance(exc, RequestError) else f"Invalid JSON body: {exc}"
            param = exc.param if isinstance(exc, RequestError) else None
            return _json(error_body(provider, 400, message, param), 400)
        runtime = self.runtime
        record = self.stats.begin(ENDPOINTS[provider], parsed.model, body)
        status = 500
        try:
            response = await self._respond(request, runtime, parsed, body, record)
            status = response.status_code
            return response
        except ClientGone:
            status = CLIENT_CLOSED
            return Response(status_code=CLIENT_CLOSED)
        finally:
            self.stats.finish(record, status)

    async def _respond(
        self, request: Request, rt: Runtime, req: ParsedRequest, body: dict[str, Any], record: CallRecord
    ) -> Response:
        provider = req.provider
        retry = rt.limiter.check(req.model)
        if retry is not None:
            record.fault = "rate_limit_rpm"
            detail = f"{req.model}: {rt.limiter.rpm} requests per {rt.limiter.window:g}s"
            return rate_limit_response(provider, retry, record.seq, detail)
        fault = rt.faults.decide(provider, req.model, req.prompt)
        record.fault = fault.kind if fault else None
        if fault is not None and fault.kind == "rate_limit":
            return rate_limit_response(provider, fault.retry_after, record.seq, "scripted fault")
        usage = rt.cache.lookup(provider, req.model, req.prompt, body, approx_tokens(req.prompt))
        delay = fault.hang_seconds if fault is not None and fault.kind == "hang" else rt.latency.sample()
        await sleep_unless_disconnected(request, delay)
        headers = _request_id_headers(provider, record.seq)
        if fault is not None and fault.kind == "server_error":
            return _json(error_body(provider, fault.status), fault.status, headers)
        payload = self._payload(rt, req, body, fault, record, usage)
        if fault is not None and fault.kind == "invalid_json":
            raw = json.dumps(payload).encode("utf-8")
            return Response(raw[: len(raw) // 2], 200, headers=headers, media_type="application/json")
        return _json(payload, 200, headers)

    def _payload(
        self,
        rt: Runtime,
        req: ParsedRequest,
        body: dict[str, Any],
        fault: Fault | None,
        record: CallRecord,
        usage: CallUsage,
        batch: bool = False,
    ) -> dict[str, Any]:
        """The reply to an answered call; its prompt prefixes are cached and its cost added to the bill."""
        script = rt.script
        jreq = JudgeRequest(req.model, req.prompt, req.temperature, req.request_seed)
        choices = [self._choice(script, req, jreq, i, fault, record) for i in range(req.n)]
        completion_tokens = sum(
            approx_tokens((c.content if c.tool_name is None else c.tool_arguments) or "") for c in choices
        )
        rt.cache.commit(usage)
        self.stats.bill.charge(script.prompt_cache, req.provider, req.model, usage, completion_tokens, batch)
        if req.provider == "anthropic":
            mid = response_id("msg_", script.seed, body)
            return anthropic_message(
                mid,
                req.model,
                choices[0],
                usage.input_tokens,
                completion_tokens,
                usage.cached_tokens,
                usage.cache_write_tokens,
            )
        cid = response_id("chatcmpl-", script.seed, body)
        return openai_completion(cid, req.model, choices, usage.input_tokens, completion_tokens, usage.cached_tokens)

    def _choice(
        self,
        script: Script,
        req: ParsedRequest,
        jreq: JudgeRequest,
        index: int,
        fault: Fault | None,
        record: CallRecord,
    ) -> ChoiceOut:
        """Generate one choice, then apply malformed/truncated faults, stop sequences, max_tokens."""
        anthropic = req.provider == "anthropic"
        stop_reason, length_reason = ("end_turn", "max_tokens") if anthropic else ("stop", "length")
        if fault is not None and fault.kind == "malformed":
            return ChoiceOut(content=fault.text, finish_reason=stop_reason)
        judgement = judge(script, jreq, index)
        record.rule = judgement.rule
        spec = req.output
        if spec.mode == "text":
            text = judgement.text
        else:
            if spec.mode == "json_object":
                text = json.dumps(default_object(judgement))
            else:
                text = json.dumps(fill_schema(spec.schema or {}, judgement))
        truncated = fault is not None and fault.kind == "truncated"
        if truncated and fault is not None:
            text = text[: int(len(text) * fault.keep_fraction)]
        elif req.max_tokens is not None and approx_tokens(text) > req.max_tokens:
            text, truncated = _truncate_to_tokens(text, req.max_tokens), True
        if spec.mode == "tool":
            tool_reason = "tool_use" if anthropic else "tool_calls"
            input_value: dict[str, Any] = {}
            if not truncated:
                loaded = json.loads(text)
                input_value = loaded if isinstance(loaded, dict) else {"value": loaded}
            return ChoiceOut(
                content=None,
                finish_reason=length_reason if truncated else tool_reason,
                tool_name=spec.tool_name,
                tool_arguments=text,
                tool_input=input_value,
            )
        if truncated:
            return ChoiceOut(content=text, finish_reason=length_reason)
        text, stop = _apply_stops(text, req.stop)
        if stop is not None and anthropic:
            return ChoiceOut(content=text, finish_reason="stop_sequence", stop_sequence=stop)
        logprobs = None
        if req.top_logprobs is not None and not anthropic:
            single = judgement.kind == "single"
            logprobs = logprobs_object(text, req.top_logprobs, script.logprob_spread, script.digit_tokens, single)
        return ChoiceOut(content=text, finish_reason=stop_reason, logprobs=logprobs)

    # ---- discovery and control -------------------------------------------------------------
    async def models(self, request: Request) -> Response:
        anthropic_style = "anthropic-version" in request.headers
        return _json(models_body(self.runtime.script.models, anthropic_style))

    async def get_stats(self, request: Request) -> Response:
        return _json({**self.stats.snapshot(), "batches": self.batches.timeline()})

    async def get_requests(self, request: Request) -> Response:
        try:
            limit = int(request.query_params.get("limit", "100"))
        except ValueError:
            limit = 100
        return _json({"requests": self.stats.recent(limit)})

    async def reset(self, request: Request) -> Response:
        """Clear stats, fault counters, RNGs and rate windows; ``?script=1`` (or a JSON body
        ``{"script": true}``) also restores the script the server was started with."""
        restore = request.query_params.get("script", "").lower() in {"1", "true", "yes"}
        raw = await request.body()
        if raw.strip():
            try:
                data = json.loads(raw)
            except ValueError:
                return _json({"error": {"message": "reset body must be JSON"}}, 400)
            restore = restore or bool(isinstance(data, dict) and data.get("script"))
        self.runtime = Runtime.build(self.startup_script if restore else self.runtime.script)
        self.stats.reset()
        self.batches.reset()
        return _json({"ok": True, "script_restored": restore})

    async def get_script(self, request: Request) -> Response:
        return _json(self.runtime.script.model_dump(mode="json"))

    async def put_script(self, request: Request) -> Response:
        """Replace the script (omitted fields take defaults); fault counters and RNGs restart."""
        try:
            script = Script.model_validate_json(await request.body())
        except ValidationError as exc:
            details = json.loads(exc.json(include_url=False))
            error = {"message": "invalid script", "type": "invalid_script", "details": details}
            return _json({"error": error}, 422)
        self.runtime = Runtime.build(script)
        return _json(script.model_dump(mode="json"))


async def _not_found(request: Request, exc: Exception) -> Response:
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    provider: Provider = "anthropic" if "anthropic-version" in request.headers else "openai"
    return _json(error_body(provider, status, f"{request.method} {request.url.path}: not found"), status)


def create_app(script: Script | None = None, log_size: int = 1000) -> Starlette:
    """Build the ASGI app; ``app.state.simulator`` is the :class:`Simulator` (for in-process use)."""
    sim = Simulator(script, log_size)
    routes = [
        Route("/v1/chat/completions", sim.chat_completions, methods=["POST"]),
        Route("/v1/messages", sim.messages, methods=["POST"]),
        Route("/v1/models", sim.models, methods=["GET"]),
        Route("/v1/files", sim.batches.upload, methods=["POST"]),
        Route("/v1/files/{file_id}", sim.batches.file, methods=["GET"]),
        Route("/v1/files/{file_id}/content", sim.batches.file_content, methods=["GET"]),
        Route("/v1/batches", sim.batches.openai_create, methods=["POST"]),
        Route("/v1/batches", sim.batches.openai_list, methods=["GET"]),
        Route("/v1/batches/{batch_id}", sim.batches.openai_get, methods=["GET"]),
        Route("/v1/batches/{batch_id}/cancel", sim.batches.openai_cancel, methods=["POST"]),
        Route("/v1/messages/batches", sim.batches.anthropic_create, methods=["POST"]),
        Route("/v1/messages/batches", sim.batches.anthropic_list, methods=["GET"]),
        Route("/v1/messages/batches/{batch_id}", sim.batches.anthropic_get, methods=["GET"]),
        Route("/v1/messages/batches/{batch_id}/cancel", sim.batches.anthropic_cancel, methods=["POST"]),
        Route("/v1/messages/batches/{batch_id}/results", sim.batches.anthropic_results, methods=["GET"]),
        Route("/_sim/stats", sim.get_stats, methods=["GET"]),
        Route("/_sim/requests", sim.get_requests, methods=["GET"]),
        Route("/_sim/reset", sim.reset, methods=["POST"]),
        Route("/_sim/script", sim.get_script, methods=["GET"]),
        Route("/_sim/script", sim.put_script, methods=["PUT"]),
    ]
    app = Starlette(routes=routes, exception_handlers={404: _not_found})
    app.state.simulator = sim
    return app
