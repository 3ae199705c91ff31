"""Calibrated: the judge's numbers on the people's scale (PPI++): judge-only, human-only and calibrated intervals per
system, the gap between the judge and the people, and the items to label next (docs/calibration.md)."""

from __future__ import annotations

from typing import Any

import streamlit as st

from dashboard import analysis, api, charts, state, widgets

HOW_TO_LABEL = (
    "No human ratings for this run yet, so there is nothing to calibrate against. Draw a random sample to label: "
    "`dialogue-judge label-queue {run} --n 50 --csv labels.csv`, then rate those items on the **Annotate** page "
    "(the *Label next* list here links to each), or fill in `labels.csv` and run "
    "`dialogue-judge import-ratings {run} labels.csv`. Then `dialogue-judge calibrated {run}`."
)
NO_QUEUE = (
    "This run has no label queue: the estimates assume the labeled items are a uniform random sample. Draw one "
    "with `dialogue-judge label-queue {run} --n 50` (or `POST /v1/runs/{run}/label-queue`) and label its items in "
    "order."
)


def ci_label(report: dict[str, Any]) -> str:
    return f"{round(100 * float((report.get('meta') or {}).get('ci', 0.95)))}% CI"


def intervals(report: dict[str, Any]) -> None:
    frame = analysis.interval_frame(report)
    if frame.empty:
        widgets.empty(
            "No row has an estimate yet: every judge × aspect × system needs more labels (see the notes below)."
        )
        return
    aspect, judge = widgets.pickers(
        [
            ("Aspect", analysis.aspect_order(frame["aspect"].unique().tolist()), "cal_aspect", None),
            ("Judge", sorted(frame["judge"].unique().tolist()), "cal_judge", None),
        ]
    )
    chosen = frame[(frame["aspect"] == aspect) & (frame["judge"] == judge)]
    scale = analysis.human_scale(report, str(judge), str(aspect))
    st.subheader("Judge only, human only and calibrated, per system")
    on = f"the people's {scale[0]:g}–{scale[1]:g} scale" if scale else "the people's scale"
    st.caption(
        f"All three on {on}. *Judge only*: the report's own mean and interval, mapped with the fixed linear map "
        "of the judge's and the people's stated scales (the map the calibrated estimate uses); it says what the "
        "judge would say over more items, not what people think. *Human only*: the labeled items alone. "
        "*Calibrated*: PPI++, the labels and every judged item."
    )
    widgets.chart(
        charts.calibrated_intervals_chart(chosen, analysis.INTERVALS, scale, ci_label(report)), key="cal_chart"
    )
    gaps = analysis.gap_frame(report)
    gaps = gaps[(gaps["aspect"] == aspect) & (gaps["judge"] == judge)]
    sentence = analysis.gap_sentence(gaps, scale)
    if sentence:
        st.markdown(sentence)
    st.subheader("Gap between the judge and the people")
    widgets.table(gaps.drop(columns=["judge", "aspect"]), "calibrated_gap", "cal_gap")


def section_tables(report: dict[str, Any]) -> None:
    section = report.get("calibrated") or {}
    ranking = list(section.get("ranking") or [])
    if ranking:
        st.subheader("Calibrated ranking")
        st.caption("`better_than`: the systems whose calibrated difference interval lies below this one's.")
        shown = [{**r, "better_than": ", ".join(r.get("better_than") or [])} for r in ranking]
        widgets.table(analysis.frame(shown, list(shown[0])), "calibrated_ranking", "cal_rank")
    judges = section.get("judges") or []
    if judges:
        st.subheader("Which judge to trust, per dollar")
        st.caption("On the labeled items: agreement (κ), bias (judge − people, people's scale), effective labels.")
        widgets.table(analysis.frame(judges, list(judges[0])), "calibrated_judges", "cal_judges")


def notes(report: dict[str, Any]) -> None:
    section = report.get("calibrated") or {}
    for note in section.get("notes") or []:
        st.warning(note, icon="⚠️")
    missing = analysis.notes_frame(report)
    if not missing.empty:
        st.subheader("Rows without an estimate")
        st.caption("A row needs at least 10 labeled items; the note says how many more, or what is wrong.")
        widgets.table(missing, "calibrated_null_rows", "cal_notes")


def label_next(run_id: str) -> None:
    st.subheader("Label next")
    queue = widgets.guard(api.label_queue, state.conn(), run_id, state.ratings_rev(), what="the label queue")
    if queue is None:  # the guard said why
        return
    if not queue:
        widgets.empty(NO_QUEUE.format(run=run_id))
        return
    todo = analysis.label_next_frame(queue)
    st.caption(
        f"Label queue ({queue.get('strategy')}, seed {queue.get('seed')}): {queue.get('n_labeled')} of "
        f"{queue.get('n_drawn')} drawn items labeled. Label them in this order; each link opens the item on Annotate."
    )
    if todo.empty:
        st.success("Every item of the queue is labeled.")
        return
    link = st.column_config.LinkColumn("annotate", display_text="rate on Annotate")
    widgets.table(todo, "label_next", "cal_next", column_config={"annotate": link})


def render() -> None:
    st.title("Calibrated")
    run = state.require_run()
    run_id = str(run["id"])
    ratings = widgets.guard(api.ratings, state.conn(), run_id, state.ratings_rev(), what="the human ratings")
    if ratings is None:
        return
    if ratings.empty:
        widgets.empty(HOW_TO_LABEL.format(run=run_id))
        label_next(run_id)
        return
    report = state.require_report(run)
    if not report.get("calibrated"):
        widgets.empty(HOW_TO_LABEL.format(run=run_id))
        label_next(run_id)
        return
    section = report["calibrated"]
    st.caption(
        f"{section.get('labels_from_queue', 0)} labels from the label queue, {section.get('labels_outside_queue', 0)} "
        f"from outside it; {ci_label(report)}."
    )
    intervals(report)
    notes(report)
    label_next(run_id)
    section_tables(report)


render()
