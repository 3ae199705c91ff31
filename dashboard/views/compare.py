"""Compare runs: baseline vs candidate run — per-aspect deltas with CIs and the items that got worse."""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from dashboard import analysis, api, charts, state, widgets


def choose_runs() -> tuple[dict[str, Any], dict[str, Any]] | None:
    listing = widgets.guard(api.list_runs, state.conn(), 0, state.RUN_LIST_LIMIT, what="the run list")
    if listing is None:
        return None
    runs = {str(r["id"]): r for r in listing.get("items") or []}
    if len(runs) < 2:
        widgets.empty(
            widgets.NO_RUNS
            if not runs
            else "Comparing needs two runs of the same items — submit the items again with the new judge, "
            "rubric or systems (`dialogue-judge submit items.jsonl --judge ...`)."
        )
        return None
    ids = list(runs)
    cand_default, base_default = analysis.default_pair(list(runs.values()), state.current_run_id())
    left, right = st.columns(2)
    cand = left.selectbox(
        "Candidate run",
        ids,
        index=cand_default,
        key="cmp_cand",
        format_func=lambda i: state.run_label(runs[i]),
    )
    base = right.selectbox(
        "Baseline run",
        ids,
        index=base_default,
        key="cmp_base",
        format_func=lambda i: state.run_label(runs[i]),
    )
    if cand == base:
        st.warning("Pick two different runs.")
        return None
    if not analysis.comparable(runs[base], runs[cand]):
        st.warning(
            f"These runs share no mode ({', '.join(runs[cand].get('mode') or [])} vs "
            f"{', '.join(runs[base].get('mode') or [])}): they have no scores or verdicts in common."
        )
    return runs[base], runs[cand]


def without_verdicts(runs: list[tuple[str, dict[str, Any] | None]], mode: str) -> str:
    """For each run (labelled baseline / candidate) whose ``mode`` judgments all came back without a verdict, why
    (widgets.no_verdicts_text); empty when each run has some verdict or no such judgments."""
    notes = []
    for which, report in runs:
        text = widgets.no_verdicts_text(report, mode, "")
        if text:
            notes.append(f"**{which} run**: {text}")
    return " ".join(notes)


def skipped_aspects(reports: list[tuple[str, dict[str, Any] | None]], deltas: Any) -> list[str]:
    """The single-mode aspects either run was judged on that the deltas leave out (a run whose judge replies were
    all unparseable shares only its reference metrics): the compared aspects alone would hide them."""
    judged: set[str] = set()
    for _, report in reports:
        scores = (report or {}).get("scores") or []
        judged |= {str(row["aspect"]) for row in scores if isinstance(row, dict) and row.get("aspect")}
        judged |= {str(a) for a in ((report or {}).get("paper_table") or {}).get("aspects") or []}
    return sorted(judged - {str(a) for a in deltas["aspect"]})


WORSE_PAGE = 50
REVIEW_CHOICES = 500  # the worst keys whose items the review box offers


def score_deltas(base: dict[str, Any], cand: dict[str, Any], reports: list[tuple[str, dict[str, Any] | None]]) -> None:
    conn = state.conn()
    base_id, cand_id = str(base["id"]), str(cand["id"])
    versions = (api.run_version(cand), api.run_version(base))
    n_boot = max(state.n_boot() or 1000, 200)
    deltas = widgets.guard(api.score_deltas, conn, cand_id, base_id, *versions, n_boot, what="the score deltas")
    if deltas is None:
        return
    st.subheader("Score deltas per system × aspect")
    st.caption("Candidate − baseline mean on the items both runs scored; 95% paired bootstrap CI over items.")
    if deltas.empty:
        widgets.empty(
            without_verdicts(reports, "single")
            or "The two runs share no single-mode (item, system, aspect) scores — compare runs of the same "
            "items and systems, both judged in single mode."
        )
        return
    skipped = skipped_aspects(reports, deltas)
    if skipped:
        st.warning(
            f"Not compared: {', '.join(skipped)} — no (item, system) has a score for them in both runs. "
            + without_verdicts(reports, "single")
        )
    widgets.chart(charts.delta_chart(deltas), key="cmp_delta")
    widgets.table(deltas, "score_deltas", "cmp_delta_t")
    worse_items(cand_id, base_id, versions)


def worse_items(cand_id: str, base_id: str, versions: tuple[str, str]) -> None:
    """The keys that scored lower, one page at a time from the API (``/worse-items``), and the review box over the
    worst ``REVIEW_CHOICES`` keys' items."""
    conn = state.conn()
    st.subheader("Items that got worse")
    first = widgets.guard(
        api.worse_items, conn, cand_id, base_id, *versions, 0, REVIEW_CHOICES, what="the items that got worse"
    )
    if first is None:
        return
    if not first.total:
        st.success("No (item, system, aspect) scored lower in the candidate run.")
        return
    offset = widgets.pager(first.total, "cmp_worse", WORSE_PAGE)
    if offset + WORSE_PAGE <= REVIEW_CHOICES:
        page: pd.DataFrame | None = first.page.iloc[offset : offset + WORSE_PAGE]
    else:
        later = widgets.guard(
            api.worse_items, conn, cand_id, base_id, *versions, offset, WORSE_PAGE, what="the items that got worse"
        )
        page = None if later is None else later.page
    if page is None:
        return
    widgets.dataframe(page, key="cmp_worse_df", column_config=widgets.number_config(page))
    st.download_button(
        "Download CSV",
        lambda: api.every_worse_item(conn, cand_id, base_id).to_csv(index=False).encode(),
        file_name="worse_items.csv",
        mime="text/csv",
        key="cmp_worse_csv",
        icon=":material/download:",
    )
    left, right = st.columns([3, 1])
    item = left.selectbox(
        "Review item (candidate run)",
        first.page["item_id"].astype(str).unique().tolist(),
        key="cmp_item",
    )
    right.write("")
    if right.button("Open in explorer", key="cmp_go") and item:
        state.select_run(cand_id)
        st.session_state["ex_typed"] = item
        st.switch_page("views/explorer.py")


def run_reports(base: dict[str, Any], cand: dict[str, Any]) -> list[tuple[str, dict[str, Any] | None]]:
    """Each run's report (no bootstrap: its counts and preferences), labelled; None where it cannot be read."""
    return [
        (
            which,
            widgets.guard(
                api.report,
                state.conn(),
                str(r["id"]),
                0,
                api.run_version(r),
                state.ratings_rev(),
                what=f"the report of {r['id']}",
            ),
        )
        for which, r in (("Baseline", base), ("Candidate", cand))
    ]


def preference_deltas(reports: list[tuple[str, dict[str, Any] | None]]) -> None:
    (_, base_report), (_, cand_report) = reports
    if base_report is None or cand_report is None:
        return
    deltas = analysis.compare_preferences(
        analysis.preferences_frame(base_report), analysis.preferences_frame(cand_report)
    )
    st.subheader("Pairwise win-rate deltas")
    if deltas.empty:
        st.caption(without_verdicts(reports, "pairwise") or "No system pair was judged pairwise in both runs.")
        return
    widgets.table(deltas, "win_rate_deltas", "cmp_pref")


def render() -> None:
    st.title("Compare runs")
    chosen = choose_runs()
    if chosen is None:
        return
    base, cand = chosen
    reports = run_reports(base, cand)
    score_deltas(base, cand, reports)
    preference_deltas(reports)


render()
