"""Two runs of the same items compared, for the dashboard's Compare runs page (issue 39):
``GET /v1/runs/{id}/score-deltas?baseline=...`` (per system and aspect, the candidate - baseline mean on the shared
items with a paired bootstrap CI over items) and ``GET /v1/runs/{id}/worse-items?baseline=...`` (the (item, system,
aspect) keys that scored lower, biggest drop first, paged). ``{id}`` is the candidate run.

Each run's scores are summed per (item, system, aspect, judge) by the database (judge_api/repository/item_aggregates.py)
and averaged and bootstrapped by ``judge_api.stats.compare``: the page never downloads either run. The item means of
a run and each comparison are kept in this process, keyed by the runs' states (``report_cache.run_state``), so the
next page of worse items or the same comparison again is not computed again, and any write is seen."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import pandas as pd
from fastapi import APIRouter, Depends, HTTPException, Query, Request
from sqlalchemy.orm import Session

from judge_api.auth import Principal
from judge_api.config import Settings, get_settings
from judge_api.deps import (
    MAX_OFFSET,
    app_settings,
    frame_readable,
    get_session,
    refuse_unknown_query,
    require,
    run_or_404,
)
from judge_api.repository import item_aggregates, report_cache
from judge_api.stats import compare
from judge_api.stats.bootstrap import REPORT_N_BOOT

router = APIRouter(tags=["runs"])

MAX_COMPARE_N_BOOT = 5000
MAX_WORSE_PAGE = 5000
"""The largest page of worse items (a larger ``limit`` is a 422 naming it)."""

_CACHE: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
_CACHE_ENTRIES = 12
_CACHE_LOCK = threading.Lock()
WAIT_S = 120.0
"""How long a request waits for the same comparison another request is computing (a cold one at 1M: ~25-30 s)."""
_COMPUTING: dict[tuple[Any, ...], _Gate] = {}
"""One lock per key being computed: a second request for the same comparison (a page drawn again while the first
draw's request is still running) waits for the first answer instead of computing it beside it on the same cores."""


class _Gate:
    """One comparison's computation: a lock taken by the request computing it and the requests that hold or await
    it (the gate is dropped when the last of them leaves, so a request arriving after a failed computation waits
    for the one computing again instead of computing beside it: review r39g)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.users = 0


def _cached(key: tuple[Any, ...], compute: Callable[[], Any]) -> Any:
    """``compute()`` or the answer kept for ``key`` (which holds the runs' states); computed once at a time. A request
    waiting for another's computation waits at most ``WAIT_S`` and then answers 503 with ``Retry-After``."""
    with _CACHE_LOCK:
        if key in _CACHE:
            _CACHE.move_to_end(key)
            return _CACHE[key]
        gate = _COMPUTING.setdefault(key, _Gate())
        gate.users += 1
    try:
        if not gate.lock.acquire(timeout=WAIT_S):
            raise HTTPException(
                503, "the same comparison is being computed; ask again shortly", headers={"Retry-After": "5"}
            )
        try:
            with _CACHE_LOCK:
                if key in _CACHE:
                    return _CACHE[key]
            value = compute()
            with _CACHE_LOCK:
                _CACHE[key] = value
                while len(_CACHE) > _CACHE_ENTRIES:
                    _CACHE.popitem(last=False)
            return value
        finally:
            gate.lock.release()
    finally:
        with _CACHE_LOCK:
            gate.users -= 1
            if gate.users == 0 and _COMPUTING.get(key) is gate:
                del _COMPUTING[key]


def clear_cache() -> None:
    with _CACHE_LOCK:
        _CACHE.clear()


def _means(session: Session, run_id: str, state: str) -> pd.DataFrame:
    return _cached(
        ("means", run_id, state),
        lambda: compare.item_means(compare.sums_frame(item_aggregates.judge_score_sums(session, run_id))),
    )


def _pair(
    session: Session,
    run_id: str,
    baseline: str | None,
    principal: Principal,
    request: Request,
    known: frozenset[str],
    settings: Settings,
) -> tuple[tuple[str, str], pd.DataFrame, pd.DataFrame]:
    """Both runs' states and item means: 404 for a run the caller cannot read, before anything about the query is
    said (another project's run id answers as a missing one: it is checked before ``baseline`` is required); 422
    for an unknown or repeated parameter, a missing baseline, or both runs the same."""
    run = run_or_404(session, run_id, principal)
    _refuse_query(request, known)
    if baseline is None:
        raise HTTPException(422, [{"loc": ["query", "baseline"], "msg": "Field required", "type": "missing"}])
    if baseline == run_id:
        raise HTTPException(
            422,
            [{"loc": ["query", "baseline"], "msg": "the baseline must be another run", "type": "value_error"}],
        )
    # every (item, system, aspect, judge) group of both runs is read: one a judgment in a monitor's run
    base_run = run_or_404(session, baseline, principal)
    frame_readable(run, settings)
    frame_readable(base_run, settings)
    settle_s = get_settings().report_settle_s  # a comparison kept within a run's settle window: computed again after
    states = (
        report_cache.run_state(session, baseline, settle_s=settle_s),
        report_cache.run_state(session, run_id, settle_s=settle_s),
    )
    # no pooled connection held while waiting for another request's computation (review r39g): each is taken again
    # only to read a run's sums
    session.commit()
    base = _means(session, baseline, states[0])
    session.commit()
    cand = _means(session, run_id, states[1])
    session.commit()
    return states, base, cand


def _records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """JSON rows: NaN and missing values as null."""
    return frame.astype(object).where(frame.notna(), None).to_dict("records")


BASELINE = Query(None, min_length=1, max_length=32, description="the baseline run's id (required)")


DELTA_PARAMS = frozenset({"baseline", "n_boot", "seed", "ci"})
WORSE_PARAMS = frozenset({"baseline", "offset", "limit"})


def _refuse_query(request: Request, known: frozenset[str]) -> None:
    """422 for a query parameter the route does not know, or one given twice (the last would be taken silently)."""
    refuse_unknown_query(request, known)
    twice = sorted(name for name in known if len(request.query_params.getlist(name)) > 1)
    if twice:
        raise HTTPException(
            422,
            [{"loc": ["query", n], "msg": "given more than once", "type": "value_error"} for n in twice],
        )


@router.get("/v1/runs/{run_id}/score-deltas")
def score_deltas(
    request: Request,
    run_id: str,
    baseline: str | None = BASELINE,
    n_boot: int = Query(REPORT_N_BOOT, ge=0, le=MAX_COMPARE_N_BOOT, description="bootstrap resamples over items"),
    seed: int = Query(0, ge=0, le=2**32 - 1),
    ci: float = Query(0.95, gt=0.5, lt=1.0, description="the confidence level of the intervals"),
    principal: Principal = Depends(require("read")),
    session: Session = Depends(get_session),
    app: Settings = Depends(app_settings),
) -> dict[str, Any]:
    """Per (system, aspect), in that order: ``n_items`` scored by both runs, the ``baseline`` and ``candidate`` means
    on them, ``delta`` with its paired bootstrap CI over items (``ci_low`` / ``ci_high``, null under two items or
    with ``n_boot`` 0), ``n_worse`` / ``n_better``. A judge's score of an item is the mean over samples; an item's
    score the mean over judges."""
    states, base, cand = _pair(session, run_id, baseline, principal, request, DELTA_PARAMS, app)
    key = ("deltas", baseline, run_id, states, n_boot, seed, ci)
    deltas = _cached(key, lambda: compare.score_deltas(base, cand, n_boot=n_boot, seed=seed, ci=ci))
    return {"run_id": run_id, "baseline": baseline, "n_boot": n_boot, "seed": seed, "ci": ci, "items": _records(deltas)}


@router.get("/v1/runs/{run_id}/worse-items")
def worse_items(
    request: Request,
    run_id: str,
    baseline: str | None = BASELINE,
    offset: int = Query(0, ge=0, le=MAX_OFFSET, description="rows skipped"),
    limit: int = Query(50, ge=1, le=MAX_WORSE_PAGE, description=f"page size (at most {MAX_WORSE_PAGE})"),
    principal: Principal = Depends(require("read")),
    session: Session = Depends(get_session),
    app: Settings = Depends(app_settings),
) -> dict[str, Any]:
    """``{total, offset, limit, items}``: the (item_id, system, aspect) keys whose score is lower in this run than
    in the baseline, with both scores and ``delta``, biggest drop first (then by item)."""
    states, base, cand = _pair(session, run_id, baseline, principal, request, WORSE_PARAMS, app)
    worse = _cached(("worse", baseline, run_id, states), lambda: compare.worse_items(base, cand))
    return {
        "run_id": run_id,
        "baseline": baseline,
        "total": len(worse),
        "offset": offset,
        "limit": limit,
        "items": _records(worse.iloc[offset : offset + limit]),
    }
