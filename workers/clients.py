"""Judge clients over the official SDKs. One interface, three wire formats' worth of providers.

* ``openai`` and ``openai-compatible`` (vLLM, Ollama, llama.cpp, Azure) and ``local`` (the embedded llama.cpp
  server): ``openai.OpenAI`` with ``base_url``.
* ``anthropic``: ``anthropic.Anthropic``.

SDK retries are off (``max_retries=0``): retries, back-off and ``Retry-After`` are ours (workers.retries), so every
attempt is counted and the rate limiter sees it.

OpenAI-style requests go out through ``workers.httppost`` (one keep-alive connection per call thread, the SDK
client's own headers, the same timeouts and error kinds) unless the SDK's transport is needed (a proxy in the
environment); Anthropic's through the SDK client's own ``post`` (its transport, auth headers, timeouts and error
classes). Either way the body is built here, and the decoded reply JSON is read here: the typed ``create``
wrappers spend another 0.3-0.6 ms of CPU per call transforming the request and building response models, at
provider rate limits of thousands of calls a minute a large share of the service's own cost per judgment. A reply
missing what a verdict needs is a ``malformed_response``.

Provider keys come from the environment or secret files (judge_api.secrets) and never leave the client object; error
text and reply text are scrubbed of them (and of anything shaped like a provider key) before they are returned, so
before anything is stored.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import os
import re
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, Protocol

import anthropic
import httpx
import openai

from judge_api.config import Settings
from judge_api.judges import JudgeSpec
from judge_api.prefixes import CachePrefix
from judge_api.reach import judge_refusal
from judge_api.secrets import provider_secret, scrub_str
from workers.httppost import JsonPoster, PostError, usable_for
from workers.scoring import numeric_positions


@dataclass
class JudgeRequest:
    messages: list[dict[str, str]]
    temperature: float = 0.0
    max_tokens: int = 512
    seed: int | None = 0
    json_schema: dict[str, Any] | None = None
    schema_name: str = "verdict"
    top_logprobs: int | None = None  # ask for token log-probabilities (expected scoring)
    # where the prompt's cacheable shared prefix ends (workers.dispatch): OpenAI gets its key as prompt_cache_key,
    # Anthropic a cache_control breakpoint there. Not part of the judge cache's key: the prompt is the same.
    cache_prefix: CachePrefix | None = None


@dataclass
class JudgeReply:
    text: str
    finish_reason: str | None
    input_tokens: int
    output_tokens: int
    latency_ms: float
    structured: dict[str, Any] | None = None
    logprobs: list[dict[str, Any]] | None = None  # workers.scoring.numeric_positions of the reply, when asked
    # parts of input_tokens (which counts every prompt token): read from / written to the provider's prompt cache
    cached_input_tokens: int = 0
    cache_write_tokens: int = 0


@dataclass
class JudgeCallError(Exception):
    """A failed call. ``retryable`` errors are retried with back-off; others fail the judgment at once."""

    kind: str
    message: str
    retryable: bool
    retry_after_s: float | None = None
    status_code: int | None = None
    details: dict[str, Any] = field(default_factory=dict)
    # False when the request never reached the provider (refused, reset or timed out before it was sent): an
    # attempt, not a call the provider saw or bills
    reached_provider: bool = True

    def __str__(self) -> str:
        code = f" HTTP {self.status_code}" if self.status_code else ""
        return f"{self.kind}{code}: {self.message}"


class JudgeClient(Protocol):
    spec: JudgeSpec

    def complete(self, request: JudgeRequest) -> JudgeReply: ...


def retry_after_seconds(headers: httpx.Headers | Mapping[str, str] | None) -> float | None:
    """``retry-after-ms``, else ``retry-after`` in seconds or as an HTTP date; None when absent or unreadable."""
    if headers is None:
        return None
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            return max(0.0, float(value) * scale)
        except ValueError:
            pass
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError):
            continue
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        return max(0.0, (when - datetime.now(UTC)).total_seconds())
    return None


# the SDKs' HTTP client: httpx2 in the current openai/anthropic releases, httpx before
_SDK_HTTP: Any = importlib.import_module("httpx2") if importlib.util.find_spec("httpx2") else httpx
# what the HTTP transport raises when the request was not (completely) sent: no server can have answered it
_NOT_SENT = tuple(
    getattr(module, name)
    for module in {httpx, _SDK_HTTP}
    for name in ("ConnectError", "ConnectTimeout", "PoolTimeout", "WriteError", "WriteTimeout")
)


def _transport_error(kind: str, exc: BaseException) -> JudgeCallError:
    """A timeout or connection failure, saying what the transport raised and whether the request was sent."""
    cause = exc.__cause__ or exc.__context__
    message = _scrub(str(exc))
    if cause is not None:
        message = f"{message} ({type(cause).__name__}: {_scrub(str(cause))[:200]})"
    return JudgeCallError(kind, message, True, reached_provider=not isinstance(cause, _NOT_SENT))


# the SDKs' pool keeps an idle connection 5 s, as long as common servers (uvicorn, so vLLM and the simulator) keep
# it open: a request sent on a connection idle for about 5 s races the server's close and fails unsent
_KEEPALIVE_EXPIRY_S = 2.0


def _http_limits() -> Any:
    return _SDK_HTTP.Limits(max_connections=1000, max_keepalive_connections=100, keepalive_expiry=_KEEPALIVE_EXPIRY_S)


def _status_error(exc: Any, provider: str) -> JudgeCallError:
    status = getattr(exc, "status_code", None)
    response = getattr(exc, "response", None)
    headers = response.headers if response is not None else None
    message = _scrub(str(getattr(exc, "message", exc)))[:500]
    if status == 429:
        return JudgeCallError("rate_limited", message, True, retry_after_seconds(headers), status)
    if status is not None and (status >= 500 or status in (408, 409)):
        return JudgeCallError("server_error", message, True, retry_after_seconds(headers), status)
    return JudgeCallError("request_rejected", f"{provider} rejected the request: {message}", False, None, status)


def _answer_error(status: int, headers: Mapping[str, str], body: bytes, provider: str) -> JudgeCallError:
    """An HTTP error answer as the SDK's APIStatusError would be classified (``_status_error``)."""
    text = body.decode("utf-8", "replace")
    try:
        decoded = json.loads(text)
    except ValueError:
        decoded = None
    error = decoded.get("error") if isinstance(decoded, dict) else None
    detail = error.get("message") if isinstance(error, dict) and isinstance(error.get("message"), str) else None
    message = f"Error code: {status} - {detail if detail is not None else (decoded if decoded is not None else text)}"
    return _status_error(_HttpStatus(status, headers, message), provider)


@dataclass
class _HttpStatus:
    status_code: int
    headers: Mapping[str, str]
    message: str

    @property
    def response(self) -> _HttpStatus:
        return self  # _status_error reads response.headers


# provider-key shapes (sk-..., sk-proj-..., sk-ant-..., also partly masked ones) and bearer tokens
_KEY_SHAPES = re.compile(r"\bsk-[A-Za-z0-9_*-]{8,}|(?i:bearer)\s+[A-Za-z0-9._~+/=-]{12,}")


def _scrub(text: str) -> str:
    """Remove every known secret and anything shaped like a provider key from text before it is returned."""
    return _KEY_SHAPES.sub("***", scrub_str(text))


class OpenAIJudgeClient:
    def __init__(self, spec: JudgeSpec, settings: Settings) -> None:
        self.spec = spec
        if spec.provider == "openai":
            base_url, api_key = os.environ.get("OPENAI_BASE_URL"), provider_secret("OPENAI_API_KEY")
        elif spec.provider == "local":
            base_url, api_key = settings.local_judge_url, "local"
        else:
            base_url = spec.base_url
            refusal = judge_refusal(spec, settings) if base_url is not None else "no base URL given"
            if refusal is not None:
                raise JudgeCallError("configuration", f"judge refused: {refusal}", False)
            api_key = provider_secret("OPENAI_COMPATIBLE_API_KEY") or "not-needed"
        if not api_key:
            raise JudgeCallError("configuration", "OPENAI_API_KEY is not set", False)
        # no redirects: the base URL is what DJ_JUDGE_URL_ALLOWLIST allowed, a 3xx's Location is not (the SDKs'
        # clients follow them by default); a 3xx fails the call with its status
        self._client = openai.OpenAI(
            api_key=api_key,
            base_url=base_url,
            max_retries=0,
            timeout=settings.judge_timeout_s,
            http_client=openai.DefaultHttpxClient(
                limits=_http_limits(), timeout=settings.judge_timeout_s, follow_redirects=False
            ),
        )
        self._poster: JsonPoster | None = None
        sdk_url = str(self._client.base_url)
        if usable_for(sdk_url):
            headers = {**self._client.default_headers, **self._client.auth_headers}
            self._poster = JsonPoster(
                sdk_url, {k: v for k, v in headers.items() if isinstance(v, str)}, settings.judge_timeout_s
            )

    def _post(self, body: dict[str, Any]) -> Any:
        """The decoded reply of POST /chat/completions (raises JudgeCallError)."""
        if self._poster is None:
            return self._sdk_post(body)
        try:
            answer = self._poster.post("/chat/completions", body)
        except PostError as exc:
            raise JudgeCallError(exc.kind, _scrub(str(exc)), True, reached_provider=exc.sent) from None
        if not 200 <= answer.status < 300:
            raise _answer_error(answer.status, answer.headers, answer.body, self.spec.provider)
        try:
            return answer.json()
        except ValueError as exc:  # not JSON (json.JSONDecodeError and UnicodeDecodeError are ValueErrors)
            raise JudgeCallError("malformed_response", _scrub(str(exc))[:500], True) from None

    def _sdk_post(self, body: dict[str, Any]) -> Any:
        try:
            return self._client.post("/chat/completions", body=body, cast_to=object)
        except openai.APITimeoutError as exc:
            raise _transport_error("timeout", exc) from None
        except openai.APIConnectionError as exc:
            raise _transport_error("connection_error", exc) from None
        except openai.APIStatusError as exc:
            raise _status_error(exc, self.spec.provider) from None
        except (openai.APIResponseValidationError, json.JSONDecodeError, ValueError) as exc:
            raise JudgeCallError("malformed_response", _scrub(str(exc))[:500], True) from None
        except openai.APIError as exc:
            raise JudgeCallError("api_error", _scrub(str(exc))[:500], False) from None

    def request_body(self, request: JudgeRequest) -> dict[str, Any]:
        """The Chat Completions body of a request (a real-time call, or a line of a batch file)."""
        kwargs: dict[str, Any] = {
            "model": self.spec.model,
            "messages": request.messages,
            "temperature": request.temperature,
        }
        # the official API wants max_completion_tokens (newer models reject max_tokens); compatible servers
        # (vLLM, llama.cpp, Ollama) know max_tokens
        kwargs["max_completion_tokens" if self.spec.provider == "openai" else "max_tokens"] = request.max_tokens
        if request.seed is not None:
            kwargs["seed"] = request.seed
        if request.cache_prefix is not None and self.spec.provider == "openai":
            kwargs["prompt_cache_key"] = request.cache_prefix.key
        if request.top_logprobs:
            kwargs["logprobs"] = True
            kwargs["top_logprobs"] = request.top_logprobs
        if request.json_schema is not None and self.spec.provider == "local":
            # llama-cpp-python's server takes the schema on json_object (grammar-constrained decoding)
            kwargs["response_format"] = {"type": "json_object", "schema": request.json_schema}
        elif request.json_schema is not None:
            kwargs["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": request.schema_name, "schema": request.json_schema, "strict": True},
            }
        return kwargs

    def complete(self, request: JudgeRequest) -> JudgeReply:
        kwargs = self.request_body(request)
        started = time.perf_counter()
        data: Any = self._post(kwargs)
        return self.read_reply(data, request, (time.perf_counter() - started) * 1000)

    def read_reply(self, data: Any, request: JudgeRequest, latency_ms: float) -> JudgeReply:
        """A chat completion (a real-time reply, or the body of a batch result line) as a reply."""
        choices = data.get("choices") if isinstance(data, dict) else None
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise JudgeCallError("malformed_response", "the reply has no choices", True)
        choice = choices[0]
        message = choice.get("message")
        if not isinstance(message, dict):
            message = {}
        content = message.get("content") or message.get("refusal") or ""
        if not isinstance(content, str):
            raise JudgeCallError("malformed_response", "the reply's message content is not text", True)
        text = _scrub(content)
        structured = None
        if request.json_schema is not None and text:
            try:
                parsed = json.loads(text)
                structured = parsed if isinstance(parsed, dict) else None
            except json.JSONDecodeError:
                structured = None
        usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
        details = usage.get("prompt_tokens_details")
        details = details if isinstance(details, dict) else {}
        prompt_tokens = _count(usage.get("prompt_tokens"))
        return JudgeReply(
            text=text,
            finish_reason=_text_or_none(choice.get("finish_reason")),
            input_tokens=prompt_tokens,
            output_tokens=_count(usage.get("completion_tokens")),
            latency_ms=latency_ms,
            structured=structured,
            logprobs=_logprobs(choice.get("logprobs")) if request.top_logprobs else None,
            cached_input_tokens=min(_count(details.get("cached_tokens")), prompt_tokens),
        )


def _logprobs(data: Any) -> list[dict[str, Any]] | None:
    """Token log-probabilities of a chat completion (OpenAI's ``{"content": [{token, logprob, top_logprobs}]}``,
    also llama.cpp's server and vLLM; or the completions layout ``{tokens, token_logprobs, top_logprobs}``) as
    ``numeric_positions``; None when the reply has none or they cannot be read."""
    tokens: list[tuple[str, float, list[tuple[str, float]]]] = []
    try:
        if isinstance(data, dict) and isinstance(data.get("content"), list):
            for entry in data["content"]:
                top = [(str(t["token"]), float(t["logprob"])) for t in entry.get("top_logprobs") or []]
                tokens.append((str(entry["token"]), float(entry["logprob"]), top))
        elif isinstance(data, dict) and isinstance(data.get("tokens"), list):
            tops = data.get("top_logprobs") or [None] * len(data["tokens"])
            for token, logprob, top in zip(data["tokens"], data["token_logprobs"], tops, strict=True):
                alternatives = [(str(t), float(lp)) for t, lp in (top or {}).items()]
                tokens.append((str(token), float(logprob if logprob is not None else "nan"), alternatives))
        else:
            return None
    except (KeyError, TypeError, ValueError):
        return None
    return numeric_positions(tokens) if tokens else None


def anthropic_messages(request: JudgeRequest) -> tuple[str | list[dict[str, Any]], list[dict[str, Any]]]:
    """The system prompt and messages of a Messages request. With a cache prefix, the text of the message it ends
    in is split into two text blocks there, the first carrying a ``cache_control`` breakpoint: the concatenated
    text is the prompt, byte for byte."""
    breakpoint_at = request.cache_prefix
    chat = request.messages
    system_parts = [i for i, m in enumerate(chat) if m["role"] == "system"]
    others = [i for i, m in enumerate(chat) if m["role"] != "system"]
    if not others:  # a system-only prompt (MemoChat's judge): Messages needs a user turn
        system_parts, others = [], system_parts

    def content(index: int) -> str | list[dict[str, Any]]:
        text = chat[index]["content"]
        if breakpoint_at is None or breakpoint_at.message != index or not 0 < breakpoint_at.offset <= len(text):
            return text
        head: dict[str, Any] = {"type": "text", "text": text[: breakpoint_at.offset], "cache_control": EPHEMERAL}
        tail = text[breakpoint_at.offset :]
        return [head, {"type": "text", "text": tail}] if tail else [head]

    system: str | list[dict[str, Any]] = "\n\n".join(chat[i]["content"] for i in system_parts)
    if breakpoint_at is not None and breakpoint_at.message in system_parts and len(system_parts) == 1:
        system = content(system_parts[0])
    messages = [
        {"role": "user" if chat[i]["role"] == "system" else chat[i]["role"], "content": content(i)} for i in others
    ]
    return system, messages


EPHEMERAL = {"type": "ephemeral"}


class AnthropicJudgeClient:
    def __init__(self, spec: JudgeSpec, settings: Settings) -> None:
        self.spec = spec
        api_key = provider_secret("ANTHROPIC_API_KEY")
        if not api_key:
            raise JudgeCallError("configuration", "ANTHROPIC_API_KEY is not set", False)
        self._client = anthropic.Anthropic(
            api_key=api_key,
            base_url=os.environ.get("ANTHROPIC_BASE_URL"),
            max_retries=0,
            timeout=settings.judge_timeout_s,
            http_client=anthropic.DefaultHttpxClient(
                limits=_http_limits(), timeout=settings.judge_timeout_s, follow_redirects=False
            ),
        )

    def request_body(self, request: JudgeRequest) -> dict[str, Any]:
        """The Messages body of a request (a real-time call, or the params of a batch request)."""
        system: str | list[dict[str, Any]]
        system, messages = anthropic_messages(request)
        kwargs: dict[str, Any] = {
            "model": self.spec.model,
            "messages": messages,
            "max_tokens": request.max_tokens,
            "temperature": request.temperature,
        }
        if system:
            kwargs["system"] = system
        if request.json_schema is not None:
            kwargs["tools"] = [
                {"name": request.schema_name, "description": "Record the verdict.", "input_schema": request.json_schema}
            ]
            kwargs["tool_choice"] = {"type": "tool", "name": request.schema_name}
        return kwargs

    def complete(self, request: JudgeRequest) -> JudgeReply:
        kwargs = self.request_body(request)
        started = time.perf_counter()
        try:
            data: Any = self._client.post("/v1/messages", body=kwargs, cast_to=object)
        except anthropic.APITimeoutError as exc:
            raise _transport_error("timeout", exc) from None
        except anthropic.APIConnectionError as exc:
            raise _transport_error("connection_error", exc) from None
        except anthropic.APIStatusError as exc:
            raise _status_error(exc, "anthropic") from None
        except (anthropic.APIResponseValidationError, json.JSONDecodeError, ValueError) as exc:
            raise JudgeCallError("malformed_response", _scrub(str(exc))[:500], True) from None
        except anthropic.APIError as exc:
            raise JudgeCallError("api_error", _scrub(str(exc))[:500], False) from None
        return self.read_reply(data, (time.perf_counter() - started) * 1000)

    def read_reply(self, data: Any, latency_ms: float) -> JudgeReply:
        """A Message (a real-time reply, or a succeeded batch result's message) as a reply."""
        blocks = data.get("content") if isinstance(data, dict) else None
        if not isinstance(blocks, list):
            raise JudgeCallError("malformed_response", "the reply has no content blocks", True)
        texts: list[str] = []
        structured = None
        for block in blocks:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "text" and isinstance(block.get("text"), str):
                texts.append(block["text"])
            elif block.get("type") == "tool_use" and isinstance(block.get("input"), dict):
                structured = dict(block["input"])
        text = _scrub("\n".join(texts) or (json.dumps(structured) if structured is not None else ""))
        usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
        read = _count(usage.get("cache_read_input_tokens"))
        written = _count(usage.get("cache_creation_input_tokens"))
        return JudgeReply(
            text=text,
            finish_reason=_text_or_none(data.get("stop_reason")),
            # Anthropic's input_tokens leaves out what was read from or written to the cache: ours counts them
            input_tokens=_count(usage.get("input_tokens")) + read + written,
            output_tokens=_count(usage.get("output_tokens")),
            latency_ms=latency_ms,
            structured=structured,
            cached_input_tokens=read,
            cache_write_tokens=written,
        )


def _count(value: Any) -> int:
    """A token count from a reply's usage; anything that is not a whole number counts as 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _text_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


_clients: dict[str, JudgeClient] = {}
_clients_lock = threading.Lock()


def _client_key(spec: JudgeSpec, settings: Settings) -> str:
    """What a client is built from: judge, timeout, and the endpoint/key environment (hashed, never kept)."""
    env = "|".join(
        os.environ.get(v, "")
        for v in (
            "OPENAI_API_KEY",
            "ANTHROPIC_API_KEY",
            "OPENAI_COMPATIBLE_API_KEY",
            "OPENAI_BASE_URL",
            "ANTHROPIC_BASE_URL",
        )
    )
    digest = hashlib.sha256(env.encode()).hexdigest()[:16]
    return f"{spec.key}|{settings.judge_timeout_s}|{settings.local_judge_url}|{digest}"


def client_for(spec: JudgeSpec, settings: Settings) -> JudgeClient:
    """One client (one HTTP connection pool) per judge and configuration per process."""
    key = _client_key(spec, settings)
    with _clients_lock:
        client = _clients.get(key)
        if client is None:
            client = (
                AnthropicJudgeClient(spec, settings)
                if spec.provider == "anthropic"
                else OpenAIJudgeClient(spec, settings)
            )
            _clients[key] = client
        return client


def reset_clients() -> None:
    with _clients_lock:
        _clients.clear()
