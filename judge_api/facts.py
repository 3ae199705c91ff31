"""Fact sheets: the facts a response must stay consistent with (docs/facts.md).

An item's fact sheet is its explicit ``facts`` when given; otherwise it is derived from the persona: every persona
line is one fact, ``user.N`` / ``bot.N`` (1-based, in the order given), with source ``persona.user`` /
``persona.bot``. Memory text and earlier sessions' turns are split into facts by a judge (the ``fact-extract``
rubric, ``dialogue-judge facts extract``); ``extraction_sources`` lists what it reads and ``extracted_fact_id``
names what it finds.
"""

from __future__ import annotations

from typing import Any


def derived_facts(item: dict[str, Any]) -> list[dict[str, str]]:
    """The persona lines of an item (a stored payload or an Item dumped to a dict) as facts."""
    persona = item.get("persona") or {}
    facts: list[dict[str, str]] = []
    for side in ("user", "bot"):
        for number, line in enumerate(persona.get(side) or [], start=1):
            if line.strip():
                facts.append({"id": f"{side}.{number}", "text": line.strip(), "source": f"persona.{side}"})
    return facts


def fact_sheet(item: dict[str, Any]) -> list[dict[str, str]]:
    """The explicit facts of an item if it has any (even an empty list: "no facts"), else the derived ones."""
    explicit = item.get("facts")
    if explicit is not None:
        return [{"id": f["id"], "text": f["text"], "source": f["source"]} for f in explicit]
    return derived_facts(item)


def extraction_sources(item: dict[str, Any]) -> list[dict[str, str]]:
    """What a fact-extraction judge reads, in order: the item's memory text (source ``memory``), then every turn of
    an earlier session (source ``session N turn M``: N the turn's ``session`` number, M its 1-based position in that
    session). The current session is the highest session number; turns without one are not an earlier session's.
    Blank texts are left out. Each source: ``source``, ``speaker`` (empty for the memory) and ``text``."""
    sources: list[dict[str, str]] = []
    memory = item.get("memory") or ""
    if memory.strip():
        sources.append({"source": "memory", "speaker": "", "text": memory})
    turns = item.get("dialogue") or []
    numbers = [t.get("session") for t in turns if t.get("session") is not None]
    if not numbers:
        return sources
    current = max(numbers)
    position: dict[int, int] = {}
    for turn in turns:
        session = turn.get("session")
        if session is None:
            continue
        position[session] = position.get(session, 0) + 1
        if session < current and turn["text"].strip():
            sources.append(
                {
                    "source": f"session {session} turn {position[session]}",
                    "speaker": turn["speaker"],
                    "text": turn["text"],
                }
            )
    return sources


def extracted_fact_id(source: str, k: int) -> str:
    """The id of the K-th fact (1-based) extracted from a source: ``mem.K`` or ``sN.tM.K``."""
    if source == "memory":
        return f"mem.{k}"
    _, session, _, turn = source.split()
    return f"s{session}.t{turn}.{k}"
