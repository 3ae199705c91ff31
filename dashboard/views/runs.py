"""Runs: every run with status, progress, judges, rubrics, cost and tokens; the selected run's live progress with
its throughput and an ETA; start a run from a JSONL file."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pandas as pd
import streamlit as st

from dashboard import api, charts, state, widgets
from dashboard.pace import PACE_WINDOW_S, duration, finished_count, pace

REFRESH_S = 2.0
MODES = ["single", "pairwise"]


def runs_table(items: list[dict[str, Any]]) -> pd.DataFrame:
    rows = [
        {
            "id": r.get("id"),
            "name": r.get("name"),
            "status": r.get("status"),
            "outcome": outcome_label(r.get("outcome")),
            "progress": float(r.get("progress") or 0.0),
            "judgments": r.get("n_judgments"),
            "items": r.get("n_items"),
            "failed": (r.get("counts") or {}).get("failed", 0),
            "unparseable": (r.get("counts") or {}).get("unparseable", 0),
            "judges": ", ".join(r.get("judges") or []),
            "rubrics": ", ".join(r.get("rubrics") or []),
            "mode": ", ".join(r.get("mode") or []),
            "cost_usd": r.get("cost_usd"),
            "input_tokens": r.get("input_tokens"),
            "output_tokens": r.get("output_tokens"),
            "cached": r.get("cached"),
            "economy": economy_cell(r.get("economy")),
            "batches": batches_cell(r.get("batches")),
            "created_at": r.get("created_at"),
            "finished_at": r.get("finished_at"),
        }
        for r in items
    ]
    return pd.DataFrame(rows)


def batches_cell(batches: dict[str, Any] | None) -> str:
    """Batch runs in the run list: provider batches open / done and the requests sent in them."""
    if not batches:
        return ""
    return f"{batches.get('open', 0)} open · {batches.get('done', 0)} done · {batches.get('requests', 0):,} requests"


OUTCOME_LABELS = {"ok": "🟢 ok", "partial": "🟠 partial", "failed": "🔴 failed"}


def outcome_label(outcome: str | None) -> str:
    """A finished run's outcome (API ``outcome``) with its colour; empty while the run is unfinished."""
    return OUTCOME_LABELS.get(str(outcome), "") if outcome else ""


def outcome_banner(run: dict[str, Any]) -> None:
    """The finished run's outcome in words and colour: a run whose judge answered nothing usable must not look like
    one that worked."""
    outcome = run.get("outcome")
    counts = run.get("counts") or {}
    bad = f"{counts.get('unparseable', 0)} unparseable, {counts.get('failed', 0)} failed"
    if outcome == "failed":
        st.error(
            f"Failed: nothing usable came back ({bad}, {counts.get('cancelled', 0)} cancelled of "
            f"{run.get('n_judgments', 0)} judgments). Fix the judge, then retry the unparseable ones past the "
            f"cache: `dialogue-judge retry {run.get('id')} --unparseable`."
        )
    elif outcome == "partial":
        st.warning(f"Partial: {counts.get('done', 0)} judgments done, {bad}.")
    elif outcome == "ok":
        st.success(f"OK: {counts.get('done', 0)} judgments done, none failed or unparseable.")


def economy_cell(economy: dict[str, Any] | None) -> str:
    """Adaptive runs in the run list: calls used against the fixed plan and why planning stopped."""
    if not economy:
        return ""
    parts = []
    pairing = economy.get("pairing") or {}
    if pairing:
        share = pairing.get("share")
        used = f"{pairing.get('calls', 0):,}/{pairing.get('round_robin_calls', 0):,} calls"
        if share is not None:
            used += f" ({100 * float(share):.0f}%)"
        parts.append(f"{used} · {pairing.get('stop') or 'planning'}")
    samples = economy.get("samples") or {}
    if samples:
        parts.append(f"samples −{100 * float(samples.get('saving') or 0):.0f}%")
    return " · ".join(parts) or ("adaptive: planning" if not economy.get("finished") else "adaptive")


def economy_section(economy: dict[str, Any]) -> None:
    """The run's adaptive economy: calls used vs round robin / fixed samples, the stopping reason, the ranking
    with its intervals."""
    st.markdown("#### Adaptive economy")
    pairing = economy.get("pairing") or {}
    if pairing:
        cols = st.columns(4)
        cols[0].metric("Pairwise calls", f"{pairing.get('calls', 0):,}")
        cols[1].metric("Round robin would take", f"{pairing.get('round_robin_calls', 0):,}")
        share = pairing.get("share")
        cols[2].metric("Share used", "-" if share is None else f"{100 * float(share):.1f}%")
        cols[3].metric("Stopped", str(pairing.get("stop") or "not yet"))
        if pairing.get("stop_message"):
            st.caption(f"Stopping reason: {pairing['stop_message']} (confidence {pairing.get('confidence')}).")
        gaps = {g["upper"]: g for g in pairing.get("gaps") or []}
        ranking = pd.DataFrame(
            [
                {
                    "rank": r.get("rank"),
                    "system": r.get("system"),
                    "strength": r.get("strength"),
                    "interval low": r.get("ci_low"),
                    "interval high": r.get("ci_high"),
                    "comparisons": r.get("comparisons"),
                    "vs next": ""
                    if r.get("system") not in gaps
                    else ("separated" if gaps[r["system"]].get("separated") else "open"),
                }
                for r in pairing.get("ranking") or []
            ]
        )
        if not ranking.empty:
            widgets.dataframe(ranking, key="adaptive_ranking")
    samples = economy.get("samples") or {}
    if samples:
        sample_cols = st.columns(3)
        sample_cols[0].metric("Samples drawn", f"{samples.get('samples', 0):,}")
        sample_cols[1].metric(f"Fixed count ({samples.get('fixed')} each)", f"{samples.get('fixed_samples', 0):,}")
        sample_cols[2].metric("Saving", f"{100 * float(samples.get('saving') or 0):.1f}%")
        histogram = samples.get("histogram") or {}
        if histogram:
            st.caption("Samples per judgment: " + ", ".join(f"{k}: {v}" for k, v in histogram.items()))


def compact(n: Any) -> str:
    """12345 -> 12.3k, 1234567 -> 1.23M."""
    value = float(n or 0)
    for unit, size in (("M", 1e6), ("k", 1e3)):
        if abs(value) >= size:
            return f"{value / size:.3g}{unit}"
    return f"{value:.0f}"


# Streamlit draws progress bars in the theme's primary colour, red by default: every finished run's bar read as a
# failure. Progress is drawn neutral; how a finished run went is its outcome column.
COLUMNS = {
    "progress": st.column_config.ProgressColumn(
        "progress", min_value=0.0, max_value=1.0, format="percent", color="blue"
    ),
    "cost_usd": st.column_config.NumberColumn("cost (USD)", format="$%.4f"),
}


def run_list() -> None:
    conn = state.conn()
    total_page = widgets.guard(api.list_runs, conn, 0, 1, what="the run list")
    if total_page is None:
        return
    total = int(total_page.get("total") or 0)
    if not total:
        widgets.empty(widgets.NO_RUNS)
        return
    offset = widgets.pager(total, "runs", page_size=50)
    page = widgets.guard(api.list_runs, conn, offset, 50, what="the run list")
    if page is None:
        return
    items = list(page.get("items") or [])
    df = runs_table(items)
    busy = [r for r in items if state.unfinished(r)]
    cols = st.columns(4)
    cols[0].metric("Runs", f"{total:,}")
    cols[1].metric("Running", len(busy))
    cols[2].metric("Judgments (this page)", f"{int(df['judgments'].fillna(0).sum()):,}")
    cols[3].metric("Cost (this page)", f"${float(df['cost_usd'].fillna(0).sum()):.4f}")
    widgets.dataframe(df, key="runs_df", column_config=COLUMNS)
    widgets.csv_button(df, "runs", "runs")
    ids = [str(r["id"]) for r in items]
    chosen = st.selectbox(
        "Open run",
        ids,
        index=None,
        placeholder="pick a run to select it everywhere",
        format_func=lambda i: state.run_label(next(r for r in items if r["id"] == i)),
    )
    if chosen and chosen != state.current_run_id():
        state.select_run(chosen)
        st.rerun()


def observe(run: dict[str, Any], now: float) -> list[tuple[float, int]]:
    """Add this refresh's count to the run's history in the page session (the window and a little more kept)."""
    histories: dict[str, list[tuple[float, int]]] = st.session_state.setdefault("run_pace", {})
    history = [(t, n) for t, n in histories.get(str(run.get("id")), []) if now - t <= 2 * PACE_WINDOW_S]
    history.append((now, finished_count(run)))
    histories[str(run.get("id"))] = history
    return history


def generation_section(generation: dict[str, Any]) -> None:
    """A run with systems: the generation stage's progress (issue 26.3), before and beside judging."""
    total = int(generation.get("total") or 0)
    settled = int(generation.get("generated") or 0) + int(generation.get("failed") or 0)
    st.progress(
        settled / total if total else 1.0,
        text=f"Generation: {settled:,} of {total:,} responses settled — {int(generation.get('generated') or 0):,} "
        f"generated, {int(generation.get('failed') or 0):,} failed, {int(generation.get('pending') or 0):,} pending, "
        f"{int(generation.get('running') or 0):,} running · {int(generation.get('items_released') or 0):,} items "
        "released to judging",
    )
    failures = generation.get("failures") or []
    if failures:
        with st.expander(f"Failed generations ({len(failures)})"):
            widgets.dataframe(pd.DataFrame(failures), key="run_generation_failures")


def run_detail(run: dict[str, Any]) -> None:
    st.subheader(f"Run {run.get('name') or ''} `{run.get('id')}`")
    counts = run.get("counts") or {}
    cols = st.columns(5)
    status = str(run.get("status"))
    cols[0].metric("Status", f"{status} · {run['outcome']}" if run.get("outcome") else status)
    cols[1].metric("Progress", f"{100 * float(run.get('progress') or 0):.1f}%")
    cols[2].metric(
        "Done / failed / unparseable",
        f"{counts.get('done', 0)} / {counts.get('failed', 0)} / {counts.get('unparseable', 0)}",
    )
    cols[3].metric("Tokens in / out", f"{compact(run.get('input_tokens'))} / {compact(run.get('output_tokens'))}")
    cols[4].metric("Cost", f"${float(run.get('cost_usd') or 0):.4f}")
    outcome_banner(run)
    if run.get("generation"):
        generation_section(run["generation"])
    now = time.time()
    rate, eta = pace(run, observe(run, now) if state.unfinished(run) else [], now)
    left, right = st.columns(2)
    left.metric("Throughput", f"{rate:.2f} judgments/s" if rate is not None else "-")
    right.metric("ETA", "finished" if eta == 0 else duration(eta))
    widgets.chart(charts.progress_figure(counts), key="run_progress")
    st.caption(
        f"Judges: {', '.join(run.get('judges') or [])} · rubrics: {', '.join(run.get('rubrics') or [])} · "
        f"provider calls {run.get('provider_calls', 0)}, cached {run.get('cached', 0)}"
    )
    if run.get("economy"):
        if run.get("message"):
            st.info(str(run["message"]))
        economy_section(run["economy"])
    elif run.get("message"):
        st.warning(str(run["message"]))
    failed = int(counts.get("failed") or 0) + int(counts.get("unparseable") or 0)
    if failed and st.button(f"Retry {failed} failed / unparseable judgments (past the cache)", key="retry"):
        result = widgets.guard(api.retry_run, state.conn(), str(run["id"]), True, what="the retry")
        if result is not None:
            st.success(f"Requeued {result.get('requeued', 0)} judgments.")


def live_section() -> None:
    """The run list and the selected run; refreshes itself every few seconds while a run is unfinished."""
    first = widgets.guard(api.list_runs, state.conn(), 0, 50, what="the run list", quiet=True)
    busy = any(state.unfinished(r) for r in (first or {}).get("items") or [])
    run_id = state.current_run_id()

    @st.fragment(run_every=REFRESH_S if busy else None)
    def live() -> None:
        run_list()
        if run_id:
            run = widgets.guard(api.get_run, state.conn(), run_id, what=f"run {run_id}")
            if run is not None:
                run_detail(run)
        now = widgets.guard(api.list_runs, state.conn(), 0, 50, what="the run list", quiet=True)
        if busy and now is not None and not any(state.unfinished(r) for r in now.get("items") or []):
            st.rerun()  # everything finished: a full rerun stops the auto-refresh

    live()
    if busy:
        st.caption(f"Live: refreshing every {REFRESH_S:.0f} s while a run is unfinished.")


def upload_form() -> None:
    """Start a run from a JSONL file. The form sends one Idempotency-Key until it starts a run (a second click of the
    same form is answered with that run, not a second one), then is cleared; the confirmation, with a link to the
    run, stays above it."""
    ss = st.session_state
    generation = int(ss.setdefault("upload_generation", 0))
    idempotency_key = str(ss.setdefault("upload_key", str(uuid.uuid4())))
    started = ss.get("upload_started")
    if started:
        st.success(
            f"Started run `{started.get('id')}`: {started.get('n_items')} items, {started.get('n_judgments')} "
            f"judgments — [open it](runs?run={started.get('id')}) (selected below)."
        )
    with st.expander("Start a run from a JSONL file", expanded=False):
        rubric_list = widgets.guard(api.rubrics, state.conn(), what="the rubrics", quiet=True) or []
        ids = [str(r.get("id")) for r in rubric_list]
        k = f"upload_{generation}"
        with st.form(f"new_run_{generation}"):
            upload = st.file_uploader("Items (JSONL: one item per line)", type=["jsonl", "json", "txt"], key=f"{k}_f")
            name = st.text_input("Name", key=f"{k}_name")
            rubrics = st.multiselect(
                "Rubrics", ids, default=[i for i in ids if i == "rsum-single"][:1], key=f"{k}_rubrics"
            )
            judges = st.text_area("Judges (one per line)", placeholder="openai:gpt-4o-mini", key=f"{k}_judges")
            modes = st.multiselect("Modes", MODES, default=["single"], key=f"{k}_modes")
            left, right = st.columns(2)
            baseline = left.text_input("Baseline system (pairwise, optional)", key=f"{k}_baseline")
            orders = right.selectbox("Pairwise orders", ["both", "random"], key=f"{k}_orders")
            submitted = st.form_submit_button("Start run", type="primary")
        if not submitted:
            return
        judge_list = [j.strip() for j in judges.splitlines() if j.strip()]
        if upload is None or not rubrics or not judge_list or not modes:
            st.error("A run needs a JSONL file, at least one rubric, one judge and one mode.")
            return
        created = widgets.guard(
            api.create_run_jsonl,
            state.conn(),
            upload.getvalue(),
            rubrics=rubrics,
            judges=judge_list,
            modes=modes,
            name=name or upload.name.rsplit(".", 1)[0],
            baseline=baseline or None,
            orders=orders,
            idempotency_key=idempotency_key,
            what="the new run",
        )
        if created is not None:
            ss["upload_started"] = created
            ss["upload_generation"] = generation + 1  # a fresh, empty form
            ss["upload_key"] = str(uuid.uuid4())  # and a new key for the next run it starts
            state.select_run(str(created.get("id")))
            st.rerun()


def render() -> None:
    st.title("Runs")
    upload_form()
    live_section()


render()
