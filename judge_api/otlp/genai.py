"""A span read as one LLM call in the conventions instrumentations emit (docs/monitoring.md#opentelemetry-traces):

- OpenTelemetry GenAI, current: ``gen_ai.input.messages`` / ``gen_ai.output.messages`` / ``gen_ai.system_instructions``
  (JSON strings, or structured values, of messages with ``parts``), on the span or on its
  ``gen_ai.client.inference.operation.details`` event;
- OpenTelemetry GenAI, the older event form: ``gen_ai.system.message``, ``gen_ai.user.message``,
  ``gen_ai.assistant.message``, ``gen_ai.tool.message`` and ``gen_ai.choice`` events (their body as ``content`` /
  ``message`` / ``gen_ai.event.content`` attributes), and the oldest ``gen_ai.content.prompt`` /
  ``gen_ai.content.completion`` events (``gen_ai.prompt`` / ``gen_ai.completion`` JSON);
- OpenLLMetry (Traceloop): ``gen_ai.prompt.N.role`` / ``.content`` and ``gen_ai.completion.N.role`` / ``.content``;
- OpenInference (Arize Phoenix): ``llm.input_messages.N.message.role`` / ``.content`` (or ``.contents.M.
  message_content.text``), ``llm.output_messages.N.message.*``, ``session.id``.

A span that is no LLM call, or an LLM call whose messages were not captured, is a ``Skip`` saying why (the latter
names the instrumentation's content-capture switch). Pure: no storage, no settings (``ReadOptions`` is handed in).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from judge_api.otlp.decode import SpanRecord

MONITOR_ATTRIBUTE = "dialogue_judge.monitor"
SEGMENT_ATTRIBUTE = "dialogue_judge.segment"
CONVERSATION_ATTRIBUTES = (
    "gen_ai.conversation.id",
    "session.id",
    "traceloop.association.properties.session_id",
    "conversation.id",
)
MODEL_ATTRIBUTES = ("gen_ai.request.model", "gen_ai.response.model", "llm.model_name")
DETAILS_EVENT = "gen_ai.client.inference.operation.details"
ROLE_EVENTS = {
    "gen_ai.system.message": "system",
    "gen_ai.user.message": "user",
    "gen_ai.assistant.message": "assistant",
    "gen_ai.tool.message": "tool",
}
_ID_HINT = " (OTLP/JSON spells them as hex: 32 and 16 characters, not base64)"
TOOL_REASONS = frozenset({"tool_calls", "tool_call", "function_call"})
NOT_CHAT = ("embeddings", "embedding", "execute_tool", "create_agent")
SLICE_BAD = re.compile(r"[^A-Za-z0-9_.:@/+ -]")

Convention = Literal["gen_ai", "gen_ai_events", "openllmetry", "openinference"]
CAPTURE_SWITCHES: dict[str, str] = {
    "gen_ai": "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=SPAN_ONLY with "
    "OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental (older instrumentations: "
    "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true)",
    "openllmetry": "TRACELOOP_TRACE_CONTENT=true (OpenLLMetry)",
    "openinference": "OPENINFERENCE_HIDE_INPUTS=false and OPENINFERENCE_HIDE_OUTPUTS=false (OpenInference)",
}


@dataclass(frozen=True)
class ReadOptions:
    """Where the slice keys, conversation id, persona and memory are read besides the conventions' attributes."""

    system_attribute: str = "service.name"
    version_attribute: str = "service.version"
    conversation_attribute: str = ""
    persona_attribute: str = ""
    memory_attribute: str = ""
    defer_messages: bool = False
    """Keep the current conventions' input messages as the JSON text the span carried (``LlmCall.raw``), parsed when
    the call is read back (``LlmCall.from_json``): the receiver's request then does not pay for them."""


@dataclass(frozen=True)
class Message:
    role: str  # system, user, assistant, tool
    text: str


@dataclass(frozen=True)
class RawMessages:
    """The current conventions' ``gen_ai.input.messages`` and ``gen_ai.system_instructions`` as the span carried them
    (JSON text), not parsed yet."""

    input: str | None
    instructions: str | None

    def parse(self) -> list[Message]:
        return _input_messages(self.input, self.instructions)


@dataclass(frozen=True)
class LlmCall:
    """One LLM call with its captured messages: what its monitor response and later spans' history are built of."""

    trace_id: str
    span_id: str
    started_ns: int
    convention: str
    monitor: str | None
    conversation_id: str
    messages: list[Message]
    """The input messages, system ones included, in order."""
    output: str
    system: str
    version: str
    segment: str | None = None
    model: str | None = None
    persona: list[str] | None = None
    memory: str | None = None
    raw: RawMessages | None = None
    """Set when ``messages`` are still the span's JSON text (``ReadOptions.defer_messages``): ``messages`` is then
    empty until ``parsed()``."""

    @property
    def response_id(self) -> str:
        """Derived from the trace and span ids: an exporter's retry is the same response (a duplicate)."""
        return f"otlp-{self.trace_id}-{self.span_id}"

    @property
    def instructions(self) -> str:
        return "\n".join(m.text for m in self.messages if m.role == "system" and m.text)

    def as_history(self) -> LlmCall:
        """The call as later spans' history needs it once its response is released: its new user message(s) and
        output only (the history it carried is its earlier spans', or already judged with it)."""
        trailing: list[Message] = []
        for message in reversed(self.messages):
            if message.role == "assistant" and message.text:
                break
            if message.role == "user":
                trailing.append(message)
        return replace(self, messages=trailing[::-1], persona=None, memory=None)

    def parsed(self) -> LlmCall:
        """The call with its messages parsed (itself when they are)."""
        if self.raw is None:
            return self
        return replace(self, messages=self.raw.parse(), raw=None)

    def to_json(self) -> dict[str, Any]:
        """As stored (``otlp_spans.call``); built by hand: ``dataclasses.asdict`` deep-copies every value. Messages
        not parsed yet are stored as the span's text (``raw_messages``, ``raw_instructions``)."""
        raw = {} if self.raw is None else {"raw_messages": self.raw.input, "raw_instructions": self.raw.instructions}
        return {
            **raw,
            "trace_id": self.trace_id,
            "span_id": self.span_id,
            "started_ns": self.started_ns,
            "convention": self.convention,
            "monitor": self.monitor,
            "conversation_id": self.conversation_id,
            "messages": [{"role": m.role, "text": m.text} for m in self.messages],
            "output": self.output,
            "system": self.system,
            "version": self.version,
            "segment": self.segment,
            "model": self.model,
            "persona": self.persona,
            "memory": self.memory,
        }

    @staticmethod
    def from_json(data: dict[str, Any]) -> LlmCall:
        """The stored call, its messages parsed."""
        values = dict(data)
        if "raw_messages" in values:
            values["messages"] = _input_messages(values.pop("raw_messages"), values.pop("raw_instructions", None))
        else:
            values["messages"] = [Message(m["role"], m["text"]) for m in data["messages"]]
        return LlmCall(**values)


@dataclass(frozen=True)
class Skip:
    """A span not judged: ``not_llm`` (no LLM call), ``tool_call`` (an LLM call answering with a tool call: no text
    to judge), ``no_content`` (messages not captured) or ``invalid``."""

    kind: Literal["not_llm", "tool_call", "no_content", "invalid"]
    message: str
    monitor: str | None = None
    convention: str | None = None


@dataclass
class _Found:
    messages: list[Message] = field(default_factory=list)
    output: str | None = None
    convention: str | None = None
    raw: RawMessages | None = None


def attribute(span: SpanRecord, name: str) -> Any:
    """A span attribute, else the resource's."""
    if not name:
        return None
    if name in span.attributes:
        return span.attributes[name]
    return span.resource.get(name)


def _name(span: SpanRecord) -> str:
    """The span's name as a message quotes it (a monitor's status keeps the message): 80 characters at most."""
    name = span.name if len(span.name) <= 80 else span.name[:77] + "..."
    return repr(name)


def read_span(span: SpanRecord, options: ReadOptions) -> LlmCall | Skip:
    """The span as an LLM call, or why it is skipped."""
    monitor = _text_or_none(attribute(span, MONITOR_ATTRIBUTE))
    convention = _convention(span)
    if convention is None:
        return Skip("not_llm", f"span {_name(span)} is not an LLM call", monitor)
    found = (
        _current(span, options.defer_messages)
        or _openinference(span)
        or _openllmetry(span)
        or _events(span)
        or _Found(convention=convention)
    )
    convention = found.convention or convention
    if (not found.output or not found.output.strip()) and _answered_with_tool_call(span):
        return Skip(
            "tool_call",
            f"LLM span {_name(span)} answered with a tool call, no text to judge (the answer after the tool is)",
            monitor,
            convention,
        )
    if not found.output or not found.output.strip():
        switch = CAPTURE_SWITCHES["gen_ai" if convention.startswith("gen_ai") else convention]
        return Skip(
            "no_content",
            f"LLM span {_name(span)} carries no message content (content capture is off): set {switch}",
            monitor,
            convention,
        )
    if not span.trace_id or not span.span_id:
        return Skip("invalid", f"span {_name(span)} has no valid trace id and span id{_ID_HINT}", monitor, convention)
    conversation = ""
    for name in (options.conversation_attribute, *CONVERSATION_ATTRIBUTES):
        value = _text_or_none(attribute(span, name))
        if value:
            conversation = _conversation_id(value)
            break
    model = next((str(v) for n in MODEL_ATTRIBUTES if (v := attribute(span, n)) not in (None, "")), None)
    return LlmCall(
        trace_id=span.trace_id,
        span_id=span.span_id,
        started_ns=span.start_ns,
        convention=convention,
        monitor=monitor,
        conversation_id=conversation,
        messages=found.messages,
        output=found.output,
        system=_slice(attribute(span, options.system_attribute), "unknown_service"),
        version=_slice(attribute(span, options.version_attribute), "unknown"),
        segment=_slice(attribute(span, SEGMENT_ATTRIBUTE), "") or None,
        model=model[:200] if model else None,
        persona=_lines(attribute(span, options.persona_attribute)),
        memory=_text_or_none(attribute(span, options.memory_attribute)),
        raw=found.raw,
    )


def _convention(span: SpanRecord) -> str | None:
    """Which convention marks the span as an LLM call (None: not one)."""
    attrs = span.attributes
    kind = attrs.get("openinference.span.kind")
    if kind is not None:
        return "openinference" if str(kind).upper() == "LLM" else None
    operation = attrs.get("gen_ai.operation.name")
    if operation is not None and str(operation) in NOT_CHAT:
        return None
    if "gen_ai.input.messages" in attrs or "gen_ai.output.messages" in attrs:  # the common case, without a scan
        return "gen_ai"
    if "llm.request.type" in attrs or any(k.startswith(("gen_ai.prompt.", "gen_ai.completion.")) for k in attrs):
        if attrs.get("llm.request.type") not in (None, "chat", "completion"):
            return None
        return "openllmetry"
    if any(k.startswith("llm.input_messages.") or k.startswith("llm.output_messages.") for k in attrs):
        return "openinference"
    if any(e.name.startswith("gen_ai.") for e in span.events):
        return "gen_ai_events"
    if operation is not None or any(k.startswith("gen_ai.") for k in attrs):
        return "gen_ai"
    return None


def _tool_reason(value: Any) -> bool:
    return str(value).strip().lower() in TOOL_REASONS


def _answered_with_tool_call(span: SpanRecord) -> bool:
    """The call's output is a tool call (the model asked for a tool; the text answer comes in a later call), in any
    convention: a ``tool_call`` part or finish reason, OpenLLMetry's ``gen_ai.completion.N.tool_calls.*``,
    OpenInference's ``llm.output_messages.N.message.tool_calls.*``, a ``gen_ai.choice`` event's tool calls."""
    attrs = span.attributes
    reasons = _json_value(attrs.get("gen_ai.response.finish_reasons"))
    if any(_tool_reason(r) for r in (reasons if isinstance(reasons, list) else [reasons] if reasons else [])):
        return True
    for key, value in attrs.items():
        if key.startswith("gen_ai.completion.") and (
            ".tool_calls." in key or (key.endswith(".finish_reason") and _tool_reason(value))
        ):
            return True
        if key.startswith("llm.output_messages.") and ".message.tool_calls." in key:
            return True
    for source in [attrs, *(e.attributes for e in span.events if e.name == DETAILS_EVENT)]:
        for raw in _json_list(source.get("gen_ai.output.messages")):
            if not isinstance(raw, dict):
                continue
            parts = raw.get("parts")
            if _tool_reason(raw.get("finish_reason", "")) or (
                isinstance(parts, list) and any(isinstance(p, dict) and p.get("type") == "tool_call" for p in parts)
            ):
                return True
    for event in span.events:
        if event.name != "gen_ai.choice":
            continue
        if _tool_reason(event.attributes.get("finish_reason", "")):
            return True
        body = _event_body(event.attributes)
        if isinstance(body, dict):
            inner = body.get("message", body)
            if _tool_reason(body.get("finish_reason", "")) or (isinstance(inner, dict) and inner.get("tool_calls")):
                return True
    return False


# -- the current GenAI conventions -------------------------------------------------------------------------------


def _current(span: SpanRecord, defer: bool = False) -> _Found | None:
    sources = [span.attributes, *(e.attributes for e in span.events if e.name == DETAILS_EVENT)]
    for attrs in sources:
        if "gen_ai.input.messages" not in attrs and "gen_ai.output.messages" not in attrs:
            continue
        outputs = [m for raw in _json_list(attrs.get("gen_ai.output.messages")) if (m := _part_message(raw))]
        output = next((m.text for m in outputs if m.role == "assistant" and m.text), None)
        given, instructions = attrs.get("gen_ai.input.messages"), attrs.get("gen_ai.system_instructions")
        if defer and isinstance(given, str | None) and isinstance(instructions, str | None):
            return _Found([], output, "gen_ai", RawMessages(given, instructions))
        return _Found(_input_messages(given, instructions), output, "gen_ai")
    return None


def _input_messages(given: Any, instructions: Any) -> list[Message]:
    """The input messages of the current conventions, the system instructions first."""
    messages = [m for raw in _json_list(given) if (m := _part_message(raw))]
    text = _parts_text(_json_value(instructions))
    if text:
        messages.insert(0, Message("system", text))
    return messages


def _part_message(raw: Any) -> Message | None:
    if not isinstance(raw, dict):
        return None
    role = str(raw.get("role") or "")
    text = _parts_text(raw.get("parts")) if "parts" in raw else _content_text(raw.get("content"))
    if _role(role) == "user":
        text = _with_media(text, raw.get("parts") if "parts" in raw else _json_value(raw.get("content")))
    return Message(_role(role), text) if role else None


MEDIA_TYPES = {
    "image": "image",
    "image_url": "image",
    "input_image": "image",
    "audio": "audio",
    "input_audio": "audio",
    "video": "video",
    "blob": "file",
    "uri": "file",
    "file": "file",
    "input_file": "file",
}


def _with_media(text: str, parts: Any) -> str:
    """A user message's text with a placeholder (``[image]``, ``[audio]``, ``[file]``) per media part: a message
    that is only a picture stays a turn of the dialogue (the judge sees the user sent something) rather than
    vanishing."""
    if not isinstance(parts, list):
        return text
    marks = []
    for part in parts:
        if isinstance(part, dict) and str(part.get("type", "")) in MEDIA_TYPES:
            # a modality that is no string is not quoted (its Python repr could outgrow the JSON it came from,
            # which intake.raw_within relies on not happening)
            modality = part.get("modality")
            marks.append(f"[{modality if isinstance(modality, str) and modality else MEDIA_TYPES[str(part['type'])]}]")
    return "\n".join([t for t in (text, *marks) if t])


def _parts_text(parts: Any) -> str:
    """The text parts of a message's ``parts`` (``{"type": "text", "content": ...}``), joined."""
    if isinstance(parts, str):
        return parts
    if not isinstance(parts, list):
        return ""
    texts = []
    for part in parts:
        if isinstance(part, dict) and part.get("type", "text") == "text":
            value = part.get("content", part.get("text"))
            if isinstance(value, str):
                texts.append(value)
        elif isinstance(part, str):
            texts.append(part)
    return "\n".join(texts)


# -- OpenInference -----------------------------------------------------------------------------------------------


def _indexed(attrs: dict[str, Any], prefix: str) -> dict[int, dict[str, Any]]:
    """``<prefix>.<N>.<rest>`` attributes grouped by N."""
    out: dict[int, dict[str, Any]] = {}
    for key, value in attrs.items():
        if not key.startswith(prefix):
            continue
        number, _, rest = key[len(prefix) :].partition(".")
        if number.isdigit() and rest:
            out.setdefault(int(number), {})[rest] = value
    return out


def _openinference(span: SpanRecord) -> _Found | None:
    attrs = span.attributes
    inputs = _indexed(attrs, "llm.input_messages.")
    outputs = _indexed(attrs, "llm.output_messages.")
    if not inputs and not outputs:
        return None

    def message(fields: dict[str, Any]) -> Message:
        text = fields.get("message.content")
        if not isinstance(text, str):
            contents = _indexed(fields, "message.contents.")
            text = "\n".join(
                str(c.get("message_content.text"))
                for _, c in sorted(contents.items())
                if c.get("message_content.type", "text") == "text" and c.get("message_content.text") is not None
            )
            if _role(str(fields.get("message.role") or "")) == "user":
                media = [{"type": c.get("message_content.type")} for _, c in sorted(contents.items())]
                text = _with_media(text, media)
        return Message(_role(str(fields.get("message.role") or "")), _content_text(text))

    messages = [message(inputs[n]) for n in sorted(inputs)]
    replies = [message(outputs[n]) for n in sorted(outputs)]
    output = next((m.text for m in replies if m.role == "assistant" and m.text), None)
    return _Found(messages, output, "openinference")


# -- OpenLLMetry -------------------------------------------------------------------------------------------------


def _openllmetry(span: SpanRecord) -> _Found | None:
    attrs = span.attributes
    prompts = _indexed(attrs, "gen_ai.prompt.")
    completions = _indexed(attrs, "gen_ai.completion.")
    if not prompts and not completions:
        return None
    messages = []
    for _, prompt in sorted(prompts.items()):
        role = _role(str(prompt.get("role") or "user"))
        text = _content_text(prompt.get("content"))
        if role == "user":
            text = _with_media(text, _json_value(prompt.get("content")))
        messages.append(Message(role, text))
    replies = [
        Message(_role(str(c.get("role") or "assistant")), _content_text(c.get("content")))
        for _, c in sorted(completions.items())
    ]
    output = next((m.text for m in replies if m.role == "assistant" and m.text), None)
    return _Found(messages, output, "openllmetry")


# -- the older event form ----------------------------------------------------------------------------------------


def _events(span: SpanRecord) -> _Found | None:
    messages: list[Message] = []
    output: str | None = None
    seen = False
    for event in span.events:
        attrs = event.attributes
        if event.name in ROLE_EVENTS:
            seen = True
            body = _event_body(attrs)
            role = ROLE_EVENTS[event.name]
            messages.append(Message(role, _content_text(body.get("content") if isinstance(body, dict) else body)))
        elif event.name == "gen_ai.choice":
            seen = True
            body = _event_body(attrs)
            if isinstance(body, dict):
                inner = body.get("message", body)
                text = _content_text(inner.get("content") if isinstance(inner, dict) else inner)
            else:
                text = _content_text(body)
            if output is None and text:
                output = text
        elif event.name == "gen_ai.content.prompt":
            seen = True
            for raw in _json_list(attrs.get("gen_ai.prompt")):
                if isinstance(raw, dict) and raw.get("role"):
                    messages.append(Message(_role(str(raw["role"])), _content_text(raw.get("content"))))
        elif event.name == "gen_ai.content.completion":
            seen = True
            for raw in _json_list(attrs.get("gen_ai.completion")):
                if isinstance(raw, dict) and output is None:
                    text = _content_text(raw.get("content"))
                    output = text or None
    return _Found(messages, output, "gen_ai_events") if seen else None


def _event_body(attrs: dict[str, Any]) -> Any:
    """An event's body as instrumentations put it on span events: ``gen_ai.event.content`` or ``body`` (JSON),
    ``message`` (an object or JSON), else the attributes themselves (``content``, ``role``)."""
    for name in ("gen_ai.event.content", "body", "message"):
        if name in attrs:
            value = _json_value(attrs[name])
            if name == "message" and isinstance(value, dict):
                return {"message": value}
            return value
    return attrs


# -- values ------------------------------------------------------------------------------------------------------


def _json_value(value: Any) -> Any:
    """A structured attribute as is; a JSON string parsed (a string that is not JSON stays the string)."""
    if isinstance(value, str):
        stripped = value.strip()
        if stripped[:1] in ("[", "{", '"'):
            try:
                return json.loads(stripped)
            except (ValueError, RecursionError):
                return value
    return value


def _json_list(value: Any) -> list[Any]:
    parsed = _json_value(value)
    return parsed if isinstance(parsed, list) else []


def _content_text(content: Any) -> str:
    """A message's content: a string, a JSON list of parts (OpenAI's ``[{"type": "text", "text": ...}]``)."""
    if content is None:
        return ""
    parsed = _json_value(content) if isinstance(content, str) and content.lstrip()[:1] == "[" else content
    if isinstance(parsed, list):
        return _parts_text(parsed)
    if isinstance(parsed, dict):
        return _content_text(parsed.get("content", parsed.get("text")))
    return str(parsed)


def _role(role: str) -> str:
    role = role.lower()
    if role in ("developer",):
        return "system"
    if role in ("model", "ai", "bot"):
        return "assistant"
    if role in ("human",):
        return "user"
    return role


def _text_or_none(value: Any) -> str | None:
    if value is None:
        return None
    text = str(value).strip()
    return text or None


def _conversation_id(value: str) -> str:
    """A conversation id as stored (200 characters at most): a longer one keeps its first 150 characters and a
    digest of the whole, so ids sharing a long prefix (``tenant/user/.../thread-N``) stay apart."""
    if len(value) <= 200:
        return value
    digest = hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:40]
    return f"{value[:150]}~{digest}"


def _slice(value: Any, default: str) -> str:
    """A system / version / segment value the monitor's slices accept: letters, digits and ``_.:@/+- ``, 100 at
    most, starting with a letter or digit (other characters become ``_``)."""
    text = SLICE_BAD.sub("_", str(value).strip())[:100] if value not in (None, "") else ""
    if text and not text[0].isalnum():
        text = ("v" + text)[:100]
    return text or default


def _lines(value: Any) -> list[str] | None:
    value = _json_value(value)
    if value is None or value == "":
        return None
    if isinstance(value, list):
        return [str(v) for v in value if str(v).strip()]
    return [line for line in str(value).splitlines() if line.strip()]
