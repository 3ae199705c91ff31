"""Self-consistency confidence of sampled judgments."""

from __future__ import annotations

import pandas as pd
import pytest

from judge_api.stats import build_report
from judge_api.stats.consistency import sample_confidence


def frame(rows: list[dict]) -> pd.DataFrame:
    base = {
        "run_id": "r",
        "aspect": "consistency",
        "judge": "j",
        "rubric_id": "x",
        "rubric_version": "v",
        "status": "done",
        "scale_min": 1.0,
        "scale_max": 100.0,
        "len_a": 10,
        "len_b": None,
    }
    return pd.DataFrame([{**base, "judgment_id": i, **row} for i, row in enumerate(rows)])


@pytest.mark.parametrize(
    ("scores", "expected"),
    [([70, 70, 70], 1.0), ([1, 100], 0.0), ([40, 60], 1 - 10 / 49.5)],
)
def test_score_confidence(scores: list[float], expected: float) -> None:
    rows = [
        {
            "item_id": "i",
            "mode": "single",
            "system_a": "s",
            "system_b": None,
            "order": None,
            "sample_index": k,
            "score": v,
        }
        for k, v in enumerate(scores)
    ]
    out = sample_confidence(frame(rows))
    assert len(out) == 1 and out.loc[0, "n_samples"] == len(scores)
    assert out.loc[0, "confidence"] == pytest.approx(expected)


def test_preference_confidence_is_majority_share_and_single_samples_are_left_out() -> None:
    rows = [
        {
            "item_id": "i",
            "mode": "pairwise",
            "system_a": "a",
            "system_b": "b",
            "order": "ab",
            "sample_index": k,
            "outcome": o,
            "preference": p,
        }
        for k, (o, p) in enumerate([("win", 2), ("win", 2), ("loss", -2)])
    ]
    rows.append(
        {
            "item_id": "i2",
            "mode": "single",
            "system_a": "s",
            "system_b": None,
            "order": None,
            "sample_index": 0,
            "score": 50,
        }
    )
    out = sample_confidence(frame(rows))
    assert len(out) == 1
    assert out.loc[0, "confidence"] == pytest.approx(2 / 3)
    section = build_report(frame(rows), n_boot=10)["self_consistency"]
    assert section == [
        {
            "mode": "pairwise",
            "system_a": "a",
            "system_b": "b",
            "aspect": "consistency",
            "judge": "j",
            "keys": 1,
            "samples_per_key": 3.0,
            "mean_confidence": pytest.approx(2 / 3),
            "min_confidence": pytest.approx(2 / 3),
        }
    ]


def test_self_consistency_is_rendered_when_samples_exist() -> None:
    from judge_api.stats import report_to_markdown, report_to_table

    rows = [
        {
            "item_id": "i",
            "mode": "single",
            "system_a": "s",
            "system_b": None,
            "order": None,
            "sample_index": k,
            "score": v,
        }
        for k, v in enumerate([60, 70, 80])
    ]
    report = build_report(frame(rows), n_boot=10)
    assert "Self-consistency" in report_to_table(report) and "Self-consistency" in report_to_markdown(report)
    single = build_report(frame(rows[:1]), n_boot=10)
    assert "Self-consistency" not in report_to_table(single)
