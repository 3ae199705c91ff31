"""Review r56b: the dashboard against a run above ``DJ_MAX_REPORT_JUDGMENTS``, whose report, agreement, calibrated
estimate and label queue the API refuses with a 409 naming the setting (judge_api/deps.py ``frame_readable``).

Finding (failing until fixed): the Annotate page's agreement after a rating (``dashboard.api.agreement``) takes every
409 for "no human ratings yet": the refusal is swallowed and the page says the run holds 0 human ratings right after
saving some, with no word of the limit.

What held (passing): the pages that read the report show the API's 409 as one error naming the setting, no
traceback.
"""

from __future__ import annotations

from types import SimpleNamespace

import httpx
import pytest
from dashboard_fakes import RUN_A, FakeApi, install
from fastapi import HTTPException
from streamlit.testing.v1 import AppTest

from judge_api.config import Settings, reset_settings_cache
from judge_api.deps import frame_readable

APP = "../../dashboard/app.py"
FRAME_ROUTES = ("/report", "/agreement", "/calibrated", "/label-queue")


def refusal(monkeypatch: pytest.MonkeyPatch) -> str:
    """The API's own 409 detail for a run of 150 judgments with ``DJ_MAX_REPORT_JUDGMENTS=100``."""
    monkeypatch.setenv("DJ_MAX_REPORT_JUDGMENTS", "100")
    reset_settings_cache()
    try:
        frame_readable(SimpleNamespace(id=RUN_A, n_judgments=150), Settings())  # type: ignore[arg-type]
    except HTTPException as exc:
        return str(exc.detail)
    finally:
        monkeypatch.delenv("DJ_MAX_REPORT_JUDGMENTS")
        reset_settings_cache()
    raise AssertionError("frame_readable let a run over the limit through")


class OverLimitApi(FakeApi):
    """The fake API's ``data`` state, with run A over the limit: its whole-frame routes answer the API's 409."""

    def __init__(self, detail: str) -> None:
        super().__init__("data")
        self.detail = detail

    def handler(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if any(path == f"/v1/runs/{RUN_A}{route}" for route in FRAME_ROUTES):
            self.requests.append(f"{request.method} {path}")
            return httpx.Response(409, json={"detail": self.detail})
        return super().handler(request)


@pytest.fixture
def over_limit(monkeypatch: pytest.MonkeyPatch) -> OverLimitApi:
    fake = OverLimitApi(refusal(monkeypatch))
    install(monkeypatch, fake)
    return fake


def page_text(at: AppTest) -> str:
    parts = [str(e.value) for kind in ("error", "warning", "info", "caption", "markdown") for e in getattr(at, kind)]
    return " ".join(parts)


def open_page(page: str) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60).run()
    at.switch_page(f"views/{page}.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_annotate_says_the_agreement_is_refused_for_the_runs_size(over_limit: OverLimitApi) -> None:
    at = open_page("annotate")
    at.text_input(key="ann_rater").input("expert_7").run()
    at.slider[0].set_value(91.0)
    at.button[0].click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert "Saved 3 rating(s)" in " ".join(str(s.value) for s in at.success)
    assert f"GET /v1/runs/{RUN_A}/agreement" in over_limit.requests
    shown = {m.label: m.value for m in at.metric}
    text = page_text(at)
    assert "DJ_MAX_REPORT_JUDGMENTS" in text, (
        f"the agreement's 409 for the run's size was taken for 'no ratings yet': metrics {shown}, nothing names "
        f"the limit ({text[:300]!r})"
    )
    assert shown.get("Human ratings in this run") != "0", shown  # 27 are stored: not "0"


@pytest.mark.parametrize("page", ["leaderboard", "explorer", "calibrated"])
def test_a_page_reading_the_report_names_the_limit(over_limit: OverLimitApi, page: str) -> None:
    at = open_page(page)
    errors = " ".join(str(e.value) for kind in ("error", "caption") for e in getattr(at, kind))  # explorer: quiet
    assert "DJ_MAX_REPORT_JUDGMENTS" in errors and "holds 150 judgments" in errors, errors


def test_the_refusal_names_setting_count_and_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    detail = refusal(monkeypatch)
    assert "DJ_MAX_REPORT_JUDGMENTS" in detail and "150" in detail and "100" in detail, detail
