"""dialogue-judge memory-audit: lexical P/R/F1 per system against the items' fact sheets, with CIs; bad input:
exit 2."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from dialogue_judge.cli import app


def _write(path: Path, items: list[Any]) -> Path:
    path.write_text("".join(json.dumps(i) + "\n" for i in items))
    return path


def test_memory_audit_json(tmp_path: Path) -> None:
    items: list[Any] = [
        {
            "id": "a",
            "facts": [{"id": "f", "text": "I have two dogs", "source": "session 1"}],
            "candidates": {"good": "I have two dogs", "half": "I have three cats"},
        },
        {"id": "b", "persona": {"user": ["I have two dogs"]}, "candidates": {"good": "I have three dogs", "half": "x"}},
    ]
    result = CliRunner().invoke(
        app, ["memory-audit", str(_write(tmp_path / "m.jsonl", items)), "--format", "json", "--n-boot", "200"]
    )
    assert result.exit_code == 0, result.output
    table = {r["system"]: r for r in json.loads(result.stdout)}
    assert table["good"]["f1"] == pytest.approx((1.0 + 0.75) / 2)
    assert table["half"]["precision"] == pytest.approx((0.5 + 0.0) / 2)
    assert table["half"]["n"] == 2 and table["good"]["f1_low"] <= table["good"]["f1"] <= table["good"]["f1_high"]


@pytest.mark.parametrize(
    ("item", "message"),
    [
        ({"id": "a", "candidates": {"s": "x"}}, "no gold memory"),
        ({"id": "a", "facts": [{"id": "f", "text": "t", "source": "nowhere"}], "candidates": {"s": "x"}}, "source"),
    ],
)
def test_memory_audit_bad_input_exits_2(tmp_path: Path, item: dict[str, object], message: str) -> None:
    result = CliRunner().invoke(app, ["memory-audit", str(_write(tmp_path / "m.jsonl", [item]))])
    assert result.exit_code == 2
    assert message in result.output
