"""The receiver keeps the current conventions' input messages as the span's JSON text and the processor parses
them (issue 38's request-path cost): the call read back equals the call parsed at once, and a refusal at receipt is
the same whether or not the messages were parsed there."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from judge_api.config import Settings
from judge_api.otlp.decode import SpanRecord
from judge_api.otlp.genai import LlmCall, ReadOptions, read_span
from judge_api.otlp.intake import call_refusal, raw_within

PARTS = [{"role": "user", "parts": [{"type": "text", "content": "Hi, my dog is Rex."}]}]
OUTPUT = json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": "Hello!"}], "finish_reason": "stop"}])


def span(attrs: dict[str, Any], events: list[Any] | None = None) -> SpanRecord:
    base = {"gen_ai.operation.name": "chat", "gen_ai.output.messages": OUTPUT, "gen_ai.conversation.id": "c1"}
    return SpanRecord(
        trace_id="ab" * 16,
        span_id="cd" * 8,
        name="chat gpt-4o",
        start_ns=1_700_000_000_000_000_000,
        end_ns=1_700_000_001_000_000_000,
        attributes={**base, **attrs},
        resource={"service.name": "bot"},
        events=events or [],
    )


CASES: dict[str, dict[str, Any]] = {
    "plain": {"gen_ai.input.messages": json.dumps(PARTS)},
    "with instructions": {
        "gen_ai.input.messages": json.dumps(PARTS),
        "gen_ai.system_instructions": json.dumps([{"type": "text", "content": "You are Max."}]),
    },
    "instructions as a plain string": {"gen_ai.input.messages": json.dumps(PARTS), "gen_ai.system_instructions": "Be"},
    "a system message among the inputs": {
        "gen_ai.input.messages": json.dumps([{"role": "system", "parts": ["Be kind."]}, *PARTS])
    },
    "media parts": {
        "gen_ai.input.messages": json.dumps(
            [{"role": "user", "parts": [{"type": "text", "content": "look"}, {"type": "image", "modality": "image"}]}]
        )
    },
    "openai content strings": {"gen_ai.input.messages": json.dumps([{"role": "user", "content": "hello"}])},
    "not JSON": {"gen_ai.input.messages": "[{not json"},
    "no role": {"gen_ai.input.messages": json.dumps([{"parts": ["x"]}, *PARTS])},
    "emoji as an escaped pair": {"gen_ai.input.messages": json.dumps([{"role": "user", "content": "hi \U0001f600"}])},
    "no input messages": {},
}


@pytest.mark.parametrize("attrs", CASES.values(), ids=list(CASES))
def test_the_call_read_back_equals_the_call_parsed_at_once(attrs: dict[str, Any]) -> None:
    parsed = read_span(span(attrs), ReadOptions())
    deferred = read_span(span(attrs), ReadOptions(defer_messages=True))
    assert isinstance(parsed, LlmCall) and isinstance(deferred, LlmCall)
    assert deferred.raw is not None and deferred.messages == []
    stored = json.loads(json.dumps(deferred.to_json()))  # as the JSON column gives it back
    assert LlmCall.from_json(stored) == parsed
    assert deferred.parsed() == parsed
    assert LlmCall.from_json(json.loads(json.dumps(parsed.to_json()))) == parsed  # rows stored before still read


def test_structured_attributes_are_parsed_at_once() -> None:
    """An exporter that sends the messages as an OTLP array (not a JSON string) has them parsed in the request."""
    read = read_span(span({"gen_ai.input.messages": PARTS}), ReadOptions(defer_messages=True))
    assert isinstance(read, LlmCall) and read.raw is None and read.messages[0].text == "Hi, my dog is Rex."


def settings(**values: Any) -> Settings:
    return Settings().model_copy(update=values)


REFUSALS: dict[str, tuple[dict[str, Any], Settings, str | None]] = {
    "fine": ({"gen_ai.input.messages": json.dumps(PARTS)}, settings(), None),
    "a NUL escape": (
        {"gen_ai.input.messages": json.dumps([{"role": "user", "content": "a\x00b"}])},
        settings(),
        "NUL character",
    ),
    "a lone surrogate escape": (
        {"gen_ai.input.messages": '[{"role": "user", "content": "a\\ud800b"}]'},
        settings(),
        "unpaired surrogate",
    ),
    "an escaped pair is fine": (
        {"gen_ai.input.messages": json.dumps([{"role": "user", "content": "\U0001f600"}])},
        settings(),
        None,
    ),
    "a message over the limit": (
        {"gen_ai.input.messages": json.dumps([{"role": "user", "content": "x" * 150}])},
        settings(max_chars_per_turn=100),
        "DJ_MAX_CHARS_PER_TURN",
    ),
    "long JSON, every message within": (
        {"gen_ai.input.messages": json.dumps([{"role": "user", "content": "x" * 60}] * 3)},
        settings(max_chars_per_turn=100),
        None,
    ),
    "instructions over the limit": (
        {"gen_ai.input.messages": json.dumps(PARTS), "gen_ai.system_instructions": "y" * 150},
        settings(max_chars_per_turn=100),
        "DJ_MAX_CHARS_PER_TURN",
    ),
    "a NUL spelled as text, not a NUL": (
        {"gen_ai.input.messages": json.dumps([{"role": "user", "content": "C:\\u0000"}])},
        settings(),
        None,
    ),
}


@pytest.mark.parametrize(("attrs", "config", "expected"), REFUSALS.values(), ids=list(REFUSALS))
def test_a_refusal_is_the_same_parsed_or_not(attrs: dict[str, Any], config: Settings, expected: str | None) -> None:
    parsed = read_span(span(attrs), ReadOptions())
    deferred = read_span(span(attrs), ReadOptions(defer_messages=True))
    assert isinstance(parsed, LlmCall) and isinstance(deferred, LlmCall)
    assert call_refusal(deferred, config) == call_refusal(parsed, config)
    refusal = call_refusal(deferred, config)
    assert (refusal is None) == (expected is None)
    if expected is not None:
        assert refusal is not None and expected in refusal


def test_raw_within_passes_only_what_cannot_be_refused() -> None:
    assert raw_within(replace_raw('[{"role": "user", "content": "hello"}]'), 100)
    assert not raw_within(replace_raw('[{"role": "user", "content": "' + "x" * 200 + '"}]'), 100)
    assert not raw_within(replace_raw('[{"role": "user", "content": "\\u0000"}]'), 100)
    assert not raw_within(replace_raw('[{"role": "user", "content": "\\uDBFF"}]'), 100)
    assert not raw_within(replace_raw('[{"role": "user", "content": "\ud800"}]'), 100)  # not UTF-8


def replace_raw(text: str) -> Any:
    call = read_span(span({"gen_ai.input.messages": text}), ReadOptions(defer_messages=True))
    assert isinstance(call, LlmCall) and call.raw is not None
    return replace(call.raw)


def test_a_media_part_whose_modality_is_not_a_string_cannot_outgrow_its_json() -> None:
    """Review r38c: ``raw_within`` assumes a message's text is never longer than the JSON it is read from, but a
    media part's ``modality`` was quoted with ``str()``: a list of ``1E15`` (5 characters each in JSON) became
    ``1000000000000000.0, `` (20 each). Such a span passed at receipt unparsed, stored, and was refused at release;
    parsed at receipt it was refused there. A refusal must not depend on whether the request parsed."""
    modality = "[" + ",".join(["1E15"] * 150) + "]"
    given = '[{"role":"user","parts":[{"type":"uri","modality":' + modality + "}]}]"
    attrs = {"gen_ai.input.messages": given}
    config = settings(max_chars_per_turn=1000)
    assert len(given) < 1000
    parsed = read_span(span(attrs), ReadOptions())
    deferred = read_span(span(attrs), ReadOptions(defer_messages=True))
    assert isinstance(parsed, LlmCall) and isinstance(deferred, LlmCall)
    assert call_refusal(deferred, config) == call_refusal(parsed, config)
    assert max(len(m.text) for m in parsed.messages) <= len(given)  # the invariant raw_within relies on
    assert parsed.messages == [replace(parsed.messages[0], text="[file]")]  # not a Python repr of the list


def test_system_messages_and_instructions_over_the_memory_limit_together_are_refused_unparsed_too() -> None:
    """Review r38c: with DJ_MAX_CHARS_PER_TURN over half of the memory limit, a system message among the input
    messages and the system instructions each pass ``raw_within``, but joined (the response's memory) they are over
    MAX_MEMORY: parsed at receipt the span was refused, unparsed it was stored and refused at release."""
    given = json.dumps([{"role": "system", "content": "a" * 120_000}, {"role": "user", "content": "hi"}])
    attrs = {"gen_ai.input.messages": given, "gen_ai.system_instructions": "b" * 120_000}
    config = settings(max_chars_per_turn=150_000)
    parsed = read_span(span(attrs), ReadOptions())
    deferred = read_span(span(attrs), ReadOptions(defer_messages=True))
    assert isinstance(parsed, LlmCall) and isinstance(deferred, LlmCall)
    refusal = call_refusal(parsed, config)
    assert refusal is not None and "system instructions" in refusal
    assert call_refusal(deferred, config) == refusal


# lone high surrogates only: a high and a low one side by side are not reachable (the decoders join the pair) and a
# JSON column's round trip joins them too
_CHARS = st.text(alphabet=st.sampled_from([*'ab \n\x00\x80\ue000\U0010ffff\ud800"\\[{', "\U0001f600"]), max_size=12)
_SCALAR = st.one_of(_CHARS, st.integers(-10, 10**6), st.floats(allow_nan=False), st.booleans(), st.none())
_VALUE = st.recursive(
    _SCALAR,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.sampled_from(["content", "text", "type", "modality", "role"]), inner, max_size=3),
    ),
    max_leaves=12,
)
_PART = st.one_of(
    _CHARS,
    st.fixed_dictionaries(
        {"type": st.sampled_from(["text", "image", "uri", "blob", "tool_call", "x"])},
        optional={"content": _VALUE, "text": _VALUE, "modality": _VALUE},
    ),
)
_MESSAGE = st.fixed_dictionaries(
    {},
    optional={
        "role": st.one_of(st.sampled_from(["user", "system", "assistant", "developer", ""]), _VALUE),
        "parts": st.one_of(st.lists(_PART, max_size=4), _VALUE),
        "content": _VALUE,
    },
)


def _spelt(value: Any, how: int) -> str:
    text = json.dumps(value, ensure_ascii=how != 1)
    return text[:-1] if how == 2 else text  # 2: not JSON


@hypothesis_settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    st.tuples(st.lists(_MESSAGE, max_size=4), st.integers(0, 2)).map(lambda t: _spelt(*t)),
    st.one_of(st.none(), _CHARS, st.tuples(st.lists(_PART, max_size=3), st.integers(0, 2)).map(lambda t: _spelt(*t))),
    st.integers(3, 60),
)
def test_deferred_or_not_the_refusal_and_the_call_read_back_are_the_same(
    given_messages: str, instructions: str | None, limit: int
) -> None:
    """Review r38c, differential: for generated input messages (escapes, surrogates, NULs, media parts, values of
    any JSON type where text is expected, text that is not JSON) the request refuses a deferred call exactly when it
    refuses the call parsed at once, and a call it keeps reads back as the call parsed at once."""
    attrs = {"gen_ai.input.messages": given_messages}
    if instructions is not None:
        attrs["gen_ai.system_instructions"] = instructions
    config = settings(max_chars_per_turn=limit)
    parsed = read_span(span(attrs), ReadOptions())
    deferred = read_span(span(attrs), ReadOptions(defer_messages=True))
    assert isinstance(parsed, LlmCall) and isinstance(deferred, LlmCall)
    refusal = call_refusal(parsed, config)
    assert (call_refusal(deferred, config) is None) == (refusal is None)
    if refusal is None:
        assert LlmCall.from_json(json.loads(json.dumps(deferred.to_json()))) == parsed
