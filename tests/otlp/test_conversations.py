"""Conversations rebuilt from their spans (judge_api.otlp.conversations): whole-history spans, last-turn spans and
session-only spans give the same dialogue with session boundaries by time gap; out of order, a response is
incomplete until the spans of its history have arrived."""

from __future__ import annotations

import random

from judge_api.otlp.conversations import Turn, rebuild, sessions_of, split
from judge_api.otlp.genai import LlmCall, Message

NS = 1_000_000_000
GAP = 1800.0
# 3 sessions of 2 exchanges: (session, user, bot), a day between sessions, a minute between exchanges
SCRIPT = [
    (1, "My dog is called Rex.", "Nice name!"),
    (1, "He is a beagle.", "Beagles are great."),
    (2, "I'm back.", "Welcome back!"),
    (2, "Rex was ill.", "Sorry to hear that."),
    (3, "Guess what, Rex is fine.", "Great news about Rex!"),
    (3, "What breed is he?", "A beagle."),
]
SYSTEM = "You are a friendly assistant."


def start_of(index: int) -> int:
    session = SCRIPT[index][0]
    return (session * 86_400 + index * 60) * NS


def call(index: int, shape: str, conversation: str = "c1") -> LlmCall:
    """The span of the index-th exchange as an app of that shape sends it: ``whole`` (all history), ``last`` (the
    new message only), ``session`` (this session's history, earlier sessions as memory)."""
    messages = [Message("system", SYSTEM)]
    for j in range(index):
        if shape == "whole" or (shape == "session" and SCRIPT[j][0] == SCRIPT[index][0]):
            messages += [Message("user", SCRIPT[j][1]), Message("assistant", SCRIPT[j][2])]
    messages.append(Message("user", SCRIPT[index][1]))
    return LlmCall(
        trace_id=f"{index + 1:032x}",
        span_id=f"{index + 1:016x}",
        started_ns=start_of(index),
        convention="gen_ai",
        monitor="m",
        conversation_id=conversation,
        messages=messages,
        output=SCRIPT[index][2],
        system="bot",
        version="v1",
    )


def expected(index: int) -> list[Turn]:
    turns: list[Turn] = []
    for session, user, bot in SCRIPT[:index]:
        turns += [Turn("user", user, session), Turn("bot", bot, session)]
    return [*turns, Turn("user", SCRIPT[index][1], SCRIPT[index][0])]


def test_split_and_sessions() -> None:
    history, new = split(call(2, "whole").messages)
    assert [e.bot for e in history] == ["Nice name!", "Beagles are great."]
    assert new == ("I'm back.",)
    assert sessions_of([0, 60 * NS, 2000 * NS, 2100 * NS, 9000 * NS], GAP) == [1, 1, 2, 2, 3]


def test_every_shape_rebuilds_the_same_dialogue_in_order() -> None:
    for shape in ("whole", "last", "session"):
        calls = [call(i, shape) for i in range(len(SCRIPT))]
        for index, target in enumerate(calls):
            rebuilt = rebuild(target, calls, GAP)
            assert rebuilt.dialogue == expected(index), (shape, index)
            assert rebuilt.complete and rebuilt.missing == 0
            assert rebuilt.session == SCRIPT[index][0]


def test_out_of_order_a_whole_history_span_waits_until_its_history_arrived() -> None:
    calls = [call(i, "whole") for i in range(len(SCRIPT))]
    target = calls[4]
    partial = rebuild(target, [calls[0], calls[3], target], GAP)  # exchanges 1 and 2 (index 1, 2) missing
    assert not partial.complete and partial.missing == 2
    # judged with what arrived: every exchange of its own history is still there, in order
    assert [t.text for t in partial.dialogue] == [t.text for t in expected(4)]
    for order in range(5):
        shuffled = calls[:]
        random.Random(order).shuffle(shuffled)
        assert rebuild(target, shuffled, GAP).dialogue == expected(4)


def test_later_spans_and_other_conversations_do_not_leak_in() -> None:
    calls = [call(i, "last") for i in range(len(SCRIPT))]
    other = [call(i, "last", conversation="c2") for i in range(len(SCRIPT))]
    rebuilt = rebuild(calls[2], [c for c in calls + other if c.conversation_id == "c1"], GAP)
    assert rebuilt.dialogue == expected(2)


def test_a_span_without_conversation_id_is_its_own_messages() -> None:
    lone = call(3, "whole", conversation="")
    rebuilt = rebuild(lone, [lone], GAP)
    assert rebuilt.complete and rebuilt.session is None
    assert [(t.speaker, t.text) for t in rebuilt.dialogue] == [(t.speaker, t.text) for t in expected(3)]
    assert {t.session for t in rebuilt.dialogue} == {None}


def test_a_released_call_kept_as_history_rebuilds_the_same_dialogues() -> None:
    """Released spans are stored trimmed to their new message(s) and output (``as_history``): later responses of
    the conversation are rebuilt the same from them."""
    for shape in ("whole", "session", "last"):
        calls = [call(i, shape) for i in range(len(SCRIPT))]
        trimmed = [c.as_history() for c in calls]
        assert all(len(t.messages) == 1 and t.messages[0].role == "user" for t in trimmed)
        for index, target in enumerate(calls):
            history = [*trimmed[:index], target]
            assert rebuild(target, history, GAP).dialogue == expected(index), (shape, index)
