"""Item explorer: filter judgments (paged by the API), then read one item as a chat with its candidates, every
judgment (the explanation in each presentation order) and its human ratings."""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from dashboard import analysis, api, charts, state, widgets

STATUSES = ["done", "failed", "unparseable", "pending", "running"]
REFERENCE_JUDGE = "reference"  # the reference metrics' pseudo-judge (judge_api.reference_metrics)
PAGE = 50
LIST_COLUMNS = [
    "id",
    "item_id",
    "mode",
    "system_a",
    "system_b",
    "aspect",
    "order",
    "score",
    "verdict",
    "outcome",
    "status",
    "judge",
]


def filters(report: dict[str, Any] | None) -> dict[str, Any]:
    counts = (report or {}).get("counts") or {}
    c1, c2, c3, c4 = st.columns(4)
    system = c1.selectbox("System", ["(all)", *counts.get("systems", [])], key="ex_system")
    aspect = c2.selectbox("Aspect", ["(all)", *counts.get("aspects", [])], key="ex_aspect")
    status = c3.selectbox("Status", ["(all)", *STATUSES], key="ex_status")
    mode = c4.selectbox("Mode", ["(all)", "single", "pairwise"], key="ex_mode")
    out: dict[str, Any] = {"system": system, "aspect": aspect, "status": status, "mode": mode}
    if st.toggle("Filter by score", key="ex_score_on"):
        low, high = st.slider("Score range", 0.0, 100.0, (0.0, 100.0), key="ex_score")
        out.update(score_min=low, score_max=high)
    return api.clean_filters(out)


def judgment_list(run_id: str, flt: dict[str, Any]) -> list[str]:
    """The filtered judgments, one API page at a time; returns the item ids on the shown page."""
    first = widgets.guard(api.judgments_page, state.conn(), run_id, 0, 1, tuple(flt.items()), what="the judgments")
    if first is None:
        return []
    total = int(first.get("total") or 0)
    st.caption(f"{total:,} judgments match.")
    if not total:
        return []
    offset = widgets.pager(total, "ex_list", PAGE)
    page = widgets.guard(
        api.judgments_page, state.conn(), run_id, offset, PAGE, tuple(flt.items()), what="the judgments"
    )
    rows = pd.DataFrame((page or {}).get("items") or [])
    if rows.empty:
        return []
    widgets.dataframe(rows[[c for c in LIST_COLUMNS if c in rows]], key="ex_list_df", height=260)
    widgets.csv_button(rows, f"{run_id}-judgments-page", "ex_list")
    return list(dict.fromkeys(rows["item_id"].astype(str)))


def context(item: dict[str, Any]) -> None:
    persona = item.get("persona") or {}
    for who in ("user", "bot"):
        if persona.get(who):
            st.markdown(f"**{who.capitalize()} persona**")
            st.markdown("\n".join(f"- {p}" for p in persona[who]))
    for field in ("memory", "reference"):
        if item.get(field):
            st.markdown(f"**{field.capitalize()}**")
            st.info(str(item[field]))
    if item.get("meta"):
        st.json(item["meta"], expanded=False)


FACT_ICONS = {"supported": "✅", "contradicted": "❌", "not_addressed": "➖"}


def fact_labels(row: dict[str, Any]) -> list[dict[str, Any]]:
    """The labelled facts of a fact-check judgment (docs/facts.md), else []."""
    details = row.get("details")
    facts = details.get("facts") if isinstance(details, dict) and row.get("status") == "done" else None
    return [f for f in facts if isinstance(f, dict)] if isinstance(facts, list) else []


def fact_check(row: dict[str, Any], response: str, texts: dict[str, str], key: str) -> None:
    """A fact-check judgment: the response with each label's evidence highlighted, then every fact with its label."""
    facts = fact_labels(row)
    st.markdown(analysis.highlight_evidence(response, facts))
    st.caption(
        f"contradiction rate {float(row['details'].get('contradiction_rate') or 0):.2f} · retention rate "
        + ("–" if row["details"].get("retention_rate") is None else f"{float(row['details']['retention_rate']):.2f}")
        + " · evidence: :green-background[supported] :red-background[contradicted]"
    )
    table = pd.DataFrame(
        [
            {
                "fact": f.get("id"),
                "label": f"{FACT_ICONS.get(str(f.get('label')), '')} {f.get('label')}",
                "source": f.get("source"),
                "text": texts.get(str(f.get("id")), ""),
                "evidence": f.get("evidence") or "",
            }
            for f in facts
        ]
    )
    widgets.dataframe(table, key=key)


def candidates(item: dict[str, Any], judgments: pd.DataFrame, texts: dict[str, str]) -> None:
    cands = item.get("candidates") or {}
    single = judgments[judgments["mode"] == "single"] if not judgments.empty else judgments
    cols = st.columns(max(1, min(4, len(cands))))
    for i, (system, text) in enumerate(cands.items()):
        with cols[i % len(cols)], st.container(border=True):
            st.markdown(f"**{system}**")
            st.write(text)
            for row in single[single["system_a"] == system].to_dict(orient="records") if not single.empty else []:
                score = "–" if pd.isna(row.get("score")) else f"{row['score']:g}"
                checked = fact_labels(row)
                with st.expander(f"{row['aspect']}: {score} ({row['status']})", expanded=bool(checked)):
                    if checked:
                        fact_check(row, str(text), texts, key=f"ex_facts_{row['id']}")
                    reply(row)


def reply(row: dict[str, Any]) -> None:
    """A judgment's text; an unparseable or failed one with its error (why the reply gave no verdict) above it."""
    error = row.get("error")
    if row.get("status") in ("unparseable", "failed") and isinstance(error, str) and error:
        st.warning(f"{'Parse error' if row['status'] == 'unparseable' else 'Error'}: {error}", icon="⚠️")
    st.write(row.get("explanation") or row.get("raw_output") or error or "(no text)")


def verdicts(judgments: pd.DataFrame) -> None:
    pair = judgments[judgments["mode"] == "pairwise"] if not judgments.empty else judgments
    if pair.empty:
        return
    st.subheader("Pairwise verdicts (each presentation order)")
    for (a, b, aspect, judge), g in pair.groupby(["system_a", "system_b", "aspect", "judge"], sort=True):
        st.markdown(f"**{a} vs {b}** · {aspect} · `{judge}`")
        cols = st.columns(2)
        for col, order in zip(cols, ("ab", "ba"), strict=True):
            shown = f"{a} first" if order == "ab" else f"{b} first"
            with col, st.container(border=True):
                rows = g[g["order"] == order].to_dict(orient="records")
                if not rows:
                    st.caption(f"{shown}: not judged")
                for row in rows:
                    st.markdown(
                        f"*{shown}* → **{row.get('outcome') or row.get('status')}** for {a} "
                        f"(verdict: {row.get('verdict') or '–'}, preference {row.get('preference')})"
                    )
                    reply(row)


def judge_prompts(judgments: pd.DataFrame) -> None:
    """The prompt templates these judgments were asked with: each rubric version as the run stored it."""
    if judgments.empty or "rubric_version" not in judgments:
        return
    used = judgments[["rubric_id", "rubric_version"]].drop_duplicates().sort_values(["rubric_id", "rubric_version"])
    st.subheader("Judge prompts")
    for rubric_id, version in used.itertuples(index=False):
        with st.expander(f"{rubric_id} · version {version}"):
            if version == "external":
                st.caption("Imported judgments: made outside dialogue-judge, so their prompt is not stored.")
                continue
            found = widgets.guard(
                api.rubric_version, state.conn(), str(rubric_id), str(version), what="this rubric version", quiet=True
            )
            if not found:
                continue
            content = found.get("content") or {}
            templates = content.get("templates") or {}
            if not found.get("current"):
                st.caption("An earlier version of this rubric: the rubric folder has changed since.")
            for message in content.get("messages") or []:
                text = templates.get(message.get("template")) if message.get("template") else message.get("text")
                st.markdown(f"**{message.get('role')}** ({message.get('template') or 'inline'})")
                st.code(text or "", language="jinja2")


def fact_texts(run: dict[str, Any], item_id: str, judgments: pd.DataFrame) -> dict[str, str]:
    """The text of each fact of the item's sheet (from ``/facts``), asked only when the item has fact-check labels."""
    if judgments.empty or "details" not in judgments or not any(fact_labels(r) for r in judgments.to_dict("records")):
        return {}
    labels = widgets.guard(
        api.fact_labels,
        state.conn(),
        str(run["id"]),
        api.run_version(run),
        (("item_id", item_id),),
        what="the fact texts",
        quiet=True,
    )
    if labels is None or labels.empty:
        return {}
    return {str(f): str(t) for f, t in zip(labels["fact_id"], labels["text"], strict=True) if isinstance(t, str)}


def item_view(run: dict[str, Any], item_id: str, rated: bool = False) -> None:
    """One item: its dialogue, candidates, verdicts and prompts, and its human ratings (with ``rated``, the run has
    some: an item without any says so and points to Annotate)."""
    conn, run_id = state.conn(), str(run["id"])
    item = widgets.guard(api.get_item, conn, run_id, item_id, what=f"item {item_id}")
    if item is None:
        return
    if not item:
        widgets.empty(f"Item {item_id!r} is not in this run — check the id, or pick one from the list above.")
        return
    rows = widgets.guard(api.item_judgments, conn, run_id, item_id, api.run_version(run), what="its judgments")
    judgments = pd.DataFrame(rows or [])
    st.header(f"Item `{item_id}`")
    left, right = st.columns([3, 2])
    with left:
        widgets.dialogue(item)
    with right:
        context(item)
    st.subheader("Candidates and their scores")
    metric_rows = judgments["judge"] == REFERENCE_JUDGE if "judge" in judgments else pd.Series(False, judgments.index)
    bars = analysis.item_score_bars(judgments[~metric_rows])
    if not bars.empty:
        aspects = analysis.aspect_order(bars["aspect"].tolist())
        widgets.chart(charts.score_means_chart(bars, aspects).properties(height=220), key="ex_item_chart")
    metrics = analysis.item_score_bars(judgments[metric_rows])
    if not metrics.empty:  # F1 / BLEU are 0-1: on the judge's 1-100 axis they would be invisible slivers
        st.caption("Reference metrics (no judge: F1, BLEU against the item's reference), on their own 0–1 axis")
        chart = charts.score_means_chart(metrics, domain=(0.0, 1.0), title="reference metric (0–1)")
        widgets.chart(chart.properties(height=200), key="ex_item_metrics")
    candidates(item, judgments, fact_texts(run, item_id, judgments))
    verdicts(judgments)
    judge_prompts(judgments)
    # this item's ratings only (the API filters); the report says whether the run has any (its agreement section)
    ratings = widgets.guard(api.ratings, conn, run_id, state.ratings_rev(), item_id, what="the human ratings")
    if ratings is not None and (rated or not ratings.empty):
        st.subheader("Human ratings")
        if ratings.empty:
            st.caption("None yet — rate this item on the Annotate page.")
        else:
            widgets.table(ratings, f"{item_id}-ratings", "ex_ratings")


def render() -> None:
    st.title("Item explorer")
    run = state.require_run()
    report = widgets.guard(
        api.report,
        state.conn(),
        str(run["id"]),
        0,
        api.run_version(run),
        state.ratings_rev(),
        what="the run's systems and aspects",
        quiet=True,
    )
    ids = judgment_list(str(run["id"]), filters(report))
    left, right = st.columns(2)
    picked = left.selectbox("Item (from the judgments listed)", ids, key="ex_item") if ids else None
    typed = right.text_input("…or go to item id", placeholder="e.g. msc5-0-t7", key="ex_typed")
    item_id = typed.strip() or picked
    if not item_id:
        widgets.empty("No judgment matches these filters — widen them, or pick another run in the sidebar.")
        return
    item_view(run, item_id, rated=bool((report or {}).get("agreement")))


render()
