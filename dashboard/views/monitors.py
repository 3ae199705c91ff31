"""Monitors: a bot watched in production (docs/monitoring.md). The alert history with its evidence, the series
of a monitor per version (or system, segment) with its interval bands, the contradiction rate of fact-check
rubrics, and the sampled responses of one bucket, each opening in the item explorer (they are items of the
monitor's run)."""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from dashboard import api, charts, state, widgets

NO_MONITORS = (
    "No monitors yet — create one with `dialogue-judge monitor create --name prod-bot --rubric rsum-single "
    "--judge openai:gpt-4o --sample-rate 0.05`, then post responses to it (`client.monitor(id).log(...)` or "
    "`dialogue-judge monitor log ID responses.jsonl`)."
)
SLICES = ["version", "system", "segment"]


def pick_monitor(monitors: list[dict[str, Any]]) -> dict[str, Any]:
    """The monitor of ``?monitor=`` (kept in step with the picker); a link to a monitor that does not exist says so
    and keeps its URL until another monitor is picked, as a bad ``?run=`` does."""
    ids = [str(m["id"]) for m in monitors]
    wanted = st.query_params.get("monitor")
    if wanted and wanted not in ids:
        st.error(f"Monitor `{wanted}` not found — it does not exist or was deleted. Pick a monitor below.", icon="🚫")
    elif wanted in ids and "mon_pick" not in st.session_state:
        st.session_state["mon_pick"] = wanted
    names = {str(m["id"]): f"{m['name']} · {m['id']}" for m in monitors}
    chosen = st.selectbox(
        "Monitor", ids, key="mon_pick", format_func=lambda i: names.get(i, i), on_change=_monitor_picked
    )
    if (not wanted or wanted in ids) and wanted != chosen:
        st.query_params["monitor"] = chosen
    return next(m for m in monitors if str(m["id"]) == chosen)


def _monitor_picked() -> None:
    st.query_params["monitor"] = str(st.session_state["mon_pick"])


def status_section(monitor: dict[str, Any]) -> None:
    status = monitor.get("status") or {}
    c1, c2, c3, c4, c5 = st.columns(5)
    c1.metric("Sampling", "paused" if status.get("state") == "paused_budget" else f"{monitor['sample_rate']:g}")
    c2.metric("Responses today", f"{int(status.get('responses_today') or 0):,}")
    c3.metric("Sampled today", f"{int(status.get('sampled_today') or 0):,}")
    budget = monitor.get("daily_budget_usd")
    c4.metric("Spent today", f"${float(status.get('spent_today_usd') or 0):.4f}", help=f"daily budget: {budget}")
    c5.metric("Judgments pending", f"{int(status.get('pending_judgments') or 0):,}")
    if status.get("state") == "paused_budget":
        st.warning(status.get("message") or "sampling paused by the daily budget", icon="⏸️")
    else:
        st.caption(status.get("message") or "")


def describe_alert(alert: dict[str, Any]) -> str:
    """One line: what the rule found, with its interval and sample."""
    evidence = alert.get("evidence") or {}
    slices = evidence.get("slices") or {}
    if alert.get("kind") == "floor":
        return (
            f"rule **{alert['rule']}**: mean {fmt(evidence.get('mean'))} below the floor {fmt(evidence.get('floor'))} "
            f"over {evidence.get('n')} verdicts"
        )
    if "by" in slices:
        what = f"{slices['by']} {slices.get('candidate')} is worse than {slices.get('baseline')}"
    else:
        what = "the current window is worse than the one before"
    level = float(evidence.get("confidence") or 0.95)
    return (
        f"rule **{alert['rule']}**: {what} by {fmt(evidence.get('difference'))} ({level:.0%} confidence sequence "
        f"{fmt(evidence.get('ci_low'))} to {fmt(evidence.get('ci_high'))}, {evidence.get('n')} pairs, decided after "
        f"{evidence.get('decided_at')})"
    )


def fmt(value: Any) -> str:
    return "–" if value is None else f"{float(value):.2f}"


def alert_banner(alerts: list[dict[str, Any]]) -> None:
    """Open alerts, at the top of the page."""
    for alert in alerts:
        if alert["status"] == "open":
            opened = alert["opened_at"][:16].replace("T", " ")
            st.warning(f"Open since {opened} UTC — {describe_alert(alert)}", icon="🚨")


def alerts_section(monitor: dict[str, Any], alerts: list[dict[str, Any]]) -> None:
    """The alert history with its evidence (judge_api/alerts.py), newest first."""
    st.subheader("Alerts")
    if not alerts:
        rules = ", ".join(str(r.get("name")) for r in monitor.get("alerts") or []) or "none"
        st.caption(f"No alert so far (rules: {rules}).")
        return
    history = pd.DataFrame(
        [
            {
                "status": a["status"],
                "rule": a["rule"],
                "opened_at": a["opened_at"],
                "resolved_at": a.get("resolved_at"),
                "difference": (a.get("evidence") or {}).get("difference", (a.get("evidence") or {}).get("mean")),
                "interval_low": (a.get("evidence") or {}).get("ci_low"),
                "interval_high": (a.get("evidence") or {}).get("ci_high"),
                "n": (a.get("evidence") or {}).get("n"),
                "p_value": (a.get("evidence") or {}).get("p_value"),
                "resolution": (a.get("resolution") or {}).get("reason"),
                "id": a["id"],
            }
            for a in alerts
        ]
    )
    widgets.table(history, "alerts", "mon_alerts_t")
    names = {str(a["id"]): f"{a['rule']} · {a['status']} · {a['opened_at'][:16]}" for a in alerts}
    chosen = st.selectbox("Evidence of", list(names), key="mon_alert_pick", format_func=lambda i: names[i])
    alert = next(a for a in alerts if str(a["id"]) == chosen)
    st.markdown(describe_alert(alert))
    worst = pd.DataFrame((alert.get("evidence") or {}).get("worst") or [])
    if not worst.empty:
        st.caption("The worst responses of the candidate slice when the alert opened")
        widgets.table(worst, "alert_worst", "mon_alert_worst_t")


def rubric_scales() -> dict[str, tuple[float, float]]:
    """Each rubric's score scale (best effort: the chart falls back to the data's range)."""
    listed = widgets.guard(api.rubrics, state.conn(), what="the rubrics", quiet=True) or []
    return {str(r["id"]): (float(r["scale"][0]), float(r["scale"][1])) for r in listed if r.get("scale")}


def alerting_slice(alerts: list[dict[str, Any]], slice_by: str) -> str | None:
    """The slice an open alert is about (its candidate), when the series is split the way the alert's rule is."""
    for alert in alerts:
        slices = (alert.get("evidence") or {}).get("slices") or {}
        if alert.get("status") == "open" and slices.get("by") == slice_by and slices.get("candidate") is not None:
            return str(slices["candidate"])
    return None


def too_small_text(rows: pd.DataFrame, slice_by: str) -> str:
    """Where the series has no interval: the buckets of fewer than 2 verdicts, named."""
    small = rows[rows["interval"] == charts.NO_INTERVAL]
    if small.empty:
        return ""
    named = [f"{s} at {t:%Y-%m-%d %H:%M} (n = {n})" for s, t, n in zip(small["slice"], small["bucket_start"],
                                                                      small["n"], strict=True)][:12]  # fmt: skip
    more = f" and {len(small) - len(named)} more" if len(small) > len(named) else ""
    return f"{charts.NO_INTERVAL.capitalize()} (hollow marks, {slice_by}): {'; '.join(named)}{more}."


def series_section(monitor: dict[str, Any], alerts: list[dict[str, Any]]) -> pd.DataFrame | None:
    c1, c2, c3, c4 = st.columns(4)
    bucket = c1.selectbox("Bucket", ["1h", "1d"], key="mon_bucket")
    slice_by = c2.selectbox("Split by", SLICES, key="mon_by")
    with c3:
        rubric = widgets.pick("Rubric", list(monitor.get("rubrics") or []), "mon_rubric", all_label="(all)")
    aspects = list(monitor.get("aspects") or [])
    aspect = c4.selectbox("Aspect", ["(all)", *aspects], key="mon_aspect") if aspects else None
    rows = widgets.guard(
        api.monitor_series,
        state.conn(),
        str(monitor["id"]),
        bucket,
        (slice_by,),
        rubric,
        None if aspect in (None, "(all)") else aspect,
        what="the series",
    )
    if rows is None:
        return None
    if rows.empty:
        widgets.empty(
            "No verdicts yet: responses sampled by this monitor appear here once the workers have judged them "
            f"(post some with `dialogue-judge monitor log {monitor['id']} responses.jsonl`)."
        )
        return None
    scales = rubric_scales()
    alerting = alerting_slice(alerts, slice_by)
    for (rubric_id, aspect_name, judge), group in rows.groupby(["rubric_id", "aspect", "judge"], sort=True):
        st.subheader(f"{rubric_id} · {aspect_name} · {charts.short_judge(judge)}")
        scale = scales.get(str(rubric_id))
        on = f" on the rubric's scale {scale[0]:g}–{scale[1]:g} (clipped to it)" if scale else ""
        flagged = f"; **{slice_by} {alerting}**, the one the open alert is about, in red" if alerting else ""
        st.caption(f"Mean verdict per bucket with its 95% t interval (band){on}, one line per {slice_by}{flagged}")
        key = f"mon_chart_{rubric_id}_{aspect_name}_{abs(hash(judge)) % 10_000}"
        widgets.chart(charts.series_chart(group, slice_by, scale=scale, alerting=alerting), key=key)
        note = too_small_text(charts.series_frame(group, slice_by, scale=scale), slice_by)
        if note:
            st.caption(note)
        if group["contradiction_rate"].notna().any():
            st.caption("Contradiction rate (share of the fact sheet contradicted, mean per response)")
            widgets.chart(charts.series_chart(group, slice_by, "contradiction_rate", alerting=alerting), key=f"{key}_c")
    shown = rows.assign(bucket_start=rows["bucket_start"].dt.strftime("%Y-%m-%d %H:%M"))
    widgets.table(shown.drop(columns=[s for s in SLICES if s != slice_by]), "monitor_series", "mon_series")
    return rows


def bucket_section(monitor: dict[str, Any], rows: pd.DataFrame) -> None:
    st.subheader("Sampled responses of a bucket")
    slice_by = str(st.session_state.get("mon_by") or "version")
    buckets = sorted({t.isoformat() for t in rows["bucket_start"]}, reverse=True)
    c1, c2 = st.columns(2)
    start = c1.selectbox("Bucket", buckets, key="mon_bucket_pick", format_func=lambda b: b[:16].replace("T", " "))
    values = sorted({str(v) for v in rows.loc[rows["bucket_start"].map(lambda t: t.isoformat()) == start, slice_by]
                     if v is not None and not pd.isna(v)})  # fmt: skip
    value = c2.selectbox(slice_by.capitalize(), ["(all)", *values], key="mon_slice_pick")
    filters = () if value == "(all)" else ((slice_by, value),)
    bucket = str(st.session_state.get("mon_bucket") or "1h")
    data = widgets.guard(
        api.bucket_responses, state.conn(), str(monitor["id"]), start, bucket, filters, what="the bucket's responses"
    )
    if data is None:
        return
    items = list(data.get("items") or [])
    if not items:
        widgets.empty("No sampled response in this bucket.")
        return
    table = pd.DataFrame(
        [
            {
                "response_id": i["response_id"],
                "ts": i["ts"],
                "system": i["system"],
                "version": i["version"],
                "segment": i.get("segment"),
                "verdicts": "; ".join(
                    f"{v['aspect']}={v['score'] if v['score'] is not None else v['status']}" for v in i["verdicts"]
                ),
            }
            for i in items
        ]
    )
    widgets.table(table, "bucket_responses", "mon_bucket_t")
    left, right = st.columns([3, 1])
    chosen = left.selectbox("Response", table["response_id"].tolist(), key="mon_response_pick")
    right.write("")
    if right.button("Open in explorer", key="mon_go") and chosen:
        state.select_run(str(data["run_id"]))
        st.session_state["ex_typed"] = chosen
        st.switch_page("views/explorer.py")
    if chosen:
        conversation_section(str(data["run_id"]), str(chosen))


def conversation_frame(item: dict[str, Any]) -> pd.DataFrame:
    """The dialogue a response was judged against, one row per turn (its session, speaker and text), the judged
    response last."""
    rows = [
        {"session": t.get("session"), "speaker": t.get("speaker"), "text": t.get("text")}
        for t in item.get("dialogue") or []
    ]
    last_session = rows[-1]["session"] if rows else None
    for system, text in (item.get("candidates") or {}).items():
        rows.append({"session": last_session, "speaker": f"{system} (judged)", "text": text})
    return pd.DataFrame(rows, columns=["session", "speaker", "text"])


def conversation_section(run_id: str, response_id: str) -> None:
    """The chosen response with the conversation it was judged against: memory or persona, then the turns session
    by session; a response rebuilt from OTLP traces says whether its history was complete."""
    item = widgets.guard(api.get_item, state.conn(), run_id, response_id, what="the response")
    if not item:
        return
    with st.expander(f"Conversation of `{response_id}`", expanded=True):
        # the production app's texts are shown as text: a system prompt is often Markdown (headings, lists) and
        # an image link in it would be fetched by the reviewer's browser
        if item.get("memory"):
            st.markdown("**Memory / instructions:**")
            st.text(str(item["memory"]))
        persona = item.get("persona") or {}
        if persona.get("bot") or persona.get("user"):
            bot, user = "; ".join(persona.get("bot") or []), "; ".join(persona.get("user") or [])
            st.markdown("**Persona:**")
            st.text(f"bot: {bot} · user: {user}")
        otlp = (item.get("meta") or {}).get("otlp") or {}
        if otlp.get("incomplete"):
            st.warning(str(otlp["incomplete"]), icon="⏳")
        elif otlp:
            st.text(
                f"rebuilt from OTLP traces: conversation {otlp.get('conversation_id')}, session {otlp.get('session')}"
            )
        widgets.table(conversation_frame(item), f"conversation_{response_id}", "mon_conversation_t")


def render() -> None:
    st.title("Monitors")
    monitors = widgets.guard(api.list_monitors, state.conn(), what="the monitors")
    if monitors is None:
        return
    if not monitors:
        widgets.empty(NO_MONITORS)
        return
    monitor = pick_monitor(monitors)
    status_section(monitor)
    alerts = widgets.guard(api.monitor_alerts, state.conn(), str(monitor["id"]), what="the alerts")
    alert_banner(alerts or [])
    rows = series_section(monitor, alerts or [])
    if rows is not None:
        bucket_section(monitor, rows)
    if alerts is not None:
        alerts_section(monitor, alerts)


render()
