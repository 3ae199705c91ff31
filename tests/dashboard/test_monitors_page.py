"""The Monitors page under Streamlit's AppTest against the fake API: the series chart per version with interval
bands, the status (paused by the budget), the sampled responses of a bucket opening in the item explorer, and the
empty and failing states."""

from __future__ import annotations

import pytest
from dashboard_fakes import MON, RUN_A, FakeApi, install, make_monitor
from streamlit.testing.v1 import AppTest

APP = "../../dashboard/app.py"


def open_monitors() -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60).run()
    at.switch_page("views/monitors.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def texts(at: AppTest, kind: str) -> str:
    return " ".join(str(e.value) for e in getattr(at, kind))


@pytest.mark.parametrize("fake_api", ["data"], indirect=True)
def test_series_chart_with_bands_per_version_and_the_bucket_opens_in_the_explorer(fake_api: FakeApi) -> None:
    at = open_monitors()
    assert at.title[0].value == "Monitors"
    assert not at.error, texts(at, "error")
    charts = at.get("vega_lite_chart")
    assert len(charts) >= 3  # rsum-single, fact-check and its contradiction rate
    spec = str(charts[0].proto.spec)
    assert '"mark": {"type": "rule"' in spec.replace("'", '"')  # the interval band of each bucket
    assert "ci_low" in spec and "ci_high" in spec and "version" in spec
    series = next(d.value for d in at.dataframe if "ci_low" in d.value.columns)
    assert set(series["version"]) == {"v1", "v2"}
    assert series.groupby("rubric_id")["n"].sum().to_dict() == {"fact-check": 48, "rsum-single": 48}
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Responses today"] == "400" and metrics["Sampling"] == "0.5"
    assert any(f"GET /v1/monitors/{MON}/series" == r for r in fake_api.requests)

    bucket = next(d.value for d in at.dataframe if "response_id" in d.value.columns)
    assert len(bucket) == 12  # the newest hour's rsum-single verdicts
    at.selectbox(key="mon_slice_pick").select("v1").run()
    bucket = next(d.value for d in at.dataframe if "response_id" in d.value.columns)
    assert set(bucket["version"]) == {"v1"} and len(bucket) == 6
    chosen = at.selectbox(key="mon_response_pick").value
    at.button(key="mon_go").click().run()
    assert at.title[0].value == "Item explorer"
    assert at.session_state["run_id"] == RUN_A
    assert at.header[0].value == f"Item `{chosen}`"


@pytest.mark.parametrize("fake_api", ["data"], indirect=True)
def test_alert_history_with_evidence(fake_api: FakeApi) -> None:
    at = open_monitors()
    banner = texts(at, "warning")
    assert "v-regression" in banner and "version v2 is worse than v1 by 5.30" in banner
    assert "1.20 to 9.80" in banner and "150 pairs" in banner and "decided after 142" in banner
    history = next(d.value for d in at.dataframe if "resolution" in d.value.columns)
    assert list(history["status"]) == ["open", "resolved"] and list(history["n"]) == [150, 150]
    assert "show no regression" in str(history["resolution"].iloc[1])
    worst = next(d.value for d in at.dataframe if "explanation" in d.value.columns and "score" in d.value.columns)
    assert list(worst["response_id"]) == ["msc-0", "msc-1", "msc-2"]
    assert f"GET /v1/monitors/{MON}/alerts" in fake_api.requests


def test_a_budget_pause_is_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = install(monkeypatch, FakeApi("data"))
    fake.monitors = [make_monitor(paused=True)]
    at = open_monitors()
    assert "resumes at 2026-11-21 00:00 UTC" in texts(at, "warning")
    assert {m.label: m.value for m in at.metric}["Sampling"] == "paused"


@pytest.mark.parametrize("fake_api", ["empty"], indirect=True)
def test_no_monitor_says_how_to_create_one(fake_api: FakeApi) -> None:
    at = open_monitors()
    assert "dialogue-judge monitor create" in texts(at, "info")
    assert not at.error and len(at.get("vega_lite_chart")) == 0


@pytest.mark.parametrize("fake_api", ["error"], indirect=True)
def test_api_error_is_a_clear_message(fake_api: FakeApi) -> None:
    at = open_monitors()
    assert "HTTP 500: database is down" in texts(at, "error")


@pytest.mark.parametrize("fake_api", ["data"], indirect=True)
def test_a_sampled_response_opens_with_the_conversation_it_was_judged_against(fake_api: FakeApi) -> None:
    # a production system prompt is Markdown more often than not: shown as text, its image never fetched
    prompt = "# Rules\n![pixel](http://tracker.example/p.png)\nUser has a beagle called Rex."
    for item in fake_api.items:
        item["memory"] = prompt
    at = open_monitors()
    chosen = str(at.selectbox(key="mon_response_pick").value)
    conversation = next(d.value for d in at.dataframe if list(d.value.columns) == ["session", "speaker", "text"])
    assert conversation["session"].tolist()[:3] == [1, 1, 2]
    assert conversation["speaker"].tolist()[:3] == ["user", "bot", "user"]
    index = chosen.split("-")[-1]
    assert conversation["text"].iloc[0] == f"I adopted a dog called Rex {index} years ago."
    assert conversation["speaker"].iloc[-1].endswith("(judged)")
    assert prompt in [str(t.value) for t in at.text]
    assert "tracker.example" not in " ".join(str(m.value) for m in at.markdown)
    assert any(r.startswith(f"GET /v1/runs/{RUN_A}/items") for r in fake_api.requests)
