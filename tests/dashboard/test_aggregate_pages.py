"""Issue 39: Human agreement and Disagreements draw from the API's item-level aggregates (``/item-scores``,
``/order-outcomes``), never the whole run (``/judgments.csv``), and show the numbers they showed when they computed
them from the run's frame; the order flips are paged by the API."""

from __future__ import annotations

import pandas as pd
import pytest
import streamlit as st
from dashboard_fakes import RUN_A, FakeApi, install, judgments_frame
from test_pages_apptest import open_page, texts

from dashboard import analysis
from tests import compare_reference


def _old(fake: FakeApi) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """What the pages computed before, from the whole run's frame: the scatter, the order outcomes, the ratings."""
    frame = judgments_frame(fake.runs[RUN_A]["rows"])
    ratings = pd.DataFrame(fake.ratings[RUN_A])
    scatter = analysis.scatter_frame(analysis.judge_item_scores(frame), analysis.human_item_scores(ratings))
    return scatter, analysis.order_outcomes(frame), ratings


def _same(shown: pd.DataFrame, expected: pd.DataFrame) -> None:
    left = shown.reset_index(drop=True)
    right = expected.reset_index(drop=True)[list(left.columns)]
    pd.testing.assert_frame_equal(left, right, check_dtype=False, check_exact=False, rtol=0, atol=1e-12)


@pytest.mark.parametrize("fake_api", ["data"], indirect=True)
def test_agreement_shows_the_frames_figures_without_the_frame(fake_api: FakeApi) -> None:
    at = open_page("agreement")
    assert not any(r.endswith("/judgments.csv") for r in fake_api.requests)
    assert any("rated=true" in r for r in fake_api.aggregate_requests)
    scatter, _, _ = _old(fake_api)
    aspect = str(at.selectbox(key="agr_aspect").value) if any(s.key == "agr_aspect" for s in at.selectbox) else None
    chosen = scatter if aspect is None else scatter[scatter["aspect"] == aspect]
    ranks = next(d.value for d in at.dataframe if "judge_rank" in d.value.columns)
    _same(ranks, analysis.system_ranks(chosen))
    assert f"{len(chosen):,} rated (item, system) pairs" in texts(at, "caption")


@pytest.mark.parametrize("fake_api", ["data"], indirect=True)
def test_disagreements_show_the_frames_figures_without_the_frame(fake_api: FakeApi) -> None:
    at = open_page("disagreements")
    assert not any(r.endswith("/judgments.csv") for r in fake_api.requests)
    scatter, orders, ratings = _old(fake_api)
    frames = [d.value for d in at.dataframe]
    gaps = next(f for f in frames if "gap" in f.columns)
    _same(gaps, scatter.sort_values("gap", ascending=False).head(len(gaps)))
    prefs = next(f for f in frames if "human_vote" in f.columns)
    _same(prefs, analysis.preference_disagreements(orders, ratings))
    at.session_state["dis_tab"] = "Order flips"  # only the open tab runs
    at.run()
    flips = next(d.value for d in at.dataframe if "flipped" in d.value.columns)
    both = orders[orders["outcome_ab"].notna() & orders["outcome_ba"].notna()]
    _same(flips, both[both["flipped"]])
    metric = {m.label: m.value for m in at.metric}["Pairs whose verdict flips with the order"]
    assert metric == f"{int(both['flipped'].sum()):,} of {len(both):,}"


def test_order_flips_are_paged_by_the_api(monkeypatch: pytest.MonkeyPatch) -> None:
    """120 flipped keys: the tab shows 50, and page 2 asks the API for the next 50 (offset 50), the same rows the
    whole frame's flipped keys had there."""
    fake = install(monkeypatch, FakeApi("data"))
    base = [r for r in fake.runs[RUN_A]["rows"] if r["mode"] == "pairwise"]
    rows = [dict(r, id=10_000 + n * len(base) + k, item_id=f"{r['item_id']}-{n:03d}")
            for n in range(120) for k, r in enumerate(base)]  # fmt: skip
    fake.runs[RUN_A]["rows"] = fake.runs[RUN_A]["rows"] + rows
    fake.ratings[RUN_A] = []
    orders = analysis.order_outcomes(judgments_frame(fake.runs[RUN_A]["rows"]))
    flipped = orders[orders["flipped"]].reset_index(drop=True)
    assert len(flipped) == 121
    at = open_page("disagreements")
    shown = next(d.value for d in at.dataframe if "flipped" in d.value.columns)
    _same(shown, flipped.iloc[:50])
    assert "rows 1–50 of 121" in texts(at, "caption")
    at.number_input(key="dis_flips_page").set_value(2).run()
    shown = next(d.value for d in at.dataframe if "flipped" in d.value.columns)
    _same(shown, flipped.iloc[50:100])
    assert any("flipped=true" in r and "offset=50" in r for r in fake.aggregate_requests)
    at.session_state["dis_tab"] = "Unparseable / failed"  # a look at another tab keeps the page the reader was on
    at.run()
    at.session_state["dis_tab"] = "Order flips"
    at.run()
    assert not at.exception and not at.warning, [w.value for w in at.warning]
    shown = next(d.value for d in at.dataframe if "flipped" in d.value.columns)
    _same(shown, flipped.iloc[50:100])
    assert not any(r.endswith("/judgments.csv") for r in fake.requests)


@pytest.mark.parametrize("fake_api", ["data"], indirect=True)
def test_compare_shows_the_frames_figures_without_either_frame(fake_api: FakeApi) -> None:
    """Compare runs reads ``/score-deltas`` and ``/worse-items``: the deltas, CIs (the same bootstrap: seed 0, the
    page's 1,000 resamples), counts and worse items equal what it computed from both runs' frames before."""
    at = open_page("compare")
    assert not any(r.endswith("/judgments.csv") for r in fake_api.requests)
    base, cand = str(at.selectbox(key="cmp_base").value), str(at.selectbox(key="cmp_cand").value)
    assert base != cand and RUN_A in (base, cand)
    assert any(r.startswith("/score-deltas?") and f"baseline={base}" in r for r in fake_api.aggregate_requests)
    b, c = (analysis.judge_item_scores(judgments_frame(fake_api.runs[r]["rows"])) for r in (base, cand))
    frames = [d.value for d in at.dataframe]
    deltas = next(f for f in frames if "ci_low" in f.columns)
    expected = compare_reference.compare_scores(b, c, n_boot=1000)
    assert len(deltas) == len(expected) > 0 and deltas["ci_low"].notna().any()
    _same(deltas, expected)
    worse = next(f for f in frames if list(f.columns) == analysis.WORSE_COLUMNS)
    _same(worse, compare_reference.worse_items(b, c).head(50))
    options = at.selectbox(key="cmp_item").options
    assert options == compare_reference.worse_items(b, c)["item_id"].astype(str).head(500).unique().tolist()


@pytest.mark.parametrize("fake_api", ["data"], indirect=True)
def test_a_page_reads_the_run_list_once(fake_api: FakeApi) -> None:
    """Each ``/v1/runs`` counts every listed run's judgments (most of a second at 1M): the sidebar's list, the page's
    run total and the selected run's summary come from one request per draw."""
    at = open_page("runs")
    fake_api.requests.clear()
    st.cache_data.clear()
    at = open_page("leaderboard", at)
    assert fake_api.requests.count("GET /v1/runs") == 1, fake_api.requests
    assert not any(r.startswith("GET /v1/runs/") and r.count("/") == 3 for r in fake_api.requests), fake_api.requests
    assert at.title[0].value == "Leaderboard" and len(at.get("vega_lite_chart")) >= 1
