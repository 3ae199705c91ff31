"""Conversations rebuilt from what apps really send (issue 38 review): a model's output keeps its trailing newline
while the app's history strips it; conversation ids longer than the stored 200 characters stay apart."""

from __future__ import annotations

from dataclasses import replace

from judge_api.otlp.conversations import rebuild
from judge_api.otlp.decode import SpanRecord
from judge_api.otlp.genai import LlmCall, Message, ReadOptions, read_span

from .test_conversations import GAP, call, expected


def test_history_matches_an_earlier_output_up_to_surrounding_whitespace() -> None:
    # the model answered "Nice name!\n"; the app keeps "Nice name!" (stripped) in the history it sends next
    first = replace(call(0, "whole"), output=call(0, "whole").output + "\n")
    second = call(1, "whole")
    rebuilt = rebuild(second, [first, second], GAP)
    assert rebuilt.complete and rebuilt.missing == 0  # no wait for a turn that has arrived
    assert [(t.speaker, t.text.strip()) for t in rebuilt.dialogue] == [(t.speaker, t.text) for t in expected(1)]
    assert len(rebuilt.dialogue) == len(expected(1))  # the exchange once, not twice


def _span(conversation: str, span: int) -> SpanRecord:
    attrs = {
        "gen_ai.operation.name": "chat",
        "gen_ai.conversation.id": conversation,
        "gen_ai.input.messages": '[{"role": "user", "parts": [{"type": "text", "content": "hi"}]}]',
        "gen_ai.output.messages": '[{"role": "assistant", "parts": [{"type": "text", "content": "hello"}]}]',
    }
    return SpanRecord("1" * 32, f"{span:016x}", "chat", 1, 2, attrs, {})


def test_conversation_ids_sharing_their_first_200_characters_stay_apart() -> None:
    prefix = "tenant-42/user-7/" + "x" * 200
    first = read_span(_span(prefix + "/thread-1", 1), ReadOptions())
    second = read_span(_span(prefix + "/thread-2", 2), ReadOptions())
    assert isinstance(first, LlmCall) and isinstance(second, LlmCall)
    assert first.conversation_id != second.conversation_id
    assert len(first.conversation_id) <= 200 and first.conversation_id.startswith("tenant-42/user-7/")
    short = read_span(_span("conv-1", 3), ReadOptions())
    assert isinstance(short, LlmCall) and short.conversation_id == "conv-1"
    assert [m for m in first.messages] == [Message("user", "hi")]
