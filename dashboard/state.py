"""Session state shared by the pages: API connection, sign-in, the selected run, cache revisions.

The API's URL comes from ``DJ_API_URL`` (default http://127.0.0.1:8000) and nothing else: a visitor cannot point the
dashboard elsewhere, so no key ever goes to a URL a visitor typed (issue 42, finding 8). The key is the dashboard's
own ``DJ_API_KEY`` when the deployment configures one (then the dashboard must sit where only trusted people reach
it: loopback, or behind the reverse proxy's auth, docs/dashboard.md); otherwise a visitor signs in with their own
API key, kept in their session only and sent only to that URL. The selected run is kept in the session (and in the
``?run=`` query parameter for links).
"""

from __future__ import annotations

import os
from typing import Any

import streamlit as st

from dashboard import api, widgets

DEFAULT_API_URL = "http://127.0.0.1:8000"
RUN_LIST_LIMIT = api.FIRST_RUNS  # the sidebar lists the newest runs: one cached answer
N_BOOT_CHOICES: tuple[int | None, ...] = (None, 0, 200, 500, 2000)  # None: the report's own default
FINISHED = ("done", "budget_exhausted", "cancelled", "failed")


def configured_url() -> str:
    """The API's URL, from the deployment's configuration only (never from the session)."""
    return (os.environ.get("DJ_API_URL") or "").strip().rstrip("/") or DEFAULT_API_URL


def configured_key() -> str | None:
    """The dashboard's own key (``DJ_API_KEY``), if the deployment gives it one."""
    return (os.environ.get("DJ_API_KEY") or "").strip() or None


def init() -> None:
    ss = st.session_state
    ss.setdefault("api_key", "")  # a visitor's own key (sign-in); unused when DJ_API_KEY is configured
    ss.setdefault("n_boot", None)
    ss.setdefault("ratings_rev", 0)
    if "run_id" not in ss:
        ss["run_id"] = st.query_params.get("run")


def conn() -> api.Conn:
    init()
    key = configured_key() or str(st.session_state["api_key"]).strip() or None
    return api.Conn(configured_url(), key)


def signed_in() -> bool:
    """True when the dashboard may show pages: it has a key (its own or the visitor's), or the API needs none.
    Otherwise a sign-in form is shown (the visitor's API key, kept in their session) and False returned."""
    init()
    if conn().key is not None:
        return True
    try:
        api.list_runs(conn(), 0, 1)
        return True  # auth is off (the embedded default): the API answers without a key
    except api.ApiError as exc:
        if exc.status_code not in (401, 403):
            return True  # unreachable or failing: the pages say so
    st.title("Sign in")
    st.caption(f"The API at {configured_url()} needs an API key (read scope). It is kept in this browser session only.")
    with st.form("sign_in"):
        typed = st.text_input("API key", type="password")
        if st.form_submit_button("Sign in") and typed.strip():
            st.session_state["api_key"] = typed.strip()
            st.rerun()
    return False


def n_boot() -> int | None:
    """The report's bootstrap replicates; None (the default) leaves them to the API, so the intervals on every page
    are those of ``dialogue-judge report``."""
    value = st.session_state.get("n_boot")
    return None if value is None else int(value)


def ratings_rev() -> int:
    return int(st.session_state.get("ratings_rev", 0))


def bump_ratings() -> None:
    """After posting ratings: the next report / ratings read goes to the API."""
    st.session_state["ratings_rev"] = ratings_rev() + 1


def select_run(run_id: str | None) -> None:
    """Select a run on the next script run (call before ``st.rerun()``)."""
    st.session_state["_select_next"] = run_id


OUTCOME_MARKS = {"failed": "🔴 failed", "partial": "🟠 partial"}


def run_label(run: dict[str, Any]) -> str:
    """How a run is named in every picker: a finished run that failed or came back partial says so, never only
    "done"."""
    name = run.get("name") or "unnamed"
    label = f"{name} · {run.get('id')} · {run.get('status')}"
    mark = OUTCOME_MARKS.get(str(run.get("outcome")))
    return f"{label} · {mark}" if mark else label


def sidebar() -> None:
    """Connection settings, report options, refresh, and the run selector."""
    init()
    ss = st.session_state
    with st.sidebar:
        with st.expander("API connection", expanded=False):
            st.caption(f"API: {configured_url()} (DJ_API_URL, set by the deployment)")
            if (
                configured_key() is None
                and ss.get("api_key")
                and st.button("Sign out", help="Forget the API key this session signed in with")
            ):
                ss["api_key"] = ""
                api.clear_caches()
                st.rerun()
            st.selectbox(
                "Bootstrap resamples (CIs)",
                N_BOOT_CHOICES,
                key="n_boot",
                format_func=lambda n: "as `dialogue-judge report`" if n is None else str(n),
                help="n_boot of the report: by default the report's own (the CLI's intervals); more is steadier",
            )
            if st.button("Refresh data", help="Forget cached API answers"):
                api.clear_caches()
        try:
            runs = api.list_runs(conn(), 0, RUN_LIST_LIMIT)
        except Exception as exc:  # the page shows the full error; the sidebar says which of the three it is
            st.caption(connection_problem(exc, conn().url))
            return
        items = list(runs.get("items") or [])
        if "_select_next" in ss:
            ss["run_id"] = ss.pop("_select_next")
        ids = [str(r["id"]) for r in items]
        if ss.get("run_id") and ss["run_id"] not in ids:
            ids.insert(0, str(ss["run_id"]))
        if not ids:
            st.caption("No runs yet.")
            return
        labels = {str(r["id"]): run_label(r) for r in items}
        if ss.get("run_id") not in ids:
            ss["run_id"] = ids[0]
        ss["_run_widget"] = ss["run_id"]
        st.selectbox("Run", ids, key="_run_widget", format_func=lambda i: labels.get(i, i), on_change=_run_changed)
        if int(runs.get("total") or 0) > len(items):
            st.caption(f"Showing the newest {len(items)} of {runs.get('total')} runs; open older ones on Runs.")
        if st.query_params.get("run") != ss["run_id"]:
            st.query_params["run"] = ss["run_id"]


def connection_problem(exc: Exception, url: str) -> str:
    """The sidebar's one line on why the run list did not load: a rejected key is not an unreachable API."""
    if isinstance(exc, api.ApiError) and exc.status_code in (401, 403):
        return f"The API at {url} refused the API key (HTTP {exc.status_code}) — check DJ_API_KEY or the key above."
    if isinstance(exc, api.ApiError) and exc.status_code == 0:
        return f"API unreachable at {url}"
    return f"The API at {url} did not give the run list: {exc}"


def _run_changed() -> None:
    st.session_state["run_id"] = st.session_state["_run_widget"]


def current_run_id() -> str | None:
    value = st.session_state.get("run_id")
    return str(value) if value else None


def require_run() -> dict[str, Any]:
    """The selected run's summary; otherwise an empty state or an error and ``st.stop()``."""
    runs = widgets.guard(api.list_runs, conn(), 0, 1, what="the run list")
    if runs is None:
        st.stop()
    run_id = current_run_id()
    if not run_id and not runs.get("total"):
        widgets.empty(widgets.NO_RUNS)
        st.stop()
    if not run_id:
        widgets.empty("Select a run in the sidebar.")
        st.stop()
    run = widgets.guard(api.get_run, conn(), run_id, what=f"run {run_id}")
    if run is None:
        st.stop()
    return run


def require_report(run: dict[str, Any]) -> dict[str, Any]:
    """The selected run's report (cached by the run's progress and the ratings revision) or ``st.stop()``."""
    report = widgets.guard(
        api.report, conn(), str(run["id"]), n_boot(), api.run_version(run), ratings_rev(), what="the report"
    )
    if report is None:
        st.stop()
    return report


def rubrics_with_parser(run: dict[str, Any], parser: str) -> list[str]:
    """The run's rubrics whose parser is ``parser`` (``fact_check``, ``memory_audit``); the rubric list is best
    effort: unreachable, none."""
    listed = widgets.guard(api.rubrics, conn(), what="the rubrics", quiet=True) or []
    parsers = {str(r.get("id")): r.get("parser") for r in listed}
    return [str(r) for r in run.get("rubrics") or [] if parsers.get(str(r)) == parser]


def unfinished(run: dict[str, Any]) -> bool:
    return str(run.get("status")) not in FINISHED
