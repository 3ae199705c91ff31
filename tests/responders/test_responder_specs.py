"""Responder strings (judge_api.responders) and the strategy folders (judge_api.strategies): what parses, what is
refused and why, and that every shipped strategy loads with its origin in every template."""

from __future__ import annotations

from pathlib import Path

import pytest

from judge_api.responders import ResponderSpecError, parse_responder
from judge_api.strategies import ITEM_INPUTS, StrategyError, StrategyRegistry, get_strategies, load_strategy

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("text", "kind", "key"),
    [
        ("local:smollm2", "chat", "strategy:full-context@local:smollm2"),
        (
            "openai-compatible:llama3.1:8b@http://h:11434/v1/",
            "chat",
            "strategy:full-context@openai-compatible:llama3.1:8b@http://h:11434/v1",
        ),
        ("strategy:rsum@openai:gpt-4o", "chat", "strategy:rsum@openai:gpt-4o"),
        (
            "strategy:memochat@openai-compatible:m@https://x.org/v1",
            "chat",
            "strategy:memochat@openai-compatible:m@https://x.org/v1",
        ),
        ("http:http://127.0.0.1:9000/respond", "http", "http:http://127.0.0.1:9000/respond"),
        ("http:https://bot.example.com/reply", "http", "http:https://bot.example.com/reply"),
        ("python:mybot.replies:answer", "python", "python:mybot.replies:answer"),
    ],
)
def test_responder_strings_parse(text: str, kind: str, key: str) -> None:
    spec = parse_responder(text)
    assert (spec.kind, spec.key) == (kind, key)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("nothing", "must be"),
        ("http:ftp://x", "is not an http(s) URL"),
        ("http:", "is not an http(s) URL"),
        ("python:mybot", "python:<module>:<function>"),
        ("python:my-bot:f", "python:<module>:<function>"),
        ("python:mybot:1f", "python:<module>:<function>"),
        ("strategy:rsum", "strategy:<name>@<chat model>"),
        ("strategy:Bad Name@local:smollm2", "strategy name 'Bad Name' is not valid"),
        ("strategy:rsum@local:gpt2", "unknown local model"),
        ("strategy:rsum@openai-compatible:m", "need '<model>@<base_url>'"),
        ("grpc:bot", "unknown provider 'grpc'"),
    ],
)
def test_bad_responder_strings_say_why(text: str, message: str) -> None:
    with pytest.raises(ResponderSpecError, match=None) as error:
        parse_responder(text)
    assert message in str(error.value)


SHIPPED = ["current-session", "full-context", "gold-memory", "memochat", "rsum"]


def test_every_shipped_strategy_loads_with_its_origin() -> None:
    registry = get_strategies()
    assert registry.errors == {}
    assert [s.id for s in registry.all()] == SHIPPED
    for strategy in registry.all():
        assert strategy.origin and strategy.label and len(strategy.version) == 16
        for name, source in strategy.templates.items():
            assert source.startswith("{# ORIGIN: "), f"{strategy.id}/{name} has no origin header"


@pytest.mark.parametrize(
    ("yaml_text", "templates", "message"),
    [
        (
            "id: s\nlabel: S\ndescription: d\norigin: o\nsteps:\n  - {name: a, template: t.j2, into: memory}\n",
            {"t.j2": "x"},
            "the last step must be 'over: once' and write 'into: response'",
        ),
        (
            "id: s\nlabel: S\ndescription: d\norigin: o\nsteps:\n  - {name: a, template: t.j2, into: response}\n",
            {"t.j2": "{{ memory }}"},
            "uses ['memory'], which are neither inputs",
        ),
        (
            "id: s\nlabel: S\ndescription: d\norigin: o\nsteps:\n"
            "  - {name: a, template: t.j2, into: response, parse: json}\n",
            {"t.j2": "x"},
            "parser 'json' is unknown",
        ),
        (
            "id: s\nlabel: S\ndescription: d\norigin: o\nsteps:\n  - {name: a, template: gone.j2, into: response}\n",
            {"t.j2": "x"},
            "template file 'gone.j2' is missing",
        ),
        (
            "id: other\nlabel: S\ndescription: d\norigin: o\nsteps:\n  - {name: a, template: t.j2, into: response}\n",
            {"t.j2": "x"},
            "differs from the folder name",
        ),
        (
            "id: s\nlabel: S\ndescription: d\norigin: o\nmemory: memo\nsteps:\n"
            "  - {name: a, template: t.j2, into: response}\n",
            {"t.j2": "x"},
            "memory: 'memo' is neither",
        ),
        (
            "id: s\nlabel: S\ndescription: d\norigin: o\nsteps:\n  - {name: a, template: t.j2, into: dialog}\n"
            "  - {name: b, template: t.j2, into: response}\n",
            {"t.j2": "x"},
            "would hide the item input",
        ),
    ],
)
def test_a_broken_strategy_folder_is_refused_naming_the_problem(
    tmp_path: Path, yaml_text: str, templates: dict[str, str], message: str
) -> None:
    folder = tmp_path / "s"
    folder.mkdir()
    (folder / "strategy.yaml").write_text(yaml_text)
    for name, source in templates.items():
        (folder / name).write_text(source)
    with pytest.raises(StrategyError) as error:
        load_strategy(folder)
    assert message in str(error.value)
    registry = StrategyRegistry([tmp_path])  # a broken folder does not take the others down; asking for it says why
    assert "s" in registry.errors
    with pytest.raises(StrategyError, match="failed to load"):
        registry.get("s")


def test_a_strategy_sees_the_state_written_before_it_and_the_item_inputs(tmp_path: Path) -> None:
    folder = tmp_path / "two-step"
    folder.mkdir()
    (folder / "strategy.yaml").write_text(
        "id: two-step\nlabel: T\ndescription: d\norigin: o\nmemory: note\ninitial: {note: ''}\nsteps:\n"
        "  - {name: a, template: a.j2, over: previous_sessions, into: note}\n"
        "  - {name: b, template: b.j2, into: response}\n"
    )
    (folder / "a.j2").write_text("{{ session }} {{ note }}")
    (folder / "b.j2").write_text(" ".join("{{ " + name + " }}" for name in ITEM_INPUTS) + " {{ note }}")
    strategy = load_strategy(folder)
    assert [s.into for s in strategy.steps] == ["note", "response"]


def test_unknown_strategy_names_the_known_ones() -> None:
    with pytest.raises(StrategyError, match="unknown strategy 'nope' \\(known: current-session, full-context"):
        get_strategies().get("nope")
