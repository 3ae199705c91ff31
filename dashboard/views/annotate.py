"""Annotate: a person rates items on the rubric's scale under a rater id; stored as human ratings."""

from __future__ import annotations

from itertools import combinations
from typing import Any

import pandas as pd
import streamlit as st

from dashboard import api, state, widgets

PAGE = 100
PREF_CHOICES = {"A is better": 1, "Tie": 0, "B is better": -1}


def rubric_options(run: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    known = widgets.guard(api.rubrics, state.conn(), what="the rubrics", quiet=True) or []
    mine = [r for r in known if r.get("id") in (run.get("rubrics") or []) and r.get("kind") == kind]
    return mine or [{"id": "(default)", "aspects": ["overall"], "scale": [1, 100], "kind": kind}]


def linked_item(run: dict[str, Any]) -> dict[str, Any] | None:
    """The item a link asked for (``?item=``, the Calibrated page's *Label next*): selected once, when the link is
    opened, then the rater moves on as usual; None without a link or when the run has no such item."""
    wanted = st.query_params.get("item")
    if not wanted:
        return None
    item = widgets.guard(api.get_item, state.conn(), str(run["id"]), str(wanted), what=f"item {wanted}")
    if not item:
        if item is not None:
            st.warning(f"This run has no item {wanted!r} (from the link).")
        return None
    if st.session_state.get("_ann_linked") != wanted:
        st.session_state["_ann_linked"] = wanted
        st.session_state["ann_item"] = str(wanted)
    return item


def pick_item(run: dict[str, Any], done: set[str]) -> dict[str, Any] | None:
    """The rater's queue: unrated items of the chosen page first."""
    first = widgets.guard(api.items_page, state.conn(), str(run["id"]), 0, 1, what="the items")
    total = int((first or {}).get("total") or 0)
    if not total:
        if first is not None:
            widgets.empty("This run has no items.")
        return None
    offset = widgets.pager(total, "ann_items", PAGE)
    page = widgets.guard(api.items_page, state.conn(), str(run["id"]), offset, PAGE, what="the items") or {}
    items = {str(i.get("id")): i for i in page.get("items") or []}
    linked = linked_item(run)
    if linked is not None:
        items.setdefault(str(linked["id"]), linked)
    ordered = [i for i in items if i not in done] + [i for i in items if i in done]
    left = sum(1 for i in items if i not in done)
    if "ann_next" in st.session_state:  # after saving: move on to the next unrated item
        upcoming = st.session_state.pop("ann_next")
        st.session_state["ann_item"] = next((i for i in ordered if i not in done and i != upcoming), upcoming)
    item_id = st.selectbox(
        f"Item ({left} of {len(items)} on this page still to rate)",
        ordered,
        key="ann_item",
        format_func=lambda i: f"{i}  ✓" if i in done else i,
    )
    return items.get(item_id) if item_id else None


def score_form(
    item: dict[str, Any], aspect: str, scale: tuple[float, float], mine: pd.DataFrame, rater: str
) -> list[dict[str, Any]]:
    lo, hi = scale
    step = 1.0 if float(lo).is_integer() and float(hi).is_integer() else (hi - lo) / 100
    rows = []
    with st.form(f"ann_scores_{item.get('id')}_{aspect}"):
        for system, text in (item.get("candidates") or {}).items():
            with st.container(border=True):
                st.markdown(f"**{system}**")
                st.write(text)
                old = mine[(mine["system"] == system) & (mine["kind"] == "score")]["value"]
                value = float(old.iloc[0]) if len(old) else float(round((lo + hi) / 2))
                score = st.slider(
                    f"{aspect} of {system}",
                    float(lo),
                    float(hi),
                    value,
                    step=step,
                    format="%.0f" if step == 1.0 else "%.2f",
                    key=f"ann_{item.get('id')}_{aspect}_{system}",
                )
                rows.append(
                    {
                        "item_id": str(item["id"]),
                        "system": system,
                        "aspect": aspect,
                        "rater": rater,
                        "kind": "score",
                        "value": score,
                        "scale_min": lo,
                        "scale_max": hi,
                    }
                )
        submitted = st.form_submit_button("Save ratings", type="primary")
    return rows if submitted else []


def preference_form(item: dict[str, Any], aspect: str, rater: str) -> list[dict[str, Any]]:
    systems = list((item.get("candidates") or {}).keys())
    pairs = list(combinations(systems, 2))
    if not pairs:
        widgets.empty("This item has one candidate: nothing to compare.")
        return []
    a, b = st.selectbox("Pair", pairs, format_func=lambda p: f"A = {p[0]}  vs  B = {p[1]}", key="ann_pair")
    with st.form(f"ann_pref_{item.get('id')}_{aspect}"):
        left, right = st.columns(2)
        for col, label, system in ((left, "A", a), (right, "B", b)):
            with col, st.container(border=True):
                st.markdown(f"**{label}: {system}**")
                st.write(item["candidates"][system])
        choice = st.radio(
            f"Which response is better for {aspect}?",
            list(PREF_CHOICES),
            horizontal=True,
            index=1,
            key=f"ann_pref_{item.get('id')}_{a}_{b}",
        )
        submitted = st.form_submit_button("Save ratings", type="primary")
    if not submitted:
        return []
    return [
        {
            "item_id": str(item["id"]),
            "system": a,
            "system_b": b,
            "aspect": aspect,
            "rater": rater,
            "kind": "preference",
            "value": PREF_CHOICES[choice],
        }
    ]


def agreement_now(run_id: str) -> None:
    conn = state.conn()
    # no ratings yet (the API's 409 for that) is none; any other failure is shown by guard and no figure is drawn
    result = widgets.guard(lambda: api.agreement(conn, run_id) or {"n_ratings": 0}, what="the updated agreement")
    if result is None:
        return
    agreement = result.get("agreement") or {}
    scores = agreement.get("scores") or []
    prefs = (agreement.get("preferences") or {}).get("judge_vs_human") or []
    cols = st.columns(3)
    cols[0].metric("Human ratings in this run", f"{result.get('n_ratings', 0):,}")
    if scores:
        best = max(scores, key=lambda r: r.get("n") or 0)
        rho = best.get("spearman")
        cols[1].metric(f"Spearman judge vs human ({best.get('aspect')})", "–" if rho is None else f"{rho:.3f}")
    if prefs:
        s1 = (prefs[0].get("s1") or {}).get("rate")
        cols[2].metric(f"S1 agreement ({prefs[0].get('aspect')})", "–" if s1 is None else f"{100 * s1:.1f}%")


def persona_sentences(lines: object) -> str:
    """A persona's lines as sentences: "I have a beagle. I like walks." (a line without a full stop gets one)."""
    parts = [lines] if isinstance(lines, str) else list(lines) if isinstance(lines, list | tuple) else []
    texts = [str(p).strip() for p in parts if str(p).strip()]
    return " ".join(t if t[-1] in ".!?…" else f"{t}." for t in texts)


def persona_caption(persona: object) -> str:
    """The item's personas in one line, each speaker's lines as sentences; "" when it has none."""
    if not isinstance(persona, dict):
        return ""
    said = {who: persona_sentences(persona.get(who)) for who in ("user", "bot")}
    return " · ".join(f"**{who.capitalize()} persona:** {text}" for who, text in said.items() if text)


def render() -> None:
    st.title("Annotate")
    run = state.require_run()
    left, mid, right = st.columns(3)
    rater = left.text_input("Rater id", key="ann_rater", placeholder="e.g. expert_1").strip()
    kind = mid.radio(
        "Rate",
        ["score", "preference"],
        horizontal=True,
        key="ann_kind",
        format_func=lambda k: "scores" if k == "score" else "pairwise preference",
    )
    rubric = rubric_options(run, "single" if kind == "score" else "pairwise")
    with right:
        chosen = (
            rubric[0]
            if len(rubric) == 1
            else next(
                r for r in rubric if r["id"] == st.selectbox("Rubric", [r["id"] for r in rubric], key="ann_rubric")
            )
        )
        aspect = widgets.pick("Aspect", [str(a) for a in chosen.get("aspects") or ["overall"]], key="ann_aspect")
    if not rater:
        widgets.empty("Enter your rater id to start (it keeps your ratings apart from other people's).")
        return
    flash = st.session_state.pop("ann_flash", None)
    if flash:
        st.success(flash)
        agreement_now(str(run["id"]))
    ratings = widgets.guard(api.ratings, state.conn(), str(run["id"]), state.ratings_rev(), what="the ratings")
    if ratings is None:
        return
    mine_all = ratings[(ratings["rater"] == rater) & (ratings["aspect"] == aspect)] if len(ratings) else ratings
    done = set(mine_all["item_id"].astype(str)) if len(mine_all) else set()
    item = pick_item(run, done)
    if item is None:
        return
    with st.expander("Dialogue and persona", expanded=True):
        widgets.dialogue(item)
        caption = persona_caption(item.get("persona"))
        if caption:
            st.caption(caption)
    mine = mine_all[mine_all["item_id"].astype(str) == str(item["id"])] if len(mine_all) else mine_all
    scale = tuple(chosen.get("scale") or (1, 100))
    rows = (
        score_form(item, str(aspect), (float(scale[0]), float(scale[1])), mine, rater)
        if kind == "score"
        else preference_form(item, str(aspect), rater)
    )
    if rows:
        result = widgets.guard(api.post_ratings, state.conn(), str(run["id"]), rows, what="the ratings")
        if result is not None:
            state.bump_ratings()
            st.session_state["ann_flash"] = (
                f"Saved {len(rows)} rating(s) for item {item['id']} as {rater} "
                f"({result.get('created', 0)} new, {result.get('updated', 0)} updated)."
            )
            st.session_state["ann_next"] = str(item["id"])
            st.rerun()


render()
