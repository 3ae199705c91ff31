"""Disagreements: the review queue — judge vs humans, presentation orders that flipped, unparseable output."""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from dashboard import analysis, api, charts, state, widgets

PAGE = 50
TAB_KEY = "dis_tab"
# the widgets of the tabs, kept while their tab is closed: the review pickers and the tables' pages
KEPT = (
    *(f"dis_{k}_pick" for k in ("h", "f", "u")),
    *(f"dis_{k}_page" for k in ("scores", "prefs", "flips", "unparseable", "failed")),
)
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


def human_tab(run: dict[str, Any], ratings: pd.DataFrame | None) -> None:
    """``ratings``: the page's read (None: it failed, and said so); a second read would copy the cached frame again."""
    conn, run_id = state.conn(), str(run["id"])
    if ratings is None:
        return
    if ratings.empty:
        widgets.empty(
            "No human ratings yet — rate items on the **Annotate** page to find where the judge and people disagree."
        )
        return
    version, rev = api.run_version(run), state.ratings_rev()
    judge_items = widgets.guard(api.rated_item_scores, conn, run_id, version, rev, what="the judgments")
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
    orders = widgets.guard(api.rated_order_outcomes, conn, run_id, version, rev, what="the pairwise judgments")
    prefs = analysis.preference_disagreements(orders if orders is not None else pd.DataFrame(), ratings)
    st.markdown("**Preferences** — judge verdict (orders combined) vs human votes; severity 2 = opposite winners")
    widgets.table(prefs, "preference_disagreements", "dis_prefs", page_size=PAGE)
    open_in_explorer([*scores["item_id"].head(200).astype(str), *prefs["item_id"].head(200).astype(str)], "dis_h")


def flips_tab(run: dict[str, Any], flips: api.OrderFlips | None) -> None:
    if flips is None:
        return
    if not flips.n_both:
        widgets.no_verdicts(
            state.require_report(run),  # only read here: the other tabs do not need it
            "pairwise",
            "No pairwise judgments in both presentation orders — submit with "
            "`--mode pairwise --orders both` to check order consistency.",
        )
        return
    st.metric(
        "Pairs whose verdict flips with the order",
        f"{flips.n_flipped:,} of {flips.n_both:,}",
        f"{100 * flips.n_flipped / flips.n_both:.1f}%",
        delta_color="off",
    )
    widgets.chart(charts.flip_chart(analysis.flip_summary_from_counts(flips.by_pair)), key="dis_flip_chart")
    if not flips.total:
        st.caption("No rows.")
        return
    offset = widgets.pager(flips.total, "dis_flips", PAGE)  # the flipped keys, one page at a time from the API
    page = (
        flips
        if offset == 0
        else widgets.guard(
            api.order_flips, state.conn(), str(run["id"]), api.run_version(run), offset, PAGE, what="the order flips"
        )
    )
    if page is None:
        return
    widgets.dataframe(page.page, key="dis_flips_df", column_config=widgets.number_config(page.page))
    widgets.csv_button(page.page, f"{run['id']}-order-flips-{offset // PAGE + 1}", "dis_flips")
    open_in_explorer(page.page["item_id"].astype(str).tolist(), "dis_f")


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
    widgets.keep(*KEPT)
    st.title("Disagreements")
    run = state.require_run()
    flips = widgets.guard(
        api.order_flips, state.conn(), str(run["id"]), api.run_version(run), 0, PAGE, what="the pairwise judgments"
    )
    ratings = widgets.guard(api.ratings, state.conn(), str(run["id"]), state.ratings_rev(), what="the human ratings")
    labels = ["Judge vs human", "Order flips", "Unparseable / failed"]
    both = flips.n_both if flips is not None else None
    # only the open tab runs (and reads the API): the others wait for a click; ?dis_tab=<label> opens one by link
    tabs = widgets.linked_tabs(labels, labels[analysis.first_with_content(run, ratings, both)], TAB_KEY)
    human, flip, failed = (tabs[label] for label in labels)
    if human.open:
        with human:
            human_tab(run, ratings)
    if flip.open:
        with flip:
            flips_tab(run, flips)
    if failed.open:
        with failed:
            failed_tab(str(run["id"]))


render()
