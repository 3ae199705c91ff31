"""Cached access to the service's HTTP API.

Every read goes through ``dialogue_judge.client.ApiClient`` and is cached with ``st.cache_data`` keyed by
the connection (URL, key) and the arguments. Reads that change while a run is going (run list, one run) have
short TTLs; expensive ones (report, the judgments frame) are keyed by a *version* string that changes
whenever the run's counts change, so a finished run is fetched once and a running one is refreshed as it
progresses. Big runs: the judgments frame comes in one CSV download (``/judgments.csv``); tables of
judgments are read one page at a time from ``/judgments`` with the filters applied by the API.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple
from urllib.parse import quote

import pandas as pd
import streamlit as st

from dashboard import analysis
from dialogue_judge.client import ApiClient, ApiError

__all__ = ["ApiError", "Conn"]

FRAME_TEXT_COLUMNS = (
    "run_id",
    "item_id",
    "mode",
    "system_a",
    "system_b",
    "aspect",
    "judge",
    "rubric_id",
    "rubric_version",
    "order",
    "status",
    "outcome",
    "cached",
)
FRAME_NUMERIC_COLUMNS = (
    "judgment_id",
    "sample_index",
    "score",
    "preference",
    "len_a",
    "len_b",
    "input_tokens",
    "output_tokens",
    "latency_ms",
    "cost_usd",
    "scale_min",
    "scale_max",
    "confidence",
)
RATING_COLUMNS = (
    "item_id",
    "system",
    "system_b",
    "aspect",
    "rater",
    "kind",
    "value",
    "scale_min",
    "scale_max",
)
PAGE_LIMIT = 1000  # the API's largest page


class Conn(NamedTuple):
    """Where the API is; hashable, so it keys the caches."""

    url: str
    key: str | None = None


def seg(value: Any) -> str:
    """An id as one path segment: a link's ``?run=../keys`` must not walk the dashboard's key to another route."""
    text = quote(str(value), safe="")
    return text.replace(".", "%2E") if text.strip(".") == "" else text


def make_client(conn: Conn, timeout: float = 120.0) -> ApiClient:
    """One client per call (tests replace this to inject a fake transport)."""
    return ApiClient(conn.url, conn.key or None, timeout=timeout)


def _get(conn: Conn, path: str, **params: Any) -> Any:
    client = make_client(conn)
    try:
        return client.get(path, **params)
    finally:
        client.close()


def _dict(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ApiError(0, f"unexpected answer for {what}: expected a JSON object, got {type(value).__name__}")
    return value


# -- runs ------------------------------------------------------------------------------------------------
FIRST_RUNS = 100
"""The newest runs are read in one request per draw of a page (kept 2 s): the sidebar's list, the pages' run counts
and pickers and the selected run's summary are sliced from it. Every ``/v1/runs`` answer counts each listed run's
judgments (0.3-0.9 s for a 1M-judgment run), so each differently sized page asked apart cost that again."""


@st.cache_data(ttl=2, show_spinner=False)
def _runs_page(conn: Conn, offset: int, limit: int) -> dict[str, Any]:
    return _dict(_get(conn, "/v1/runs", offset=offset, limit=limit), "/v1/runs")


def list_runs(conn: Conn, offset: int = 0, limit: int = 100) -> dict[str, Any]:
    """One page of runs (newest first, as the API orders them): ``{total, offset, limit, items}``; a page within the
    newest ``FIRST_RUNS`` is a slice of their one cached answer."""
    if offset + limit > FIRST_RUNS:
        return _runs_page(conn, offset, limit)
    first = _runs_page(conn, 0, FIRST_RUNS)
    items = list(first.get("items") or [])[offset : offset + limit]
    return {**first, "offset": offset, "limit": limit, "items": items}


@st.cache_data(ttl=2, show_spinner=False)
def _get_run(conn: Conn, run_id: str) -> dict[str, Any]:
    return _dict(_get(conn, f"/v1/runs/{seg(run_id)}"), "the run")


def get_run(conn: Conn, run_id: str) -> dict[str, Any]:
    """The run's summary: its entry in the newest runs' cached list (the same summary), else ``/v1/runs/{id}``."""
    for run in _runs_page(conn, 0, FIRST_RUNS).get("items") or []:
        if isinstance(run, dict) and str(run.get("id")) == str(run_id):
            return run
    return _get_run(conn, run_id)


def run_version(run: Mapping[str, Any]) -> str:
    """Changes whenever the run's judgments change state (keys the report and frame caches)."""
    counts = run.get("counts") or {}
    return "|".join(
        [str(run.get("status")), str(run.get("finished_at")), *(f"{k}={counts[k]}" for k in sorted(counts))]
    )


@st.cache_data(ttl=600, show_spinner=False)
def rubrics(conn: Conn) -> list[dict[str, Any]]:
    data = _get(conn, "/v1/rubrics")
    return list(data) if isinstance(data, list) else []


@st.cache_data(ttl=3600, max_entries=64, show_spinner=False)
def rubric_version(conn: Conn, rubric_id: str, version: str) -> dict[str, Any]:
    """One rubric version's config and template text (a version never changes: cached long)."""
    return _dict(_get(conn, f"/v1/rubrics/{seg(rubric_id)}/versions/{seg(version)}"), "the rubric version")


# -- report ----------------------------------------------------------------------------------------------
@st.cache_data(ttl=300, max_entries=32, show_spinner="Computing the report…")
def report(conn: Conn, run_id: str, n_boot: int | None, version: str, ratings_rev: int = 0) -> dict[str, Any]:
    """The run's report (``/report``; ``n_boot`` None: the API's default, as the CLI asks); ``version`` /
    ``ratings_rev`` only key the cache."""
    del version, ratings_rev
    return _dict(_get(conn, f"/v1/runs/{seg(run_id)}/report", n_boot=n_boot), "the report")


# -- judgments -------------------------------------------------------------------------------------------
def parse_judgments_csv(text: str) -> pd.DataFrame:
    """The ``/judgments.csv`` body as a frame with stable types (ids stay strings, numbers are floats)."""
    if not text.strip():
        return pd.DataFrame(columns=[*FRAME_TEXT_COLUMNS, *FRAME_NUMERIC_COLUMNS])
    header = text.split("\n", 1)[0].strip().split(",")
    numeric = [c for c in header if c in FRAME_NUMERIC_COLUMNS]
    frame = pd.read_csv(
        io.StringIO(text),
        dtype={c: str for c in header if c not in numeric},
        keep_default_na=False,
        na_values={c: [""] for c in numeric},
    )
    for column in numeric:
        frame[column] = pd.to_numeric(frame[column], errors="coerce").astype("float64")
    for column in ("system_b", "order", "outcome"):
        if column in frame:
            frame[column] = frame[column].replace("", None)
    if "cached" in frame:
        frame["cached"] = frame["cached"].str.lower().isin(["true", "1"])
    return frame


@st.cache_data(ttl=600, max_entries=4, show_spinner="Loading judgments…")
def judgments_frame(conn: Conn, run_id: str, version: str) -> pd.DataFrame:
    """Every judgment of a run, one row each (data-contract columns), from one CSV download."""
    del version
    client = make_client(conn, timeout=300.0)
    try:
        text = client.request("GET", f"/v1/runs/{seg(run_id)}/judgments.csv")
    finally:
        client.close()
    if not isinstance(text, str):
        raise ApiError(0, "unexpected answer for judgments.csv: expected CSV text")
    return parse_judgments_csv(text)


def clean_filters(filters: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in sorted(filters.items()) if v not in (None, "", "(all)")}


@st.cache_data(ttl=600, max_entries=8, show_spinner=False)
def judge_item_scores(conn: Conn, run_id: str, version: str) -> pd.DataFrame:
    """Single-mode item scores (samples averaged) of a run, built once per run version."""
    return analysis.judge_item_scores(judgments_frame(conn, run_id, version))


@st.cache_data(ttl=600, max_entries=8, show_spinner=False)
def order_outcomes(conn: Conn, run_id: str, version: str) -> pd.DataFrame:
    """Pairwise keys with both presentation orders' outcomes, built once per run version."""
    return analysis.order_outcomes(judgments_frame(conn, run_id, version))


@st.cache_data(ttl=600, max_entries=8, show_spinner=False)
def score_deltas(
    conn: Conn, run_id: str, baseline: str, version: str, baseline_version: str, n_boot: int
) -> pd.DataFrame:
    """``/score-deltas``: per (system, aspect) the candidate (``run_id``) - baseline mean on the shared items with
    its paired bootstrap CI, computed by the API from both runs' item means (neither run is downloaded)."""
    del version, baseline_version
    body = _dict(
        _get(conn, f"/v1/runs/{seg(run_id)}/score-deltas", baseline=baseline, n_boot=n_boot), "the score deltas"
    )
    frame = pd.DataFrame(list(body.get("items") or []), columns=analysis.DELTA_COLUMNS)
    for column in ("baseline", "candidate", "delta", "ci_low", "ci_high"):
        frame[column] = pd.to_numeric(frame[column], errors="coerce").astype("float64")
    for column in ("n_items", "n_worse", "n_better"):
        frame[column] = frame[column].astype("int64")
    return frame


class WorseItems(NamedTuple):
    """One page of the (item, system, aspect) keys that scored lower in the candidate run, and how many there are."""

    total: int
    page: pd.DataFrame


@st.cache_data(ttl=600, max_entries=32, show_spinner=False)
def worse_items(
    conn: Conn, run_id: str, baseline: str, version: str, baseline_version: str, offset: int = 0, limit: int = 50
) -> WorseItems:
    """``/worse-items``, one page: biggest drop first."""
    del version, baseline_version
    body = _dict(
        _get(conn, f"/v1/runs/{seg(run_id)}/worse-items", baseline=baseline, offset=offset, limit=limit),
        "the items that got worse",
    )
    frame = pd.DataFrame(list(body.get("items") or []), columns=analysis.WORSE_COLUMNS)
    for column in ("baseline", "candidate", "delta"):
        frame[column] = pd.to_numeric(frame[column], errors="coerce").astype("float64")
    return WorseItems(int(body.get("total") or 0), frame)


def every_worse_item(conn: Conn, run_id: str, baseline: str) -> pd.DataFrame:
    """Every worse (item, system, aspect), in pages of the API's largest size (the table's CSV download)."""
    rows, _ = _every_page(conn, f"/v1/runs/{seg(run_id)}/worse-items", "the items that got worse", baseline=baseline)
    return pd.DataFrame(rows, columns=analysis.WORSE_COLUMNS)


AGGREGATE_PAGE = 5000  # the API's largest page of item-level aggregates


def _every_page(conn: Conn, path: str, what: str, **params: Any) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Every row of a paged aggregate route, and its first page (which carries the route's summary fields)."""
    rows: list[dict[str, Any]] = []
    first: dict[str, Any] = {}
    offset = 0
    while True:
        page = _dict(_get(conn, path, offset=offset, limit=AGGREGATE_PAGE, **params), what)
        first = first or page
        items = list(page.get("items") or [])
        rows.extend(items)
        offset += AGGREGATE_PAGE
        if not items or offset >= int(page.get("total") or 0):
            return rows, first


@st.cache_data(ttl=600, max_entries=8, show_spinner=False)
def rated_item_scores(conn: Conn, run_id: str, version: str, ratings_rev: int = 0) -> pd.DataFrame:
    """Item scores (``judge_item_scores``' rows) of the items people rated, grouped by the API
    (``/item-scores?rated=true``): the judge-vs-human pages join them with the ratings, without the whole run."""
    del version, ratings_rev
    rows, _ = _every_page(conn, f"/v1/runs/{seg(run_id)}/item-scores", "the item scores", rated="true")
    frame = pd.DataFrame(rows, columns=analysis.JUDGE_ITEM_COLUMNS)
    for column in ("score", "scale_min", "scale_max"):
        frame[column] = pd.to_numeric(frame[column], errors="coerce").astype("float64")
    frame["n_samples"] = frame["n_samples"].astype("int64")
    return frame


def _orders_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=analysis.ORDER_COLUMNS)
    for column in ("preference_ab", "preference_ba"):
        frame[column] = pd.to_numeric(frame[column], errors="coerce").astype("float64")
    frame["flipped"] = frame["flipped"].astype(bool)
    return frame


@st.cache_data(ttl=600, max_entries=8, show_spinner=False)
def rated_order_outcomes(conn: Conn, run_id: str, version: str, ratings_rev: int = 0) -> pd.DataFrame:
    """``order_outcomes``' rows of the items with a human preference vote (``/order-outcomes?rated=true``)."""
    del version, ratings_rev
    rows, _ = _every_page(conn, f"/v1/runs/{seg(run_id)}/order-outcomes", "the order outcomes", rated="true")
    return _orders_frame(rows)


class OrderFlips(NamedTuple):
    """One page of the keys whose verdict flips with the presentation order, and the run's flip counts."""

    total: int
    page: pd.DataFrame
    n_both: int
    n_flipped: int
    by_pair: list[dict[str, Any]]


@st.cache_data(ttl=600, max_entries=32, show_spinner=False)
def order_flips(conn: Conn, run_id: str, version: str, offset: int = 0, limit: int = 50) -> OrderFlips:
    """``/order-outcomes?flipped=true``, one page: the Order flips tab's table, metric and chart."""
    del version
    page = _dict(
        _get(conn, f"/v1/runs/{seg(run_id)}/order-outcomes", flipped="true", offset=offset, limit=limit),
        "the order outcomes",
    )
    return OrderFlips(
        int(page.get("total") or 0),
        _orders_frame(list(page.get("items") or [])),
        int(page.get("n_both") or 0),
        int(page.get("n_flipped") or 0),
        list(page.get("by_pair") or []),
    )


@st.cache_data(ttl=10, max_entries=64, show_spinner=False)
def judgments_page(
    conn: Conn, run_id: str, offset: int, limit: int, filters: tuple[tuple[str, Any], ...] = ()
) -> dict[str, Any]:
    """One page of ``/judgments`` (full rows: explanation, raw output, error) with API-side filters."""
    return _dict(
        _get(conn, f"/v1/runs/{seg(run_id)}/judgments", offset=offset, limit=min(limit, PAGE_LIMIT), **dict(filters)),
        "the judgments",
    )


@st.cache_data(ttl=30, max_entries=64, show_spinner=False)
def item_judgments(conn: Conn, run_id: str, item_id: str, version: str) -> list[dict[str, Any]]:
    """Every judgment of one item (paging until the total is read)."""
    del version
    rows: list[dict[str, Any]] = []
    offset = 0
    while True:
        page = _dict(
            _get(conn, f"/v1/runs/{seg(run_id)}/judgments", offset=offset, limit=PAGE_LIMIT, item_id=item_id),
            "the judgments",
        )
        items = list(page.get("items") or [])
        rows.extend(items)
        offset += PAGE_LIMIT
        if not items or offset >= int(page.get("total") or 0):
            return rows


FACT_COLUMNS = (
    "judgment_id",
    "item_id",
    "system",
    "judge",
    "rubric_id",
    "aspect",
    "sample_index",
    "fact_id",
    "text",
    "source",
    "label",
    "evidence",
)


@st.cache_data(ttl=60, max_entries=32, show_spinner=False)
def fact_labels(conn: Conn, run_id: str, version: str, filters: tuple[tuple[str, Any], ...] = ()) -> pd.DataFrame:
    """The run's fact-check labels (``/facts``, every page) with API-side filters (label, system, source,
    item_id); ``version`` only keys the cache."""
    del version
    rows: list[dict[str, Any]] = []
    offset = 0
    while True:
        page = _dict(
            _get(conn, f"/v1/runs/{seg(run_id)}/facts", offset=offset, limit=PAGE_LIMIT, **dict(filters)),
            "the fact labels",
        )
        items = list(page.get("items") or [])
        rows.extend(items)
        offset += PAGE_LIMIT
        if not items or offset >= int(page.get("total") or 0):
            return pd.DataFrame(rows, columns=list(FACT_COLUMNS))


# -- items -----------------------------------------------------------------------------------------------
@st.cache_data(ttl=600, max_entries=64, show_spinner=False)
def items_page(conn: Conn, run_id: str, offset: int = 0, limit: int = 100) -> dict[str, Any]:
    return _dict(_get(conn, f"/v1/runs/{seg(run_id)}/items", offset=offset, limit=limit), "the items")


@st.cache_data(ttl=600, max_entries=256, show_spinner=False)
def get_item(conn: Conn, run_id: str, item_id: str) -> dict[str, Any]:
    """One item's payload; ``{}`` when the run has no such item."""
    data = _dict(_get(conn, f"/v1/runs/{seg(run_id)}/items", item_id=[item_id], limit=1), "the item")
    items = data.get("items") or []
    return dict(items[0]) if items else {}


# -- human ratings ---------------------------------------------------------------------------------------
@st.cache_data(ttl=30, max_entries=16, show_spinner=False)
def ratings(conn: Conn, run_id: str, ratings_rev: int = 0, item_id: str | None = None) -> pd.DataFrame:
    """The run's human ratings as a frame (columns of the data contract's human ratings frame); with ``item_id``
    only that item's (the API filters: a run's thousands are not downloaded for one item)."""
    del ratings_rev
    params = {} if item_id is None else {"item_id": item_id}
    data = _dict(_get(conn, f"/v1/runs/{seg(run_id)}/human-ratings", **params), "the human ratings")
    frame = pd.DataFrame(list(data.get("items") or []))
    for column in RATING_COLUMNS:
        if column not in frame:
            frame[column] = pd.Series(dtype="float64" if column in ("value", "scale_min", "scale_max") else object)
    return frame


@st.cache_data(ttl=30, max_entries=16, show_spinner=False)
def label_queue(conn: Conn, run_id: str, ratings_rev: int = 0) -> dict[str, Any]:
    """The run's label queue with what is labeled so far (``GET /label-queue``); ``{}`` when it has none (404)."""
    del ratings_rev
    try:
        return _dict(_get(conn, f"/v1/runs/{run_id}/label-queue"), "the label queue")
    except ApiError as exc:
        if exc.status_code == 404:
            return {}
        raise


# -- writes (never cached) -------------------------------------------------------------------------------
def post_ratings(conn: Conn, run_id: str, rows: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    client = make_client(conn)
    try:
        result = client.post(f"/v1/runs/{seg(run_id)}/human-ratings", {"ratings": [dict(r) for r in rows]})
    finally:
        client.close()
    ratings.clear()
    report.clear()  # the agreement section changes for every session, not just this one
    label_queue.clear()
    return _dict(result, "the rating upload")


def agreement(conn: Conn, run_id: str) -> dict[str, Any] | None:
    """``/agreement`` now (uncached); None while the run has no human ratings (HTTP 409 saying so; the 409 of a run
    too large to read, ``DJ_MAX_REPORT_JUDGMENTS``, is raised as the error it is: review r56b)."""
    try:
        return _dict(_get(conn, f"/v1/runs/{seg(run_id)}/agreement"), "the agreement")
    except ApiError as exc:
        if exc.status_code == 409 and "no human ratings" in str(exc):
            return None
        raise


def create_run_jsonl(
    conn: Conn,
    body: bytes,
    *,
    rubrics: list[str],
    judges: list[str],
    modes: list[str],
    name: str | None = None,
    baseline: str | None = None,
    orders: str = "both",
    idempotency_key: str | None = None,
) -> dict[str, Any]:
    """Start a run from a JSONL upload; the form's ``idempotency_key`` makes a second click of the same form answer
    with the run the first one started."""
    params: list[tuple[str, str]] = [("rubric", r) for r in rubrics] + [("judge", j) for j in judges]
    params += [("mode", m) for m in modes] + [("orders", orders)]
    if name:
        params.append(("name", name))
    if baseline:
        params.append(("baseline", baseline))
    client = make_client(conn)
    try:  # with an Idempotency-Key, retried on connection errors and 5xx: one click, at most one run
        result = client.create_run_jsonl(body, params, idempotency_key)
    finally:
        client.close()
    _runs_page.clear()
    return _dict(result, "the new run")


def retry_run(conn: Conn, run_id: str, unparseable: bool = False) -> dict[str, Any]:
    client = make_client(conn)
    try:
        result = client.post(f"/v1/runs/{seg(run_id)}/retry", {"unparseable": True} if unparseable else {})
    finally:
        client.close()
    _runs_page.clear()
    _get_run.clear()
    return _dict(result, "the retry")


def clear_caches() -> None:
    st.cache_data.clear()


# -- monitors (docs/monitoring.md) -----------------------------------------------------------------------
@st.cache_data(ttl=5, show_spinner=False)
def list_monitors(conn: Conn) -> list[dict[str, Any]]:
    """The project's monitors with their status today (newest first)."""
    page = _dict(_get(conn, "/v1/monitors", limit=500), "/v1/monitors")
    return list(page.get("items") or [])


@st.cache_data(ttl=30, max_entries=32, show_spinner="Loading the series…")
def monitor_series(
    conn: Conn, monitor_id: str, bucket: str, by: tuple[str, ...], rubric: str | None, aspect: str | None
) -> pd.DataFrame:
    """A monitor's series rows (``/series``), bucket_start as UTC timestamps."""
    data = _dict(
        _get(conn, f"/v1/monitors/{seg(monitor_id)}/series", bucket=bucket, by=list(by), rubric=rubric, aspect=aspect),
        "the series",
    )
    frame = pd.DataFrame(list(data.get("rows") or []))
    if not frame.empty:
        frame["bucket_start"] = pd.to_datetime(frame["bucket_start"], utc=True)
    return frame


@st.cache_data(ttl=5, max_entries=32, show_spinner=False)
def monitor_alerts(conn: Conn, monitor_id: str) -> list[dict[str, Any]]:
    """A monitor's alerts, newest first, with their evidence (``GET /v1/monitors/{id}/alerts``)."""
    page = _dict(_get(conn, f"/v1/monitors/{seg(monitor_id)}/alerts", limit=200), "the alerts")
    return list(page.get("items") or [])


@st.cache_data(ttl=30, max_entries=32, show_spinner=False)
def bucket_responses(
    conn: Conn, monitor_id: str, start: str, bucket: str, filters: tuple[tuple[str, str], ...] = ()
) -> dict[str, Any]:
    """The sampled responses of one bucket with their verdicts (``GET /v1/monitors/{id}/responses``)."""
    return _dict(
        _get(conn, f"/v1/monitors/{seg(monitor_id)}/responses", start=start, bucket=bucket, **dict(filters)),
        "the bucket's responses",
    )
