"""Review r60a (hostile): commit 8c196d2's dashboard changes: tables past ``INLINE_CSV_ROWS`` build their CSV when the
Download button is clicked, and the Disagreements page reads the human ratings once.

Tests named ``test_HOLDS_*`` pin a promise the review could not break."""

from __future__ import annotations

import io
from typing import Any

import httpx
import numpy as np
import pandas as pd
import pytest
import streamlit as st
from dashboard_fakes import RUN_A, RUN_B, FakeApi, install
from streamlit.testing.v1 import AppTest

from dashboard import widgets

APP = "../../dashboard/app.py"


def _frame(n: int) -> pd.DataFrame:
    rng = np.random.default_rng(7)
    return pd.DataFrame(
        {
            "item_id": [f"msc-{i}" for i in range(n)],
            "score": rng.normal(50, 20, n).round(3),
            "judge": [None if i % 3 == 0 else "openai:gpt" for i in range(n)],
            "gap": np.where(np.arange(n) % 7 == 0, np.nan, rng.random(n)),
        }
    )


@pytest.fixture
def downloads(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """What each ``st.download_button`` was given (its data as the browser would receive it)."""
    seen: list[dict[str, Any]] = []

    def download_button(label: str, data: Any, **kwargs: Any) -> bool:
        seen.append({"deferred": callable(data), "bytes": data() if callable(data) else data, **kwargs})
        return False

    monkeypatch.setattr(st, "download_button", download_button)
    return seen


@pytest.mark.parametrize("n", [widgets.INLINE_CSV_ROWS, widgets.INLINE_CSV_ROWS + 1, 2_345])
def test_HOLDS_the_csv_is_the_whole_table_with_the_same_bytes(downloads: list[dict[str, Any]], n: int) -> None:
    """Up to INLINE_CSV_ROWS the bytes are given with the page, past it a callable that gives the same bytes
    (``df.to_csv(index=False)``: what the button gave on a7aee4d), for the whole table, whatever page is shown."""
    df = _frame(n)
    st.session_state["big_page"] = 3  # a later page shown: the download is still every row
    widgets.table(df, "big", "big")
    (given,) = downloads
    assert given["deferred"] is (n > widgets.INLINE_CSV_ROWS)
    assert given["bytes"] == df.to_csv(index=False).encode()
    assert given["file_name"] == "big.csv" and given["mime"] == "text/csv" and given["key"] == "big_csv"
    assert len(pd.read_csv(io.BytesIO(given["bytes"]))) == n


def test_HOLDS_a_deferred_csv_is_the_frame_as_it_was_drawn(downloads: list[dict[str, Any]]) -> None:
    """The callable reads the frame the page drew (a new frame per run: the next run's frame is another object)."""
    df = _frame(widgets.INLINE_CSV_ROWS + 5)
    expected = df.to_csv(index=False).encode()
    widgets.csv_button(df, "t", "t")
    assert downloads[0]["deferred"] and downloads[0]["bytes"] == expected


def _failing_ratings(fake: FakeApi) -> None:
    real = fake.handler

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/human-ratings") and request.method == "GET":
            return httpx.Response(500, json={"detail": "ratings table is locked"})
        return real(request)

    fake.handler = handler


def test_HOLDS_disagreements_says_when_the_ratings_read_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    """The human ratings read fails: the page says so (once), does not crash, and the other tabs still draw."""
    fake = FakeApi("data")
    _failing_ratings(fake)
    install(monkeypatch, fake)
    at = AppTest.from_file(APP, default_timeout=60).run()
    at.switch_page("views/disagreements.py").run()
    at.session_state["dis_tab"] = "Judge vs human"
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    errors = " ".join(str(e.value) for e in at.error)
    assert "human ratings" in errors and "ratings table is locked" in errors
    assert not any("gap" in d.value.columns for d in at.dataframe)
    at.session_state["dis_tab"] = "Order flips"
    at.run()
    assert not at.exception and any("flipped" in d.value.columns for d in at.dataframe)


def test_HOLDS_disagreements_without_ratings_points_to_annotate(monkeypatch: pytest.MonkeyPatch) -> None:
    """A run without human ratings (an empty frame): the Judge-vs-human tab points to the Annotate page."""
    install(monkeypatch, FakeApi("data"))
    at = AppTest.from_file(APP, default_timeout=60).run()
    at.session_state["run_id"] = RUN_B
    at.switch_page("views/disagreements.py").run()
    at.session_state["dis_tab"] = "Judge vs human"
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert "No human ratings yet" in " ".join(str(e.value) for e in at.info)


def test_HOLDS_disagreements_reads_the_ratings_once_per_draw(monkeypatch: pytest.MonkeyPatch) -> None:
    """With ratings, the Judge-vs-human tab draws the gap table from the page's one read."""
    fake = install(monkeypatch, FakeApi("data"))
    at = AppTest.from_file(APP, default_timeout=60).run()
    at.session_state["run_id"] = RUN_A
    at.switch_page("views/disagreements.py").run()
    at.session_state["dis_tab"] = "Judge vs human"
    st.cache_data.clear()
    fake.requests.clear()
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert any("gap" in d.value.columns for d in at.dataframe)
    assert len([r for r in fake.requests if r == f"GET /v1/runs/{RUN_A}/human-ratings"]) == 1
