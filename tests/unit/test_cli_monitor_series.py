"""`dialogue-judge monitor series` prints every row the API can return, including a bucket whose verdicts have no
score (n=0, mean null: every fact-check verdict n/a), which it shows as ``mean n/a``."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pandas as pd
import pytest
from typer.testing import CliRunner

from dialogue_judge.cli import app, monitor
from judge_api.schemas.monitors import Series, SeriesRow
from judge_api.stats.series import series_of_verdicts


def verdict(hour: int, score: float | None, contradiction: float | None) -> dict[str, Any]:
    return {
        "ts": datetime(2026, 3, 1, hour, 15),
        "system": "bot",
        "version": "v2",
        "segment": None,
        "rubric_id": "fact-check",
        "aspect": "consistency",
        "judge": "openai:gpt-4o",
        "score": score,
        "contradiction_rate": contradiction,
    }


def series_answer() -> dict[str, Any]:
    """The JSON the API gives for two hours: the first with two scored verdicts, the second all n/a."""
    frame = series_of_verdicts(
        pd.DataFrame([verdict(9, 80.0, 0.0), verdict(9, 60.0, 0.5), verdict(10, None, 0.0), verdict(10, None, 0.0)])
    )
    rows = [SeriesRow.model_validate(record) for record in frame.to_dict("records")]
    return Series(monitor_id="mon_x", bucket="1h", by=["version"], confidence=0.95, rows=rows).model_dump(mode="json")


class FakeClient:
    def __init__(self, answer: dict[str, Any]) -> None:
        self.answer = answer

    def monitor_series(self, monitor_id: str, **params: Any) -> dict[str, Any]:
        return self.answer


@pytest.fixture
def answer(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    data = series_answer()
    monkeypatch.setattr(monitor, "_client", lambda api, api_key: FakeClient(data))
    return data


def test_a_bucket_without_a_mean_prints_n_a(answer: dict[str, Any]) -> None:
    assert [(r["n"], r["mean"]) for r in answer["rows"]] == [(2, 70.0), (0, None)]
    result = CliRunner().invoke(app, ["monitor", "series", "mon_x"])
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 2, result.output
    scored, unscored = lines
    assert "version=v2" in scored and "n=2" in scored and "mean 70.00 [" in scored
    assert "contradiction 0.250" in scored
    assert "n=0" in unscored and "mean n/a" in unscored and "[" not in unscored
    assert "contradiction 0.000" in unscored
