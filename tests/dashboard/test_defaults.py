"""Issue 27.6: defaults that showed nothing. Compare runs pairs the two most recent comparable runs and says when
the pair shares no scores; Disagreements opens on a tab with rows; Human agreement shows its charts before its
tables; count axes have whole ticks. (Tables read "n/a" where a value does not apply: test_no_none_cells.py.)"""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest
import streamlit as st
from dashboard_fakes import RUN_A, RUN_B, FakeApi, install
from streamlit.testing.v1 import AppTest

from dashboard import charts
from dashboard.analysis import agreement_tabs, comparable, default_pair, first_with_content

APP = "../../dashboard/app.py"


def runs(*modes: list[str]) -> list[dict[str, Any]]:
    return [{"id": f"r{i}", "mode": m} for i, m in enumerate(modes)]  # newest first, as GET /v1/runs lists them


def test_compare_defaults_to_the_most_recent_comparable_pair() -> None:
    # the issue: the newest run pairwise, the next single; the old default paired them (every delta 0)
    listing = runs(["pairwise"], ["single"], ["single"], ["pairwise"])
    assert default_pair(listing, None) == (0, 3)  # the newest and the newest run it can be compared with
    assert default_pair(listing, "r1") == (1, 2)  # the selected run against the latest comparable one
    assert default_pair(runs(["single"], ["pairwise"], ["single", "pairwise"]), "r0") == (0, 2)
    assert default_pair(runs(["single"], ["pairwise"]), None) == (0, 1)  # nothing comparable: the two newest
    assert comparable({"mode": ["single", "pairwise"]}, {"mode": ["pairwise"]})
    assert not comparable({"mode": ["single"]}, {"mode": ["pairwise"]})


def open_page(page: str) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60).run()
    at.switch_page(f"views/{page}.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_compare_page_says_when_the_pair_shares_no_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    """The issue's case: a single-mode run beside a pairwise run (every delta read 0 with no word why)."""
    fake = install(monkeypatch, FakeApi("data"))
    fake.runs[RUN_A]["summary"]["mode"] = ["single"]
    fake.runs[RUN_B]["summary"]["mode"] = ["pairwise"]
    at = open_page("compare")
    assert "share no mode (single vs pairwise)" in " ".join(w.value for w in at.warning)
    fake.runs[RUN_B]["summary"]["mode"] = ["single", "pairwise"]
    st.cache_data.clear()  # the run listing is cached for 2 s; a warm second page run comes well inside that
    at = open_page("compare")
    assert {at.selectbox(key="cmp_cand").value, at.selectbox(key="cmp_base").value} == {RUN_A, RUN_B}
    assert "share no mode" not in " ".join(w.value for w in at.warning)


def test_disagreements_opens_on_a_tab_with_rows() -> None:
    run = {"counts": {"done": 10, "unparseable": 24}}
    no_ratings, no_orders = pd.DataFrame(), pd.DataFrame(columns=["outcome_ab", "outcome_ba"])
    assert first_with_content(run, no_ratings, no_orders) == 2  # the issue: only the unparseable tab had rows
    ratings = pd.DataFrame([{"rater": "r", "value": 3}])
    assert first_with_content(run, ratings, no_orders) == 0
    both = pd.DataFrame([{"outcome_ab": "win", "outcome_ba": "loss"}])
    assert first_with_content({"counts": {"done": 4}}, no_ratings, both) == 1
    assert first_with_content({"counts": {"done": 4}}, None, None) == 0  # nothing anywhere: the first


def opened_tab(at: AppTest) -> str:
    """The label of the tab the page opens on (the tab container's default index, as sent to the browser)."""

    def containers(node: Any) -> list[Any]:
        proto = getattr(node, "proto", None)
        found = [node] if proto is not None and "tab_container" in type(proto).DESCRIPTOR.fields_by_name else []
        found = [n for n in found if n.proto.HasField("tab_container")]
        for child in getattr(node, "children", {}).values():
            found += containers(child)
        return found

    (tabs,) = containers(at.main)
    labels = [child.label for child in tabs.children.values()]
    assert labels == ["Judge vs human", "Order flips", "Unparseable / failed"]
    return str(labels[tabs.proto.tab_container.default_tab_index])


@pytest.mark.parametrize(
    ("state", "run_id", "tab"),
    [
        ("unparseable", RUN_A, "Unparseable / failed"),  # the issue: only this tab has rows (no ratings, no verdicts)
        ("data", RUN_B, "Order flips"),  # no human ratings, an order flip
        ("data", RUN_A, "Judge vs human"),  # human ratings: the first tab has rows
    ],
)
def test_disagreements_page_opens_on_the_first_tab_with_rows(
    monkeypatch: pytest.MonkeyPatch, state: str, run_id: str, tab: str
) -> None:
    install(monkeypatch, FakeApi(state))
    at = AppTest.from_file(APP, default_timeout=60)
    at.session_state["run_id"] = run_id
    at.run()
    at.switch_page("views/disagreements.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert opened_tab(at) == tab


def kinds_in_order(at: AppTest) -> list[str]:
    """The main area's element types in page order (depth first)."""
    out: list[str] = []

    def walk(node: Any) -> None:
        kind = getattr(node, "type", None)
        if kind in ("dataframe", "vega_lite_chart"):
            out.append("table" if kind == "dataframe" else "chart")
        for child in getattr(node, "children", {}).values():
            walk(child)

    walk(at.main)
    return out


def test_human_agreement_puts_its_charts_before_its_tables(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, FakeApi("data"))
    at = open_page("agreement")
    kinds = kinds_in_order(at)
    assert "chart" in kinds and "table" in kinds
    assert kinds.index("chart") < kinds.index("table"), kinds


def test_count_axes_have_whole_ticks() -> None:
    hist = pd.DataFrame([{"system": "a", "aspect": "c", "bin_start": 0.0, "bin_end": 10.0, "count": 1, "judge": "j"}])
    spec = charts.histogram_chart(hist).to_dict()
    axis = spec["encoding"]["y"]["axis"]
    assert axis["tickMinStep"] == 1 and axis["format"] == "d"
    progress = charts.progress_figure({"done": 1, "unparseable": 2}).to_dict()
    axis = progress["layer"][0]["encoding"]["x"]["axis"]
    assert axis["format"] == ",d" and axis["tickMinStep"] == 1
    big = charts.progress_figure({"done": 1_000_000}).to_dict()["layer"][0]["encoding"]["x"]["axis"]
    assert big["tickMinStep"] == charts.integer_dtick(1_000_000)
    assert charts.integer_dtick(3) == 1 and charts.integer_dtick(100) == 13
    contradictions = charts.contradiction_chart(
        pd.DataFrame([{"system": "a", "source_kind": "memory", "contradictions": 1}])
    ).to_dict()
    assert contradictions["encoding"]["x"]["axis"]["tickMinStep"] == 1


def _agreement(scores: bool, votes: bool, judges: bool, panel: bool) -> dict[str, Any]:
    judge = {"judge": "j", "aspect": "coherence", "n_scores": 3}
    inter = {"aspect": "a", "n_units": 2, "alpha_interval": 0.5, "alpha_ordinal": 0.5}
    return {
        "agreement": {
            "scores": [{"aspect": "coherence", "judge": "j", "n": 3}] if scores else [],
            "preferences": {"judge_vs_human": [{"aspect": "coherence", "judge": "j"}] if votes else []},
            "judges": {"matrix": [judge] if judges else []},
        },
        "panel": {"inter_judge": {"scores": [inter]}} if panel else None,
    }


@pytest.mark.parametrize(
    ("scores", "votes", "judges", "panel", "labels", "first"),
    [
        (True, True, False, False, ["Scores", "Preferences"], "Scores"),
        (False, True, False, False, ["Scores", "Preferences"], "Preferences"),  # votes only: open on them
        (False, False, False, False, ["Scores", "Preferences"], "Scores"),  # nothing shared: Scores says why
        (True, False, True, False, ["Scores", "Preferences", "Judges"], "Scores"),
        (False, True, False, True, ["Scores", "Preferences", "Judges"], "Preferences"),
    ],
)
def test_agreement_tabs_open_on_what_the_judge_and_humans_share(
    scores: bool, votes: bool, judges: bool, panel: bool, labels: list[str], first: str
) -> None:
    assert agreement_tabs(_agreement(scores, votes, judges, panel)) == (labels, first)
