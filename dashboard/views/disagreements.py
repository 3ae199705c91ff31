"""Disagreements: the review queue — judge vs humans, presentation orders that flipped, unparseable output."""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from dashboard import analysis, api, charts, state, widgets

PAGE = 50
FAILED_COLUMNS = [
    "id",
    "item_id",
    "mode",
    "system_a",
    "system_b",
    "aspect",
    "order",
    "status",
    "attempts",
    "error",
    "raw_output",
    "judge",
]


def open_in_explorer(item_ids: list[str], key: str) -> None:
    """Pick an item of the queue and jump to it in the item explorer."""
    if not item_ids:
        return
    left, right = st.columns([3, 1])
    item = left.selectbox("Review item", list(dict.fromkeys(item_ids)), key=f"{key}_pick")
    right.write("")
    if right.button("Open in explorer", key=f"{key}_go") and item:
        st.session_state["ex_typed"] = item
        st.switch_page("views/explorer.py")


def human_tab(run: dict[str, Any], orders: pd.DataFrame | None) -> None:
    conn, run_id = state.conn(), str(run["id"])
    ratings = widgets.guard(api.ratings, conn, run_id, state.ratings_rev(), what="the human ratings")
    if ratings is None:
        return
    if ratings.empty:
        widgets.empty(
            "No human ratings yet — rate items on the **Annotate** page to find where the judge and people disagree."
        )
        return
    judge_items = widgets.guard(api.judge_item_scores, conn, run_id, api.run_version(run), what="the judgments")
    if judge_items is None:
        return
    scores = analysis.scatter_frame(judge_items, analysis.human_item_scores(ratings))
    scores = scores.sort_values("gap", ascending=False).reset_index(drop=True)
    if not scores.empty:
        widgets.chart(charts.gap_chart(analysis.gap_summary(scores)), key="dis_gap_chart")
        first = ["item_id", "system", "aspect", "gap", "score", "human", "n_raters", "judge"]
        scores = scores[[*first, *[c for c in scores.columns if c not in first]]]
    st.markdown("**Scores** — largest gap between the judge and the mean human score (both on a 0–1 scale)")
    widgets.table(
        scores,
        "score_disagreements",
        "dis_scores",
        page_size=PAGE,
        column_config={"gap": st.column_config.ProgressColumn("gap", min_value=0.0, max_value=1.0)},
    )
    prefs = analysis.preference_disagreements(orders if orders is not None else pd.DataFrame(), ratings)
    st.markdown("**Preferences** — judge verdict (orders combined) vs human votes; severity 2 = opposite winners")
    widgets.table(prefs, "preference_disagreements", "dis_prefs", page_size=PAGE)
    open_in_explorer([*scores["item_id"].head(200).astype(str), *prefs["item_id"].head(200).astype(str)], "dis_h")


def flips_tab(run: dict[str, Any], orders: pd.DataFrame | None) -> None:
    if orders is None:
        return
    both = orders[orders["outcome_ab"].notna() & orders["outcome_ba"].notna()]
    if both.empty:
        widgets.no_verdicts(
            state.require_report(run),  # only read here: the other tabs do not need it
            "pairwise",
            "No pairwise judgments in both presentation orders — submit with "
            "`--mode pairwise --orders both` to check order consistency.",
        )
        return
    flipped = both[both["flipped"]].reset_index(drop=True)
    st.metric(
        "Pairs whose verdict flips with the order",
        f"{len(flipped):,} of {len(both):,}",
        f"{100 * len(flipped) / len(both):.1f}%",
        delta_color="off",
    )
    widgets.chart(charts.flip_chart(analysis.flip_summary(orders)), key="dis_flip_chart")
    widgets.table(flipped, "order_flips", "dis_flips", page_size=PAGE)
    open_in_explorer(flipped["item_id"].head(200).astype(str).tolist(), "dis_f")


def failed_tab(run_id: str) -> None:
    shown: list[str] = []
    for status in ("unparseable", "failed"):
        first = widgets.guard(
            api.judgments_page,
            state.conn(),
            run_id,
            0,
            1,
            (("status", status),),
            what=f"the {status} judgments",
        )
        total = int((first or {}).get("total") or 0)
        st.markdown(f"**{status.capitalize()}**: {total:,}")
        if not total:
            continue
        offset = widgets.pager(total, f"dis_{status}", PAGE)
        page = widgets.guard(
            api.judgments_page,
            state.conn(),
            run_id,
            offset,
            PAGE,
            (("status", status),),
            what=f"the {status} judgments",
        )
        rows = pd.DataFrame((page or {}).get("items") or [])
        if not rows.empty:
            widgets.dataframe(rows[[c for c in FAILED_COLUMNS if c in rows]], key=f"dis_{status}_df")
            widgets.csv_button(rows, f"{run_id}-{status}", f"dis_{status}")
            shown += rows["item_id"].astype(str).tolist()
    if not shown:
        st.success("Every finished judgment parsed.")
    open_in_explorer(shown, "dis_u")


def render() -> None:
    st.title("Disagreements")
    run = state.require_run()
    orders = widgets.guard(
        api.order_outcomes, state.conn(), str(run["id"]), api.run_version(run), what="the pairwise judgments"
    )
    ratings = widgets.guard(api.ratings, state.conn(), str(run["id"]), state.ratings_rev(), what="the human ratings")
    labels = ["Judge vs human", "Order flips", "Unparseable / failed"]
    human, flips, failed = st.tabs(labels, default=labels[analysis.first_with_content(run, ratings, orders)])
    with human:
        human_tab(run, orders)
    with flips:
        flips_tab(run, orders)
    with failed:
        failed_tab(str(run["id"]))


render()
