"""Human agreement: S1/S2, kappa, correlations, alpha; judge-vs-human scatter, confusions, system ranks."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from dashboard import analysis, api, charts, state, widgets

TAB_KEY = "agr_tab"
# the widgets of the tabs, kept while their tab is closed: the pickers and the tables' pages
KEPT = (
    "agr_aspect",
    "agr_judge",
    *(f"agr_{k}_page" for k in ("ranks_t", "items", "scores", "alpha", "pref", "judges", "sets", "inter")),
)
EMPTY = (
    "No human ratings for this run yet — rate items on the **Annotate** page, or import them with "
    "`dialogue-judge import-ratings RUN_ID ratings.csv`."
)


def no_section(report: dict) -> bool:
    """True (and says so) when the report has no agreement section yet: the item-level charts need none."""
    if report.get("agreement"):
        return False
    widgets.empty("The report has no agreement section yet — press *Refresh data* in the sidebar.")
    return True


def score_tables(report: dict) -> None:
    if no_section(report):
        return
    st.subheader("Score agreement (judge vs mean human)")
    widgets.table(analysis.score_agreement_frame(report), "score_agreement", "agr_scores")
    st.subheader("Krippendorff's alpha")
    widgets.table(analysis.alpha_frame(report), "alpha", "agr_alpha")


def preference_table(report: dict) -> None:
    if no_section(report):
        return
    st.subheader("Preference agreement (S1 keeps ties, S2 drops them)")
    prefs = analysis.pref_agreement_frame(report)
    if prefs.empty:
        st.caption("No human preference votes.")
    else:
        widgets.table(prefs, "preference_agreement", "agr_pref")


def judges_matrix(report: dict) -> None:
    matrix = analysis.judges_human_frame(report)
    if matrix.empty:
        return
    st.subheader("Judges × humans, with cost")
    st.caption(
        "Each judge, the panel (its judges aggregated) and the reference metrics against the human ratings: "
        "Spearman / QWK for scores, S1 / kappa for preferences, and what each cost."
    )
    widgets.table(matrix, "judges_vs_humans", "agr_judges")
    sets = analysis.judge_sets_frame(report)
    if not sets.empty:
        st.subheader("Judge sets (cheapest first)")
        st.caption("Every set of the panel's judges aggregated like the panel: pick the cheapest set that agrees.")
        widgets.table(sets, "judge_sets", "agr_sets")


def inter_judge(report: dict) -> None:
    inter = analysis.inter_judge_frame(report)
    if inter.empty:
        return
    panel = report.get("panel") or {}
    st.subheader(f"Agreement between judges (panel: {panel.get('aggregate')} of {len(panel.get('members') or [])})")
    st.caption("Krippendorff's alpha across the panel's judges, and each pair's Spearman / QWK or agreement / kappa.")
    coverage = analysis.panel_coverage_text(report)
    if coverage:
        st.caption(coverage)
    widgets.table(inter, "inter_judge", "agr_inter")


def item_level(run: dict, ratings: pd.DataFrame, report: dict) -> None:
    conn, run_id = state.conn(), str(run["id"])
    judge_items = widgets.guard(
        api.rated_item_scores, conn, run_id, api.run_version(run), state.ratings_rev(), what="the judgments"
    )
    if judge_items is None:
        return
    scatter = analysis.scatter_frame(judge_items, analysis.human_item_scores(ratings))
    if scatter.empty:
        widgets.no_verdicts(
            report,
            "single",
            "No item has both a judge score and a human score yet — rate single-mode items on Annotate.",
        )
        return
    aspect, judge = widgets.pickers(
        [
            ("Aspect", analysis.aspect_order(scatter["aspect"].tolist()), "agr_aspect", None),
            ("Judge", sorted(scatter["judge"].unique().tolist()), "agr_judge", None),
        ]
    )
    chosen = scatter[(scatter["aspect"] == aspect) & (scatter["judge"] == judge)]
    left, right = st.columns([3, 2])
    with left:
        st.subheader("Judge vs human scores")
        st.caption(f"{len(chosen):,} rated (item, system) pairs; dashed line: perfect agreement.")
        widgets.chart(charts.agreement_scatter(chosen), key="agr_scatter")
    with right:
        st.subheader("Score confusion (5 bins)")
        st.caption("Judge bin (rows) by human bin (columns), both scales cut into five equal parts.")
        matrix = analysis.score_confusion(chosen)
        widgets.chart(charts.confusion_heatmap(matrix.to_numpy().tolist(), list(matrix.index)), key="agr_conf")
    st.subheader("System-level ranks: judge vs humans")
    st.caption("Mean scores on each one's scale (the judge's is the report's); ranks from each scale's 0–1 share.")
    ranks = analysis.system_ranks(chosen)
    widgets.chart(charts.rank_comparison_chart(ranks), key="agr_ranks")
    widgets.table(ranks, "system_ranks", "agr_ranks_t")
    with st.expander("Rated items"):
        st.caption("score and human on their own scales; the 0–1 columns are each score's share of its scale.")
        unit = {"judge_unit": "judge (0–1)", "human_unit": "human (0–1)", "gap": "gap (0–1)"}
        shown = chosen.sort_values("gap", ascending=False).rename(columns=unit)
        widgets.table(shown, "judge_vs_human_items", "agr_items")


def preference_confusions(report: dict) -> None:
    confusions = analysis.pref_confusions(report)
    if not confusions:
        return
    st.subheader("Preference confusion (judge rows × human columns)")
    cols = st.columns(min(3, len(confusions)))
    for i, c in enumerate(confusions):
        with cols[i % len(cols)]:
            st.caption(f"{c['aspect']} · `{c['judge']}`")
            widgets.chart(charts.confusion_heatmap(c["matrix"], c["labels"]), key=f"agr_pconf_{i}", stretch=False)


def render() -> None:
    widgets.keep(*KEPT)
    st.title("Human agreement")
    run = state.require_run()
    ratings = widgets.guard(api.ratings, state.conn(), str(run["id"]), state.ratings_rev(), what="the human ratings")
    if ratings is None:
        return
    if ratings.empty:
        widgets.empty(EMPTY)
        if run.get("judges") and len(run["judges"]) > 1:
            inter_judge(state.require_report(run))  # how the judges agree needs no human
        return
    report = state.require_report(run)
    st.caption(f"{len(ratings):,} human ratings from {ratings['rater'].nunique()} raters.")
    labels, first = analysis.agreement_tabs(report)
    # only the open tab runs (its API reads, its charts); ?agr_tab=<label> opens one by link
    tabs = widgets.linked_tabs(labels, first, TAB_KEY)
    if tabs[analysis.SCORES_TAB].open:
        with tabs[analysis.SCORES_TAB]:
            item_level(run, ratings, report)  # the charts first, then the tables behind them
            score_tables(report)
    if tabs[analysis.PREFERENCES_TAB].open:
        with tabs[analysis.PREFERENCES_TAB]:
            preference_confusions(report)
            preference_table(report)
    judges = tabs.get(analysis.JUDGES_TAB)
    if judges is not None and judges.open:
        with judges:
            judges_matrix(report)
            inter_judge(report)


render()
