"""How a strategy step's reply becomes a state value (judge_api.strategies.STEP_PARSERS names them).

* ``text``: the reply, stripped (a memory, a summary);
* ``chat_text``: a response: each line's whitespace collapsed (MemoChat's ``normalize_chatting_outputs``), stripped;
* ``memochat_topics``: MemoChat's memo writing: the ``{'topic', 'summary', 'start', 'end'}`` elements of the reply,
  read the way ``normalize_model_outputs`` of github.com/LuJunru/MemoChat reads them (quoted strings and numbers in
  order), each appended to the memos under its topic with the session lines of its range; a reply with none adds
  a NOTO memo "Partial dialogs about: <line> or <line>." (two lines drawn with a seed taken from the session, so a
  rerun draws the same);
* ``memochat_choice``: MemoChat's memo retrieval: option numbers separated by ``#``; NOTO and numbers out of range
  are dropped; the chosen memos become the evidence.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Callable
from typing import Any

_ELEMENTS = re.compile(r"'[^']*'|\"[^\"]*\"|\d+")


def text(reply: str, previous: Any, inputs: dict[str, Any]) -> str:
    return reply.strip()


def chat_text(reply: str, previous: Any, inputs: dict[str, Any]) -> str:
    return "\n".join(" ".join(line.split()) for line in reply.split("\n")).strip()


def memochat_elements(reply: str) -> list[dict[str, Any]]:
    """The topic/summary/start/end records of a memo-writing reply (MemoChat's normalize_model_outputs)."""
    found = [re.sub(r"\s+", " ", m.replace('"', "").replace("'", "")) for m in _ELEMENTS.findall(reply)]
    records = []
    for i in range(len(found) - 7):
        if (found[i], found[i + 2], found[i + 4], found[i + 6]) == ("topic", "summary", "start", "end"):
            try:
                start, end = int(found[i + 5]), int(found[i + 7])
            except ValueError:
                continue
            records.append({"topic": found[i + 1], "summary": found[i + 3], "start": start, "end": end})
    return records


def memochat_topics(reply: str, previous: Any, inputs: dict[str, Any]) -> list[dict[str, Any]]:
    memos: list[dict[str, Any]] = [dict(m) for m in previous or []]
    lines: list[str] = list(inputs["session_lines"])
    records = memochat_elements(reply)
    for record in records:
        entry = {
            "topic": record["topic"],
            "summary": record["summary"],
            "dialogs": lines[record["start"] - 1 : record["end"]],
        }
        _add_under_topic(memos, entry)
    if not records and len(lines) >= 2:
        seed = int(hashlib.sha256("\n".join(lines).encode()).hexdigest()[:8], 16)
        first, second = random.Random(seed).sample(range(len(lines)), 2)
        _add_under_topic(
            memos,
            {
                "topic": "NOTO",
                "summary": f"Partial dialogs about: {lines[first]} or {lines[second]}.",
                "dialogs": lines,
            },
        )
    return memos


def _add_under_topic(memos: list[dict[str, Any]], entry: dict[str, Any]) -> None:
    """After the topic's last memo (MemoChat keeps a dict of topic -> memos, listed topic by topic), else at the end."""
    last = max((i for i, m in enumerate(memos) if m["topic"] == entry["topic"]), default=None)
    memos.insert(len(memos) if last is None else last + 1, entry)


def memochat_choice(reply: str, previous: Any, inputs: dict[str, Any]) -> list[dict[str, Any]]:
    memos: list[dict[str, Any]] = inputs["memos"]
    chosen = []
    for part in reply.split("#"):
        try:
            index = int(part) - 1
        except ValueError:
            continue
        if 0 <= index < len(memos) and "NOTO" not in memos[index]["topic"]:
            chosen.append(memos[index])
    return chosen


PARSERS: dict[str, Callable[[str, Any, dict[str, Any]], Any]] = {
    "text": text,
    "chat_text": chat_text,
    "memochat_topics": memochat_topics,
    "memochat_choice": memochat_choice,
}


def memory_text(value: Any) -> str | None:
    """A generated memory as text (what the memory audit scores): a string as is; memos as 'topic: summary' lines
    (NOTO left out)."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(
            f"{m['topic']}: {m['summary']}" for m in value if isinstance(m, dict) and m.get("topic") != "NOTO"
        )
    return str(value)
