"""Streamlit building blocks the pages share: guarded API calls, empty states, paged downloadable tables."""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any, Literal, TypeVar

import altair as alt
import pandas as pd
import streamlit as st

from dialogue_judge.client import ApiError

T = TypeVar("T")
NO_RUNS = (
    "No runs yet — submit one with `dialogue-judge submit items.jsonl --judge ...` or upload a JSONL file "
    "on the **Runs** page."
)
PAGE_SIZE = 100
REFERENCE_RUBRIC = "reference-metrics"  # judge_api.reference_metrics.REFERENCE_RUBRIC (the dashboard reads the API)
AltairChart = alt.Chart | alt.LayerChart | alt.FacetChart | alt.ConcatChart | alt.HConcatChart | alt.VConcatChart
# a table's CSV is built with the page up to this many rows, past it only when its button is clicked: 8,000 rows cost
# ~0.15 s of the page's script (issue 39), a thousand a few ms
INLINE_CSV_ROWS = 1_000


def guard(fn: Callable[..., T], *args: Any, what: str, quiet: bool = False, **kwargs: Any) -> T | None:
    """Call ``fn``; on failure show one clear ``st.error`` (never a traceback) and return None."""
    try:
        return fn(*args, **kwargs)
    except ApiError as exc:
        message = f"Could not load {what} from the API: {exc.message}"
        if exc.status_code == 401 or exc.status_code == 403:
            message += " — check the API key (DJ_API_KEY, or sign out and in again in the sidebar)."
        elif exc.status_code == 0:
            message += " — is the service running? Start it with `dialogue-judge up`, or set DJ_API_URL."
    except Exception as exc:  # a malformed answer must not become a traceback on the page
        message = f"Could not load {what}: {type(exc).__name__}: {exc}"
    if quiet:
        st.caption(message)
    else:
        st.error(message, icon="🚫")
    return None


def empty(message: str) -> None:
    """An empty state that says what to do next."""
    st.info(message, icon="ℹ️")


def no_verdicts_text(
    report: dict[str, Any] | None, mode: str | None, none_message: str, rubrics: Collection[str] | None = None
) -> str:
    """``none_message`` when the run has no ``mode`` judgments (None: of any mode; with ``rubrics``: no judgments of
    those rubrics); when it has some but none gave a verdict, how many and why (unparseable, failed, not done yet),
    so "none exist" is never said of judgments that all failed."""
    counted = (report or {}).get("counts") or {}
    if rubrics is not None:
        groups = {k: v for k, v in (counted.get("by_rubric") or {}).items() if k in rubrics}
    else:
        groups = {k: dict(v or {}) for k, v in (counted.get("by_mode") or {}).items() if mode is None or k == mode}
        # the reference metrics are single-mode rows of no judge: their F1 / BLEU are not the judge's verdicts
        metrics = (counted.get("by_rubric") or {}).get(REFERENCE_RUBRIC) or {}
        if metrics and "single" in groups:
            groups["single"] = {s: int(n) - int(metrics.get(s, 0)) for s, n in groups["single"].items()}
    counts: dict[str, int] = {}
    for statuses in groups.values():
        for status, n in (statuses or {}).items():
            counts[status] = counts.get(status, 0) + int(n)
    total = sum(counts.values())
    if total == 0 or counts.get("done", 0) > 0:
        return none_message
    parts = ", ".join(
        f"{counts[s]:,} {s}" for s in ("unparseable", "failed", "pending", "running", "cancelled") if counts.get(s)
    )
    unfinished = counts.get("pending", 0) + counts.get("running", 0)
    kind = ", ".join(sorted(groups)) if rubrics is not None else mode
    judgments = f"{total:,} {kind + ' ' if kind else ''}judgment{'s' if total != 1 else ''}"
    if unfinished == total:
        return f"This run has {judgments}, none done yet ({parts}) — wait for them on the **Runs** page."
    run_id = ((report or {}).get("run") or {}).get("id") or "RUN_ID"
    return (
        f"This run has {judgments}, but none gave a verdict ({parts}) — see the **Item explorer** for the judge's "
        f"replies and errors; once the judge is fixed, ask again past the cache: "
        f"`dialogue-judge retry {run_id} --unparseable`."
    )


def no_verdicts(
    report: dict[str, Any] | None, mode: str | None, none_message: str, rubrics: Collection[str] | None = None
) -> None:
    """The empty state of a section that shows ``mode`` verdicts (see :func:`no_verdicts_text`)."""
    empty(no_verdicts_text(report, mode, none_message, rubrics))


def pager(total: int, key: str, page_size: int = PAGE_SIZE) -> int:
    """A page picker when ``total`` exceeds one page; returns the offset of the chosen page."""
    pages = max(1, -(-total // page_size))
    if pages == 1:
        return 0
    left, right = st.columns([1, 3])
    # no value=: the first page is the default ("min"), so a kept page (keep) is not a value set twice
    page = left.number_input("Page", min_value=1, max_value=pages, step=1, key=f"{key}_page")
    first = (int(page) - 1) * page_size
    right.caption(f"rows {first + 1}–{min(total, first + page_size)} of {total:,}")
    return first


def linked_tabs(labels: list[str], default: str, key: str) -> dict[str, Any]:
    """Tabs of which only the open one runs its code (``container.open``): a tab's API reads and charts wait for a
    click (issue 39, a million judgments). The open tab is in the link (``?<key>=<label>``): a link opens that tab,
    and a click writes it. The dashboard writes the parameter itself rather than binding the tabs to it
    (``bind="query-params"``): ``st.switch_page`` clears the query parameters, which Streamlit refuses for a bound
    one. Until the reader picks a tab (a click or a link) the page opens on ``default`` (the tab with something to
    show, which moves as ratings and verdicts arrive); the tab they picked stays open whenever this page has it, across
    runs and changes of the tab set (a new set of labels is a new widget to Streamlit, so the tab is set every run)."""
    ss = st.session_state
    picked_key, shown_key = f"_{key}_picked", f"_{key}_shown"
    wanted = st.query_params.get(key)
    current = ss.get(key)
    if wanted in labels and wanted != ss.get(picked_key):
        ss[picked_key] = wanted  # a link
    elif current in labels and current != ss.get(shown_key):
        ss[picked_key] = current  # a click: the tab shown is not the one this function set
    picked = ss.get(picked_key)
    shown = picked if picked in labels else default
    ss[key] = ss[shown_key] = shown
    if picked in labels:
        if wanted != picked:
            st.query_params[key] = str(picked)
    elif wanted is not None:
        del st.query_params[key]  # a tab this page does not have (any more): the link would not open it
    containers = st.tabs(labels, key=key, on_change="rerun")
    return dict(zip(labels, containers, strict=True))


def keep(*keys: str) -> None:
    """Keep these widgets' values while they are not drawn (a closed tab's picker, its table's page): Streamlit drops
    the value of a widget a run does not draw, unless the run sets it itself."""
    ss = st.session_state
    for key in keys:
        if key in ss:
            ss[key] = ss[key]


def csv_button(df: pd.DataFrame, name: str, key: str) -> None:
    if len(df) <= INLINE_CSV_ROWS:
        data: Any = df.to_csv(index=False).encode()
    else:

        def data() -> bytes:  # deferred: built only when clicked
            return df.to_csv(index=False).encode()

    st.download_button(
        "Download CSV",
        data,
        file_name=f"{name}.csv",
        mime="text/csv",
        key=f"{key}_csv",
        icon=":material/download:",
    )


def number_config(df: pd.DataFrame) -> dict[str, Any]:
    """How ``table`` shows float columns: two decimals, p-values in three significant digits."""
    return {
        c: st.column_config.NumberColumn(format="%.3g" if c.endswith("_p") else "%.2f")
        for c in df.columns
        if pd.api.types.is_float_dtype(df[c])
    }


def table(
    df: pd.DataFrame,
    name: str,
    key: str,
    *,
    page_size: int = PAGE_SIZE,
    column_config: dict[str, Any] | None = None,
    height: int | Literal["auto"] = "auto",
) -> None:
    """A dataframe shown one page at a time, with the whole table downloadable as CSV."""
    if df.empty:
        st.caption("No rows.")
        return
    offset = pager(len(df), key, page_size)
    config = number_config(df)
    config.update(column_config or {})
    dataframe(df.iloc[offset : offset + page_size], key=f"{key}_df", column_config=config, height=height)
    csv_button(df, name, key)


NOT_APPLICABLE = "n/a"


def dataframe(
    df: pd.DataFrame,
    *,
    key: str,
    column_config: dict[str, Any] | None = None,
    height: int | Literal["auto"] = "auto",
) -> None:
    """Every table of the dashboard is drawn here: a value that does not apply (``system_b`` of a single judgment,
    ``finished_at`` of a running run, a missing number) reads "n/a" where Streamlit would write "None", and the
    data keeps its types (numbers sort as numbers; the CSV download keeps empty cells)."""
    st.dataframe(df, hide_index=True, column_config=column_config, height=height, key=key, placeholder=NOT_APPLICABLE)


def chart(figure: AltairChart, key: str, *, stretch: bool = True) -> None:
    """Render an Altair chart (full width unless ``stretch`` is False). The dashboard draws Altair only: a Plotly
    figure would make the browser load plotly.js (megabytes) for its page."""
    st.altair_chart(figure, key=key, width="stretch" if stretch else "content")


def pick(label: str, options: list[str], key: str, *, all_label: str | None = None) -> str | None:
    """A selectbox that is skipped when there is one option (returns it) and None when there is none."""
    if not options:
        return None
    choices = ([all_label] if all_label else []) + options
    if len(choices) == 1:
        return choices[0]
    value = st.selectbox(label, choices, key=key)
    return None if value == all_label else value


def dialogue(item: dict[str, Any]) -> None:
    """An item's dialogue as a chat, sessions separated."""
    session = None
    for turn in item.get("dialogue") or []:
        if turn.get("session") is not None and turn.get("session") != session:
            session = turn.get("session")
            st.caption(f"──── session {session} ────")
        with st.chat_message("user" if turn.get("speaker") == "user" else "assistant"):
            st.markdown(str(turn.get("text", "")))


def pickers(specs: list[tuple[str, list[str], str, str | None]]) -> list[str | None]:
    """Several ``pick`` selectors (label, options, key, all_label) side by side, left-aligned; a picker with a
    single choice takes no space."""
    shown = [len(options) + (1 if all_label else 0) > 1 for _, options, _, all_label in specs]
    cols = iter(st.columns(max(3, sum(shown))))
    values: list[str | None] = []
    for (label, options, key, all_label), visible in zip(specs, shown, strict=True):
        if visible:
            with next(cols):
                values.append(pick(label, options, key, all_label=all_label))
        else:
            values.append(pick(label, options, key, all_label=all_label))
    return values
