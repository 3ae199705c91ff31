"""Issue 40 review: what the pages show where the report's interval is open or missing, and for systems never
compared — against the report the fake API builds with the service's own code."""

from __future__ import annotations

from typing import Any

import httpx
import pandas as pd
import pytest
from dashboard_fakes import RUN_A, FakeApi, _row, install
from streamlit.testing.v1 import AppTest

from dashboard import analysis, charts

APP = "../../dashboard/app.py"
ORDER = ("rsum", "memgpt", "vanilla")


def one_sided_with_an_apart_pair(fake: FakeApi) -> FakeApi:
    """rsum wins every comparison, vanilla loses every one (the report leaves their upper / lower bound open); x and
    y only ever met each other (a second component)."""
    rows = fake.runs[RUN_A]["rows"]
    for r in rows:
        if r["mode"] == "pairwise":
            wins = ORDER.index(r["system_a"]) < ORDER.index(r["system_b"])
            r.update(preference=2.0 if wins else -2.0, outcome="win" if wins else "loss")
    for i in range(3):
        for order in ("ab", "ba"):
            rows.append(
                _row(RUN_A, 90_000 + 2 * i + (order == "ba"), item_id=f"msc-{i}", mode="pairwise",
                     system_a="x", system_b="y", order=order, rubric_id="rsum-pairwise", aspect="overall",
                     verdict="tie", preference=1.0 if order == "ab" else -1.0, outcome="tie", score=None)
            )  # fmt: skip
    fake._reports.clear()
    return fake


def test_an_open_bradley_terry_interval_runs_to_the_edge_and_says_so() -> None:
    report = one_sided_with_an_apart_pair(FakeApi("data")).report(RUN_A)
    ranking = analysis.ranking_frame(report)
    by_system = ranking.set_index("system")
    assert by_system.at["rsum", "ci_unbounded"] == "high" and pd.isna(by_system.at["rsum", "elo_ci_high"])
    assert by_system.at["vanilla", "ci_unbounded"] == "low" and pd.isna(by_system.at["vanilla", "elo_ci_low"])
    d = charts.ranking_chart(ranking).to_dict()
    drawn = pd.DataFrame(d["datasets"][next(iter(d["datasets"]))]).set_index("system")
    rule = d["layer"][0]["encoding"]
    ends = [rule["x"]["field"], rule["x2"]["field"]]
    # every system the report gives an interval has its rule (was: the open side null, so the winner's and the
    # loser's intervals were not drawn and they looked the most certain); an open side reaches the axis' edge
    assert drawn[ends].notna().all().all(), drawn[ends]
    low, high = rule["x"]["scale"]["domain"]
    assert drawn.at["rsum", ends[1]] == high and drawn.at["vanilla", ends[0]] == low
    assert drawn.at["rsum", ends[0]] == pytest.approx(by_system.at["rsum", "elo_ci_low"])
    assert drawn.at["rsum", "interval"].endswith("to +∞") and drawn.at["vanilla", "interval"].startswith("−∞ to")
    assert drawn.at["rsum", "unbounded_label"] == "no upper bound →"
    assert drawn.at["vanilla", "unbounded_label"] == "← no lower bound"
    assert [layer["mark"]["type"] for layer in d["layer"]] == ["rule", "point", "text"]


def test_the_leaderboard_says_which_systems_were_never_compared(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, one_sided_with_an_apart_pair(FakeApi("data")))
    at = AppTest.from_file(APP, default_timeout=60)
    at.session_state["run_id"] = RUN_A
    at.run()
    at.switch_page("views/leaderboard.py").run()
    assert not at.exception, [e.value for e in at.exception]
    warnings = " ".join(str(w.value) for w in at.warning)
    assert "never compared" in warnings and "x, y" in warnings and "rsum, memgpt, vanilla" in warnings, warnings


def test_a_rejected_key_is_not_called_an_unreachable_api(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeApi("data")
    answer = fake.handler

    def only_the_right_key(request: httpx.Request) -> httpx.Response:
        if request.headers.get("authorization") != "Bearer right-key":
            return httpx.Response(401, json={"detail": "invalid API key"})
        return answer(request)

    fake.handler = only_the_right_key
    install(monkeypatch, fake)
    at = AppTest.from_file(APP, default_timeout=60)
    at.session_state["api_key"] = "wrong-key-s3cret"
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    sidebar = " ".join(str(e.value) for e in at.sidebar.caption)
    assert "unreachable" not in sidebar, sidebar  # it answered: the key was refused
    assert "refused the API key" in sidebar and "401" in sidebar, sidebar
    shown = " ".join(str(e.value) for kind in ("caption", "error", "markdown", "info") for e in getattr(at, kind))
    assert "s3cret" not in shown


def tooltip_fields(spec: dict[str, Any]) -> list[str]:
    return [
        str(t.get("field"))
        for layer in spec.get("layer", [spec])
        for t in (layer.get("encoding") or {}).get("tooltip") or []
        if isinstance(t, dict)
    ]


def test_a_score_with_no_interval_says_why_in_the_chart_not_null(monkeypatch: pytest.MonkeyPatch) -> None:
    """A system judged on one item: the report's interval is null with a ci_warning. Chromium's tooltip of the bare
    bounds read "ci_low null, ci_high null"; it says the warning instead."""
    fake = FakeApi("data")
    fake.runs[RUN_A]["rows"] += [
        _row(RUN_A, 95_000 + k, item_id="msc-0", mode="single", system_a="solo", rubric_id="rsum-single",
             aspect=aspect, score=50.0)
        for k, aspect in enumerate(("engagingness", "coherence", "consistency"))
    ]  # fmt: skip
    report = fake.report(RUN_A)
    scores = analysis.scores_frame(report)
    solo = scores[scores["system"] == "solo"]
    assert solo["ci_low"].isna().all() and solo["ci_warning"].str.startswith("1 item").all()
    d = charts.score_means_chart(scores).to_dict()
    shown = tooltip_fields(d)
    assert "ci_low" not in shown and "ci_high" not in shown, shown
    drawn = pd.DataFrame(d["datasets"][next(iter(d["datasets"]))])
    said = drawn.loc[drawn["system"] == "solo", "interval"]
    assert (said == "1 item: no interval of the mean of scores").all(), said
    bounded = drawn.loc[drawn["system"] == "rsum"].iloc[0]
    assert bounded["interval"] == f"{bounded['ci_low']:.1f} to {bounded['ci_high']:.1f}"


@pytest.mark.parametrize("link", ["../keys", "..", "run_aaaa/../../keys"])
def test_a_run_link_cannot_walk_the_dashboards_key_to_another_route(monkeypatch: pytest.MonkeyPatch, link: str) -> None:
    """``?run=../keys`` made the dashboard GET /v1/keys with its own key (httpx resolves dot segments); an id is one
    path segment, so the API answers "not found" for it and no other route is asked."""
    fake = FakeApi("data")
    answer = fake.handler
    asked: list[str] = []

    def recording(request: httpx.Request) -> httpx.Response:
        asked.append(request.url.raw_path.decode().split("?")[0])
        return answer(request)

    fake.handler = recording
    install(monkeypatch, fake)
    at = AppTest.from_file(APP, default_timeout=60)
    at.query_params["run"] = link
    at.run()
    at.switch_page("views/leaderboard.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert all(path.startswith(("/v1/runs", "/v1/rubrics", "/v1/monitors")) for path in asked), asked
    assert all(part not in (".", "..") for path in asked for part in path.split("/")), asked  # one segment each
    assert "not found" in " ".join(str(e.value) for e in at.error).lower()
