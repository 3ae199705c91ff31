"""Cache-aware dispatch: judgments whose prompts share a long prefix are sent so the provider caches it.

The K candidates of an item (MemoChat's consistency judge, memory-faithfulness, memory-audit) put thousands of
tokens of history before the response. Providers bill a cached prefix at a fraction of its price, but only a prompt
that arrives after the first one with that prefix has been processed finds it cached. So a batch's judgments are
grouped by their shared prefix (the prompt up to the first candidate-specific character, cut back to the start of
that line so every batch of the group cuts at the same place); one judgment of a group is sent first, the rest when
it has answered, and the other groups' judgments fill the call slots meanwhile.

The prompts are not changed by a byte: an OpenAI request carries a ``prompt_cache_key`` (a hash of the prefix,
the same for the group in every batch and on every worker), an Anthropic request a ``cache_control`` breakpoint at
the end of the prefix (the message's text split into two text blocks there, see workers.clients). Only a prefix
long enough to be cached (1,024 tokens at OpenAI, Anthropic's per-model minimum: ``min_cache_tokens`` in the price
table) is marked; a shorter one, or a judgment alone in its group, is sent as before and pays nothing extra.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

CACHING_PROVIDERS = ("openai", "anthropic")

Messages = list[dict[str, str]]


@dataclass(frozen=True)
class CachePrefix:
    """Where the shared prefix of a group's prompts ends: ``offset`` characters into message ``message`` (all the
    messages before it are shared whole). ``key`` names the prefix (OpenAI's ``prompt_cache_key``)."""

    message: int
    offset: int
    chars: int
    key: str

    def text(self, messages: Messages) -> str:
        return (
            "".join(m["content"] for m in messages[: self.message]) + messages[self.message]["content"][: self.offset]
        )


@dataclass
class Group:
    members: list[int]  # indices into the planned prompts, leader first
    prefix: CachePrefix | None  # None: not worth marking (alone, or too short to be cached)


def shared_prefix(prompts: Sequence[Messages]) -> CachePrefix | None:
    """The prefix every prompt shares, cut back to the start of the line it ends in; None when nothing is shared."""
    first = prompts[0]
    chars = 0
    for index, message in enumerate(first):
        same = [p[index] if index < len(p) else None for p in prompts]
        if all(m is not None and m["role"] == message["role"] for m in same):
            contents = [m["content"] for m in same if m is not None]
            if all(c == message["content"] for c in contents) and index < len(first) - 1:
                chars += len(message["content"])
                continue
            common = _common_prefix(contents)
            cut = common.rfind("\n") + 1 if len(common) < min(len(c) for c in contents) else len(common)
        else:
            cut = 0
        if cut == 0 and index == 0:
            return None
        if cut == 0:  # the previous message ends the prefix
            index, cut = index - 1, len(first[index - 1]["content"])
            chars -= cut
        text = "".join(m["content"] for m in first[:index]) + first[index]["content"][:cut]
        digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]
        return CachePrefix(index, cut, chars + cut, f"dj-{digest}")
    return None


def _common_prefix(texts: Sequence[str]) -> str:
    lo, hi = min(texts), max(texts)  # the common prefix of all is that of the smallest and the largest
    low, high = 0, min(len(lo), len(hi))
    while low < high:  # binary search on slice equality (compared in C, not character by character here)
        mid = (low + high + 1) // 2
        if lo[:mid] == hi[:mid]:
            low = mid
        else:
            high = mid - 1
    return lo[:low]


def plan_groups(
    keys: Sequence[Hashable],
    prompts: Sequence[Messages],
    long_enough: Callable[[int, str], bool],
) -> list[Group]:
    """Group prompts by ``keys`` (judge, rubric, item: what can share a prefix), in first-seen order. A group of
    two or more whose shared prefix ``long_enough(first member, prefix text)`` accepts gets that prefix."""
    by_key: dict[Hashable, list[int]] = {}
    for index, key in enumerate(keys):
        by_key.setdefault(key, []).append(index)
    groups: list[Group] = []
    for members in by_key.values():
        prefix = shared_prefix([prompts[i] for i in members]) if len(members) > 1 else None
        if prefix is not None and not long_enough(members[0], prefix.text(prompts[members[0]])):
            prefix = None
        groups.append(Group(members, prefix))
    return groups


def dispatch_order(groups: Sequence[Group]) -> tuple[list[int], dict[int, list[int]]]:
    """What to send now (each cached group's leader first, then every uncached judgment) and what to send when a
    leader has answered (leader -> the rest of its group)."""
    leaders = [g.members[0] for g in groups if g.prefix is not None]
    rest = [i for g in groups if g.prefix is None for i in g.members]
    followers = {g.members[0]: g.members[1:] for g in groups if g.prefix is not None}
    return leaders + rest, followers


PROBE_HISTORY = "dj-probe-history"


def rubric_prefix(rubric: Any) -> str:
    """What a rubric's prompts for the candidates of one item share before the first candidate-specific character
    (``dialogue-judge rubrics``): ``history`` (the item's dialogue comes first: cache-aware dispatch can save the
    history's tokens), ``instructions`` (only the fixed text before the candidate), ``none``, or ``unknown`` (the
    probe item could not be rendered)."""
    from judge_api.prompting import render

    item = {
        "id": "probe",
        "dialogue": [
            {"speaker": "user", "text": f"{PROBE_HISTORY} one", "session": 1},
            {"speaker": "bot", "text": f"{PROBE_HISTORY} two", "session": 1},
            {"speaker": "user", "text": f"{PROBE_HISTORY} three?", "session": 2},
        ],
        "persona": {"user": ["probe persona"], "bot": ["probe persona"]},
        "memory": "probe memory",
        "reference": "probe reference",
        "candidates": {"a": "first candidate", "b": "second candidate", "c": "third answer"},
    }
    aspect = rubric.aspect_names[0]
    try:
        if rubric.kind == "pairwise":
            prompts = [render(rubric, item, aspect, "Q first", "Q second").messages]
            prompts.append(render(rubric, item, aspect, "Z third", "Z second").messages)
        else:
            prompts = [render(rubric, item, aspect, text).messages for text in ("Q first", "Z third")]
    except Exception:
        return "unknown"
    prefix = shared_prefix(prompts)
    if prefix is None:
        return "none"
    return "history" if PROBE_HISTORY in prefix.text(prompts[0]) else "instructions"
