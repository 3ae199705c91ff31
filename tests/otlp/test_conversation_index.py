"""ConversationIndex rebuilds every response of a conversation as ``rebuild`` does, without re-sorting and re-splitting
the whole conversation for each one (which made a long conversation cubic: 2,000 spans took 13.5 s)."""

from __future__ import annotations

import random
import time

import pytest

from judge_api.otlp.conversations import NS, ConversationIndex, rebuild
from judge_api.otlp.genai import LlmCall, Message


def conversation(rng: random.Random, n_spans: int, whole_history: bool) -> list[LlmCall]:
    """A conversation of ``n_spans`` calls over a few sessions; each call carries the whole history, or only the
    current session's (or, now and then, nothing but the last turn), with the odd repeated exchange and stray text."""
    calls: list[LlmCall] = []
    messages: list[Message] = [Message("system", "You are Rex's owner's assistant.")]
    session_start = 0
    started = 1_000 * NS
    for i in range(n_spans):
        started += rng.choice([5, 20, 3_600 * 3]) * NS
        if started - calls[-1].started_ns > 1_800 * NS if calls else False:
            session_start = len(messages)
        user = rng.choice(["hi", "Do you remember my dog?", f"turn {i}", "ok"])
        messages = [*messages, Message("user", user)]
        if whole_history:
            sent = messages
        elif rng.random() < 0.2:
            sent = [messages[0], messages[-1]]
        else:
            sent = [messages[0], *messages[session_start:]]
        output = rng.choice(["Yes, Rex!", f"answer {i}", "Sure.\n"])
        calls.append(
            LlmCall(
                trace_id=f"{rng.getrandbits(64):032x}",
                span_id=f"{i:016x}",
                started_ns=started,
                convention="genai",
                monitor="m",
                conversation_id="c1",
                messages=list(sent),
                output=output,
                system="bot",
                version="1",
            )
        )
        messages = [*messages, Message("assistant", output.strip() if rng.random() < 0.5 else output)]
    return calls


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("whole_history", [True, False])
def test_the_index_rebuilds_each_response_as_rebuild_does(seed: int, whole_history: bool) -> None:
    rng = random.Random(seed)
    calls = conversation(rng, rng.randint(1, 40), whole_history)
    arrived = rng.sample(calls, k=rng.randint(1, len(calls)))  # out of order, some not yet arrived
    index = ConversationIndex(arrived, gap_s=1_800)
    for call in calls:
        assert index.rebuild(call) == rebuild(call, arrived, 1_800), call.span_id


def test_a_call_stored_twice_at_two_times_follows_the_plain_rule() -> None:
    calls = conversation(random.Random(3), 6, True)
    again = LlmCall(**{**calls[4].__dict__, "started_ns": calls[1].started_ns - 1})
    arrived = [*calls, again]
    index = ConversationIndex(arrived, gap_s=1_800)
    assert index.rebuild(calls[4]) == rebuild(calls[4], arrived, 1_800)


def test_a_long_conversation_is_not_cubic() -> None:
    """600 spans each carrying the whole history: the plain rule re-splits every earlier span's messages for each
    response (cubic: 21 s of CPU here), the index builds the dialogues themselves (quadratic output: 1.1 s). The
    bound is generous, and far below the plain rule's time at this size."""
    calls = conversation(random.Random(1), 600, True)
    started = time.process_time()
    index = ConversationIndex(calls, gap_s=1_800)
    total = sum(len(index.rebuild(call).dialogue) for call in calls)
    elapsed = time.process_time() - started
    assert total == sum(2 * i + 1 for i in range(600))
    assert elapsed < 6.0, elapsed
