"""Cache-aware dispatch's grouping (issue 24 item 2): the shared prefix of a group's prompts, who goes first, and
the Anthropic request split at the prefix with the text unchanged."""

from __future__ import annotations

from typing import Any

import pytest

from judge_api.prefixes import CachePrefix, dispatch_order, plan_groups, shared_prefix
from workers.clients import JudgeRequest, anthropic_messages

HISTORY = "Related Conversation History\n" + "".join(f"user: turn {k}\nbot: ok {k}\n" for k in range(50))


def memochat(response: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": f"{HISTORY}Bot Response\nbot: {response}\nRate it: [[rating]]."}]


def flatten(messages: list[dict[str, str]]) -> str:
    return "".join(m["content"] for m in messages)


def test_prefix_ends_at_the_start_of_the_first_differing_line() -> None:
    prompts = [memochat("Rex is a beagle."), memochat("Rex is a cat."), memochat("I have no idea.")]
    prefix = shared_prefix(prompts)
    assert prefix is not None and (prefix.message, prefix.offset) == (0, len(HISTORY) + len("Bot Response\n"))
    assert prefix.text(prompts[1]) == HISTORY + "Bot Response\n"
    # the cut does not depend on which candidates happen to share a batch (same key in every batch)
    other = shared_prefix([memochat("Rex is a beagle, yes."), memochat("Rex is a beagle!")])
    assert other is not None and other.key == prefix.key and other.offset == prefix.offset


def test_prefix_across_messages() -> None:
    a = [{"role": "system", "content": "Judge."}, {"role": "user", "content": HISTORY + "A: one\n"}]
    b = [{"role": "system", "content": "Judge."}, {"role": "user", "content": HISTORY + "A: two\n"}]
    prefix = shared_prefix([a, b])
    assert prefix is not None and prefix.message == 1 and prefix.chars == len("Judge.") + len(HISTORY)
    # the candidate first: nothing but the line before it is shared
    first = shared_prefix(
        [
            [{"role": "user", "content": "Response: x\n" + HISTORY}],
            [{"role": "user", "content": "Response: y\n" + HISTORY}],
        ]
    )
    assert first is None


def test_plan_marks_only_long_enough_groups_of_two_or_more() -> None:
    prompts = [memochat("a"), memochat("b"), memochat("c"), memochat("z"), [{"role": "user", "content": "x"}]]
    keys = ["item1", "item1", "item1", "item2", "item3"]
    groups = plan_groups(keys, prompts, lambda _i, text: len(text) > 100)
    assert [g.members for g in groups] == [[0, 1, 2], [3], [4]]
    assert groups[0].prefix is not None and groups[1].prefix is None and groups[2].prefix is None
    now, later = dispatch_order(groups)
    assert now == [0, 3, 4] and later == {0: [1, 2]}
    short = plan_groups(keys, prompts, lambda _i, text: len(text) > 10_000)
    assert all(g.prefix is None for g in short)
    assert dispatch_order(short) == ([0, 1, 2, 3, 4], {})


@pytest.mark.parametrize(
    "messages",
    [
        memochat("Rex is a beagle."),  # system only: becomes the user turn
        [{"role": "system", "content": HISTORY + "Response: x"}, {"role": "user", "content": "Rate it."}],
        [{"role": "system", "content": "Judge."}, {"role": "user", "content": HISTORY + "Response: x"}],
    ],
)
def test_anthropic_breakpoint_keeps_the_text(messages: list[dict[str, str]]) -> None:
    other = [dict(m, content=m["content"].replace("x", "y").replace("beagle", "cat")) for m in messages]
    prefix = shared_prefix([messages, other])
    assert prefix is not None
    plain_system, plain = anthropic_messages(JudgeRequest(messages))
    system, marked = anthropic_messages(JudgeRequest(messages, cache_prefix=prefix))

    def text(value: str | list[dict[str, Any]]) -> str:
        return value if isinstance(value, str) else "".join(b["text"] for b in value)

    assert text(system) == text(plain_system)
    assert [text(m["content"]) for m in marked] == [text(m["content"]) for m in plain]
    blocks = [b for value in [system, *(m["content"] for m in marked)] if isinstance(value, list) for b in value]
    assert sum("cache_control" in b for b in blocks) == 1
    head = next(b for b in blocks if "cache_control" in b)
    assert head["text"].endswith(prefix.text(messages)[-50:])


def test_no_prefix_no_blocks() -> None:
    system, messages = anthropic_messages(JudgeRequest(memochat("x")))
    assert system == "" and isinstance(messages[0]["content"], str)
    unused = CachePrefix(message=5, offset=3, chars=3, key="k")
    assert anthropic_messages(JudgeRequest(memochat("x"), cache_prefix=unused)) == (system, messages)
