"""The Memory audit page (issue 26.4), AppTest against the fake API's memory-audit run: the report's memory_audit
section per system (precision / recall / F1 and the error-type shares with their CIs, the audit counts), and an
empty state that tells "no memory-audit judgments" apart from "all unparseable" and "not finished"."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest
from dashboard_fakes import RUN_M, FakeApi, install
from streamlit.testing.v1 import AppTest

from dashboard import charts
from dashboard import memory_audit as audit

APP = "../../dashboard/app.py"


def open_page() -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60).run()
    at.switch_page("views/memory.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    assert at.title[0].value == "Memory audit"
    return at


def texts(at: AppTest, kind: str) -> str:
    return " ".join(str(e.value) for e in getattr(at, kind))


def by_system(table: pd.DataFrame) -> dict[str, dict[str, Any]]:
    return {str(r["system"]): r for r in table.to_dict("records")}


@pytest.mark.parametrize("fake_api", ["memory"], indirect=True)
def test_page_shows_the_planted_figures_with_cis(fake_api: FakeApi) -> None:
    at = open_page()
    assert len(at.get("vega_lite_chart")) == 2 and len(at.download_button) == 2
    figures = by_system(at.dataframe[0].value)
    swapper, faithful = figures["swapper"], figures["faithful"]
    assert (swapper["precision"], swapper["recall"], swapper["f1"]) == pytest.approx((3 / 8, 5 / 12, 11 / 28))
    assert (faithful["precision"], faithful["recall"], faithful["f1"]) == pytest.approx((1.0, 3 / 4, 5 / 6))
    counts = ("n_items", "n_parsed", "n_unparseable", "n_failed")
    assert tuple(swapper[c] for c in counts) == (2, 2, 1, 0)
    assert tuple(faithful[c] for c in counts) == (2, 2, 0, 0)
    for row in (swapper, faithful):
        for name in ("precision", "recall", "f1"):
            assert row[f"{name}_ci_low"] <= row[name] + 1e-12 and row[name] <= row[f"{name}_ci_high"] + 1e-12
    # swapper's items have F1 2/7 and 1/2: every bootstrap mean lies between them
    assert 2 / 7 - 1e-12 <= swapper["f1_ci_low"] < swapper["f1_ci_high"] <= 0.5 + 1e-12
    errors = by_system(at.dataframe[1].value)
    swapper_errors = errors["swapper"]
    assert (swapper_errors["errors"], swapper_errors["fabricated"], swapper_errors["wrong_relationship"]) == (7, 1, 3)
    shares = tuple(swapper_errors[f"{k}_share"] for k in ("fabricated", "wrong_relationship", "missing"))
    assert shares == pytest.approx((1 / 7, 3 / 7, 3 / 7))
    assert errors["faithful"]["missing_share"] == 1.0 and errors["faithful"]["fabricated_share"] == 0.0
    assert "1 audit without figures (unparseable or failed)" in texts(at, "caption")
    # the figures are the API's report's, not recomputed on the page
    section = fake_api.report(RUN_M)["memory_audit"]
    assert {r["system"]: r["f1_ci_high"] for r in section["systems"]} == {
        s: r["f1_ci_high"] for s, r in figures.items()
    }


@pytest.mark.parametrize("fake_api", ["data"], indirect=True)
def test_run_without_memory_audit_says_how_to_get_one(fake_api: FakeApi) -> None:
    at = open_page()
    assert "No memory-audit judgments in this run" in texts(at, "info")
    assert "--rubric memory-audit" in texts(at, "info")
    assert len(at.get("vega_lite_chart")) == 0 and len(at.dataframe) == 0


@pytest.mark.parametrize(
    ("status", "message"),
    [
        ("unparseable", "This run has 5 memory-audit judgments, but none gave a parsed audit (5 unparseable)"),
        ("failed", "This run has 5 memory-audit judgments, but none gave a parsed audit (5 failed)"),
        ("pending", "This run's memory-audit judgments are not finished"),
    ],
)
def test_no_parsed_audit_is_not_called_none(monkeypatch: pytest.MonkeyPatch, status: str, message: str) -> None:
    fake = FakeApi("memory")
    rows = fake.runs[RUN_M]["rows"]
    rows[:] = [{**r, "status": status, "details": None, "score": None} for r in rows]
    install(monkeypatch, fake)
    at = open_page()
    assert message in texts(at, "info")
    assert "No memory-audit judgments" not in texts(at, "info")
    assert len(at.get("vega_lite_chart")) == 0


def test_tables_and_charts_from_a_section() -> None:
    record = {
        "system": "s", "judge": "j", "rubric_id": "memory-audit", "n_items": 2, "n_parsed": 2, "n_unparseable": 0,
        "n_failed": 0, "precision": 0.5, "precision_ci_low": 0.25, "precision_ci_high": 0.75, "recall": 1.0,
        "recall_ci_low": 1.0, "recall_ci_high": 1.0, "f1": 2 / 3, "f1_ci_low": 0.4, "f1_ci_high": 0.9, "errors": 2,
        "fabricated": 2, "wrong_relationship": 0, "missing": 0, "fabricated_share": 1.0,
        "wrong_relationship_share": 0.0, "missing_share": 0.0,
    }  # fmt: skip
    report = {"memory_audit": {"systems": [record, {**record, "judge": "k", "errors": 0, "fabricated": 0,
                                                     "fabricated_share": None, "missing_share": None,
                                                     "wrong_relationship_share": None}]}}  # fmt: skip
    assert audit.judges(report) == ["j", "k"]
    long = audit.figures_long(report, "j")
    assert long[["figure", "value", "ci_low"]].values.tolist() == [
        ["precision", 0.5, 0.25],
        ["recall", 1.0, 1.0],
        ["F1", 2 / 3, 0.4],
    ]
    assert audit.shares_long(report, "k").empty  # no errors: no share to draw
    shares = audit.shares_long(report, "j")
    assert shares[["error_type", "count", "share"]].values.tolist()[0] == ["fabricated", 2, 1.0]
    spec = charts.memory_figures_chart(long).to_dict()
    assert spec["layer"][0]["encoding"]["y"]["scale"]["domain"] == [0, 1]
    assert spec["layer"][1]["encoding"]["y2"]["field"] == "ci_high"
    assert charts.error_shares_chart(shares).to_dict()["encoding"]["x"]["field"] == "share"
    assert audit.no_audit_text(report, True) is None
    assert "No memory-audit judgments" in (audit.no_audit_text({"memory_audit": None}, False) or "")
