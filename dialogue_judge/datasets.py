"""Turn the public datasets the seed papers used into dialogue-judge items.

* Multi-Session Chat (ParlAI MSC): previous sessions + current session, personas; the candidate slot is the bot's
  next turn.
* MT-Bench+ (MemoChat): long multi-topic dialogues whose last question's ``turn-info`` names the related turns.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def msc_record_to_item(
    record: dict[str, Any], item_id: str, bot_speaker: str = "Speaker 2", bot_turn: int | None = None
) -> dict[str, Any]:
    """Context = previous sessions + the current session up to the bot's last turn (or its turn at index
    ``bot_turn`` of the current session); reference = that turn."""
    dialogue: list[dict[str, Any]] = []
    for session_number, previous in enumerate(record.get("previous_dialogs") or [], start=1):
        for position, turn in enumerate(previous["dialog"]):
            # older MSC sessions have no speaker ids: Speaker 1 opens and the two alternate
            turn_id = turn.get("id") or ("Speaker 1" if position % 2 == 0 else "Speaker 2")
            speaker = "bot" if turn_id == bot_speaker else "user"
            dialogue.append({"speaker": speaker, "text": turn["text"].strip(), "session": session_number})
    current = len(record.get("previous_dialogs") or []) + 1
    turns = record["dialog"]
    last_bot = max(i for i, t in enumerate(turns) if t.get("id") == bot_speaker) if bot_turn is None else bot_turn
    for turn in turns[:last_bot]:
        speaker = "bot" if turn.get("id") == bot_speaker else "user"
        dialogue.append({"speaker": speaker, "text": turn["text"].strip(), "session": current})
    personas = record.get("personas") or [[], []]
    return {
        "id": item_id,
        "dialogue": dialogue,
        "persona": {"user": list(personas[0]), "bot": list(personas[1])},
        "reference": turns[last_bot]["text"].strip(),
        "facts": msc_facts(record),
        "candidates": {},
        "meta": {"source": "msc", "session": current},
    }


def msc_record_to_items(record: dict[str, Any], prefix: str, bot_speaker: str = "Speaker 2") -> list[dict[str, Any]]:
    """One item per bot turn of the current session that follows a user turn (ids ``<prefix>.t<index>``): every point
    where a system under test must answer."""
    turns = record["dialog"]
    return [
        msc_record_to_item(record, f"{prefix}.t{index}", bot_speaker, bot_turn=index)
        for index, turn in enumerate(turns)
        if turn.get("id") == bot_speaker and index > 0 and turns[index - 1].get("id") != bot_speaker
    ]


def msc_facts(record: dict[str, Any], bot_index: int = 1) -> list[dict[str, str]]:
    """MSC's personas as facts (docs/facts.md).

    Where the previous sessions carry their own persona summaries (the ``msc_dialogue_session_N`` files), each
    session's lines are facts ``sN.user.K`` / ``sN.bot.K`` with source ``session N``; otherwise the record's
    accumulated personas are facts ``user.K`` / ``bot.K`` with source ``persona.user`` / ``persona.bot``.
    Persona list ``bot_index`` is the bot's (Speaker 2 is the second list).
    """
    sides = {bot_index: "bot", 1 - bot_index: "user"}
    facts: list[dict[str, str]] = []
    previous = record.get("previous_dialogs") or []
    if previous and all(session.get("personas") for session in previous):
        for number, session in enumerate(previous, start=1):
            for index in (1 - bot_index, bot_index):
                for k, line in enumerate(session["personas"][index], start=1):
                    if line.strip():
                        facts.append(
                            {"id": f"s{number}.{sides[index]}.{k}", "text": line.strip(), "source": f"session {number}"}
                        )
        return facts
    personas = record.get("personas") or [[], []]
    for index in (1 - bot_index, bot_index):
        side = sides[index]
        for k, line in enumerate(personas[index], start=1):
            if line.strip():
                facts.append({"id": f"{side}.{k}", "text": line.strip(), "source": f"persona.{side}"})
    return facts


def read_msc_lines(path: Path) -> Iterator[dict[str, Any]]:
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                yield json.loads(line)


_TOPIC = re.compile(r"([a-z]+-\d+)")


def mtbench_plus_to_item(record: dict[str, Any]) -> dict[str, Any]:
    """All turns but the final question become the dialogue; meta.related_turns lists the indices (in
    ``dialogue``) of the turns whose topic the last question's turn-info names, with the bot turns after them."""
    conversation = record["conversations"]
    dialogue: list[dict[str, Any]] = []
    topics_of: list[str | None] = []
    for turn in conversation:
        speaker = "user" if turn["from"] == "human" else "bot"
        dialogue.append({"speaker": speaker, "text": turn["value"]})
        info = turn.get("turn-info")
        topics_of.append("-".join(info.split("-")[:2]) if info and speaker == "user" else None)
    while dialogue and dialogue[-1]["speaker"] == "bot" and not dialogue[-1]["text"]:
        dialogue.pop()
        topics_of.pop()
    last_info = conversation[[i for i, t in enumerate(conversation) if t["from"] == "human"][-1]]["turn-info"]
    wanted = set(_TOPIC.findall(last_info.removesuffix("-Q")))
    related: list[int] = []
    current: str | None = None
    for index, topic in enumerate(topics_of[:-1]):
        if topic is not None:
            current = topic
        if current in wanted:
            related.append(index)
    kind = {0: "retrospection", 1: "continuation", 2: "conjunction"}.get(int(record["id"].rsplit("-", 1)[1]) // 18)
    return {
        "id": record["id"],
        "dialogue": dialogue,
        "candidates": {},
        "meta": {"source": "mtbench_plus", "turn_info": last_info, "related_turns": related, "type": kind},
    }
