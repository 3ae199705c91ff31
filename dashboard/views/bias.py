"""Bias: position bias, swap flips, length bias, score-scale use and the run's flags."""

from __future__ import annotations

import streamlit as st

from dashboard import analysis, charts, state, widgets


def flags_section(report: dict) -> None:
    st.subheader("Flags")
    flags = analysis.flags_frame(report)
    if flags.empty:
        st.success("No bias flags: every figure with enough observations is within its threshold.")
    for flag in flags.to_dict(orient="records"):
        st.warning(f"**{flag['name']}** — {flag['message']}", icon="⚠️")
    thresholds = ((report.get("bias") or {}).get("thresholds")) or {}
    if thresholds:
        with st.expander("Thresholds"):
            st.json(thresholds)


def render() -> None:
    st.title("Bias")
    run = state.require_run()
    report = state.require_report(run)
    bias = analysis.bias_frame(report)
    if bias.empty:
        widgets.no_verdicts(report, None, "No bias figures for this run yet — they appear once judgments are done.")
        return
    flags_section(report)
    thresholds = ((report.get("bias") or {}).get("thresholds")) or {}
    left, right = st.columns(2)
    with left:
        st.subheader("Position bias")
        st.caption("P(the response shown first wins), non-tie pairwise verdicts; 0.5 is unbiased.")
        if bias["p_first_wins"].notna().any():
            widgets.chart(
                charts.rate_bars(
                    bias,
                    "p_first_wins",
                    "P(first shown wins)",
                    band=thresholds.get("position_bias_max_deviation"),
                ),
                key="bias_pos",
            )
        else:
            widgets.no_verdicts(report, "pairwise", "Needs pairwise judgments (`--mode pairwise`).")
        st.subheader("Swap flips")
        st.caption("Share of pairs whose verdict changes when the order is swapped.")
        if bias["swap_flip_rate"].notna().any():
            widgets.chart(charts.rate_bars(bias, "swap_flip_rate", "swap-flip rate", reference=0.0), key="bias_swap")
        else:
            widgets.no_verdicts(report, "pairwise", "Needs pairwise judgments in both orders (`--orders both`).")
    with right:
        st.subheader("Length bias")
        st.caption("P(the longer response wins), non-tie pairwise outcomes; 0.5 is unbiased.")
        if bias["p_longer_wins"].notna().any():
            widgets.chart(charts.rate_bars(bias, "p_longer_wins", "P(longer wins)"), key="bias_len")
        else:
            widgets.no_verdicts(report, "pairwise", "Needs pairwise judgments of responses of different lengths.")
        st.subheader("Score vs length")
        st.caption("Spearman correlation of single-mode scores with response length (0 is none).")
        if bias["score_length_spearman"].notna().any():
            widgets.chart(
                charts.rate_bars(
                    bias,
                    "score_length_spearman",
                    "Spearman ρ(score, length)",
                    reference=0.0,
                    domain=(-1.0, 1.0),
                ),
                key="bias_rho",
            )
        else:
            widgets.no_verdicts(report, "single", "Needs single-mode scores.")
    st.subheader("Per judge")
    widgets.table(bias, "bias", "bias_t")


render()
