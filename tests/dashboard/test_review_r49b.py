"""Review r49b of 720c9e9 (``widgets.linked_tabs`` / ``widgets.keep``): the tab the reader picked, or a link opened,
must stay open, and the open tab must be the one the URL names, on every rerun.

A click on a tab is emulated as the browser does it: the tabs' value in the session and ``?<key>=<label>`` in the
URL (``widgets.linked_tabs`` writes it after a click; AppTest cannot click a tab)."""

from __future__ import annotations

import pytest
import streamlit as st
from dashboard_fakes import RUN_A, RUN_B, FakeApi
from streamlit.testing.v1 import AppTest
from test_review_r49a import _ok, _open

FLIPS, HUMAN, FAILED = "Order flips", "Judge vs human", "Unparseable / failed"


def _columns(at: AppTest) -> list[str]:
    """The columns of the tables drawn (which tells the open tab)."""
    return [str(c) for d in at.dataframe for c in d.value.columns]


def _open_tab(at: AppTest, key: str) -> str:
    return str(at.session_state[key]) if key in at.session_state else "<none>"


def _click(at: AppTest, key: str, label: str) -> None:
    at.session_state[key] = label
    at.query_params[key] = label
    at.run()


@pytest.mark.parametrize("fake_api", ["data"], indirect=True)
def test_a_link_to_the_default_tab_stays_open_when_the_default_moves(fake_api: FakeApi) -> None:
    """``?agr_tab=Preferences`` while Preferences is also the default (votes only). Scores ratings arrive: linked_tabs
    sees the open tab equal to the remembered default, takes it for "not picked" and opens Scores, though the URL
    still says Preferences; the next rerun (any click) reads the URL again and jumps back to Preferences. The same
    happens after a click away and back to the default tab (the click writes the same URL)."""
    everything = list(fake_api.ratings[RUN_A])
    fake_api.ratings[RUN_A] = [r for r in everything if r["kind"] == "preference"]
    at = _open("agreement", {"agr_tab": "Preferences"})
    _ok(at)
    assert "S1 rate" in _columns(at)
    fake_api.ratings[RUN_A] = everything  # someone rates scores; the sidebar's refresh bumps the revision
    at.session_state["ratings_rev"] = 1
    seen = []
    for _ in range(2):
        at.run()
        _ok(at)
        seen.append((_open_tab(at, "agr_tab"), at.query_params.get("agr_tab"), "S1 rate" in _columns(at)))
    # observed: [('Scores', 'Preferences', False), ('Preferences', 'Preferences', True)]
    assert seen == [("Preferences", "Preferences", True)] * 2, seen


@pytest.mark.parametrize("fake_api", ["data"], indirect=True)
def test_a_picked_tab_stays_open_when_another_tab_disappears(fake_api: FakeApi) -> None:
    """The reader picked Preferences; the refreshed report has no Judges tab any more. ``st.tabs`` (not keyed by its
    key alone: the labels are in its identity) becomes a new widget that opens on its first tab, and linked_tabs
    does not re-assign the label (the session still holds it): Scores for one run, the URL saying Preferences, then
    Preferences again on the next rerun. The same when a run with a Judges tab and one without are switched."""
    at = _open("agreement")
    _ok(at)
    _click(at, "agr_tab", "Preferences")
    _ok(at)
    assert "S1 rate" in _columns(at)
    report = fake_api.report(RUN_A)
    key = f"{RUN_A}:{len(fake_api.ratings[RUN_A])}"
    agreement = {**report["agreement"], "judges": {"matrix": []}}
    fake_api._reports[key] = {**report, "agreement": agreement, "panel": None}
    at.session_state["ratings_rev"] = 1
    seen = []
    for _ in range(2):
        at.run()
        _ok(at)
        assert [t.label for t in at.tabs] == ["Scores", "Preferences"]
        seen.append((_open_tab(at, "agr_tab"), at.query_params.get("agr_tab"), "S1 rate" in _columns(at)))
    # observed: [('Scores', 'Preferences', False), ('Preferences', 'Preferences', True)]
    assert seen == [("Preferences", "Preferences", True)] * 2, seen


@pytest.mark.parametrize("fake_api", ["data"], indirect=True)
def test_a_picked_tab_stays_open_after_a_look_at_another_run(fake_api: FakeApi) -> None:
    """Disagreements on run A (default Judge vs human): the reader opens Order flips, picks run B in the sidebar (its
    default is Order flips: no ratings), then run A again. On B the picked tab became "the default shown", so on A
    linked_tabs follows A's default and opens Judge vs human while the URL says Order flips; the next rerun jumps back
    to Order flips."""
    at = _open("disagreements")
    _ok(at)
    assert _open_tab(at, "dis_tab") == HUMAN
    _click(at, "dis_tab", FLIPS)
    at.selectbox(key="_run_widget").select(RUN_B).run()
    _ok(at)
    assert _open_tab(at, "dis_tab") == FLIPS
    at.selectbox(key="_run_widget").select(RUN_A).run()
    _ok(at)
    seen = [(_open_tab(at, "dis_tab"), at.query_params.get("dis_tab"), "gap" in _columns(at))]
    at.run()
    _ok(at)
    seen.append((_open_tab(at, "dis_tab"), at.query_params.get("dis_tab"), "gap" in _columns(at)))
    # observed: [('Judge vs human', 'Order flips', True), ('Order flips', 'Order flips', False)]
    assert seen == [(FLIPS, FLIPS, False)] * 2, seen


# checks that held


def _unparseable(fake_api: FakeApi, n: int) -> None:
    """Run A with ``n`` more unparseable judgments (pages of 50 on the Unparseable / failed tab)."""
    rows = [r for r in fake_api.runs[RUN_A]["rows"] if r["id"] < 90_000]
    base = next(r for r in rows if r["status"] == "unparseable")
    fake_api.runs[RUN_A]["rows"] = rows + [{**base, "id": 90_000 + k, "item_id": f"msc-{k % 6}"} for k in range(n)]


@pytest.mark.parametrize("fake_api", ["data"], indirect=True)
def test_a_kept_page_past_the_last_page_opens_the_first(fake_api: FakeApi) -> None:
    _unparseable(fake_api, 130)  # 131 rows: 3 pages
    at = _open("disagreements", {"dis_tab": FAILED})
    _ok(at)
    at.number_input(key="dis_unparseable_page").set_value(3).run()
    _click(at, "dis_tab", HUMAN)
    _click(at, "dis_tab", FAILED)
    _ok(at)
    assert at.number_input(key="dis_unparseable_page").value == 3  # kept while the tab was closed
    _click(at, "dis_tab", HUMAN)
    _unparseable(fake_api, 60)  # fewer rows after a refresh: 2 pages
    st.cache_data.clear()
    _click(at, "dis_tab", FAILED)
    _ok(at)
    assert at.number_input(key="dis_unparseable_page").value == 1
    assert "rows 1–50 of 61" in [c.value for c in at.caption]


@pytest.mark.parametrize("fake_api", ["data"], indirect=True)
def test_a_kept_pick_no_longer_offered_falls_back_and_opens(fake_api: FakeApi) -> None:
    at = _open("disagreements")
    at.selectbox(key="dis_h_pick").select("msc-5").run()
    _click(at, "dis_tab", FLIPS)
    fake_api.ratings[RUN_A] = [r for r in fake_api.ratings[RUN_A] if r["item_id"] in ("msc-0", "msc-1")]
    at.session_state["ratings_rev"] = 1
    at.run()
    _click(at, "dis_tab", HUMAN)
    _ok(at)
    pick = at.selectbox(key="dis_h_pick")
    assert pick.value in pick.options, (pick.value, pick.options)
    at.button(key="dis_h_go").click().run()
    _ok(at)
    assert at.header[0].value == f"Item `{pick.value}`"
