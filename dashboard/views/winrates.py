"""Win / tie / loss: stacked bars per system pair (the seed paper's figure 4) and a win-rate heatmap."""

from __future__ import annotations

import streamlit as st

from dashboard import analysis, charts, state, widgets

EMPTY = (
    "No pairwise judgments in this run — submit it with `--mode pairwise --rubric rsum-pairwise` "
    "to compare systems head to head."
)


def render() -> None:
    st.title("Win / tie / loss")
    run = state.require_run()
    report = state.require_report(run)
    prefs = analysis.preferences_frame(report)
    prefs = prefs[prefs["n"].fillna(0) > 0]
    if prefs.empty:
        widgets.no_verdicts(report, "pairwise", EMPTY)
        return
    systems = sorted(set(prefs["system_a"]) | set(prefs["system_b"]))
    judge, aspect, focus = widgets.pickers(
        [
            ("Judge", sorted(prefs["judge"].dropna().unique().tolist()), "wtl_judge", None),
            ("Aspect", analysis.aspect_order(prefs["aspect"].dropna().tolist()), "wtl_aspect", None),
            ("Seen from", systems, "wtl_focus", "(each pair as stored)"),
        ]
    )
    chosen = prefs[(prefs["judge"] == judge) & (prefs["aspect"] == aspect)]
    oriented = analysis.orient(chosen, focus)
    st.subheader("Win / tie / loss per pair")
    st.caption(
        "Left system's outcome against the right one, both presentation orders combined "
        "(orders that disagree count as a tie)."
    )
    widgets.chart(charts.wtl_figure(analysis.wtl_long(oriented)), key="wtl_bars")
    st.subheader("Pairwise win rate")
    st.caption("Row system's win rate (W + T/2) / N over the column system.")
    widgets.chart(charts.winrate_heatmap(analysis.winrate_matrix(chosen)), key="wtl_heat")
    st.subheader("Table")
    widgets.table(
        oriented,
        "win_tie_loss",
        "wtl_t",
        column_config={
            "win_rate_pct": st.column_config.NumberColumn("win %", format="%.1f"),
            "tie_rate_pct": st.column_config.NumberColumn("tie %", format="%.1f"),
            "loss_rate_pct": st.column_config.NumberColumn("loss %", format="%.1f"),
        },
    )


render()
