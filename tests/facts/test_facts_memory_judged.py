"""Memory audit (b), judge-based: the memory-audit rubric (gold facts recalled / missing, generated facts supported /
fabricated / wrong relationship, quoted from the memory), its strict parser and figures, the simulator's scripted
labels (``<<g:ID>>``, ``<<m:s|f|w>>``), and ``dialogue-judge memory-audit --judge`` with exact per-system figures."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from dialogue_judge.cli import app
from judge_api.rubrics import get_registry
from judge_simulator.behaviour import JudgeRequest, judge
from judge_simulator.process import SimulatorProcess
from judge_simulator.script import Script
from workers.memoryaudit import memory_figures
from workers.parsing import parse_reply
from workers.prompting import parse_context, render

PERSONA = {"user": ["I have two dogs.", "I live in Oslo."], "bot": ["I am a nurse."]}
FACTS = [
    {"id": "dogs", "text": "The user has two dogs.", "source": "session 1"},
    {"id": "job", "text": "The bot is a nurse.", "source": "session 2"},
]
DIALOGUE = [
    {"speaker": "user", "text": "I have two dogs and I live in Oslo.", "session": 1},
    {"speaker": "bot", "text": "Nice! I work as a nurse.", "session": 1},
]
MEMORIES = {  # system -> (memory of item a: gold user.1, user.2, bot.1; memory of item b: gold dogs, job)
    "faithful": (
        "User has two dogs <<m:s>><<g:user.1>>. User lives in Oslo <<m:s>><<g:user.2>>. "
        "Bot is a nurse <<m:s>><<g:bot.1>>.",
        "User has two dogs <<m:s>><<g:dogs>>.",
    ),
    "swapper": (
        "Bot has two dogs <<m:w>>. User is a nurse <<m:w>>. User lives in Oslo <<m:s>><<g:user.2>>. "
        "User has a cat <<m:f>>.",
        "User has two dogs <<m:s>><<g:dogs>>. User is a nurse <<m:w>>.",
    ),
    "forger": (
        "User has two dogs <<m:s!>><<g:user.1>>.",
        "User has two dogs <<m:s>><<g:dogs>>.",
    ),
}  # fmt: skip


def items() -> list[dict[str, Any]]:
    return [
        {"id": "a", "dialogue": DIALOGUE, "persona": PERSONA, "candidates": {s: m[0] for s, m in MEMORIES.items()}},
        {"id": "b", "dialogue": DIALOGUE, "persona": PERSONA, "facts": FACTS,
         "candidates": {s: m[1] for s, m in MEMORIES.items()}},
    ]  # fmt: skip


@pytest.fixture(scope="module")
def rubric() -> Any:
    return get_registry(refresh=True).get("memory-audit")


def audit(rubric: Any, item: dict[str, Any], memory: str) -> Any:
    prompt = render(rubric, item, "memory", memory)
    reply = judge(Script(), JudgeRequest(model="sim", prompt=prompt.text))
    assert reply.rule == "memory-audit"
    return parse_reply(reply.text, rubric, context=parse_context(rubric, item, memory))


def test_rubric_is_data_with_its_origin(rubric: Any) -> None:
    assert rubric.kind == "facts" and rubric.parser == "memory_audit" and rubric.mode == "single"
    assert rubric.aspect_names == ["memory"] and rubric.scale == (1, 100)
    origin = rubric.origin or ""
    assert "The paper's" in origin and "This project's own" in origin


@pytest.mark.parametrize(
    ("system", "index", "expected"),
    [
        # (precision, recall, f1, errors {fabricated, wrong_relationship, missing}, score)
        ("faithful", 0, (1.0, 1.0, 1.0, (0, 0, 0), 100)),
        ("swapper", 0, (1 / 4, 1 / 3, 2 / 7, (1, 2, 2), 29)),
        ("faithful", 1, (1.0, 1 / 2, 2 / 3, (0, 0, 1), 67)),
        ("swapper", 1, (1 / 2, 1 / 2, 1 / 2, (0, 1, 1), 51)),
    ],
)
def test_scripted_labels_give_exact_figures(
    rubric: Any, system: str, index: int, expected: tuple[float, float, float, tuple[int, int, int], int]
) -> None:
    item = items()[index]
    parsed = audit(rubric, item, item["candidates"][system])
    assert parsed.ok, parsed.error
    precision, recall, f1, errors, score = expected
    assert parsed.details["precision"] == pytest.approx(precision)
    assert parsed.details["recall"] == pytest.approx(recall)
    assert parsed.details["f1"] == pytest.approx(f1)
    assert tuple(parsed.details["errors"].values()) == errors
    assert parsed.score == score


def test_labels_and_evidence_are_stored(rubric: Any) -> None:
    item = items()[0]
    parsed = audit(rubric, item, item["candidates"]["swapper"])
    assert [(g["id"], g["label"], g["source"]) for g in parsed.details["gold"]] == [
        ("user.1", "missing", "persona.user"),
        ("user.2", "recalled", "persona.user"),
        ("bot.1", "missing", "persona.bot"),
    ]
    assert parsed.details["gold"][1]["evidence"] == "User lives in Oslo <<m:s>><<g:user.2>>"
    assert [(g["fact"], g["label"]) for g in parsed.details["generated"]] == [
        ("Bot has two dogs <<m:w>>", "wrong_relationship"),
        ("User is a nurse <<m:w>>", "wrong_relationship"),
        ("User lives in Oslo <<m:s>>", "supported"),
        ("User has a cat <<m:f>>", "fabricated"),
    ]
    assert parsed.details["error_shares"] == pytest.approx(
        {"fabricated": 1 / 5, "wrong_relationship": 2 / 5, "missing": 2 / 5}
    )


@pytest.mark.parametrize(
    ("memory", "error"),
    [
        ("User has two dogs <<m:s!>>.", "generated[0]: the fact is not in the memory"),
        ("User has pets <<g:pets>>.", "unknown fact id 'pets'"),
    ],
)
def test_planted_parse_errors(rubric: Any, memory: str, error: str) -> None:
    parsed = audit(rubric, items()[0], memory)
    assert not parsed.ok and error in (parsed.error or "")


@pytest.mark.parametrize(
    ("reply", "error"),
    [
        ("no json", "no JSON object"),
        ('{"gold": "all", "generated": []}', "'gold' must be a list"),
        ('{"gold": [{"id": "user.1", "label": "recalled", "evidence": ""}]}', "recalled fact 'user.1' has no evidence"),
        ('{"gold": [{"id": "user.1", "label": "kept"}]}', "label 'kept' for 'user.1' is not one of"),
        ('{"gold": [{"id": "user.1", "label": "missing"}]}', "gold facts not labelled: user.2, bot.1"),
        (
            '{"gold": [{"id": "user.1", "label": "missing"}, {"id": "user.2", "label": "missing"},'
            ' {"id": "bot.1", "label": "missing"}], "generated": [{"fact": "two dogs", "label": "true"}]}',
            "label 'true' is not one of",
        ),
        (
            '{"gold": [{"id": "user.1", "label": "missing"}, {"id": "user.2", "label": "missing"},'
            ' {"id": "bot.1", "label": "missing"}], "generated": [{"fact": "two dogs", "label": "supported"},'
            ' {"fact": "Two  DOGS", "label": "fabricated"}]}',
            "listed twice",
        ),
    ],
)
def test_strict_parser_refuses(rubric: Any, reply: str, error: str) -> None:
    parsed = parse_reply(reply, rubric, context=parse_context(rubric, items()[0], "User has two dogs."))
    assert not parsed.ok and error in (parsed.error or ""), parsed.error


@pytest.mark.parametrize(
    ("gold", "generated", "p", "r", "f1", "shares"),
    [
        ([], [], 0.0, 0.0, 0.0, (None, None, None)),
        (["missing", "missing"], [], 0.0, 0.0, 0.0, (0.0, 0.0, 1.0)),
        (["recalled"], ["supported", "fabricated"], 0.5, 1.0, 2 / 3, (1.0, 0.0, 0.0)),
        (["recalled", "missing"], ["supported", "wrong_relationship"], 0.5, 0.5, 0.5, (0.0, 0.5, 0.5)),
    ],
)
def test_memory_figures(
    gold: list[str], generated: list[str], p: float, r: float, f1: float, shares: tuple[float | None, ...]
) -> None:
    figures = memory_figures(gold, generated)
    assert (figures["precision"], figures["recall"]) == (pytest.approx(p), pytest.approx(r))
    assert figures["f1"] == pytest.approx(f1)
    assert tuple(figures["error_shares"].values()) == shares


def test_cli_judged_memory_audit_exact_figures(
    sim: SimulatorProcess, settings_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    path = tmp_path / "memories.jsonl"
    path.write_text("".join(json.dumps(i) + "\n" for i in items()))
    judge_spec = f"openai-compatible:sim-judge@{sim.base_url}"
    args = ["memory-audit", str(path), "--judge", judge_spec, "--cache-dir", str(tmp_path / "cache"), "--n-boot", "200"]
    result = CliRunner().invoke(app, [*args, "--format", "json"])
    assert result.exit_code == 0, result.output
    rows = {r["system"]: r for r in json.loads(result.stdout)}
    faithful, swapper, forger = rows["faithful"], rows["swapper"], rows["forger"]
    assert (faithful["n"], faithful["n_unparseable"]) == (2, 0)
    assert faithful["precision"] == pytest.approx(1.0)
    assert faithful["recall"] == pytest.approx(0.75)
    assert faithful["f1"] == pytest.approx(5 / 6)
    assert (faithful["fabricated"], faithful["wrong_relationship"], faithful["missing"]) == (0, 0, 1)
    assert faithful["missing_share"] == 1.0 and faithful["fabricated_share"] == 0.0
    assert swapper["precision"] == pytest.approx(3 / 8)
    assert swapper["recall"] == pytest.approx(5 / 12)
    assert swapper["f1"] == pytest.approx(11 / 28)
    assert (swapper["fabricated"], swapper["wrong_relationship"], swapper["missing"]) == (1, 3, 3)
    assert swapper["fabricated_share"] == pytest.approx(1 / 7)
    assert swapper["wrong_relationship_share"] == pytest.approx(3 / 7)
    assert swapper["missing_share"] == pytest.approx(3 / 7)
    for name in ("precision", "recall", "f1", "wrong_relationship_share"):
        assert swapper[f"{name}_low"] <= swapper[name] <= swapper[f"{name}_high"]
    assert (forger["n"], forger["n_unparseable"]) == (1, 1)
    assert forger["recall"] == pytest.approx(0.5) and forger["precision"] == pytest.approx(1.0)
    calls = sim.stats()["total_calls"]

    table = CliRunner().invoke(app, args)  # the same audit again: from the judge cache, as a table
    assert table.exit_code == 0, table.output
    assert sim.stats()["total_calls"] == calls
    assert "swapper" in table.stdout and "0.375" in table.stdout and "0.429" in table.stdout


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--rubric", "fact-check"], "is not a memory-audit rubric"),
        (["--rubric", "no-such-rubric"], "--rubric"),
        (["--format", "pdf"], "table or json"),
    ],
)
def test_cli_bad_input_exits_2(
    settings_env: pytest.MonkeyPatch, tmp_path: Path, extra: list[str], message: str
) -> None:
    path = tmp_path / "memories.jsonl"
    path.write_text("".join(json.dumps(i) + "\n" for i in items()))
    result = CliRunner().invoke(app, ["memory-audit", str(path), "--judge", "openai:gpt-4o", *extra])
    assert result.exit_code == 2 and message in result.output, result.output
