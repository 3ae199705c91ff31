"""Fact sheets: the item field's validation, facts derived from persona lines, and MSC's personas as facts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from dialogue_judge.cli import app
from dialogue_judge.datasets import msc_facts
from judge_api.facts import derived_facts, fact_sheet
from judge_api.schemas import Item


@pytest.fixture
def msc(shared_dir: Path) -> Path:
    """MSC in ../shared (the test skips, like the other reference-data tests, where that folder is absent)."""
    return shared_dir / "data" / "msc"


def _item(**extra: Any) -> dict[str, Any]:
    return {"id": "i1", "candidates": {"a": "hello"}, **extra}


@pytest.mark.parametrize(
    "source", ["persona.user", "persona.bot", "memory", "session 1", "session 3 turn 0", "session 12 turn 140"]
)
def test_valid_sources(source: str) -> None:
    item = Item.model_validate(_item(facts=[{"id": "f1", "text": "I have two dogs.", "source": source}]))
    assert item.facts is not None and item.facts[0].source == source


@pytest.mark.parametrize(
    ("facts", "loc", "fragment"),
    [
        ([{"id": "f1", "text": "x", "source": "persona"}], ("facts", 0, "source"), "should match pattern"),
        ([{"id": "f1", "text": "x", "source": "session 1 turn"}], ("facts", 0, "source"), "should match pattern"),
        ([{"id": "f 1", "text": "x", "source": "memory"}], ("facts", 0, "id"), "should match pattern"),
        ([{"id": "f1", "text": "", "source": "memory"}], ("facts", 0, "text"), "at least 1 character"),
        ([{"id": "f1", "text": "x", "source": "memory", "label": "y"}], ("facts", 0, "label"), "Extra inputs"),
        (
            [{"id": "f1", "text": "x", "source": "memory"}, {"id": "f1", "text": "y", "source": "memory"}],
            ("facts",),
            "duplicate fact id 'f1'",
        ),
    ],
)
def test_invalid_facts_name_the_field(facts: list[dict[str, Any]], loc: tuple[Any, ...], fragment: str) -> None:
    with pytest.raises(ValidationError) as info:
        Item.model_validate(_item(facts=facts))
    errors = info.value.errors()
    assert len(errors) == 1
    assert errors[0]["loc"] == loc
    assert fragment in errors[0]["msg"]


def test_derived_from_persona_lines() -> None:
    item = _item(persona={"user": ["I have two dogs.", " ", "I live in Oslo."], "bot": ["I am a nurse."]})
    assert derived_facts(item) == [
        {"id": "user.1", "text": "I have two dogs.", "source": "persona.user"},
        {"id": "user.3", "text": "I live in Oslo.", "source": "persona.user"},
        {"id": "bot.1", "text": "I am a nurse.", "source": "persona.bot"},
    ]
    assert fact_sheet(item) == derived_facts(item)


def test_explicit_facts_win_even_when_empty() -> None:
    explicit = [{"id": "dogs", "text": "The user has two dogs.", "source": "session 1 turn 3"}]
    persona = {"user": ["I have two dogs."]}
    assert fact_sheet(_item(persona=persona, facts=explicit)) == explicit
    assert fact_sheet(_item(persona=persona, facts=[])) == []
    assert fact_sheet(_item()) == []


def test_msc_per_session_personas_become_session_facts(msc: Path) -> None:
    record = json.loads((msc / "msc_dialogue_session_3_test.txt").read_text().splitlines()[0])
    facts = msc_facts(record)
    session1_user = [f for f in facts if f["id"].startswith("s1.user.")]
    assert [f["text"] for f in session1_user] == record["previous_dialogs"][0]["personas"][0]
    assert {f["source"] for f in facts} == {"session 1", "session 2"}
    assert facts[-1] == {"id": "s2.bot.5", "text": "There are no running clubs near me.", "source": "session 2"}
    assert len(facts) == sum(len(side) for s in record["previous_dialogs"] for side in s["personas"])
    Item.model_validate(_item(facts=facts))  # valid as an item's fact sheet


def test_msc_accumulated_personas_without_per_session_ones(msc: Path) -> None:
    record = json.loads((msc / "msc_session5_test_episode0_sample.json").read_text())
    facts = msc_facts(record)
    assert facts[0] == {"id": "user.1", "text": "I own a Jeep.", "source": "persona.user"}
    assert [f["text"] for f in facts if f["source"] == "persona.bot"] == record["personas"][1]


def test_convert_msc_emits_facts(msc: Path) -> None:
    result = CliRunner().invoke(app, ["convert", "msc", str(msc / "msc_dialogue_session_3_test.txt"), "--limit", "2"])
    assert result.exit_code == 0, result.output
    items = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(items) == 2
    for item in items:
        assert item["facts"] and all(f["source"].startswith("session ") for f in item["facts"])
        item["candidates"] = {"a": "hi"}
        Item.model_validate(item)
