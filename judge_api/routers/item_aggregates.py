"""A run's item-level aggregates for the dashboard (issue 39): ``GET /v1/runs/{id}/item-scores`` (single-mode scores
averaged over samples per item, system, aspect and judge) and ``GET /v1/runs/{id}/order-outcomes`` (each pairwise
key's outcome in both presentation orders, whether it flips, and the flip counts per pair and aspect). Grouped in the
database (judge_api/repository/item_aggregates.py) and paged with the filters applied by the API, so a page never
downloads the whole run."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Depends, Query, Request
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

router = APIRouter(tags=["runs"])

_CACHE: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
_CACHE_ENTRIES = 16
_CACHE_ROWS = 10_000
"""Aggregates computed in this process, keyed by the query and the run's state (its judgments' count and last write,
its ratings, and whether it is settled: ``report_cache.run_state``), so the next page of the same aggregate is
sliced, not grouped again; a write of any kind changes the state. Only answers of at most ``_CACHE_ROWS`` rows are
kept."""
_CACHE_LOCK = threading.Lock()


def _cached(
    key: tuple[Any, ...], session: Session, run_id: str, compute: Callable[[], Any], size: Callable[[Any], int]
) -> Any:
    """``compute()`` or the kept answer for ``key`` on the run's current state."""
    # a running run's answer kept within the settle window is computed once more after it (review r39f: a verdict
    # stamped earlier may commit later; report_cache's module docstring)
    full = (*key, report_cache.run_state(session, run_id, settle_s=get_settings().report_settle_s))
    with _CACHE_LOCK:
        if full in _CACHE:
            _CACHE.move_to_end(full)
            return _CACHE[full]
    value = compute()
    if size(value) <= _CACHE_ROWS:
        with _CACHE_LOCK:
            _CACHE[full] = value
            while len(_CACHE) > _CACHE_ENTRIES:
                _CACHE.popitem(last=False)
    return value


_FILTERS = frozenset({"offset", "limit", "rated", "item_id", "system", "aspect", "judge"})
ITEM_SCORE_PARAMS = _FILTERS
ORDER_OUTCOME_PARAMS = _FILTERS | {"flipped"}


MAX_AGGREGATE_PAGE = 5000
"""The largest page of aggregates (a larger ``limit`` is a 422 naming it)."""

_LIMIT = Query(1000, ge=1, le=MAX_AGGREGATE_PAGE, description=f"page size (at most {MAX_AGGREGATE_PAGE})")
_OFFSET = Query(0, ge=0, le=MAX_OFFSET, description="rows skipped")


def aggregate_filters(
    item_id: str | None = None, system: str | None = None, aspect: str | None = None, judge: str | None = None
) -> dict[str, str | None]:
    """The filters both aggregate routes take (None: not filtered)."""
    return {"item_id": item_id, "system": system, "aspect": aspect, "judge": judge}


@router.get("/v1/runs/{run_id}/item-scores")
def item_scores(
    request: Request,
    run_id: str,
    offset: int = _OFFSET,
    limit: int = _LIMIT,
    rated: bool = Query(False, description="only the items with a human score rating"),
    filters: dict[str, str | None] = Depends(aggregate_filters),
    principal: Principal = Depends(require("read")),
    session: Session = Depends(get_session),
    app: Settings = Depends(app_settings),
) -> dict[str, Any]:
    """Done single-mode scores averaged over samples: ``{total, offset, limit, items}``, one item per (item_id,
    system, aspect, judge) in that order, with ``score`` (the mean), ``scale_min`` / ``scale_max`` and
    ``n_samples``."""
    run = run_or_404(session, run_id, principal)
    if not rated and filters.get("item_id") is None:  # every group is read, then paged: bounded by ratings or an item
        frame_readable(run, app)
    refuse_unknown_query(request, ITEM_SCORE_PARAMS)
    key = ("item-scores", run_id, tuple(sorted(filters.items())), rated)
    rows = _cached(key, session, run_id, lambda: item_aggregates.item_scores(session, run_id, filters, rated), len)
    return {"total": len(rows), "offset": offset, "limit": limit, "items": rows[offset : offset + limit]}


@router.get("/v1/runs/{run_id}/order-outcomes")
def order_outcomes(
    request: Request,
    run_id: str,
    offset: int = _OFFSET,
    limit: int = _LIMIT,
    flipped: bool = Query(False, description="only the keys whose verdict flips with the presentation order"),
    rated: bool = Query(False, description="only the items with a human preference rating"),
    filters: dict[str, str | None] = Depends(aggregate_filters),
    principal: Principal = Depends(require("read")),
    session: Session = Depends(get_session),
) -> dict[str, Any]:
    """Pairwise keys (item_id, system_a, system_b, aspect, judge, sorted) with ``outcome_ab`` / ``outcome_ba`` (over
    samples: the sign of the mean of win 1, tie 0, loss -1), ``preference_ab`` / ``preference_ba`` (means) and
    ``flipped``; ``by_pair``: per (system_a, system_b, aspect) the keys judged in both orders (``n``) and the flips;
    ``n_both`` / ``n_flipped`` their sums. ``system`` filters on system_a."""
    run_or_404(session, run_id, principal)
    refuse_unknown_query(request, ORDER_OUTCOME_PARAMS)
    key = ("order-outcomes", run_id, tuple(sorted(filters.items())), rated, flipped, offset, limit)
    result = _cached(
        key,
        session,
        run_id,
        lambda: item_aggregates.order_outcomes_page(
            session, run_id, filters, rated=rated, flipped=flipped, offset=offset, limit=limit
        ),
        lambda page: len(page.rows),
    )
    return {
        "total": result.total,
        "offset": offset,
        "limit": limit,
        "items": result.rows,
        "n_keys": result.n_keys,
        "n_both": result.n_both,
        "n_flipped": result.n_flipped,
        "by_pair": result.by_pair,
    }
