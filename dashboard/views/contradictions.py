"""Contradictions: every fact a response contradicted across the run (fact-check rubrics, docs/facts.md), filtered
by system and by the kind of the fact's source, with the evidence quoted from the response."""

from __future__ import annotations

import streamlit as st

from dashboard import analysis, api, charts, state, widgets

PAGE = 50
COLUMNS = ["item_id", "system", "fact_id", "source", "text", "evidence", "judge", "rubric_id", "judgment_id"]


def rates_section(run: dict) -> None:
    """The report's contradiction and retention rates per system, with their intervals (docs/facts.md)."""
    if not state.rubrics_with_parser(run, "fact_check"):
        return
    rates = analysis.fact_rates_frame(state.require_report(run))
    if rates.empty:
        return
    st.subheader("Rates per system (95% bootstrap CI)")
    st.caption(
        "Contradiction rate: per response, contradicted / facts in the sheet, averaged over items; retention rate: "
        "supported / (supported + contradicted); addressed rate: responses that addressed a fact — as the report."
    )
    widgets.table(rates, f"{run['id']}-fact-rates", "ct_rates")


def render() -> None:
    st.title("Contradictions")
    run = state.require_run()
    run_id = str(run["id"])
    labels = widgets.guard(
        api.fact_labels,
        state.conn(),
        run_id,
        api.run_version(run),
        (("label", "contradicted"),),
        what="the fact labels",
    )
    if labels is None:
        return
    rates_section(run)
    if labels.empty:
        fact_rubrics = state.rubrics_with_parser(run, "fact_check")
        if not fact_rubrics:
            widgets.empty(
                "No contradicted facts in this run. Judge it with a fact-check rubric (`--rubric fact-check`, see "
                "docs/facts.md) to list here every fact a response contradicts."
            )
        else:  # fact-check judgments that all came back unparseable or failed are not "no contradiction"
            widgets.no_verdicts(
                state.require_report(run),
                None,
                "No contradicted facts in this run: no response contradicted a fact of its item's sheet.",
                rubrics=fact_rubrics,
            )
        return
    labels = labels.assign(source_kind=labels["source"].map(analysis.source_kind))
    systems = sorted(labels["system"].astype(str).unique())
    kinds = [k for k in analysis.SOURCE_KINDS if k in set(labels["source_kind"])]
    kinds += sorted(set(labels["source_kind"]) - set(kinds))
    system, kind = widgets.pickers(
        [("System", systems, "ct_system", "(all systems)"), ("Fact source", kinds, "ct_source", "(all sources)")]
    )
    shown = labels
    if system:
        shown = shown[shown["system"] == system]
    if kind:
        shown = shown[shown["source_kind"] == kind]
    c1, c2, c3 = st.columns(3)
    c1.metric("Contradicted facts", f"{len(shown):,}")
    c2.metric("Items", f"{shown['item_id'].nunique():,}")
    c3.metric("Responses", f"{shown['judgment_id'].nunique():,}")
    if shown.empty:
        widgets.empty("No contradiction matches these filters — widen them.")
        return
    widgets.chart(charts.contradiction_chart(analysis.contradiction_counts(shown)), key="ct_chart")
    table = shown.sort_values(["item_id", "system", "fact_id"], kind="stable").reset_index(drop=True)
    widgets.table(table[COLUMNS], f"{run_id}-contradictions", "ct", page_size=PAGE)
    left, right = st.columns([3, 1])
    item = left.selectbox("Review item", list(dict.fromkeys(table["item_id"].astype(str))), key="ct_pick")
    right.write("")
    if right.button("Open in explorer", key="ct_go") and item:
        st.session_state["ex_typed"] = item
        st.switch_page("views/explorer.py")


render()
