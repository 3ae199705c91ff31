"""The runs page shows the generation stage of a run with systems (issue 26.3): how many responses are generated,
failed, pending and running, how many items were released to judging, and the failures."""

from __future__ import annotations

import pytest
from dashboard_fakes import RUN_A, FakeApi, install
from streamlit.testing.v1 import AppTest

APP = "../../dashboard/app.py"


@pytest.fixture
def systems_api(monkeypatch: pytest.MonkeyPatch) -> FakeApi:
    fake = install(monkeypatch, FakeApi("data"))
    fake.runs[RUN_A]["summary"].update(
        generation={
            "total": 12,
            "generated": 7,
            "failed": 2,
            "pending": 2,
            "running": 1,
            "items_released": 4,
            "failures": [
                {"item_id": "msc-0", "system": "ours", "error": "timeout: slow"},
                {"item_id": "msc-3", "system": "ours", "error": "http 500"},
            ],
        }
    )
    return fake


def test_runs_page_shows_the_generation_progress(systems_api: FakeApi) -> None:
    at = AppTest.from_file(APP, default_timeout=60)
    at.session_state["run_id"] = RUN_A
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    bars = [e for e in at.get("progress") if "Generation" in str(e.proto.text)]
    assert len(bars) == 1
    assert bars[0].proto.value == 75  # 9 of 12 settled
    assert "7 generated, 2 failed, 2 pending, 1 running · 4 items released" in bars[0].proto.text
    failures = [d.value for d in at.dataframe if "error" in d.value.columns]
    assert len(failures) == 1 and failures[0]["error"].tolist() == ["timeout: slow", "http 500"]


def test_a_run_without_systems_has_no_generation_bar(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, FakeApi("data"))
    at = AppTest.from_file(APP, default_timeout=60)
    at.session_state["run_id"] = RUN_A
    at.run()
    assert not [e for e in at.get("progress") if "Generation" in str(e.proto.text)]
