"""Memory audit: the report's ``memory_audit`` section (runs judged with the memory-audit rubric, docs/facts.md):
per system the fact-level precision / recall / F1 and the shares of the error types, with their bootstrap CIs."""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from dashboard import charts, state, widgets
from dashboard import memory_audit as audit


def three_decimals(table: pd.DataFrame) -> dict[str, Any]:
    """Figures and shares to three decimals (fractions such as 3/8 and 11/28 read as 0.375 and 0.393)."""
    return {
        c: st.column_config.NumberColumn(format="%.3f") for c in table.columns if pd.api.types.is_float_dtype(table[c])
    }


def render() -> None:
    st.title("Memory audit")
    run = state.require_run()
    report = state.require_report(run)
    missing = audit.no_audit_text(report, bool(state.rubrics_with_parser(run, "memory_audit")))
    if missing:
        widgets.empty(missing)
        return
    st.caption(
        "A judge labels every gold fact of the item recalled or missing, and every fact the generated memory states "
        "supported, fabricated or wrong relationship (the memory-audit rubric). Precision = supported / stated "
        "facts, recall = recalled / gold facts; means over items with 95% bootstrap CIs over items."
    )
    if state.unfinished(run):
        st.warning(f"Run still going ({100 * float(run.get('progress') or 0):.0f}% done): numbers will change.")
    judge = widgets.pick("Judge", audit.judges(report), key="ma_judge")
    figures = audit.figures_table(report, judge)
    st.subheader("Precision / recall / F1 per system (95% bootstrap CI)")
    widgets.chart(charts.memory_figures_chart(audit.figures_long(report, judge)), key="ma_figures")
    widgets.table(figures, "memory_audit", "ma_figures_t", column_config=three_decimals(figures))
    unparsed = int(figures["n_unparseable"].fillna(0).sum())
    if unparsed:
        st.caption(
            f"{unparsed:,} audit{'s' if unparsed != 1 else ''} without figures (unparseable or failed) left out: "
            "see the **Item explorer**."
        )
    st.subheader("Error types (share of each system's errors, 95% bootstrap CI)")
    shares = audit.shares_long(report, judge)
    if shares.empty:
        st.caption("No errors: every stated fact is supported and every gold fact recalled.")
    else:
        widgets.chart(charts.error_shares_chart(shares), key="ma_shares")
    errors = audit.errors_table(report, judge)
    widgets.table(errors, "memory_audit_errors", "ma_errors_t", column_config=three_decimals(errors))


render()
