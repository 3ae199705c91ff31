"""The verdict file readers on small files in the real formats (FastChat ``model_judgment/gpt-4_single.jsonl`` and
``gpt-4_pair.jsonl``, AlpacaEval ``annotations.json``, a spreadsheet's CSV of 1-100 scores): every row becomes the
verdict the format means, and a bad file names the row and field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from judge_api.schemas import VerdictIn
from judge_api.verdict_files import VerdictFileError, detect_format, read_verdict_file

DATA = Path(__file__).parent / "data"


def _read(name: str, **options: Any) -> Any:
    return read_verdict_file((DATA / name).read_bytes(), name=name, **options)


def _alpaca_items() -> list[dict[str, Any]]:
    return [
        {
            "id": f"alp-{n}",
            "dialogue": [{"speaker": "user", "text": a["instruction"]}],
            "candidates": {a["generator_1"]: a["output_1"], a["generator_2"]: a["output_2"]},
        }
        for n, a in enumerate(json.loads((DATA / "alpacaeval_annotations.json").read_text()))
    ]


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("gpt-4_single.jsonl", "fastchat-single"),
        ("gpt-4_pair.jsonl", "fastchat-pair"),
        ("alpacaeval_annotations.json", "alpacaeval"),
        ("my_judge_scores.csv", "csv"),
    ],
)
def test_the_format_is_detected_from_the_content(name: str, expected: str) -> None:
    assert detect_format((DATA / name).read_bytes(), name) == expected
    assert detect_format((DATA / name).read_bytes(), None) == expected


def test_fastchat_single_scores_on_1_to_10_with_the_failed_rating_unparseable() -> None:
    parsed = _read("gpt-4_single.jsonl", turn=1)
    assert parsed.format == "fastchat-single" and parsed.scale == (1.0, 10.0)
    rows = [VerdictIn.model_validate(fields) for _, fields in parsed.rows]
    assert len(rows) == 24  # 8 questions x 3 models of turn 1; the turn-2 lines are left out
    first = json.loads((DATA / "gpt-4_single.jsonl").read_text().splitlines()[0])
    assert rows[0].item_id == f"mtbench-{first['question_id']}-t1" and rows[0].system == first["model"]
    assert rows[0].score == first["score"] and rows[0].judge == "gpt-4" and rows[0].mode == "single"
    assert rows[0].explanation == first["judgment"] and rows[0].details["prompt"] == "single-v1"
    failed = [r for r in rows if r.unparseable]
    assert [(r.item_id, r.system, r.score) for r in failed] == [("mtbench-85-t1", "llama-13b", None)]
    both_turns = _read("gpt-4_single.jsonl", item_id="{question_id}/{turn}", judge="fastchat-gpt4")
    assert len(both_turns.rows) == 27 and both_turns.rows[-1][1]["item_id"] == "81/2"
    assert {fields["judge"] for _, fields in both_turns.rows} == {"fastchat-gpt4"}


def test_fastchat_pair_gives_one_verdict_per_game_in_its_presentation_order() -> None:
    parsed = _read("gpt-4_pair.jsonl")
    rows = [(where, VerdictIn.model_validate(fields)) for where, fields in parsed.rows]
    assert len(rows) == 24  # 12 lines x 2 games
    lines = [json.loads(line) for line in (DATA / "gpt-4_pair.jsonl").read_text().splitlines()]
    label = {"model_1": "A", "model_2": "B", "tie": "tie", "error": None}
    for line, ((w1, g1), (w2, g2)) in zip(lines, zip(rows[::2], rows[1::2], strict=True), strict=True):
        assert (g1.order, g2.order) == ("ab", "ba")  # game 1 shows model_1 first, game 2 model_2
        assert g1.system == g2.system == line["model_1"] and g1.system_b == g2.system_b == line["model_2"]
        assert g1.verdict == label[line["g1_winner"]] and g2.verdict == label[line["g2_winner"]]
        assert g2.unparseable == (line["g2_winner"] == "error")
        assert g1.explanation == line["g1_judgment"] and w1.endswith("(g1)") and w2.endswith("(g2)")


def test_alpacaeval_preferences_map_to_the_run_items_by_instruction() -> None:
    parsed = _read("alpacaeval_annotations.json", items=_alpaca_items())
    rows = [VerdictIn.model_validate(fields) for _, fields in parsed.rows]
    assert [(r.item_id, r.verdict, r.unparseable) for r in rows] == [
        ("alp-0", "A", False),  # preference 1: output_1 better
        ("alp-1", "B", False),  # 2: output_2
        ("alp-2", "tie", False),  # 1.5
        ("alp-3", None, True),  # no preference
    ]
    assert all(r.order is None and r.judge == "alpaca_eval_gpt4_turbo_fn" for r in rows)
    assert rows[0].system == "gpt4_1106_preview" and rows[0].system_b == "gpt4"


def test_a_spreadsheet_csv_with_a_bom_and_extra_columns() -> None:
    parsed = _read("my_judge_scores.csv")
    assert parsed.ignored_columns == ["comment"]
    rows = [VerdictIn.model_validate(fields) for _, fields in parsed.rows]
    assert len(rows) == 24 and rows[0].item_id == "mtbench-81-t1" and rows[0].judge == "my-judge"
    assert (rows[0].scale_min, rows[0].scale_max) == (1, 100) and isinstance(rows[0].score, float)
    assert parsed.rows[0][0] == "row 2"


PAIR_LINE = {"question_id": 81, "model_1": "a", "model_2": "b", "g1_winner": "model_1", "g2_winner": "tie"}
PAIR_LINE["judge"] = ["gpt-4", "pair-v2"]


@pytest.mark.parametrize(
    ("content", "fmt", "options", "where", "field", "message"),
    [
        (b"item_id,system,judge,score\nx,a,j,high\n", "csv", {}, "row 2", "score", "'high' is not a number"),
        (b"item_id,system,judge,score\nx,a,j,1,2\n", "csv", {}, "row 2", None, "more cells than the header"),
        (b"", "csv", {}, None, None, "no header"),
        (b'{"item_id": "x"}\nnot json\n', "jsonl", {}, "line 2", None, "not valid JSON"),
        (b"[1, 2]\n", "jsonl", {}, "line 1", None, "expected a JSON object"),
        (
            b'{"question_id": 1, "model": "a", "judge": ["gpt-4", "single-v1"], "turn": 1}\n',
            "fastchat-single",
            {},
            "line 1",
            "score",
            "missing",
        ),
        (
            b'{"question_id": 1, "model": "a", "judge": ["gpt-4", "x"], "score": "x", "turn": 1}\n',
            "fastchat-single",
            {},
            "line 1",
            "score",
            "not a number",
        ),
        (
            b'{"question_id": 1, "model": "a", "judge": ["gpt-4", "x"], "score": 3, "turn": 1}\n',
            "fastchat-single",
            {"turn": 2},
            None,
            None,
            "no verdicts of turn 2",
        ),
        (
            b'{"question_id": 1, "model": "a", "judge": ["gpt-4", "x"], "score": 3, "turn": 1}\n',
            "fastchat-single",
            {"item_id": "{question}"},
            "line 1",
            "item_id",
            "cannot be filled",
        ),
        (
            json.dumps({**PAIR_LINE, "g1_winner": "model_3"}).encode(),
            "fastchat-pair",
            {},
            "line 1",
            "g1_winner",
            "not model_1, model_2, tie or error",
        ),
        (json.dumps({**PAIR_LINE, "model_2": None}).encode(), "fastchat-pair", {}, "line 1", "model_2", "missing"),
        (b'{"a": 1}', "alpacaeval", {}, None, None, "expected a JSON list"),
        (b"x,y", "nonsense", {}, None, "format", "unknown format"),
        (b"\xff\xfe", "csv", {}, None, None, "not UTF-8"),
    ],
)
def test_a_bad_file_names_the_row_and_field(
    content: bytes, fmt: str, options: dict[str, Any], where: str | None, field: str | None, message: str
) -> None:
    with pytest.raises(VerdictFileError) as caught:
        read_verdict_file(content, fmt, **options)
    assert (caught.value.where, caught.value.field) == (where, field)
    assert message in caught.value.message


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"instruction": "Unknown question?"}, "instruction", "matches the last user turn of no item"),
        ({"generator_2": "gpt5"}, "generator_2", "'gpt5' is not a candidate of item 'alp-0'"),
        ({"output_1": "Another text."}, "output_1", "differs from the run's response"),
        ({"preference": 3}, "preference", "not between 1 and 2"),
    ],
)
def test_alpacaeval_rows_that_do_not_match_the_run(change: dict[str, Any], field: str, message: str) -> None:
    records = json.loads((DATA / "alpacaeval_annotations.json").read_text())
    records[0].update(change)
    with pytest.raises(VerdictFileError) as caught:
        read_verdict_file(json.dumps(records).encode(), "alpacaeval", items=_alpaca_items())
    assert (caught.value.where, caught.value.field) == ("record 1", field)
    assert message in caught.value.message
