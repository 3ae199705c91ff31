"""Each reference memory strategy against the judge simulator acting as the chat model: scripted replies reveal which
memory text reached it, and the exact prompts it was sent are read back from the simulator."""

from __future__ import annotations

from typing import Any

import pytest

from judge_api.config import Settings
from judge_api.responders import parse_responder
from judge_api.strategies import get_strategies
from judge_simulator.process import SimulatorProcess
from workers.responders.callers import Answer, build_responder

ITEM: dict[str, Any] = {
    "id": "d1",
    "dialogue": [
        {"speaker": "user", "text": "I have two cats.", "session": 1},
        {"speaker": "bot", "text": "I am a vet.", "session": 1},
        {"speaker": "user", "text": "I moved to  Oslo.", "session": 2},
        {"speaker": "bot", "text": "I love snow.", "session": 2},
        {"speaker": "user", "text": "Hi again!", "session": 3},
        {"speaker": "bot", "text": "Hello, how are the cats?", "session": 3},
        {"speaker": "user", "text": "How many cats do I have?", "session": 3},
    ],
    "persona": {"user": ["I have two cats.", "I live in Oslo."], "bot": ["I am a vet."]},
    "candidates": {},
}

# The recursive-summarisation paper's memory-iteration prompt (table "The prompt design of memory iteration"),
# typed here from the paper, not read from the template, so a template edit that changes the paper's text fails.
RSUM_MEMORY_ITERATION = (
    "You are an advanced AI language model with the ability to store and update a memory to keep track of\n"
    "key personality information for both the user and the bot. You will receive a previous memory and\n"
    "dialogue context. Your goal is to update the memory by incorporating the new personality information.\n"
    "To successfully update the memory, follow these steps:\n"
    "1.Carefully analyze the existing memory and extract the key personality of the user and bot from it.\n"
    "2. Consider the dialogue context provided to identify any new or changed personality that needs to\n"
    "be incorporated into the memory.\n"
    "3. Combine the old and new personality information to create an updated representation of the user and\n"
    "bot's traits.\n"
    "4. Structure the updated memory in a clear and concise manner, ensuring it does not exceed 20 sentences.\n"
    "Remember, the memory should serve as a reference point to\n"
    "maintain continuity in the dialogue and help you respond accurately to the user based on their personality.\n"
)
RSUM_RESPONSE = (
    "You will be provided with a memory containing personality information for both yourself and the user.\n"
    "Your goal is to respond accurately to the user based on the personality traits and dialogue context.\n"
    "Follow these steps to successfully complete the task:\n"
    "1. Analyze the provided memory to extract the key personality traits for both yourself and the user.\n"
    "2. Review the dialogue history to understand the context and flow of the conversation.\n"
    "3. Utilize the extracted personality traits and dialogue context to formulate an appropriate response.\n"
    "4. If no specific personality trait is applicable, respond naturally as a human would.\n"
    "5. Pay attention to the relevance and importance of the personality information, focusing on capturing\n"
    "the most significant aspects while maintaining the overall coherence of the memory.\n"
)
CONTEXT_ONLY = (
    "You are an advanced AI language model capable of engaging in personality-based conversations.\n"
    "Respond to the user based on the provided dialogue context. Craft a response that is natural and\n"
    "conversational.\n"
    "Dialog context: {dialog}\n"
    "The response to user is:"
)
SESSION_1 = "User: I have two cats.\nAssistant: I am a vet."
SESSION_2 = "User: I moved to Oslo.\nAssistant: I love snow."
CURRENT = "User: Hi again!\nAssistant: Hello, how are the cats?\nUser: How many cats do I have?"


def answer(sim: SimulatorProcess, strategy: str, rules: list[dict[str, Any]], **settings: Any) -> Answer:
    sim.set_script({"rules": rules})
    responder = build_responder(
        parse_responder(f"strategy:{strategy}@openai-compatible:sim-chat@{sim.base_url}"),
        Settings(DJ_MAX_ATTEMPTS=2, DJ_BACKOFF_BASE=0.01, DJ_JUDGE_TIMEOUT=5, **settings),
        get_strategies(),
    )
    return responder.respond(ITEM)


def sent(sim: SimulatorProcess) -> list[str]:
    """The user message of every call, oldest first."""
    requests = sorted(sim.requests(100), key=lambda r: r["seq"])
    return [r["body"]["messages"][-1]["content"] for r in requests]


def test_rsum_iterates_memory_session_by_session_then_answers_from_it(sim: SimulatorProcess) -> None:
    result = answer(
        sim,
        "rsum",
        [
            # each reply names the memory it was given, so the next prompt shows which text reached the model
            {
                "name": "m1",
                "match": r"\[Previous Memory\] none \[Session Context\] User: I have two cats",
                "reply": "M1<none+s1>",
            },
            {
                "name": "m2",
                "match": r"\[Previous Memory\] M1<none\+s1> \[Session Context\] User: I moved",
                "reply": "M2<M1+s2>",
            },
            {"name": "wrong-memory", "match": r"store and update a memory", "reply": "MEMORY FROM THE WRONG INPUT"},
            {
                "name": "r",
                "match": r"\[Previous Memory\] M2<M1\+s2> \[Current Context\] User: Hi again",
                "reply": " answered from  M2 ",
            },
            {"name": "wrong-response", "match": r"personality information", "reply": "answered without M2"},
        ],
    )
    assert result.error is None
    assert result.response == "answered from M2"  # chat_text collapses whitespace
    assert result.memory == "M2<M1+s2>"
    assert sent(sim) == [
        RSUM_MEMORY_ITERATION + f"[Previous Memory] none [Session Context] {SESSION_1}",
        RSUM_MEMORY_ITERATION + f"[Previous Memory] M1<none+s1> [Session Context] {SESSION_2}",
        RSUM_RESPONSE + f"[Previous Memory] M2<M1+s2> [Current Context] {CURRENT}",
    ]
    assert [(t["step"], t["session"]) for t in result.trace] == [
        ("memory-iteration", 1),
        ("memory-iteration", 2),
        ("respond", None),
    ]
    assert result.tally.provider_calls == 3 and result.cached_calls == 0


@pytest.mark.parametrize(
    ("strategy", "expected_prompt"),
    [
        ("full-context", CONTEXT_ONLY.format(dialog=f"{SESSION_1}\n{SESSION_2}\n{CURRENT}")),
        ("current-session", CONTEXT_ONLY.format(dialog=CURRENT)),
        (
            "gold-memory",
            RSUM_RESPONSE
            + "[Previous Memory] User: I have two cats. I live in Oslo.\nAssistant: I am a vet. "
            + f"[Current Context] {CURRENT}",
        ),
    ],
)
def test_single_call_strategies_send_the_papers_prompt_with_their_context(
    sim: SimulatorProcess, strategy: str, expected_prompt: str
) -> None:
    result = answer(
        sim,
        strategy,
        [
            {"name": "saw-s1", "match": r"I have two cats", "reply": "saw session 1 or the persona"},
            {"name": "blind", "reply": "saw only the current session"},
        ],
    )
    assert sent(sim) == [expected_prompt]
    assert result.response == (
        "saw only the current session" if strategy == "current-session" else "saw session 1 or the persona"
    )
    assert result.memory is None and result.error is None


def test_memochat_writes_memos_retrieves_and_answers_from_the_evidence(sim: SimulatorProcess) -> None:
    result = answer(
        sim,
        "memochat",
        [
            {
                "name": "write-s1",
                "match": r"Task Conversation:\n\(line 1\) user: I have two cats",
                "reply": "[{'topic': 'pets', 'summary': 'user has two cats.', 'start': 1, 'end': 2}]",
            },
            {"name": "write-s2", "match": r"Task Conversation:", "reply": "I cannot do this."},
            {"name": "retrieve", "match": r"\(3\) pets\. user has two cats\.\n```", "reply": "3"},
            {"name": "retrieve-wrong", "match": r"Query Sentence", "reply": "1"},
            {
                "name": "chat",
                "match": r"\(1\) \{'Related Topics': 'pets', 'Related Summaries': 'user has two cats\.', "
                r"'Related Dialogs': 'user: I have two cats\. ### bot: I am a vet\.'\}",
                "reply": "You have two cats.",
            },
            {"name": "chat-blind", "reply": "no evidence reached me"},
        ],
    )
    assert result.error is None and result.response == "You have two cats."
    calls = sent(sim)
    assert len(calls) == 4  # two memo writings (one per earlier session), one retrieval, one response
    assert calls[0].startswith(
        "You will be shown a 2-line Task Conversation between user and bot. Please read, memorize, and understand "
        "Task Conversation, then complete the task under the guidance of Task Introduction.\n\n```\nTask "
        "Conversation:\n(line 1) user: I have two cats.\n(line 2) bot: I am a vet.\n```\n\n```\nTask Introduction:\n"
    )
    assert calls[0].endswith(
        "the total num of Task Conversation lines 2.\n2 - Intersecting intervals such as "
        "{'topic': 'apple', 'summary': 'user and bot share apples.', 'start': K, 'end': N} and "
        "{'topic': 'pear', 'summary': 'bot sends pear to user.', 'start': N-2, 'end': M} are "
        "illegal.\n```\n\nTask Result:"
    )
    # the unreadable second writing became a NOTO memo, listed under NOTO (MemoChat's dict of topics)
    retrieval = calls[2]
    assert retrieval.startswith("You will be shown 1 Query Sentence and 3 Topic Options.")
    assert (
        "Query Sentence:\nHow many cats do I have?\nTopic Options:\n(1) NOTO. None of the others.\n(2) NOTO. "
        "Partial dialogs about: " in retrieval
    )
    assert retrieval.endswith("not exceed the total num of Topic Options 3.\n```\n\nTask Result:")
    assert calls[3].endswith(
        "\n\nRecent Dialogs:\nuser: Hi again! ### bot: Hello, how are the cats?\n```\n\n"
        "User Input:\nuser: How many cats do I have? ### bot: "
    )
    assert result.memory == "pets: user has two cats."
    assert [t["step"] for t in result.trace] == ["memo-writing", "memo-writing", "memo-retrieval", "respond"]


def test_memochat_skips_retrieval_while_only_noto_exists(sim: SimulatorProcess) -> None:
    item_one_session = {**ITEM, "dialogue": [dict(t, session=1) for t in ITEM["dialogue"]]}
    sim.set_script({"rules": [{"name": "chat", "reply": "plain answer"}]})
    responder = build_responder(
        parse_responder(f"strategy:memochat@openai-compatible:sim-chat@{sim.base_url}"), Settings(), get_strategies()
    )
    result = responder.respond(item_one_session)
    assert result.response == "plain answer"
    assert [t["step"] for t in result.trace] == ["memo-retrieval", "respond"]
    assert result.trace[0]["skipped"] == "memos|length > 1"
    assert len(sent(sim)) == 1 and "Related Evidences:\n\n\nRecent Dialogs:" in sent(sim)[0]
    assert result.memory == ""


@pytest.mark.parametrize(
    ("fault", "error_start"),
    [
        ({"kind": "server_error", "status": 503, "probability": 1.0}, "server_error HTTP 503"),
        ({"kind": "hang", "hang_seconds": 3, "probability": 1.0}, "timeout"),
    ],
)
def test_a_failing_or_hanging_chat_model_is_an_error_with_the_reason(
    sim: SimulatorProcess, fault: dict[str, Any], error_start: str
) -> None:
    sim.set_script({"faults": [fault], "rules": [{"name": "x", "reply": "never"}]})
    responder = build_responder(
        parse_responder(f"strategy:rsum@openai-compatible:sim-chat@{sim.base_url}"),
        Settings(DJ_MAX_ATTEMPTS=2, DJ_BACKOFF_BASE=0.01, DJ_BACKOFF_MAX=0.05, DJ_JUDGE_TIMEOUT=0.5),
        get_strategies(),
    )
    result = responder.respond(ITEM)
    assert result.response is None
    assert result.error is not None and result.error.startswith(error_start), result.error
    assert "(after 2 attempts)" in result.error
    assert result.tally.attempts == 2


def test_an_empty_reply_is_a_failure_not_an_empty_response(sim: SimulatorProcess) -> None:
    result = answer(sim, "current-session", [{"name": "blank", "reply": "   "}])
    assert result.response is None
    assert result.error == "empty response: openai-compatible:sim-chat@" + sim.base_url.rstrip("/") + (
        " answered nothing for strategy 'current-session'"
    )


def test_a_dialogue_without_a_user_turn_to_answer_is_refused_without_a_call(sim: SimulatorProcess) -> None:
    sim.set_script({"rules": [{"name": "x", "reply": "never"}]})
    responder = build_responder(
        parse_responder(f"strategy:full-context@openai-compatible:sim-chat@{sim.base_url}"),
        Settings(),
        get_strategies(),
    )
    result = responder.respond({**ITEM, "dialogue": ITEM["dialogue"][:-1]})
    assert result.error == "strategy: the item's dialogue must end with the user's turn to answer"
    assert sent(sim) == []


def test_a_generation_that_is_gone_starts_no_further_call(sim: SimulatorProcess) -> None:
    """Issue 43: a stored generation's claim is checked before each call; once its run is deleted (the check answers
    no), the strategy's remaining calls are not sent and the generation ends failed, naming why."""
    from workers.responders.callers import PaidReplies
    from workers.stash import LocalReplyStash

    sim.set_script({"rules": []})
    checks: list[bool] = []

    def holds() -> bool:  # the run is deleted once the first call has been answered
        checks.append(sim.stats()["total_calls"] == 0)
        return checks[-1]

    responder = build_responder(
        parse_responder(f"strategy:rsum@openai-compatible:sim-chat@{sim.base_url}"),
        Settings(DJ_MAX_ATTEMPTS=2, DJ_BACKOFF_BASE=0.01, DJ_JUDGE_TIMEOUT=5),
        get_strategies(),
        paid=PaidReplies(LocalReplyStash(), "token", 7, holds=holds),
    )
    result = responder.respond(ITEM)
    assert sim.stats()["total_calls"] == 1  # rsum would make three: two memory iterations and the response
    assert checks == [True, False]
    assert result.response is None and result.error is not None and "generation 7 is gone" in result.error
