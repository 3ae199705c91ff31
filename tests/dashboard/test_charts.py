"""charts.py and analysis/ without Streamlit: report dicts in, tables and chart specs out."""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import pandas as pd
import pytest
from dashboard_fakes import RUN_A, RUN_B, FakeApi, judgments_frame, make_ratings

from dashboard import analysis, api, charts
from tests import compare_reference


@pytest.fixture(scope="module")
def fake() -> FakeApi:
    return FakeApi("data")


@pytest.fixture(scope="module")
def report(fake: FakeApi) -> dict[str, Any]:
    return fake.report(RUN_A)


@pytest.fixture(scope="module")
def frame(fake: FakeApi) -> pd.DataFrame:
    """The judgments frame as the dashboard reads it: through the CSV the API serves."""
    buffer = io.StringIO()
    judgments_frame(fake.runs[RUN_A]["rows"]).to_csv(buffer, index=False)
    return api.parse_judgments_csv(buffer.getvalue())


def spec(chart: Any) -> dict[str, Any]:
    out = chart.to_dict()
    assert out["$schema"].startswith("https://vega.github.io/schema/vega-lite/")
    return out


def layer_marks(d: dict[str, Any]) -> list[str]:
    return [(m["mark"]["type"] if isinstance(m["mark"], dict) else m["mark"]) for m in d["layer"]]


# -- tolerating missing sections -------------------------------------------------------------------------
@pytest.mark.parametrize("broken", [None, {}, {"scores": None, "bias": {}, "agreement": None, "paper_table": {}}])
def test_missing_report_sections_give_empty_frames(broken: dict[str, Any] | None) -> None:
    for build in (analysis.scores_frame, analysis.paper_frame, analysis.ranking_frame, analysis.preferences_frame,
                  analysis.paired_frame, analysis.bias_frame, analysis.flags_frame, analysis.histogram_frame,
                  analysis.pref_agreement_frame, analysis.score_agreement_frame, analysis.alpha_frame):  # fmt: skip
        out = build(broken)
        assert isinstance(out, pd.DataFrame) and out.empty and len(out.columns) > 0
    assert analysis.pref_confusions(broken) == [] and analysis.judges_of(broken) == []


def test_frames_keep_columns_a_newer_report_adds() -> None:
    out = analysis.scores_frame({"scores": [{"system": "a", "aspect": "x", "mean": 1.0, "new_stat": 3}]})
    assert out.loc[0, "new_stat"] == 3 and "ci_low" in out


# -- leaderboard -----------------------------------------------------------------------------------------
def test_paper_table_matches_the_seed_layout(report: dict[str, Any]) -> None:
    table = analysis.paper_frame(report, judge=analysis.judges_of(report)[0])
    seed = ["Judge", "System", "Engagingness", "Coherence", "Consistency", "Average", "Items"]
    assert list(table.columns) == [*seed, "Engagingness n", "Coherence n", "Consistency n"]  # the n behind each cell
    assert table["System"].tolist() == ["rsum", "memgpt", "vanilla"]
    row = table.iloc[0]
    assert row["Average"] == pytest.approx(np.mean([row["Engagingness"], row["Coherence"], row["Consistency"]]))


def test_score_means_chart_has_bars_and_ci_rules(report: dict[str, Any]) -> None:
    scores = analysis.scores_frame(report)
    d = spec(charts.score_means_chart(scores, analysis.aspect_order(scores["aspect"].tolist())))
    assert layer_marks(d) == ["bar", "rule"]
    bars, rules = d["layer"]
    assert bars["encoding"]["y"]["field"] == "mean" and bars["encoding"]["color"]["field"] == "aspect"
    assert rules["encoding"]["y"]["field"] == "ci_low" and rules["encoding"]["y2"]["field"] == "ci_high"
    assert bars["encoding"]["x"]["sort"][0] == "rsum"  # best system first
    assert bars["encoding"]["xOffset"]["sort"] == ["engagingness", "coherence", "consistency"]
    assert len(d["datasets"][next(iter(d["datasets"]))]) == 9


def test_ranking_chart_orders_systems_by_strength(report: dict[str, Any]) -> None:
    d = spec(charts.ranking_chart(analysis.ranking_frame(report)))
    assert d["layer"][1]["encoding"]["y"]["sort"] == ["rsum", "memgpt", "vanilla"]
    assert layer_marks(d) == ["rule", "point", "text"]


def test_histogram_chart_uses_the_report_bins(report: dict[str, Any]) -> None:
    hist = analysis.histogram_frame(report)
    assert hist.groupby(["system", "aspect", "judge"])["count"].sum().max() == 6
    d = spec(charts.histogram_chart(hist))
    assert d["encoding"]["column"]["field"] == "aspect"


# -- win / tie / loss ------------------------------------------------------------------------------------
def test_orient_swaps_wins_losses_and_the_ci(report: dict[str, Any]) -> None:
    prefs = analysis.preferences_frame(report)
    prefs = prefs[prefs["n"] > 0]
    seen = analysis.orient(prefs, "vanilla")
    assert set(seen["system_a"]) == {"vanilla"}
    stored = prefs[prefs["system_b"] == "vanilla"].set_index("system_a")
    flipped = seen.set_index("system_b")
    for other in ("rsum", "memgpt"):
        assert flipped.loc[other, "losses"] == stored.loc[other, "wins"]
        assert flipped.loc[other, "wins"] == stored.loc[other, "losses"]
        assert flipped.loc[other, "win_rate"] == pytest.approx(1 - stored.loc[other, "win_rate"])
        assert flipped.loc[other, "win_rate_ci_low"] == pytest.approx(1 - stored.loc[other, "win_rate_ci_high"])
    assert analysis.orient(prefs, None).equals(prefs)


def layer_rows(d: dict[str, Any], i: int) -> pd.DataFrame:
    """The rows layer ``i`` of a layered spec draws (its data is a named dataset of the spec)."""
    data = d["layer"][i].get("data") or d["data"]
    return pd.DataFrame(d["datasets"][data["name"]])


def test_wtl_bars_are_the_seed_figure(report: dict[str, Any]) -> None:
    long = analysis.wtl_long(analysis.preferences_frame(report))
    assert long.groupby("pair")["pct"].sum().round(9).eq(100).all()
    d = spec(charts.wtl_figure(long, title="Win / tie / loss"))
    assert layer_marks(d) == ["bar", "text"] and d["title"] == "Win / tie / loss"
    bars = d["layer"][0]["encoding"]
    assert bars["y"]["field"] == "pair" and bars["y"]["sort"] == list(dict.fromkeys(long["pair"]))  # given order
    assert bars["x"]["field"] == "start" and bars["x2"]["field"] == "end"  # horizontal, stacked per pair
    assert bars["x"]["scale"]["domain"] == [0, 100] and bars["x"]["axis"]["values"][-1] == 100
    assert "'%'" in bars["x"]["axis"]["labelExpr"]
    colour = bars["color"]
    assert colour["scale"]["domain"] == ["win", "tie", "loss"] == colour["sort"]  # the legend's order
    assert colour["scale"]["range"] == [charts.OUTCOME_COLORS[o] for o in ("win", "tie", "loss")]
    assert {t["field"] for t in bars["tooltip"]} >= {"pct", "count"}
    rows = layer_rows(d, 0)
    for _, segments in rows.groupby("pair"):  # win from 0, then tie, then loss up to 100
        assert segments.sort_values("start")["outcome"].tolist() == ["win", "tie", "loss"]
        assert segments["start"].min() == 0 and segments["end"].max() == pytest.approx(100)
    rsum_vanilla = rows[(rows["pair"] == "rsum vs vanilla")].set_index("outcome")
    assert rsum_vanilla.loc["win", "pct"] == 100.0 and rsum_vanilla.loc["win", "label"] == "100.0%"
    assert rsum_vanilla.loc["tie", "label"] == "" and rsum_vanilla.loc["loss", "label"] == ""  # < 4 %: not written
    assert d["layer"][1]["encoding"]["x"]["field"] == "mid"  # the percent sits inside its segment


def test_winrate_heatmap_is_complementary(report: dict[str, Any]) -> None:
    matrix = analysis.winrate_matrix(analysis.preferences_frame(report))
    pivot = matrix.pivot_table(index="row", columns="column", values="win_rate")
    assert pivot.loc["rsum", "vanilla"] + pivot.loc["vanilla", "rsum"] == pytest.approx(1.0)
    d = spec(charts.winrate_heatmap(matrix))
    assert layer_marks(d) == ["rect", "text"]
    heat = d["layer"][0]["encoding"]
    systems = ["memgpt", "rsum", "vanilla"]
    assert heat["x"]["scale"]["domain"] == systems == heat["y"]["scale"]["domain"]
    assert heat["color"]["scale"] == {"scheme": "redblue", "domain": [0, 1]}
    assert [t.get("format") for t in heat["tooltip"] if t["field"] == "win_rate"] == [".3f"]
    cells = layer_rows(d, 0).set_index(["row", "column"])
    assert cells.loc[("rsum", "vanilla"), "win_rate"] + cells.loc[("vanilla", "rsum"), "win_rate"] == pytest.approx(1)
    assert cells.loc[("rsum", "vanilla"), "label"] == f"{pivot.loc['rsum', 'vanilla']:.2f}"
    assert not any(r == c for r, c in cells.index)  # a system is not compared with itself: its cell stays blank


# -- agreement -------------------------------------------------------------------------------------------
def test_scatter_confusion_and_ranks(frame: pd.DataFrame) -> None:
    scatter = analysis.scatter_frame(analysis.judge_item_scores(frame),
                                     analysis.human_item_scores(pd.DataFrame(make_ratings())))  # fmt: skip
    assert len(scatter) == 18 and scatter["aspect"].unique().tolist() == ["consistency"]
    assert scatter["gap"].between(0, 1).all()
    top = scatter.sort_values("gap").iloc[-1]
    assert top["item_id"] == "msc-2"
    confusion = analysis.score_confusion(scatter)
    assert confusion.shape == (5, 5) and confusion.to_numpy().sum() == 18
    d = spec(charts.confusion_heatmap(confusion.to_numpy().tolist(), list(confusion.index)))
    assert layer_marks(d) == ["rect", "text"]
    ranks = analysis.system_ranks(scatter)
    assert ranks.set_index("system")["judge_rank"].to_dict() == {"memgpt": 2, "rsum": 1, "vanilla": 3}
    assert spec(charts.rank_comparison_chart(ranks))["layer"][0]["encoding"]["y"]["scale"]["reverse"] is True
    assert spec(charts.agreement_scatter(scatter))["layer"][1]["encoding"]["x"]["field"] == "human_unit"


def test_bins_follow_the_agreement_module() -> None:
    unit = pd.Series([0.0, 0.19, 0.2, 0.99, 1.0, np.nan])
    assert analysis.bins(unit).tolist()[:5] == [0, 0, 1, 4, 4] and np.isnan(analysis.bins(unit).iloc[5])


def test_preference_confusion_comes_from_the_report(report: dict[str, Any]) -> None:
    (confusion,) = analysis.pref_confusions(report)
    assert confusion["labels"] == ["b wins", "tie", "a wins"]
    assert np.asarray(confusion["matrix"]).sum() == 6


# -- bias ------------------------------------------------------------------------------------------------
def test_bias_frame_and_rate_bars(report: dict[str, Any]) -> None:
    bias = analysis.bias_frame(report)
    assert len(bias) == 1 and 0 <= bias.loc[0, "p_first_wins"] <= 1
    d = spec(charts.rate_bars(bias, "p_first_wins", "P(first)", band=0.1))
    assert layer_marks(d) == ["rect", "bar", "text", "rule"]
    assert d["layer"][1]["encoding"]["y"]["field"] == "judge_label"
    bar_data = d["datasets"][d["layer"][1]["data"]["name"]]
    assert bar_data[0]["judge_label"] == "openai-compatible:sim"  # the endpoint is dropped from labels
    rho = spec(charts.rate_bars(bias, "score_length_spearman", "rho", reference=0.0, domain=(-1.0, 1.0)))
    assert rho["layer"][0]["encoding"]["x"]["scale"]["domain"] == [-1.0, 1.0]


# -- disagreements ---------------------------------------------------------------------------------------
def test_order_outcomes_find_the_flip(frame: pd.DataFrame) -> None:
    orders = analysis.order_outcomes(frame)
    assert len(orders) == 18 and orders["flipped"].sum() == 1
    flip = orders[orders["flipped"]].iloc[0]
    assert (flip["item_id"], flip["outcome_ab"], flip["outcome_ba"]) == ("msc-1", "tie", "loss")
    summary = analysis.flip_summary(orders)
    assert summary.set_index("pair").loc["rsum vs memgpt", "flips"] == 1
    assert spec(charts.flip_chart(summary))["mark"]["type"] == "bar"


def test_preference_disagreements_orient_the_human_vote(frame: pd.DataFrame) -> None:
    orders = analysis.order_outcomes(frame)
    ratings = pd.DataFrame(make_ratings())
    out = analysis.preference_disagreements(orders, ratings)
    assert out[["item_id", "judge_vote", "human_vote", "severity"]].values.tolist() == [["msc-0", 1.0, -1.0, 2.0]]
    votes = ratings["kind"] == "preference"
    swapped = ratings.copy()
    swapped.loc[votes, ["system", "system_b"]] = ratings.loc[votes, ["system_b", "system"]].to_numpy(copy=True)
    swapped.loc[votes, "value"] = -ratings.loc[votes, "value"]
    assert analysis.preference_disagreements(orders, swapped)["item_id"].tolist() == ["msc-0"]


# -- compare runs ----------------------------------------------------------------------------------------
def test_compare_scores_paired_bootstrap_and_worse_items(fake: FakeApi) -> None:
    def items(run_id: str) -> pd.DataFrame:
        return analysis.judge_item_scores(judgments_frame(fake.runs[run_id]["rows"]))

    deltas = compare_reference.compare_scores(items(RUN_B), items(RUN_A), n_boot=200).set_index(["system", "aspect"])
    assert deltas.loc[("memgpt", "coherence"), "delta"] == pytest.approx(-10)
    assert deltas.loc[("memgpt", "coherence"), "ci_high"] == pytest.approx(-10)  # every item moved by 10
    assert deltas.loc[("rsum", "coherence"), "delta"] == 0
    assert deltas.loc[("vanilla", "coherence"), "n_items"] == 5  # one unparseable
    worse = compare_reference.worse_items(items(RUN_B), items(RUN_A))
    assert len(worse) == 18 and set(worse["system"]) == {"memgpt"} and (worse["delta"] < 0).all()
    d = spec(charts.delta_chart(deltas.reset_index()))
    assert layer_marks(d) == ["rule", "rule", "point"]


def test_compare_preferences_combines_wilson_widths(report: dict[str, Any]) -> None:
    prefs = analysis.preferences_frame(report)
    out = analysis.compare_preferences(prefs, prefs)
    assert (out["delta"] == 0).all() and (out["ci_low"] < 0).all() and (out["ci_high"] > 0).all()


# -- the CSV frame ---------------------------------------------------------------------------------------
def test_parse_judgments_csv_keeps_ids_as_text() -> None:
    text = "judgment_id,item_id,mode,system_a,system_b,order,status,score,outcome,cached\n" \
           "1,007,single,NA,,,done,85.0,,False\n2,008,pairwise,a,b,ab,done,,win,True\n"  # fmt: skip
    df = api.parse_judgments_csv(text)
    assert df["item_id"].tolist() == ["007", "008"] and df["system_a"].tolist() == ["NA", "a"]
    assert pd.isna(df.loc[0, "system_b"]) and pd.isna(df.loc[1, "score"]) and df.loc[0, "score"] == 85.0
    assert df["cached"].tolist() == [False, True]
    assert api.parse_judgments_csv("").empty


def test_run_version_changes_with_progress() -> None:
    run = {"status": "running", "finished_at": None, "counts": {"done": 1, "pending": 3}}
    assert api.run_version(run) != api.run_version({**run, "counts": {"done": 2, "pending": 2}})
    assert api.run_version({}) == api.run_version({})


def test_progress_figure_stacks_statuses() -> None:
    d = spec(charts.progress_figure({"failed": 1, "done": 5, "pending": 0}))
    assert layer_marks(d) == ["bar", "text"]
    colour = d["layer"][0]["encoding"]["color"]
    assert colour["scale"]["domain"] == ["done", "failed"]  # the fixed order; a status with no judgment is absent
    assert colour["scale"]["range"] == [charts.STATUS_COLORS["done"], charts.STATUS_COLORS["failed"]]
    rows = layer_rows(d, 0)
    assert rows[["status", "start", "end"]].values.tolist() == [["done", 0, 5], ["failed", 5, 6]]  # stacked
    assert rows["label"].tolist() == ["5", "1"]  # counts written
    assert "failed (1)" in colour["legend"]["labelExpr"]
    tiny = layer_rows(spec(charts.progress_figure({"done": 999_999, "failed": 1})), 0)
    assert tiny["label"].tolist() == ["999,999", ""]  # a sliver is not overwritten; the legend gives its count


# -- the runs page's throughput and ETA ------------------------------------------------------------------------
RUN_PACE_CASES = [
    # (finished, n, history [(t, finished)], now, created offset s, expected rate, expected eta)
    ("window", 40, 100, [(100.0, 20), (110.0, 30), (120.0, 40)], 120.0, -1000.0, 1.0, 60.0),
    ("stalled", 40, 100, [(100.0, 40), (120.0, 40)], 120.0, -1000.0, 0.0, None),
    ("average since created", 50, 100, [], 1000.0, 900.0, 0.5, 100.0),
    ("nothing yet", 0, 100, [], 1000.0, 900.0, None, None),
    ("done", 100, 100, [], 1000.0, 800.0, 0.5, 0.0),
]


@pytest.mark.parametrize(
    ("case", "finished", "n", "history", "now", "created", "rate", "eta"),
    RUN_PACE_CASES,
    ids=[c[0] for c in RUN_PACE_CASES],
)
def test_runs_page_pace(
    case: str, finished: int, n: int, history: list, now: float, created: float, rate: float | None, eta: float | None
) -> None:
    from datetime import UTC, datetime

    from dashboard import pace

    created_at = datetime.fromtimestamp(created, UTC).replace(tzinfo=None).isoformat()
    run = {"n_judgments": n, "counts": {"done": finished}, "created_at": created_at, "finished_at": None}
    got_rate, got_eta = pace.pace(run, history, now)
    assert got_rate == (pytest.approx(rate) if rate is not None else None)
    assert got_eta == (pytest.approx(eta) if eta is not None else None)


def test_panel_coverage_text_says_what_the_panel_stands_on() -> None:
    """Issue 28.4: the dashboard's panel figures (Leaderboard with the panel picked, Human agreement) come with the
    quorum and the coverage; a unit judged by one of three judges is counted below the quorum."""
    from judge_api.stats.report import build_report

    rows = []
    for judge, judged in (("j-a", ("i1", "i2")), ("j-b", ("i1",)), ("j-c", ())):
        for item in ("i1", "i2"):
            done = item in judged
            rows.append(
                {
                    "item_id": item,
                    "mode": "single",
                    "system_a": "x",
                    "aspect": "consistency",
                    "judge": judge,
                    "status": "done" if done else "failed",
                    "score": 50 if done else None,
                    "scale_min": 1,
                    "scale_max": 100,
                }
            )
    report = build_report(pd.DataFrame(rows), n_boot=10)
    text = analysis.panel_coverage_text(report)
    assert text is not None
    assert "quorum 2 of 3 judges" in text and "coverage 1/2 units (50.0 %)" in text and "fewer members (1)" in text
    assert analysis.panel_coverage_text({"panel": None}) is None
