"""``dialogue_judge.gate.inputs``: reading the two sides and merging them into one two-system request."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dialogue_judge.gate.inputs import GateInputError, load_side, merge_sides

from .planting import context, plant


def test_responses_files_merge_with_the_shared_items(tmp_path: Path) -> None:
    data = plant(tmp_path, 5, 0.0)
    merged = merge_sides(
        load_side(data.baseline, "baseline"),
        load_side(data.responses, "candidate"),
        {json.loads(line)["id"]: json.loads(line) for line in data.items.read_text().splitlines()},
    )
    assert [m["id"] for m in merged] == [f"item-{i:03d}" for i in range(5)]
    assert set(merged[0]["candidates"]) == {"baseline", "candidate"}
    assert merged[0]["dialogue"] == context(0)["dialogue"]


def test_differing_contexts_are_rejected(tmp_path: Path) -> None:
    data = plant(tmp_path, 3, 0.0)
    lines = [json.loads(line) for line in data.candidate.read_text().splitlines()]
    lines[1]["dialogue"][0]["text"] = "Something else entirely."
    data.candidate.write_text("".join(json.dumps(line) + "\n" for line in lines))
    with pytest.raises(GateInputError, match=r"1 item\(s\) have a different dialogue context .* \(item-001\)"):
        merge_sides(load_side(data.baseline, "baseline"), load_side(data.candidate, "candidate"))


def test_multi_system_items_need_a_system_name(tmp_path: Path) -> None:
    path = tmp_path / "both.jsonl"
    path.write_text(json.dumps({**context(0), "candidates": {"old": "a", "new": "b"}}) + "\n")
    with pytest.raises(GateInputError, match=r"has 2 candidates .* --baseline-system"):
        load_side(path, "baseline")
    assert load_side(path, "baseline", "new").responses == {"item-000": "b"}
