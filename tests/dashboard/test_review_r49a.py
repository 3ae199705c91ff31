"""Review r49a of d122812: the Human agreement / Disagreements tabs that run only when open."""

from __future__ import annotations

import pytest
from dashboard_fakes import RUN_A, FakeApi
from streamlit.testing.v1 import AppTest

APP = "../../dashboard/app.py"


def _open(page: str, params: dict[str, str] | None = None) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60)
    at.session_state["run_id"] = RUN_A
    at.run()
    at.switch_page(f"views/{page}.py")
    for k, v in (params or {}).items():
        at.query_params[k] = v
    at.run()
    return at


def _ok(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]
    assert not [e.value for e in at.error if "failed" in str(e.value)], [e.value for e in at.error]


def _charts(at: AppTest) -> int:
    return len(at.get("vega_lite_chart"))


@pytest.mark.parametrize("fake_api", ["data"], indirect=True)
def test_agreement_without_an_agreement_section_still_shows_the_item_level_charts(fake_api: FakeApi) -> None:
    """Before d122812 the scatter / confusion / ranks (from the judgments and the ratings, not the report's agreement
    section) were drawn even when the report had no agreement section yet (a stale report: "press Refresh data");
    now the page returns before any tab, so they are reachable nowhere."""
    report = fake_api.report(RUN_A)
    key = f"{RUN_A}:{len(fake_api.ratings[RUN_A])}"
    fake_api._reports[key] = {**report, "agreement": None}
    at = _open("agreement")
    _ok(at)
    assert _charts(at) >= 3, _charts(at)


def _open_tab(at: AppTest) -> list[str]:
    """The columns of the tables drawn (which tells the open tab)."""
    return [str(c) for d in at.dataframe for c in d.value.columns]


@pytest.mark.parametrize("fake_api", ["data"], indirect=True)
@pytest.mark.parametrize(
    ("page", "param", "value", "column"),
    [
        ("agreement", "agr_tab", "Bogus", "spearman"),
        ("agreement", "agr_tab", "scores", "spearman"),
        ("agreement", "agr_tab", "<script>alert(1)</script>", "spearman"),
        ("disagreements", "dis_tab", "Bogus", "gap"),
        ("disagreements", "dis_tab", "", "gap"),
    ],
)
def test_an_invalid_tab_label_opens_the_default_tab(
    fake_api: FakeApi, page: str, param: str, value: str, column: str
) -> None:
    at = _open(page, {param: value})
    _ok(at)
    assert column in _open_tab(at), _open_tab(at)


@pytest.mark.parametrize("fake_api", ["data"], indirect=True)
def test_ratings_added_after_opening_change_the_default_tab_without_an_exception(fake_api: FakeApi) -> None:
    everything = list(fake_api.ratings[RUN_A])
    fake_api.ratings[RUN_A] = [r for r in everything if r["kind"] == "preference"]
    at = _open("agreement")
    _ok(at)
    assert "S1 rate" in _open_tab(at)  # votes only: opens on Preferences
    fake_api.ratings[RUN_A] = everything  # someone rates scores; the sidebar's refresh bumps the revision
    at.session_state["ratings_rev"] = 1
    at.run()
    _ok(at)
    assert "spearman" in _open_tab(at), _open_tab(at)


@pytest.mark.parametrize("fake_api", ["data"], indirect=True)
def test_a_chosen_agreement_tab_survives_a_change_of_the_default(fake_api: FakeApi) -> None:
    everything = list(fake_api.ratings[RUN_A])
    fake_api.ratings[RUN_A] = [r for r in everything if r["kind"] == "preference"]
    at = _open("agreement")
    at.session_state["agr_tab"] = "Judges"
    at.run()
    _ok(at)
    judges = _open_tab(at)
    fake_api.ratings[RUN_A] = everything
    at.session_state["ratings_rev"] = 1
    at.run()
    _ok(at)
    assert at.session_state["agr_tab"] == "Judges", at.session_state["agr_tab"]
    assert set(judges) & set(_open_tab(at)), (judges, _open_tab(at))


@pytest.mark.parametrize("fake_api", ["data"], indirect=True)
def test_disagreements_default_moves_when_ratings_arrive(fake_api: FakeApi) -> None:
    from dashboard_fakes import RUN_B, make_ratings

    at = AppTest.from_file(APP, default_timeout=60)
    at.session_state["run_id"] = RUN_B
    at.run()
    at.switch_page("views/disagreements.py").run()
    _ok(at)
    first = _open_tab(at)
    fake_api.ratings[RUN_B] = make_ratings()
    at.session_state["ratings_rev"] = 1
    at.run()
    _ok(at)
    assert "gap" in _open_tab(at), (first, _open_tab(at))


@pytest.mark.parametrize("fake_api", ["data"], indirect=True)
def test_the_review_pick_survives_a_look_at_another_tab(fake_api: FakeApi) -> None:
    """Before d122812 every tab ran on every rerun, so the item picked in Judge vs human was still picked after a look
    at Order flips; now the picker is not drawn while its tab is closed and Streamlit drops its value."""
    at = _open("disagreements")
    _ok(at)
    options = at.selectbox(key="dis_h_pick").options
    chosen = options[-1]
    at.selectbox(key="dis_h_pick").select(chosen).run()
    at.session_state["dis_tab"] = "Order flips"
    at.run()
    at.session_state["dis_tab"] = "Judge vs human"
    at.run()
    _ok(at)
    assert at.selectbox(key="dis_h_pick").value == chosen


@pytest.mark.parametrize("fake_api", ["data"], indirect=True)
def test_the_judges_tab_disappearing_under_the_reader_is_no_exception(fake_api: FakeApi) -> None:
    at = _open("agreement", {"agr_tab": "Judges"})
    _ok(at)
    assert "cost_usd" in _open_tab(at), _open_tab(at)
    report = fake_api.report(RUN_A)
    key = f"{RUN_A}:{len(fake_api.ratings[RUN_A])}"
    agreement = {**report["agreement"], "judges": {"matrix": []}}
    fake_api._reports[key] = {**report, "agreement": agreement, "panel": None}
    at.session_state["ratings_rev"] = 1
    at.run()
    _ok(at)
    assert "spearman" in _open_tab(at), _open_tab(at)


@pytest.mark.parametrize("fake_api", ["data"], indirect=True)
@pytest.mark.parametrize(("tab", "key"), [("Order flips", "dis_f"), ("Unparseable / failed", "dis_u")])
def test_open_in_explorer_from_a_later_tab(fake_api: FakeApi, tab: str, key: str) -> None:
    """A non-default tab puts ``dis_tab`` in the URL (a link, or a click on the tab); ``st.switch_page`` then clears the
    query parameters, which Streamlit refuses for a bound one: "This page failed: StreamlitAPIException: Cannot clear
    query parameters - the following are bound to widgets: 'dis_tab'"."""
    at = _open("disagreements", {"dis_tab": tab})
    _ok(at)
    item = at.selectbox(key=f"{key}_pick").options[-1]
    at.selectbox(key=f"{key}_pick").select(item).run()
    at.button(key=f"{key}_go").click().run()
    _ok(at)
    assert at.title[0].value == "Item explorer"
    assert at.header[0].value == f"Item `{item}`"
