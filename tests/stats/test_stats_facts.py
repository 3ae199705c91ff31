"""The facts section from hand-made fact labels frames: contradiction rate (per response, samples averaged per item,
then items), pooled retention rate, unparseable counted apart, empty sheets, the most-contradicted facts."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest

from judge_api.stats.facts import FACT_COLUMNS, facts_section
from judge_api.stats.render import report_to_table


def labels(*judgments: tuple[int, str, str, int, str, list[tuple[str, str, str]]]) -> pd.DataFrame:
    """(judgment_id, item, system, sample, status, [(fact_id, source, label)])."""
    rows: list[dict[str, Any]] = []
    for jid, item, system, sample, status, facts in judgments:
        base = {"judgment_id": jid, "item_id": item, "system": system, "judge": "j", "rubric_id": "fact-check",
                "aspect": "consistency", "sample_index": sample, "status": status}  # fmt: skip
        if not facts:
            rows.append({**base, "fact_id": None, "text": None, "source": None, "label": None, "evidence": None})
        rows += [
            {**base, "fact_id": f, "text": f"text of {f}", "source": s, "label": lab, "evidence": "e"}
            for f, s, lab in facts
        ]
    return pd.DataFrame(rows, columns=FACT_COLUMNS)


S, C, N = "supported", "contradicted", "not_addressed"
CASES = [
    # one response per item: rates 1/2 and 0 -> 0.25; retention 2 / (2 + 1)
    (
        labels(
            (1, "a", "x", 0, "done", [("f1", "persona.user", C), ("f2", "persona.bot", S)]),
            (2, "b", "x", 0, "done", [("f1", "session 1", S), ("f2", "memory", N)]),
        ),
        {
            "contradiction_rate": 0.25,
            "retention_rate": 2 / 3,
            "n_items": 2,
            "n_responses": 2,
            "n_unparseable": 0,
            "n_na": 0,
            "addressed_rate": 1.0,
        },
    ),
    # two samples of item a (rates 1 and 0 -> 0.5), item b rate 0 -> 0.25; retention 1 / 2
    (
        labels(
            (1, "a", "x", 0, "done", [("f1", "persona.user", C)]),
            (2, "a", "x", 1, "done", [("f1", "persona.user", S)]),
            (3, "b", "x", 0, "done", [("f1", "persona.user", N)]),
        ),
        {
            "contradiction_rate": 0.25,
            "retention_rate": 0.5,
            "n_items": 2,
            "n_responses": 3,
            "n_unparseable": 0,
            "n_na": 1,
            "addressed_rate": 2 / 3,
        },
    ),
    # an empty sheet is rate 0, nothing addressed: retention None; an unparseable judgment is counted apart
    (
        labels((1, "a", "x", 0, "done", []), (2, "b", "x", 0, "unparseable", [])),
        {
            "contradiction_rate": 0.0,
            "retention_rate": None,
            "n_items": 1,
            "n_responses": 1,
            "n_unparseable": 1,
            "n_na": 1,
            "addressed_rate": None,
        },
    ),
]


@pytest.mark.parametrize(("frame", "expected"), CASES)
def test_rates(frame: pd.DataFrame, expected: dict[str, Any]) -> None:
    section = facts_section(frame, n_boot=200, seed=1)
    assert section is not None
    (row,) = section["systems"]
    for key, value in expected.items():
        assert row[key] == (None if value is None else pytest.approx(value)), key
    if row["retention_rate"] is None:
        assert row["retention_rate_ci_low"] is None and row["retention_rate_ci_high"] is None
    else:
        assert row["retention_rate_ci_low"] <= row["retention_rate"] <= row["retention_rate_ci_high"]


def test_a_response_addressing_nothing_is_na_and_lowers_the_addressed_rate() -> None:
    """System x answers "tell me more!" on items a and b (every fact not addressed); system y uses the facts and gets
    one wrong. x's contradiction rate (0) beats y's; its addressed rate (0 against 1) says why."""
    frame = labels(
        (1, "a", "x", 0, "done", [("f1", "persona.user", N), ("f2", "persona.bot", N)]),
        (2, "b", "x", 0, "done", [("f1", "persona.user", N)]),
        (3, "c", "x", 0, "done", [("f1", "persona.user", S)]),
        (4, "a", "y", 0, "done", [("f1", "persona.user", S), ("f2", "persona.bot", C)]),
        (5, "b", "y", 0, "done", [("f1", "persona.user", S)]),
        (6, "c", "y", 0, "done", [("f1", "persona.user", S)]),
    )
    section = facts_section(frame, n_boot=300, seed=2)
    assert section is not None
    rows = {r["system"]: r for r in section["systems"]}
    assert rows["x"]["n_na"] == 2 and rows["y"]["n_na"] == 0
    assert rows["x"]["addressed_rate"] == pytest.approx(1 / 3) and rows["y"]["addressed_rate"] == 1.0
    assert rows["x"]["contradiction_rate"] < rows["y"]["contradiction_rate"]
    low, high = rows["x"]["addressed_rate_ci_low"], rows["x"]["addressed_rate_ci_high"]
    assert 0.0 <= low <= 1 / 3 <= high <= 1.0 and low < high
    assert rows["y"]["addressed_rate_ci_low"] == rows["y"]["addressed_rate_ci_high"] == 1.0
    text = report_to_table({"facts": section})
    assert "addressed rate" in text and "score n/a" in text


def test_most_contradicted_and_determinism() -> None:
    frame = labels(
        (1, "a", "x", 0, "done", [("f1", "persona.user", C), ("f2", "persona.bot", C)]),
        (2, "a", "y", 0, "done", [("f1", "persona.user", C), ("f2", "persona.bot", S)]),
        (3, "b", "y", 0, "done", [("f1", "session 2 turn 1", C)]),
    )
    section = facts_section(frame, n_boot=100, seed=3)
    assert section == facts_section(frame, n_boot=100, seed=3)
    assert section is not None
    assert [(f["item_id"], f["fact_id"], f["count"], f["systems"]) for f in section["most_contradicted"]] == [
        ("a", "f1", 2, ["x", "y"]),
        ("a", "f2", 1, ["x"]),
        ("b", "f1", 1, ["y"]),
    ]
    y = next(r for r in section["systems"] if r["system"] == "y")
    assert [(f["item_id"], f["fact_id"], f["source"], f["text"]) for f in y["most_contradicted"]] == [
        ("a", "f1", "persona.user", "text of f1"),
        ("b", "f1", "session 2 turn 1", "text of f1"),
    ]


def test_no_fact_check_judgments_is_none() -> None:
    assert facts_section(None) is None
    assert facts_section(pd.DataFrame(columns=FACT_COLUMNS)) is None
