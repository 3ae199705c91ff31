"""Wire formats: parse OpenAI Chat Completions / Anthropic Messages requests into a
provider-neutral :class:`ParsedRequest`, and build the exact response and error JSON shapes the
official SDKs parse.

Only the fields a judge client uses are interpreted; unknown request fields are accepted and
ignored (as the real APIs do for most optional fields). Streaming is not simulated: a request with
``"stream": true`` gets a 400 in the provider's error shape.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any, Literal

from .behaviour import stable_hash
from .script import Provider

OutputMode = Literal["text", "json_object", "json_schema", "tool"]

_TOOL_HINT_NAMES = {"score", "rating", "verdict", "winner", "explanation", "preference"}


class RequestError(Exception):
    """A request the real API would reject with 400 ``invalid_request_error``."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


@dataclass(frozen=True)
class OutputSpec:
    """What shape the reply must take: plain text, a JSON document, or a tool call."""

    mode: OutputMode = "text"
    schema: dict[str, Any] | None = None
    tool_name: str | None = None


@dataclass(frozen=True)
class ParsedRequest:
    """Provider-neutral view of a completion request."""

    provider: Provider
    model: str
    prompt: str
    temperature: float = 1.0
    request_seed: int | None = None
    n: int = 1
    max_tokens: int | None = None
    stop: list[str] = field(default_factory=list)
    output: OutputSpec = field(default_factory=OutputSpec)
    top_logprobs: int | None = None  # None: no logprobs asked for; else how many alternatives per token


def _text_of(content: Any, sep: str = "\n") -> str:
    """Text of a message ``content``: a string, or the text parts of a list of content blocks joined by ``sep``
    (Anthropic's text blocks are one text: ``""``, so a prompt split at a ``cache_control`` breakpoint reads the
    same)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts: list[str] = []
        for block in content:
            if isinstance(block, str):
                parts.append(block)
            elif isinstance(block, dict):
                if isinstance(block.get("text"), str):
                    parts.append(block["text"])
                elif block.get("type") == "tool_result":
                    parts.append(_text_of(block.get("content")))
        return sep.join(p for p in parts if p)
    return ""


def _require_model(body: dict[str, Any]) -> str:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise RequestError("you must provide a model parameter", "model")
    return model


def _messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        raise RequestError("messages: a non-empty list of message objects is required", "messages")
    return messages


def _number(body: dict[str, Any], key: str, default: float) -> float:
    value = body.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RequestError(f"{key}: expected a number", key)
    return float(value)


def _optional_int(body: dict[str, Any], *keys: str) -> int | None:
    for key in keys:
        value = body.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise RequestError(f"{key}: expected a non-negative integer", key)
        return value
    return None


def _stops(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [s for s in value if isinstance(s, str) and s]
    return []


def _pick_tool(tools: list[tuple[str, dict[str, Any]]], wanted: str | None) -> tuple[str, dict[str, Any]]:
    """The named tool, else the first whose schema has judge-like fields, else the first tool."""
    if wanted is not None:
        for name, schema in tools:
            if name == wanted:
                return name, schema
        raise RequestError(f"tool_choice names unknown tool {wanted!r}", "tool_choice")
    for name, schema in tools:
        props = schema.get("properties") if isinstance(schema, dict) else None
        if isinstance(props, dict) and _TOOL_HINT_NAMES & {k.lower() for k in props}:
            return name, schema
    return tools[0]


def parse_openai(body: dict[str, Any]) -> ParsedRequest:
    """Parse a Chat Completions request body."""
    model = _require_model(body)
    messages = _messages(body)
    if body.get("stream"):
        raise RequestError("stream=true is not supported by the judge simulator", "stream")
    n = _optional_int(body, "n") or 1
    if n > 128:
        raise RequestError("n: must be at most 128", "n")
    seed = body.get("seed")
    top_logprobs = _optional_int(body, "top_logprobs")
    if top_logprobs is not None and not body.get("logprobs"):
        raise RequestError("top_logprobs: logprobs must be set to true if top_logprobs is used", "top_logprobs")
    if top_logprobs is not None and not 0 <= top_logprobs <= 20:
        raise RequestError("top_logprobs: must be between 0 and 20", "top_logprobs")
    output = OutputSpec()
    tools = [
        (t["function"]["name"], t["function"].get("parameters") or {})
        for t in body.get("tools") or []
        if isinstance(t, dict)
        and t.get("type", "function") == "function"
        and isinstance(t.get("function"), dict)
        and isinstance(t["function"].get("name"), str)
    ]
    choice = body.get("tool_choice")
    if tools and choice != "none":
        wanted = None
        if isinstance(choice, dict) and isinstance(choice.get("function"), dict):
            wanted = choice["function"].get("name")
        name, schema = _pick_tool(tools, wanted)
        output = OutputSpec("tool", schema, name)
    else:
        fmt = body.get("response_format")
        if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
            js = fmt.get("json_schema")
            js_schema = js.get("schema") if isinstance(js, dict) else None
            output = OutputSpec("json_schema", js_schema if isinstance(js_schema, dict) else {})
        elif isinstance(fmt, dict) and fmt.get("type") == "json_object":
            output = OutputSpec("json_object")
    return ParsedRequest(
        provider="openai",
        model=model,
        prompt="\n\n".join(t for t in (_text_of(m.get("content")) for m in messages) if t),
        temperature=_number(body, "temperature", 1.0),
        request_seed=seed if isinstance(seed, int) and not isinstance(seed, bool) else None,
        n=n,
        max_tokens=_optional_int(body, "max_completion_tokens", "max_tokens"),
        stop=_stops(body.get("stop")),
        output=output,
        top_logprobs=(top_logprobs or 0) if body.get("logprobs") else None,
    )


def parse_anthropic(body: dict[str, Any]) -> ParsedRequest:
    """Parse a Messages request body."""
    model = _require_model(body)
    messages = _messages(body)
    if body.get("stream"):
        raise RequestError("stream=true is not supported by the judge simulator", "stream")
    max_tokens = _optional_int(body, "max_tokens")
    if max_tokens is None:
        raise RequestError("max_tokens: Field required", "max_tokens")
    output = OutputSpec()
    tools = [
        (t["name"], t.get("input_schema") or {})
        for t in body.get("tools") or []
        if isinstance(t, dict) and isinstance(t.get("name"), str) and "input_schema" in t
    ]
    raw_choice = body.get("tool_choice")
    choice: dict[str, Any] = raw_choice if isinstance(raw_choice, dict) else {}
    if tools and choice.get("type") != "none":
        wanted = choice.get("name") if choice.get("type") == "tool" else None
        name, schema = _pick_tool(tools, wanted)
        output = OutputSpec("tool", schema, name)
    else:
        raw_config = body.get("output_config")
        config: dict[str, Any] = raw_config if isinstance(raw_config, dict) else {}
        fmt = config.get("format") or body.get("output_format")
        if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
            fmt_schema = fmt.get("schema")
            output = OutputSpec("json_schema", fmt_schema if isinstance(fmt_schema, dict) else {})
    system = _text_of(body.get("system"), "")
    texts = [system] + [_text_of(m.get("content"), "") for m in messages]
    return ParsedRequest(
        provider="anthropic",
        model=model,
        prompt="\n\n".join(t for t in texts if t),
        temperature=_number(body, "temperature", 1.0),
        request_seed=None,
        n=1,
        max_tokens=max_tokens,
        stop=_stops(body.get("stop_sequences")),
        output=output,
    )


def response_id(prefix: str, seed: int, body: Any, *extra: object) -> str:
    """Deterministic id from the script seed and the request content."""
    canonical = json.dumps(body, sort_keys=True, default=str)
    return f"{prefix}{stable_hash(seed, canonical, *extra):016x}"


@dataclass
class ChoiceOut:
    """One generated choice: text content or a tool call (arguments as a JSON string)."""

    content: str | None
    finish_reason: str
    tool_name: str | None = None
    tool_arguments: str | None = None
    tool_input: dict[str, Any] | None = None
    stop_sequence: str | None = None
    logprobs: dict[str, Any] | None = None


def openai_completion(
    completion_id: str,
    model: str,
    choices: list[ChoiceOut],
    prompt_tokens: int,
    completion_tokens: int,
    cached_tokens: int = 0,
) -> dict[str, Any]:
    """A ``chat.completion`` object."""
    out_choices = []
    for index, choice in enumerate(choices):
        message: dict[str, Any] = {
            "role": "assistant",
            "content": choice.content,
            "refusal": None,
            "annotations": [],
        }
        if choice.tool_name is not None:
            message["tool_calls"] = [
                {
                    "id": f"call_{completion_id[-16:]}{index}",
                    "type": "function",
                    "function": {"name": choice.tool_name, "arguments": choice.tool_arguments or ""},
                }
            ]
        out_choices.append(
            {"index": index, "message": message, "logprobs": choice.logprobs, "finish_reason": choice.finish_reason}
        )
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": out_choices,
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached_tokens, "audio_tokens": 0},
        },
        "system_fingerprint": "fp_judge_simulator",
    }


def anthropic_message(
    message_id: str,
    model: str,
    choice: ChoiceOut,
    input_tokens: int,
    output_tokens: int,
    cache_read: int = 0,
    cache_write: int = 0,
) -> dict[str, Any]:
    """A Messages API ``message`` object; ``input_tokens`` counts every prompt token and is reported, as Anthropic
    does, less the tokens read from or written to the cache."""
    content: list[dict[str, Any]] = []
    if choice.tool_name is not None:
        content.append(
            {
                "type": "tool_use",
                "id": f"toolu_{message_id[-16:]}",
                "name": choice.tool_name,
                "input": choice.tool_input or {},
            }
        )
    else:
        content.append({"type": "text", "text": choice.content or ""})
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": choice.finish_reason,
        "stop_sequence": choice.stop_sequence,
        "usage": {
            "input_tokens": input_tokens - cache_read - cache_write,
            "output_tokens": output_tokens,
            "cache_creation_input_tokens": cache_write,
            "cache_read_input_tokens": cache_read,
        },
    }


_OPENAI_ERRORS: dict[int, tuple[str, str | None, str]] = {
    400: ("invalid_request_error", None, "Invalid request."),
    401: ("invalid_request_error", "invalid_api_key", "Incorrect API key provided."),
    403: ("invalid_request_error", None, "You are not allowed to sample from this model."),
    404: ("invalid_request_error", None, "The requested resource does not exist."),
    429: ("requests", "rate_limit_exceeded", "Rate limit reached."),
    500: ("server_error", None, "The server had an error while processing your request. Sorry about that!"),
    502: ("server_error", None, "Bad gateway."),
    503: ("server_error", None, "The engine is currently overloaded, please try again later."),
}

_ANTHROPIC_ERRORS: dict[int, tuple[str, str]] = {
    400: ("invalid_request_error", "Invalid request."),
    401: ("authentication_error", "invalid x-api-key"),
    403: ("permission_error", "Your API key does not have permission to use the specified resource."),
    404: ("not_found_error", "The requested resource could not be found."),
    413: ("request_too_large", "Request exceeds the maximum allowed number of bytes."),
    429: ("rate_limit_error", "Number of requests has exceeded your rate limit."),
    500: ("api_error", "Internal server error"),
    529: ("overloaded_error", "Overloaded"),
}


def error_body(provider: Provider, status: int, message: str | None = None, param: str | None = None) -> dict[str, Any]:
    """The provider's error JSON for ``status`` (OpenAI ``{"error": {message, type, param, code}}``,
    Anthropic ``{"type": "error", "error": {type, message}}``)."""
    if provider == "anthropic":
        etype, default = _ANTHROPIC_ERRORS.get(status, ("api_error", f"Simulated HTTP {status} error"))
        return {"type": "error", "error": {"type": etype, "message": message or default}}
    fallback = (
        ("server_error", None, f"Simulated HTTP {status} error")
        if status >= 500
        else (
            "invalid_request_error",
            None,
            f"Simulated HTTP {status} error",
        )
    )
    etype, code, default = _OPENAI_ERRORS.get(status, fallback)
    return {"error": {"message": message or default, "type": etype, "param": param, "code": code}}


def models_body(models: list[str], anthropic_style: bool) -> dict[str, Any]:
    """``GET /v1/models`` in the OpenAI (``object: list``) or Anthropic (``has_more``) shape."""
    if anthropic_style:
        data = [{"type": "model", "id": m, "display_name": m, "created_at": "2025-01-01T00:00:00Z"} for m in models]
        return {
            "data": data,
            "has_more": False,
            "first_id": models[0] if models else None,
            "last_id": models[-1] if models else None,
        }
    return {
        "object": "list",
        "data": [{"id": m, "object": "model", "created": 1735689600, "owned_by": "judge-simulator"} for m in models],
    }
