"""The Calibrated page (issue 37) under AppTest against the fake API's ``calibrated`` state: the three intervals per
system on the people's scale, the gap between the judge and the people, the notes of null rows, the label-next list
linking to Annotate (which opens the linked item), and the states without ratings, with too few, without a queue;
a label posted as Annotate posts it changes the figures and the list."""

from __future__ import annotations

import calibrated_fakes as cal
import pandas as pd
import pytest
from dashboard_fakes import FakeApi, install
from streamlit.testing.v1 import AppTest

from dashboard import analysis, api
from dashboard.analysis.calibrated import CALIBRATED, HUMAN_ONLY, JUDGE_ONLY

APP = "../../dashboard/app.py"


def open_calibrated(run_id: str) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60).run()
    at.session_state["run_id"] = run_id
    at.switch_page("views/calibrated.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.title[0].value == "Calibrated"
    return at


def texts(at: AppTest, kind: str) -> str:
    return " ".join(str(e.value) for e in getattr(at, kind))


def frame_with(at: AppTest, column: str) -> pd.DataFrame:
    return next(d.value for d in at.dataframe if column in d.value.columns)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeApi:
    return install(monkeypatch, FakeApi("calibrated"))


def test_three_intervals_per_system_on_the_people_scale_and_the_gap(fake: FakeApi) -> None:
    at = open_calibrated(cal.RUN_C)
    assert not at.error, texts(at, "error")
    charts = at.get("vega_lite_chart")
    assert len(charts) == 1
    report = fake.report(cal.RUN_C)
    intervals = analysis.interval_frame(report)
    assert sorted(intervals["interval"].unique()) == sorted([JUDGE_ONLY, HUMAN_ONLY, CALIBRATED])
    assert sorted(intervals["system"].unique()) == ["v1", "v2"]
    v1 = intervals[intervals["system"] == "v1"].set_index("interval")
    # the judge-only mean is the report's own mean mapped 1-100 -> 0-2; v1 is overrated, so it sits well above
    own = next(r for r in report["scores"] if r["system"] == "v1" and r["aspect"] == "consistency")
    assert v1.loc[JUDGE_ONLY, "estimate"] == pytest.approx((own["mean"] - 1) * 2 / 99)
    assert v1.loc[JUDGE_ONLY, "estimate"] > v1.loc[CALIBRATED, "ci_high"]
    row = next(r for r in report["calibrated"]["scores"] if r["system"] == "v1")
    assert (
        v1.loc[CALIBRATED, "estimate"] == row["estimate"]
        and v1.loc[HUMAN_ONLY, "estimate"] == (row["human_only"]["estimate"])
    )
    assert "judge only (mapped to the human scale)" in str(charts[0].proto.spec)  # the mapped interval is labelled
    assert "0–2 scale" in texts(at, "caption") and "fixed linear map" in texts(at, "caption")
    gap = frame_with(at, "gap").set_index("system")
    assert gap.loc["v1", "gap"] > 0.5 and abs(gap.loc["v2", "gap"]) < gap.loc["v1", "gap"]
    assert "The judge puts **v1** (consistency)" in texts(at, "markdown") and "above" in texts(at, "markdown")
    assert "uniform random sample" in texts(at, "warning")  # the section's note


def test_label_next_lists_the_unlabeled_queue_items_in_order_linked_to_annotate(fake: FakeApi) -> None:
    at = open_calibrated(cal.RUN_C)
    todo = frame_with(at, "annotate")
    assert todo["item_id"].tolist() == [cal.item_id(p) for p in range(cal.N_RATED, cal.N_QUEUE)]
    assert todo["annotate"].iloc[0] == f"annotate?run={cal.RUN_C}&item=cal-12"
    assert "12 of 16 drawn items labeled" in texts(at, "caption")


def test_the_link_opens_that_item_on_annotate(fake: FakeApi) -> None:
    at = AppTest.from_file(APP, default_timeout=60).run()
    at.query_params["run"] = cal.RUN_C
    at.query_params["item"] = "cal-20"  # not the first unrated item: the link decides
    at.session_state["run_id"] = cal.RUN_C
    at.switch_page("views/annotate.py").run()
    at.text_input(key="ann_rater").input("h1").run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.selectbox(key="ann_item").value == "cal-20"
    at.query_params["item"] = "cal-nope"
    at.run()
    assert "no item 'cal-nope'" in texts(at, "warning")


def test_a_new_label_changes_the_figures_and_the_list(fake: FakeApi) -> None:
    at = open_calibrated(cal.RUN_C)
    before = frame_with(at, "gap").set_index("system")
    values = cal.truth()
    rows = [{k: v for k, v in cal.rating(12, s, float(values[s][12])).items()
             if k not in ("system_b", "turn", "tie_inconsistent")} for s in cal.CENTRE]  # fmt: skip
    api.post_ratings(api.Conn("http://fake-api"), cal.RUN_C, rows)  # what Annotate's save does
    at.run()
    assert not at.exception
    todo = frame_with(at, "annotate")
    assert todo["item_id"].iloc[0] == "cal-13" and "13 of 16 drawn items labeled" in texts(at, "caption")
    after = frame_with(at, "gap").set_index("system")
    assert after.loc["v1", "n_labeled"] == before.loc["v1", "n_labeled"] + 1
    assert after.loc["v1", "people (calibrated)"] != before.loc["v1", "people (calibrated)"]


def test_too_few_labels_shows_each_null_row_and_its_note_and_no_queue(fake: FakeApi) -> None:
    at = open_calibrated(cal.RUN_N)
    assert not at.error, texts(at, "error")
    notes = frame_with(at, "note")
    assert set(notes["which"]) >= {"v1", "v2"}
    assert "5 labeled item(s); a calibrated estimate needs at least 10 (5 more)" in set(notes["note"])
    assert "no label queue" in texts(at, "info") and f"label-queue {cal.RUN_N} --n 50" in texts(at, "info")
    intervals = analysis.interval_frame(fake.report(cal.RUN_N))
    assert set(intervals["interval"]) == {JUDGE_ONLY}  # only the judge's own interval can be drawn


def test_no_ratings_says_how_to_get_them(fake: FakeApi) -> None:
    at = open_calibrated(cal.RUN_E)
    assert not at.error, texts(at, "error")
    info = texts(at, "info")
    assert f"dialogue-judge label-queue {cal.RUN_E} --n 50" in info
    assert "Annotate" in info and f"dialogue-judge import-ratings {cal.RUN_E}" in info
    assert len(at.get("vega_lite_chart")) == 0
