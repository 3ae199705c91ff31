"""Leaderboard: mean score per system x aspect with CIs, Bradley-Terry ranking, the seed paper's table."""

from __future__ import annotations

import streamlit as st

from dashboard import analysis, charts, state, widgets


def score_section(report: dict, judge: str | None) -> None:
    st.subheader("Mean score per system × aspect (95% bootstrap CI)")
    scores = analysis.scores_frame(report)
    if judge:
        scores = scores[scores["judge"] == judge]
    if scores["mean"].notna().sum() == 0:
        widgets.no_verdicts(
            report,
            "single",
            "No single-mode scores in this run — submit it with a single rubric "
            "(e.g. `--rubric rsum-single --mode single`) to get per-aspect means.",
        )
        return
    aspects = analysis.aspect_order(scores["aspect"].dropna().tolist())
    widgets.chart(charts.score_means_chart(scores, aspects), key="lb_scores")
    widgets.table(scores, "scores", "lb_scores_t")
    st.subheader("Paper table (mean scores)")
    st.caption(
        "Systems × aspects as printed in the seed paper; Average is the mean of the aspect means. Each aspect is "
        "compared on the items every system has (the '… n' columns)."
    )
    paper = analysis.paper_frame(report, judge)
    widgets.table(paper.drop(columns=["Judge"]) if judge else paper, "paper_table", "lb_paper")
    with st.expander("Score distributions and paired comparisons"):
        hist = analysis.histogram_frame(report)
        if judge:
            hist = hist[hist["judge"] == judge]
        if not hist.empty:
            widgets.chart(charts.histogram_chart(hist), key="lb_hist")
        paired = analysis.paired_frame(report)
        widgets.table(paired[paired["judge"] == judge] if judge else paired, "paired", "lb_paired")


def reference_section(report: dict) -> None:
    metrics = analysis.reference_frame(report)
    if metrics.empty:
        return
    st.subheader("Reference metrics (no judge: F1, BLEU-1/2 against the items' references)")
    st.caption(
        "ParlAI's definitions (lower-case, punctuation and articles removed); BLEU via nltk with "
        "SmoothingFunction(epsilon=1e-12).method1. Mean over items with a 95% bootstrap CI."
    )
    widgets.table(metrics, "reference_metrics", "lb_reference")


def ranking_section(report: dict, judge: str | None) -> None:
    st.subheader("Bradley–Terry ranking (pairwise, 95% bootstrap CI)")
    ranking = analysis.ranking_frame(report)
    if judge:
        ranking = ranking[ranking["judge"] == judge]
    if ranking.empty:
        widgets.no_verdicts(
            report,
            "pairwise",
            "No pairwise judgments in this run — submit with `--mode pairwise` "
            "(e.g. `--rubric rsum-pairwise`) to rank systems.",
        )
        return
    aspects = analysis.aspect_order(ranking["aspect"].dropna().tolist())
    aspect = widgets.pick("Aspect", aspects, key="lb_rank_aspect")
    chosen = ranking[ranking["aspect"] == aspect]
    widgets.chart(charts.ranking_chart(chosen), key="lb_rank")
    apart = analysis.components_text(chosen)
    if apart:
        st.warning(apart, icon="⚠️")
    widgets.table(chosen.sort_values("rank"), "ranking", "lb_rank_t")


def render() -> None:
    st.title("Leaderboard")
    run = state.require_run()
    report = state.require_report(run)
    counts = report.get("counts") or {}
    if not counts.get("n_rows"):
        widgets.empty("This run has no judgments yet — wait for it on the Runs page.")
        return
    judges = analysis.judges_of(report)
    judge = widgets.pick("Judge", judges, key="lb_judge")
    coverage = analysis.panel_coverage_text(report) if judge == analysis.PANEL else None
    if coverage:
        st.caption(coverage)
    if state.unfinished(run):
        st.warning(f"Run still going ({100 * float(run.get('progress') or 0):.0f}% done): numbers will change.")
    reference_section(report)
    score_section(report, judge)
    ranking_section(report, judge)


render()
