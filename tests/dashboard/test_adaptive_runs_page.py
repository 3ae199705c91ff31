"""The runs page shows an adaptive run's economy: calls used against round robin, the stopping reason, the ranking
with its intervals, and the samples adaptive self-consistency saved."""

from __future__ import annotations

from typing import Any

import pytest
from dashboard_fakes import RUN_A, FakeApi, install
from streamlit.testing.v1 import AppTest

APP = "../../dashboard/app.py"

ECONOMY: dict[str, Any] = {
    "finished": True,
    "rounds": 9,
    "pairing": {
        "stop": "separated",
        "stop_message": "every adjacent pair of the ranking is separated at the requested confidence",
        "confidence": 0.95,
        "top_k": None,
        "max_calls": None,
        "target": {"rubric_id": "rsum-pairwise", "aspect": "overall", "judge": "openai:gpt-4o"},
        "calls": 312,
        "round_robin_calls": 2400,
        "share": 0.13,
        "comparisons": 156,
        "round_robin_comparisons": 1200,
        "ranking": [
            {"system": "rsum", "rank": 1, "strength": 0.9, "ci_low": 0.5, "ci_high": 1.3, "comparisons": 60},
            {"system": "memgpt", "rank": 2, "strength": -0.1, "ci_low": -0.4, "ci_high": 0.2, "comparisons": 90},
            {"system": "vanilla", "rank": 3, "strength": -0.8, "ci_low": -1.2, "ci_high": -0.4, "comparisons": 62},
        ],
        "gaps": [
            {"upper": "rsum", "lower": "memgpt", "diff": 1.0, "z": 4.1, "z_needed": 3.1, "separated": True},
            {"upper": "memgpt", "lower": "vanilla", "diff": 0.7, "z": 3.3, "z_needed": 3.1, "separated": True},
        ],
    },
    "samples": {
        "judgments": 312,
        "samples": 420,
        "fixed": 5,
        "fixed_samples": 1560,
        "saving": 0.7308,
        "histogram": {"1": 250, "2": 40, "5": 22},
    },
}


@pytest.fixture
def adaptive_api(monkeypatch: pytest.MonkeyPatch) -> FakeApi:
    fake = install(monkeypatch, FakeApi("data"))
    fake.runs[RUN_A]["summary"].update(
        economy=ECONOMY, message="adaptive pairing stopped: every adjacent pair ... separated"
    )
    return fake


def test_runs_page_shows_the_adaptive_economy(adaptive_api: FakeApi) -> None:
    at = AppTest.from_file(APP, default_timeout=60).run()
    at.session_state["run_id"] = RUN_A
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    table = at.dataframe[0].value
    assert table.loc[table["id"] == RUN_A, "economy"].item() == "312/2,400 calls (13%) · separated · samples −73%"
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Pairwise calls"] == "312" and metrics["Round robin would take"] == "2,400"
    assert metrics["Share used"] == "13.0%" and metrics["Stopped"] == "separated"
    assert metrics["Saving"] == "73.1%" and metrics["Fixed count (5 each)"] == "1,560"
    ranking = next(d.value for d in at.dataframe if "interval low" in d.value.columns)
    assert ranking["system"].tolist() == ["rsum", "memgpt", "vanilla"]
    assert ranking["vs next"].tolist() == ["separated", "separated", ""]
    captions = " ".join(str(c.value) for c in at.caption)
    assert "Stopping reason: every adjacent pair" in captions and "1: 250, 2: 40, 5: 22" in captions
