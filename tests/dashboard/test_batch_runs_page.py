"""The runs page shows a batch run's provider batches (open, done, requests sent)."""

from __future__ import annotations

import pytest
from dashboard_fakes import RUN_A, FakeApi, install
from streamlit.testing.v1 import AppTest

APP = "../../dashboard/app.py"


@pytest.fixture
def batch_api(monkeypatch: pytest.MonkeyPatch) -> FakeApi:
    fake = install(monkeypatch, FakeApi("data"))
    fake.runs[RUN_A]["summary"].update(execution="batch", batches={"open": 2, "done": 3, "requests": 12_500})
    return fake


def test_runs_page_shows_the_provider_batches_of_a_batch_run(batch_api: FakeApi) -> None:
    at = AppTest.from_file(APP, default_timeout=60).run()
    assert not at.exception, [e.value for e in at.exception]
    table = at.dataframe[0].value
    assert table.loc[table["id"] == RUN_A, "batches"].item() == "2 open · 3 done · 12,500 requests"
    others = table.loc[table["id"] != RUN_A, "batches"].tolist()
    assert all(cell == "" for cell in others)
