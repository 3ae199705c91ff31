"""Hostile inputs to the span reader (issue 38 review): a tool-call answer in each convention is a ``tool_call``
skip, never blamed on content capture; OTLP/JSON values a careless reader would misread."""

from __future__ import annotations

import json
from typing import Any

import pytest

from judge_api.otlp.decode import OtlpError, decode
from judge_api.otlp.genai import ReadOptions, Skip, read_span

from .spans import SpanSpec, encoded, export, to_json

QUESTION = [("user", "Weather in Paris?")]

TOOL_CALLS: dict[str, SpanSpec] = {
    # opentelemetry-instrumentation-openai (OpenLLMetry): the completion has tool_calls, no content
    "openllmetry": SpanSpec(
        1,
        1,
        attrs={
            "llm.request.type": "chat",
            "gen_ai.system": "openai",
            "gen_ai.prompt.0.role": "user",
            "gen_ai.prompt.0.content": "Weather in Paris?",
            "gen_ai.completion.0.role": "assistant",
            "gen_ai.completion.0.finish_reason": "tool_calls",
            "gen_ai.completion.0.tool_calls.0.id": "call_1",
            "gen_ai.completion.0.tool_calls.0.name": "get_weather",
            "gen_ai.completion.0.tool_calls.0.arguments": '{"city": "Paris"}',
        },
    ),
    # openinference-instrumentation-openai: the output message carries tool_calls
    "openinference": SpanSpec(
        1,
        2,
        attrs={
            "openinference.span.kind": "LLM",
            "llm.input_messages.0.message.role": "user",
            "llm.input_messages.0.message.content": "Weather in Paris?",
            "llm.output_messages.0.message.role": "assistant",
            "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "get_weather",
            "llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments": '{"city": "Paris"}',
        },
    ),
    # the older event form: the choice's message has tool_calls and no content
    "gen_ai events": SpanSpec(
        1,
        3,
        attrs={"gen_ai.system": "openai", "gen_ai.operation.name": "chat"},
        events=[
            ("gen_ai.user.message", {"gen_ai.system": "openai", "content": "Weather in Paris?"}),
            (
                "gen_ai.choice",
                {
                    "gen_ai.system": "openai",
                    "gen_ai.event.content": json.dumps(
                        {
                            "index": 0,
                            "finish_reason": "tool_calls",
                            "message": {
                                "role": "assistant",
                                "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "x"}}],
                            },
                        }
                    ),
                },
            ),
        ],
    ),
    # the current conventions on the details event
    "gen_ai details event": SpanSpec(
        1,
        4,
        attrs={"gen_ai.operation.name": "chat"},
        events=[
            (
                "gen_ai.client.inference.operation.details",
                {
                    "gen_ai.input.messages": json.dumps(
                        [{"role": "user", "parts": [{"type": "text", "content": "?"}]}]
                    ),
                    "gen_ai.output.messages": json.dumps(
                        [
                            {
                                "role": "assistant",
                                "parts": [{"type": "tool_call", "id": "c", "name": "f", "arguments": {}}],
                            }
                        ]
                    ),
                },
            )
        ],
    ),
}


@pytest.mark.parametrize("name", list(TOOL_CALLS))
@pytest.mark.parametrize("encoding", ["protobuf", "json"])
def test_a_tool_call_answer_is_a_tool_call_skip_in_every_convention(name: str, encoding: str) -> None:
    body, _ = encoded(export([TOOL_CALLS[name]]), encoding)
    [span] = decode(body, "protobuf" if encoding == "protobuf" else "json")
    read = read_span(span, ReadOptions())
    assert isinstance(read, Skip) and read.kind == "tool_call", read
    assert "tool call" in read.message and "CONTENT" not in read.message


def test_an_llm_span_without_content_is_still_blamed_on_content_capture() -> None:
    body, _ = encoded(export([SpanSpec(1, 9, attrs={"gen_ai.operation.name": "chat"})]), "json")
    [span] = decode(body, "json")
    read = read_span(span, ReadOptions())
    assert isinstance(read, Skip) and read.kind == "no_content"


def _json_with_attribute(value: dict[str, Any]) -> bytes:
    data = to_json(export([SpanSpec(1, 1, attrs={"flag": True})]))
    data["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["attributes"] = [{"key": "flag", "value": value}]
    return json.dumps(data).encode()


def test_a_bool_value_that_is_a_string_is_a_400_not_true() -> None:
    [span] = decode(_json_with_attribute({"boolValue": False}), "json")
    assert span.attributes["flag"] is False
    with pytest.raises(OtlpError) as refused:
        decode(_json_with_attribute({"boolValue": "false"}), "json")  # bool("false") is True
    assert refused.value.status == 400 and "boolValue" in refused.value.message


def test_an_error_quotes_a_long_bad_value_briefly() -> None:
    data = to_json(export([SpanSpec(1, 1)]))
    data["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["startTimeUnixNano"] = "9" * 1000 + "x"
    with pytest.raises(OtlpError) as refused:
        decode(json.dumps(data).encode(), "json")
    assert refused.value.status == 400 and len(refused.value.message) < 200


def test_base64_ids_in_otlp_json_are_rejected_saying_they_must_be_hex() -> None:
    """protobuf's own JSON printer writes bytes as base64; OTLP/JSON wants hex: the span is rejected, saying so."""
    from google.protobuf.json_format import MessageToDict

    from .spans import current

    data = MessageToDict(export([SpanSpec(1, 1, attrs=current([("user", "hi")], "hello"))]))
    [span] = decode(json.dumps(data).encode(), "json")
    read = read_span(span, ReadOptions())
    assert isinstance(read, Skip) and read.kind == "invalid" and "hex" in read.message


IMAGE_ONLY: dict[str, dict[str, Any]] = {
    "gen_ai": {
        "gen_ai.operation.name": "chat",
        "gen_ai.input.messages": json.dumps(
            [{"role": "user", "parts": [{"type": "uri", "modality": "image", "uri": "https://example.org/cat.png"}]}]
        ),
        "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": "A cat."}]}]),
    },
    "openllmetry": {
        "llm.request.type": "chat",
        "gen_ai.prompt.0.role": "user",
        "gen_ai.prompt.0.content": json.dumps(
            [{"type": "text", "text": "What is it?"}, {"type": "image_url", "image_url": {"url": "data:image/png;..."}}]
        ),
        "gen_ai.completion.0.role": "assistant",
        "gen_ai.completion.0.content": "A cat.",
    },
    "openinference": {
        "openinference.span.kind": "LLM",
        "llm.input_messages.0.message.role": "user",
        "llm.input_messages.0.message.contents.0.message_content.type": "image",
        "llm.input_messages.0.message.contents.0.message_content.image.image.url": "https://example.org/cat.png",
        "llm.output_messages.0.message.role": "assistant",
        "llm.output_messages.0.message.content": "A cat.",
    },
}
IMAGE_TEXT = {"gen_ai": "[image]", "openllmetry": "What is it?\n[image]", "openinference": "[image]"}


@pytest.mark.parametrize("name", list(IMAGE_ONLY))
def test_a_picture_the_user_sent_stays_a_turn(name: str) -> None:
    from judge_api.otlp.conversations import rebuild
    from judge_api.otlp.genai import LlmCall

    body, _ = encoded(export([SpanSpec(1, 1, attrs={**IMAGE_ONLY[name], "gen_ai.conversation.id": "c"})]), "json")
    [span] = decode(body, "json")
    call = read_span(span, ReadOptions())
    assert isinstance(call, LlmCall), call
    dialogue = rebuild(call, [call], 1800.0).dialogue
    assert [(t.speaker, t.text) for t in dialogue] == [("user", IMAGE_TEXT[name])]
