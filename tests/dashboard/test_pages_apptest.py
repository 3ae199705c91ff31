"""Every dashboard page under Streamlit's AppTest against a fake API: with data, empty, and failing."""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from dashboard_fakes import (
    JUDGE,
    RUN_A,
    RUN_B,
    RUN_F,
    RUN_R,
    FakeApi,
    install,
    judgments_frame,
    make_fact_judgments,
)
from streamlit import cache_data
from streamlit.testing.v1 import AppTest

from dashboard.widgets import NO_RUNS

APP = "../../dashboard/app.py"
PAGES = {
    "runs": "Runs",
    "leaderboard": "Leaderboard",
    "winrates": "Win / tie / loss",
    "agreement": "Human agreement",
    "calibrated": "Calibrated",
    "bias": "Bias",
    "explorer": "Item explorer",
    "disagreements": "Disagreements",
    "contradictions": "Contradictions",
    "memory": "Memory audit",
    "annotate": "Annotate",
    "compare": "Compare runs",
}


def open_page(page: str, at: AppTest | None = None) -> AppTest:
    if at is None:
        at = AppTest.from_file(APP, default_timeout=60).run()
    if page != "runs":
        at.switch_page(f"views/{page}.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def st_cache_clear() -> None:
    cache_data.clear()


def charts(at: AppTest) -> int:
    return len(at.get("vega_lite_chart"))


def texts(at: AppTest, kind: str) -> str:
    return " ".join(str(e.value) for e in getattr(at, kind))


# -- the three states, every page ------------------------------------------------------------------------
@pytest.mark.parametrize("fake_api", ["data"], indirect=True)
@pytest.mark.parametrize("page", list(PAGES))
def test_page_with_data(fake_api: FakeApi, page: str) -> None:
    at = open_page(page)
    assert at.title[0].value == PAGES[page]
    assert not at.error, texts(at, "error")
    if page in ("annotate",):
        assert "rater id" in texts(at, "info")
    elif page == "contradictions":  # these runs have no fact-check judgments: the page says how to get some
        assert "fact-check" in texts(at, "info") and charts(at) == 0
        return
    elif page == "memory":  # nor memory-audit judgments
        assert "--rubric memory-audit" in texts(at, "info") and charts(at) == 0
        return
    else:
        assert charts(at) >= 1
        assert len(at.dataframe) >= 1
    assert len(at.download_button) >= (0 if page == "annotate" else 1)


@pytest.mark.parametrize("fake_api", ["empty"], indirect=True)
@pytest.mark.parametrize("page", list(PAGES))
def test_page_empty_says_what_to_do(fake_api: FakeApi, page: str) -> None:
    at = open_page(page)
    assert at.title[0].value == PAGES[page]
    assert not at.error
    assert NO_RUNS in texts(at, "info")
    assert charts(at) == 0


@pytest.mark.parametrize("fake_api", ["error"], indirect=True)
@pytest.mark.parametrize("page", list(PAGES))
def test_page_api_error_is_a_clear_message(fake_api: FakeApi, page: str) -> None:
    at = open_page(page)
    assert at.title[0].value == PAGES[page]
    assert "HTTP 500: database is down" in texts(at, "error")
    assert not at.exception


@pytest.mark.parametrize("fake_api", ["unreachable"], indirect=True)
def test_unreachable_api_says_how_to_start_it(fake_api: FakeApi) -> None:
    at = open_page("leaderboard")
    message = texts(at, "error")
    assert "cannot reach the API at http://fake-api" in message and "dialogue-judge up" in message


def test_api_url_and_key_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = install(monkeypatch, FakeApi("data"))
    monkeypatch.setenv("DJ_API_KEY", "sk-test-123")
    at = open_page("leaderboard")
    assert fake.auth == "Bearer sk-test-123"
    # the URL is configuration only: the sidebar shows it, no widget changes it (tests/dashboard/test_dashboard_key.py)
    assert "http://fake-api" in " ".join(str(c.value) for c in at.caption)
    assert not [w for w in at.text_input if "URL" in str(w.label)]


def test_report_failure_keeps_other_pages_working(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = install(monkeypatch, FakeApi("data"))
    fake.report_error = True
    at = open_page("leaderboard")
    assert "Could not load the report from the API: HTTP 500" in texts(at, "error")
    at = open_page("explorer", at)  # needs no report
    assert not at.error and len(at.dataframe) >= 1


# -- page content ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("fake_api", ["data"], indirect=True)
def test_runs_lists_runs_and_shows_progress(fake_api: FakeApi) -> None:
    at = open_page("runs")
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Runs"] == "2" and metrics["Running"] == "0" and metrics["Status"] == "done"
    table = at.dataframe[0].value
    assert set(table["id"]) == {RUN_A, RUN_B}
    assert {"status", "progress", "judges", "rubrics", "cost_usd", "input_tokens", "output_tokens"} <= set(table)
    assert table.loc[table["id"] == RUN_A, "judges"].item() == JUDGE


def test_runs_refresh_live_while_a_run_is_unfinished(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = install(monkeypatch, FakeApi("data"))
    started = (datetime.now(UTC) - timedelta(seconds=60)).replace(tzinfo=None).isoformat()
    n = fake.runs[RUN_A]["summary"]["n_judgments"]
    fake.runs[RUN_A]["summary"].update(
        status="running",
        progress=0.4,
        finished_at=None,
        created_at=started,
        counts={"done": int(0.4 * n), "pending": n - int(0.4 * n)},
    )
    at = open_page("runs")
    assert "Live: refreshing every 2 s" in texts(at, "caption")
    assert {m.label: m.value for m in at.metric}["Running"] == "1"
    shown = {m.label: m.value for m in at.metric}
    # 40% in the 60 s since it was created: ~0.6 judgments/s for 90 judgments, so ~90 s to go
    assert shown["Throughput"].endswith("judgments/s") and 0.4 < float(shown["Throughput"].split()[0]) < 0.8
    assert shown["ETA"].startswith("1m "), shown["ETA"]
    fake.runs[RUN_A]["summary"].update(status="done", progress=1.0)
    st_cache_clear()
    at.run()
    assert "Live:" not in texts(at, "caption")


@pytest.mark.parametrize("fake_api", ["data"], indirect=True)
def test_runs_starts_a_run_from_an_uploaded_jsonl(fake_api: FakeApi) -> None:
    at = open_page("runs")
    line = b'{"id": "x1", "candidates": {"a": "hi", "b": "hello"}}\n'
    at.file_uploader[0].upload("items.jsonl", line, "application/jsonl")
    at.text_area[0].input("openai:gpt-4o-mini")
    at.multiselect[1].set_value(["single", "pairwise"])
    at.button[0].click()  # the form's submit button
    at.run()
    assert not at.error, texts(at, "error")
    assert "Started run `run_new`" in texts(at, "success")
    path, sent = fake_api.posts[-1]
    assert path == "/v1/runs/jsonl" and sent["body"] == line.decode()
    assert uuid.UUID(sent["key"]).version == 4  # an Idempotency-Key: a retried click makes at most one run
    assert sent["query"]["judge"] == ["openai:gpt-4o-mini"] and sent["query"]["mode"] == ["single", "pairwise"]
    assert sent["query"]["rubric"] == ["rsum-single"] and sent["query"]["name"] == ["items"]


@pytest.mark.parametrize("fake_api", ["data"], indirect=True)
def test_runs_upload_needs_a_file_and_a_judge(fake_api: FakeApi) -> None:
    at = open_page("runs")
    at.button[0].click()
    at.run()
    assert "needs a JSONL file" in texts(at, "error")
    assert not fake_api.posts


@pytest.mark.parametrize("fake_api", ["data"], indirect=True)
def test_leaderboard_has_the_paper_table_and_ranking(fake_api: FakeApi) -> None:
    at = open_page("leaderboard")
    paper = next(d.value for d in at.dataframe if "Engagingness" in d.value.columns)
    assert list(paper.columns[:5]) == ["System", "Engagingness", "Coherence", "Consistency", "Average"]
    assert paper["System"].tolist()[0] == "rsum"  # sorted by Average
    ranking = next(d.value for d in at.dataframe if "elo" in d.value.columns)
    assert ranking.sort_values("rank")["system"].tolist() == ["rsum", "memgpt", "vanilla"]
    assert len(at.get("vega_lite_chart")) >= 2  # means with CIs, Bradley-Terry


@pytest.mark.parametrize("fake_api", ["data"], indirect=True)
def test_winrates_can_be_seen_from_one_system(fake_api: FakeApi) -> None:
    at = open_page("winrates")
    assert len(at.get("vega_lite_chart")) == 2  # stacked bars + heatmap
    at.selectbox(key="wtl_focus").set_value("vanilla").run()
    table = at.dataframe[0].value
    assert set(table["system_a"]) == {"vanilla"} and table["losses"].sum() > table["wins"].sum()


@pytest.mark.parametrize("fake_api", ["data"], indirect=True)
def test_agreement_tables_scatter_and_confusions(fake_api: FakeApi) -> None:
    at = open_page("agreement")
    columns = [set(d.value.columns) for d in at.dataframe]  # the Scores tab: only the open tab runs
    assert any({"spearman", "kendall", "pearson", "qwk"} <= c for c in columns)
    assert any("alpha_interval_all" in c for c in columns)
    assert any({"judge_rank", "human_rank"} <= c for c in columns)
    assert not any("S1 rate" in c for c in columns)
    assert len(at.get("vega_lite_chart")) == 3  # scatter, score confusion, rank slope
    at.session_state["agr_tab"] = "Preferences"
    at.run()
    columns = [set(d.value.columns) for d in at.dataframe]
    assert any({"S1 rate", "S2 rate", "kappa S1"} <= c for c in columns)
    assert not any("spearman" in c for c in columns)
    assert len(at.get("vega_lite_chart")) >= 1  # a preference confusion per (aspect, judge)


@pytest.mark.parametrize("fake_api", ["data"], indirect=True)
@pytest.mark.parametrize(
    ("page", "param", "label", "column"),
    [
        ("agreement", "agr_tab", "Preferences", "S1 rate"),
        ("disagreements", "dis_tab", "Order flips", "flipped"),
        ("disagreements", "dis_tab", "Unparseable / failed", "raw_output"),
    ],
)
def test_a_tab_opens_from_its_link(fake_api: FakeApi, page: str, param: str, label: str, column: str) -> None:
    """The open tab is a query parameter (``?agr_tab=Preferences``): a shared link opens that tab, and only it runs."""
    at = AppTest.from_file(APP, default_timeout=60)
    at.query_params[param] = label
    at.run()
    at.switch_page(f"views/{page}.py")
    at.query_params[param] = label
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    columns = [set(d.value.columns) for d in at.dataframe]
    assert any(column in c for c in columns), columns
    assert not any({"gap", "spearman"} & c for c in columns), columns  # the page's first tab did not run


@pytest.mark.parametrize("fake_api", ["data"], indirect=True)
def test_agreement_without_ratings_points_to_annotate(fake_api: FakeApi) -> None:
    at = AppTest.from_file(APP, default_timeout=60).run()
    at.session_state["run_id"] = RUN_B  # the baseline run has no human ratings
    at = open_page("agreement", at)
    assert "Annotate" in texts(at, "info")


@pytest.mark.parametrize("fake_api", ["data"], indirect=True)
def test_bias_shows_charts_and_flag_state(fake_api: FakeApi) -> None:
    at = open_page("bias")
    assert len(at.get("vega_lite_chart")) == 4
    assert at.success or at.warning
    assert "p_first_wins" in at.dataframe[0].value.columns


@pytest.mark.parametrize("fake_api", ["data"], indirect=True)
def test_explorer_filters_go_to_the_api_and_render_the_item(fake_api: FakeApi) -> None:
    at = open_page("explorer")
    assert "90 judgments match." in texts(at, "caption")
    at.selectbox(key="ex_status").set_value("unparseable").run()
    assert "1 judgments match." in texts(at, "caption")
    assert any("status=unparseable" in r or r.endswith("/judgments") for r in fake_api.requests)
    assert at.header[0].value == "Item `msc-5`"
    assert len(at.chat_message) == 3  # the dialogue as a chat
    assert "session 2" in texts(at, "caption")
    assert any("Order ab" in str(m.value) for m in at.markdown)  # pairwise explanations, per order
    assert any("Order ba" in str(m.value) for m in at.markdown)


@pytest.mark.parametrize("fake_api", ["data"], indirect=True)
def test_explorer_shows_the_prompts_each_rubric_version_asked(fake_api: FakeApi) -> None:
    at = open_page("explorer")
    labels = [e.label for e in at.expander]
    assert "rsum-single · version v1" in labels and "rsum-pairwise · version v1" in labels
    assert "GET /v1/rubrics/rsum-single/versions/v1" in fake_api.requests
    codes = [str(c.value) for c in at.code]
    assert "You are an impartial judge." in codes
    assert "Rate the rsum-pairwise response: {{ response }}" in codes
    assert "the rubric folder has changed since" in texts(at, "caption")


@pytest.mark.parametrize("fake_api", ["data"], indirect=True)
def test_explorer_score_filter_and_unknown_item(fake_api: FakeApi) -> None:
    at = open_page("explorer")
    at.toggle(key="ex_score_on").set_value(True).run()
    at.slider(key="ex_score").set_value((80.0, 100.0)).run()
    assert "12 judgments match." in texts(at, "caption")  # rsum's 85, 88, 90, 82 x 3 aspects
    assert all(s >= 80 for s in at.dataframe[0].value["score"])
    at.text_input(key="ex_typed").input("nope").run()
    assert "'nope' is not in this run" in texts(at, "info")


@pytest.mark.parametrize("fake_api", ["data"], indirect=True)
def test_disagreements_queue_and_jump_to_explorer(fake_api: FakeApi) -> None:
    at = open_page("disagreements")
    frames = [d.value for d in at.dataframe]
    gaps = next(f for f in frames if "gap" in f.columns)
    assert gaps.iloc[0]["item_id"] == "msc-2"  # the humans rated item 2 far higher
    prefs = next(f for f in frames if "human_vote" in f.columns)
    assert prefs["item_id"].tolist() == ["msc-0"]
    # only the open tab ran: the flips and the unparseable rows are drawn when their tab is opened
    assert not any("flipped" in f.columns or "raw_output" in f.columns for f in frames)
    at.session_state["dis_tab"] = "Order flips"
    at.run()
    frames = [d.value for d in at.dataframe]
    flips = next(f for f in frames if "flipped" in f.columns)
    assert flips[["item_id", "system_a", "system_b"]].values.tolist() == [["msc-1", "rsum", "memgpt"]]
    assert not any("gap" in f.columns for f in frames)
    at.session_state["dis_tab"] = "Unparseable / failed"
    at.run()
    assert any(len(d.value) == 1 and "raw_output" in d.value.columns for d in at.dataframe)  # unparseable
    at.session_state["dis_tab"] = "Judge vs human"
    at.run()
    at.button(key="dis_h_go").click().run()
    assert at.title[0].value == "Item explorer"
    assert at.header[0].value == "Item `msc-2`"


@pytest.mark.parametrize("fake_api", ["data"], indirect=True)
def test_annotate_posts_a_score_rating_and_shows_agreement(fake_api: FakeApi) -> None:
    at = open_page("annotate")
    at.text_input(key="ann_rater").input("expert_7").run()
    at.selectbox(key="ann_aspect").set_value("coherence").run()
    assert len(at.slider) == 3
    at.slider[0].set_value(91.0)
    at.button[0].click().run()
    assert not at.error, texts(at, "error")
    path, body = fake_api.posts[-1]
    assert path == f"/v1/runs/{RUN_A}/human-ratings"
    first = body["ratings"][0]
    assert first == {"item_id": "msc-0", "system": "rsum", "aspect": "coherence", "rater": "expert_7",
                     "kind": "score", "value": 91.0, "scale_min": 1.0, "scale_max": 100.0}  # fmt: skip
    assert "Saved 3 rating(s) for item msc-0 as expert_7" in texts(at, "success")
    assert {m.label: m.value for m in at.metric}["Human ratings in this run"] == "27"  # 24 + 3: agreement updated
    assert at.selectbox(key="ann_item").value == "msc-1"  # on to the next unrated item


@pytest.mark.parametrize("fake_api", ["data"], indirect=True)
def test_annotate_posts_a_preference(fake_api: FakeApi) -> None:
    at = open_page("annotate")
    at.text_input(key="ann_rater").input("expert_7").run()
    at.radio(key="ann_kind").set_value("preference").run()
    at.radio[1].set_value("B is better")
    at.button[0].click().run()
    _, body = fake_api.posts[-1]
    rating = body["ratings"][0]
    assert rating["kind"] == "preference" and rating["value"] == -1 and rating["system_b"] == "memgpt"
    assert rating["aspect"] == "overall"


@pytest.mark.parametrize("fake_api", ["data"], indirect=True)
def test_compare_shows_deltas_and_worse_items(fake_api: FakeApi) -> None:
    at = open_page("compare")
    deltas = next(d.value for d in at.dataframe if "delta" in d.value.columns and "ci_low" in d.value.columns)
    memgpt = deltas[deltas["system"] == "memgpt"]
    assert (memgpt["delta"].round(6) == -10).all() and (memgpt["ci_high"] < 0).all()
    assert (deltas[deltas["system"] == "rsum"]["delta"] == 0).all()
    worse = next(d.value for d in at.dataframe if list(d.value.columns[:3]) == ["item_id", "system", "aspect"])
    assert set(worse["system"]) == {"memgpt"}
    assert len(at.get("vega_lite_chart")) >= 1


# -- big runs --------------------------------------------------------------------------------------------
def test_a_run_with_100000_judgments_stays_paged_and_cached(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = install(monkeypatch, FakeApi("data"))
    small_report = fake.report(RUN_A)
    base = fake.runs[RUN_A]["rows"]
    rows = [dict(r, id=n, item_id=f"{r['item_id']}-{n // len(base)}") for n, r in
            enumerate(base[i % len(base)] for i in range(100_000))]  # fmt: skip
    fake.runs[RUN_A]["rows"] = rows
    fake.runs[RUN_A]["summary"]["n_judgments"] = len(rows)
    fake._reports[f"{RUN_A}:{len(fake.ratings[RUN_A])}"] = small_report
    start = time.monotonic()
    at = open_page("explorer")
    assert "100,000 judgments match." in texts(at, "caption")
    assert len(at.dataframe[0].value) == 50  # one page, never the whole run
    at = open_page("disagreements", at)
    at = open_page("agreement", at)
    assert not at.error, texts(at, "error")
    assert not any(r.endswith("/judgments.csv") for r in fake.requests)  # aggregates from the API, never the run
    assert any(r.startswith("/order-outcomes?") and "flipped=true" in r for r in fake.aggregate_requests)
    assert any(r.startswith("/item-scores?") and "rated=true" in r for r in fake.aggregate_requests)
    assert time.monotonic() - start < 60


@pytest.mark.parametrize("fake_api", ["data"], indirect=True)
def test_runs_progress_bars_are_not_drawn_in_the_themes_red(fake_api: FakeApi) -> None:
    """Issue 27.2: Streamlit draws progress in the theme's primary colour, red by default, so every finished run's
    bar looked like a failure; how a run went is its outcome column."""
    import json

    at = open_page("runs")
    columns = json.loads(at.dataframe[0].proto.columns)
    assert columns["progress"]["type_config"]["color"] == "blue"
    assert "outcome" in at.dataframe[0].value


def test_bias_page_flags_a_length_score_correlation(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 27.7: the Bias page shows the report's length-score flag (it said "No bias flags" at rho = 0.84)."""
    import numpy as np
    import pandas as pd

    from judge_api.stats.report import build_report

    fake = install(monkeypatch, FakeApi("data"))
    rng = np.random.default_rng(27)
    lengths = rng.uniform(50, 800, 30)
    rows = fake.runs[RUN_A]["rows"]
    frame = judgments_frame(rows)
    single = frame[(frame["mode"] == "single") & (frame["status"] == "done")].head(30).copy()
    assert len(single) == 30
    single["len_a"] = lengths
    single["score"] = np.clip(np.round(single["scale_min"] + lengths / 10), single["scale_min"], single["scale_max"])
    report = {"run": fake.runs[RUN_A]["summary"], **build_report(pd.DataFrame(single), n_boot=20)}
    monkeypatch.setattr(fake, "report", lambda run_id: report)
    at = open_page("bias")
    warnings = texts(at, "warning")
    assert "length_score_correlation" in warnings and "AlpacaEval" in warnings
    assert "No bias flags" not in texts(at, "success")


N_FACT_CHECKS = len(make_fact_judgments())


@pytest.mark.parametrize("fake_api", ["unparseable"], indirect=True)
@pytest.mark.parametrize(
    ("page", "run_id", "kinds"),
    [
        ("winrates", RUN_A, ["pairwise"]),
        ("leaderboard", RUN_A, ["single", "pairwise"]),
        ("bias", RUN_A, ["single", "pairwise"]),
        ("disagreements", RUN_A, ["pairwise"]),
        ("agreement", RUN_R, ["single"]),  # human ratings, no judge score to set against them
        ("compare", RUN_A, ["single"]),  # candidate: the unparseable run, baseline: a healthy one
        ("contradictions", RUN_F, ["fact-check"]),
    ],
)
def test_pages_tell_all_unparseable_apart_from_none(
    fake_api: FakeApi, page: str, run_id: str, kinds: list[str]
) -> None:
    """Issue 26.2: a run whose judgments all came back unparseable is not a run without judgments."""
    at = AppTest.from_file(APP, default_timeout=60)
    at.session_state["run_id"] = run_id
    at = open_page(page, at.run())
    if page == "disagreements":  # it opens on the unparseable rows; the order flips' tab says why it has none
        assert "Unparseable" in texts(at, "markdown")
        at.session_state["dis_tab"] = "Order flips"
        at.run()
    info = texts(at, "info")
    for none in (
        "No pairwise judgments",
        "No single-mode scores",
        "Needs",
        "No contradicted facts",
        "No item has both",
    ):
        assert none not in info, info
    assert "share no single-mode" not in info
    n = {"single": 6 * 3 * 3, "pairwise": 6 * 3 * 2, "fact-check": N_FACT_CHECKS}  # items x aspects x systems, ...
    for kind in kinds:
        assert f"This run has {n[kind]} {kind} judgments, but none gave a verdict ({n[kind]} unparseable)" in info, info
    assert "Item explorer" in info and charts(at) == 0
    if page == "compare":  # the candidate is named, the healthy baseline is not blamed
        assert "**Candidate run**: This run has" in info and "Baseline run" not in info
        captions = texts(at, "caption")
        assert f"**Candidate run**: This run has {n['pairwise']} pairwise judgments, but none gave" in captions


@pytest.mark.parametrize(
    ("state", "outcome", "bar_colours", "label"),
    [
        ("data", "ok", {"done": "#2e7d32"}, "🟢 ok"),  # every judgment done: green only, nothing red
        ("unparseable", "failed", {"unparseable": "#ef6c00"}, "🔴 failed"),  # the run: its failure shows
    ],
)
def test_a_finished_runs_bars_show_how_it_went(
    monkeypatch: pytest.MonkeyPatch, state: str, outcome: str, bar_colours: dict[str, str], label: str
) -> None:
    """Issue 27.2: a healthy finished run's bars are not red (the run list's progress bar and the selected run's
    status bar), and a run whose judgments all failed to parse does not look like it."""
    import json

    fake = install(monkeypatch, FakeApi(state))
    run = fake.runs[RUN_A]["summary"]
    if state == "data":  # a healthy run: the fake's one unparseable judgment done too
        run["counts"] = {"done": run["n_judgments"]}
    run["outcome"] = outcome
    at = AppTest.from_file(APP, default_timeout=60)
    at.session_state["run_id"] = RUN_A
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    runs = at.dataframe[0]
    assert json.loads(runs.proto.columns)["progress"]["type_config"]["color"] == "blue"  # not the theme's red
    assert runs.value.loc[runs.value["id"] == RUN_A, "outcome"].item() == label
    assert {m.label: m.value for m in at.metric}["Status"] == f"done · {outcome}"
    (status_bar,) = [json.loads(c.proto.spec) for c in at.get("vega_lite_chart")]
    scale = status_bar["layer"][0]["encoding"]["color"]["scale"]
    assert dict(zip(scale["domain"], scale["range"], strict=True)) == bar_colours
