"""Issue 40 under AppTest and without Streamlit: the monitor series on the rubric's scale with a band per bucket, the
advice of a run whose judge replies were all unparseable while its reference metrics succeeded, pickers that name a
run's outcome, a bad monitor link, and the smaller truths (metric axis, agreement scales, fact rates, personas, the
upload form, parse errors, the Compare baseline)."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest
from dashboard_fakes import RUN_A, RUN_B, RUN_F, FakeApi, install, unparsed
from streamlit.testing.v1 import AppTest

from dashboard import charts, state
from dashboard.analysis import default_pair

APP = "../../dashboard/app.py"
METRICS = ("f1", "bleu-1")


def texts(at: AppTest, kind: str) -> str:
    return " ".join(str(e.value) for e in getattr(at, kind))


def open_page(page: str, at: AppTest | None = None, run_id: str | None = None) -> AppTest:
    at = at or AppTest.from_file(APP, default_timeout=60)
    if run_id:
        at.session_state["run_id"] = run_id
    at.run()
    if page != "runs":
        at.switch_page(f"views/{page}.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def metric_rows(run_id: str, first_id: int) -> list[dict[str, Any]]:
    """The run's F1 / BLEU-1 as the workers store them: single-mode rows of the ``reference`` pseudo-judge."""
    from dashboard_fakes import QUALITY, _row

    rows: list[dict[str, Any]] = []
    for i in range(6):
        for system in QUALITY:
            for metric in METRICS:
                rows.append(
                    _row(run_id, first_id + len(rows), item_id=f"msc-{i}", mode="single", system_a=system,
                         judge="reference", rubric_id="reference-metrics", rubric_version="parlai-nltk-1",
                         aspect=metric, score=0.25 + 0.1 * i / 6, cost_usd=0.0, input_tokens=0, output_tokens=0)
                )  # fmt: skip
    return rows


def partial_run(fake: FakeApi, run_id: str) -> None:
    """``run_id``'s judge replies all unparseable, its reference metrics done: the run ends partial."""
    run = fake.runs[run_id]
    run["rows"] = [unparsed(r) for r in run["rows"]] + metric_rows(run_id, 50_000)
    run["summary"]["counts"] = {"done": 36, "unparseable": len(run["rows"]) - 36}
    run["summary"]["outcome"] = "partial"
    fake._reports.clear()


# -- finding 1: the monitor chart ---------------------------------------------------------------------------------
def series_rows() -> pd.DataFrame:
    start = pd.Timestamp("2026-11-28 15:00", tz="UTC")
    rows = []
    for hour, n, mean, low, high in ((0, 1, 70.0, None, None), (1, 2, 57.5, -420.0, 535.0), (3, 30, 84.0, 82.0, 86.0)):
        for version, shift in (("v1.4", 0.0), ("v1.5", -20.0)):
            rows.append({"bucket_start": start + pd.Timedelta(hours=hour), "version": version, "n": n,
                         "mean": mean + shift, "ci_low": None if low is None else low + shift,
                         "ci_high": None if high is None else high + shift, "contradiction_rate": None})  # fmt: skip
    return pd.DataFrame(rows)


def test_the_series_is_drawn_on_the_scale_with_a_band_for_every_bucket_with_an_interval() -> None:
    rows = series_rows()
    drawn = charts.series_frame(rows, "version", scale=(1.0, 100.0))
    assert drawn["ci_low"].min() >= 1 and drawn["ci_high"].max() <= 100  # n = 2: -420 to 535 before
    assert (drawn["interval"] == charts.NO_INTERVAL).sum() == 2  # n = 1: said, not silently blank
    spec = charts.series_chart(rows, "version", scale=(1.0, 100.0), alerting="v1.5").to_dict()
    bands, line, small = spec["layer"]
    assert bands["mark"]["type"] == "rule"  # one band per bucket: an isolated bucket has its own
    datasets = spec["datasets"]
    assert len(datasets[bands["data"]["name"]]) == 4 and len(datasets[small["data"]["name"]]) == 2
    assert line["encoding"]["y"]["scale"]["domain"] == [1.0, 100.0]
    scale = line["encoding"]["color"]["scale"]
    colours = dict(zip(scale["domain"], scale["range"], strict=True))
    assert colours["v1.5"] == charts.ALERT_COLOUR and colours["v1.4"] != charts.ALERT_COLOUR
    assert (
        line["encoding"]["strokeWidth"]["value"] == 1.5 and line["encoding"]["strokeWidth"]["condition"]["value"] == 4
    )


# -- finding 3: advice that fits the run ---------------------------------------------------------------------------
def test_a_partial_run_with_unparseable_judge_replies_says_so_and_how_to_retry(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = install(monkeypatch, FakeApi("data"))
    partial_run(fake, RUN_A)
    at = open_page("leaderboard", run_id=RUN_A)
    info = texts(at, "info")
    assert "No single-mode scores" not in info  # it was submitted so
    assert "This run has 54 single judgments, but none gave a verdict (54 unparseable)" in info, info
    assert f"dialogue-judge retry {RUN_A} --unparseable" in info


# -- finding 4: pickers name the outcome ---------------------------------------------------------------------------
def test_every_run_picker_names_a_failed_or_partial_outcome(monkeypatch: pytest.MonkeyPatch) -> None:
    assert state.run_label({"id": "r1", "name": "x", "status": "done", "outcome": "failed"}).endswith(
        "done · 🔴 failed"
    )
    assert state.run_label({"id": "r1", "name": "x", "status": "done", "outcome": "ok"}) == "x · r1 · done"
    fake = install(monkeypatch, FakeApi("unparseable"))
    fake.runs[RUN_A]["summary"]["outcome"] = "failed"
    fake.runs[RUN_B]["summary"]["outcome"] = "partial"
    at = open_page("compare", run_id=RUN_A)
    for picker in (at.sidebar.selectbox[-1], at.selectbox(key="cmp_cand"), at.selectbox(key="cmp_base")):
        options = " | ".join(picker.options)
        assert f"{RUN_A} · done · 🔴 failed" in options and f"{RUN_B} · done · 🟠 partial" in options, options


# -- finding 5: a bad monitor link ---------------------------------------------------------------------------------
def test_a_link_to_a_monitor_that_does_not_exist_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, FakeApi("data"))
    at = AppTest.from_file(APP, default_timeout=60).run()
    at.query_params["monitor"] = "mon_bogus"
    at.switch_page("views/monitors.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert "Monitor `mon_bogus` not found" in texts(at, "error")
    assert at.query_params["monitor"] in ("mon_bogus", ["mon_bogus"])  # the link is not silently rewritten


# -- finding 6 -----------------------------------------------------------------------------------------------------
def test_the_explorer_draws_reference_metrics_on_their_own_axis_and_shows_the_parse_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = install(monkeypatch, FakeApi("data"))
    rows = fake.runs[RUN_A]["rows"]
    rows.extend(metric_rows(RUN_A, 50_000))
    bad = next(r for r in rows if r["status"] == "unparseable")
    bad["error"] = "no [[rating]] in the reply"
    at = open_page("explorer", run_id=RUN_A)
    at.text_input(key="ex_typed").input(bad["item_id"]).run()
    assert at.header[0].value == f"Item `{bad['item_id']}`"
    specs = [c.proto.spec for c in at.get("vega_lite_chart")]
    judge_chart = next(s for s in specs if '"coherence"' in s)
    assert '"f1"' not in judge_chart  # metrics are not slivers on the judge's axis
    metric_chart = next(s for s in specs if '"f1"' in s)
    assert '"domain": [0.0, 1.0]' in metric_chart
    assert "Parse error: no [[rating]] in the reply" in texts(at, "warning")


def test_agreement_ranks_show_means_on_the_reports_scale(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, FakeApi("data"))
    at = open_page("agreement", run_id=RUN_A)
    ranks = next(d.value for d in at.dataframe if "judge_rank" in d.value.columns)
    assert (ranks["judge_mean"] > 1).all() and set(ranks["judge_scale"]) == {"1–100"}
    assert ranks.set_index("system")["judge_mean"].round(2).to_dict() == {"memgpt": 54.17, "rsum": 82.17,
                                                                          "vanilla": 41.67}  # fmt: skip


def test_contradictions_shows_the_reports_rates(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = install(monkeypatch, FakeApi("facts"))
    fake.runs[RUN_F]["summary"]["rubrics"] = ["fact-check"]
    report = fake.report(RUN_F)
    figures = {"judge": "j", "rubric_id": "fact-check", "aspect": "consistency", "n_items": 2, "n_responses": 2,
               "contradiction_rate": 0.124, "contradiction_rate_ci_low": 0.093, "contradiction_rate_ci_high": 0.153,
               "retention_rate": 0.8, "retention_rate_ci_low": 0.5, "retention_rate_ci_high": 1.0,
               "addressed_rate": None, "addressed_rate_ci_low": None, "addressed_rate_ci_high": None}  # fmt: skip
    report["facts"] = {"systems": [{"system": "rsum", **figures}]}  # the report's section as the API gives it
    monkeypatch.setattr(fake, "report", lambda run_id: report)
    at = open_page("contradictions", run_id=RUN_F)
    rates = next(d.value for d in at.dataframe if "contradiction rate" in d.value.columns).set_index("system")
    assert rates.loc["rsum", "contradiction rate"] == "0.124 [0.093, 0.153]"
    assert rates.loc["rsum", "retention rate"] == "0.800 [0.500, 1.000]"
    assert rates.loc["rsum", "addressed rate"] == "n/a"


def test_a_persona_given_as_lists_reads_as_sentences(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = install(monkeypatch, FakeApi("data"))
    fake.items[0]["persona"] = {"user": ["I have a dog called Rex.", "I walk him daily"], "bot": ["I like animals."]}
    at = open_page("annotate", run_id=RUN_A)
    at.text_input(key="ann_rater").input("expert_7").run()
    caption = next(c.value for c in at.caption if "persona" in c.value)
    assert ".;" not in caption
    assert "I have a dog called Rex. I walk him daily." in caption and "I like animals." in caption


def test_the_upload_form_confirms_clears_and_sends_one_key_until_a_run_starts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = install(monkeypatch, FakeApi("data"))
    handler = fake.handler
    failures = iter([True])

    def flaky(request: Any) -> Any:  # the first start is refused by the API: the user clicks again
        import httpx

        if request.url.path == "/v1/runs/jsonl" and next(failures, False):
            fake.posts.append(("refused", {"key": request.headers.get("idempotency-key")}))
            return httpx.Response(400, json={"detail": "judges: try again"})
        return handler(request)

    fake.handler = flaky
    at = open_page("runs")
    line = b'{"id": "x1", "candidates": {"a": "hi", "b": "hello"}}\n'
    at.file_uploader[0].upload("items.jsonl", line, "application/jsonl")
    at.text_area[0].input("openai:gpt-4o-mini")
    at.button[0].click().run()
    assert "try again" in texts(at, "error")
    at.button[0].click().run()
    (_, refused), (path, sent) = fake.posts[-2], fake.posts[-1]
    assert path == "/v1/runs/jsonl" and sent["key"] == refused["key"]  # one form, one key: at most one run
    at.run()  # and later: the confirmation is still there, with its link, over an empty form
    success = texts(at, "success")
    assert "Started run `run_new`" in success and "runs?run=run_new" in success
    assert at.text_area[0].value == "" and not at.file_uploader[0].value
    at.text_area[0].input("openai:gpt-4o")
    at.file_uploader[0].upload("items.jsonl", line, "application/jsonl")
    at.button[0].click().run()
    assert fake.posts[-1][1]["key"] != sent["key"]  # the next run is another run


def test_compare_does_not_default_to_a_partial_baseline_and_says_what_it_skipped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    listing = [{"id": "new", "mode": ["single"]}, {"id": "half", "mode": ["single"], "outcome": "partial"},
               {"id": "old", "mode": ["single"], "outcome": "ok"}]  # fmt: skip
    assert default_pair(listing, "new") == (0, 2)
    fake = install(monkeypatch, FakeApi("data"))
    for run_id in (RUN_A, RUN_B):
        fake.runs[run_id]["rows"].extend(metric_rows(run_id, 50_000 if run_id == RUN_A else 60_000))
    partial_run(fake, RUN_B)
    at = open_page("compare", run_id=RUN_A)
    assert at.selectbox(key="cmp_base").value == RUN_B  # the only other run: compared, and what it lacks said
    warning = texts(at, "warning")
    assert "Not compared: coherence, consistency, engagingness" in warning, warning
    assert "**Baseline run**: This run has 54 single judgments, but none gave a verdict (54 unparseable)" in warning
