"""Fact sheets: the facts a response must stay consistent with (docs/facts.md).

An item's fact sheet is its explicit ``facts`` when given; otherwise it is derived from the persona: every persona
line is one fact, ``user.N`` / ``bot.N`` (1-based, in the order given), with source ``persona.user`` /
``persona.bot``. Memory text and earlier turns are not split into facts here (that needs a judge).
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
