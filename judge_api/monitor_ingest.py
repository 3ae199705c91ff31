"""The one ingestion path of monitors' responses (docs/monitoring.md): a batch of validated responses posted to a
monitor, each stored once per id, a deterministic sample (by the id's SHA-256) planned as items and pending judgments
of the monitor's internal run, the daily budget pausing the sampling. ``POST /v1/monitors/{id}/responses``
(routers/monitors.py) and the OTLP receiver (routers/otlp.py, judge_api/otlp/) both hand their responses here, and
the sweeper the OTLP responses that waited for their earlier turns.

``ingest`` works in the caller's transaction and does not commit; after the commit the caller publishes
``Ingested.judgment_ids`` (``publish``) and counts their expected cost (``Ingested.after_commit``).
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any

from sqlalchemy.orm import Session

from judge_api import queue
from judge_api.config import Settings
from judge_api.db import get_engine, session_scope
from judge_api.errors import field_error
from judge_api.models import Monitor, utcnow
from judge_api.planning import PlanError, plan_run, run_rubrics
from judge_api.pricing import load_prices
from judge_api.repository import monitors as store
from judge_api.rubrics import get_registry
from judge_api.schemas import Item, JudgeOptions, PanelOptions, RunCreate
from judge_api.schemas.monitors import MonitorResponseIn

REGISTRY_MAX_AGE_S = 1.0  # ingestion looks at the rubric folders at most once a second (judge_api.rubrics)


# -- sampling ----------------------------------------------------------------------------------------------------


def sample_point(monitor_id: str, response_id: str) -> float:
    """The response's uniform draw in [0, 1): the first 8 bytes of SHA-256(``<monitor id>:<response id>``) over
    2**64. A response is sampled when it is below the sample rate: the same id always gets the same answer (a
    retry is never sampled anew), and raising the rate samples a superset."""
    digest = hashlib.sha256(f"{monitor_id}:{response_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def is_sampled(monitor_id: str, response_id: str, rate: float) -> bool:
    return sample_point(monitor_id, response_id) < rate


def run_request(config: dict[str, Any], name: str, items: Sequence[Item]) -> RunCreate:
    """The run request a monitor's sampled responses are planned with (single mode, no reference metrics, no
    panel: one verdict per response, rubric, aspect and judge)."""
    return RunCreate(
        name=name,
        items=list(items),
        rubrics=config["rubrics"],
        judges=config["judges"],
        mode=["single"],
        aspects=config.get("aspects"),
        options=JudgeOptions.model_validate(config.get("options") or {}),
        metrics=[],
        panel=PanelOptions(enabled=False),
    )


# -- spend -------------------------------------------------------------------------------------------------------

SPEND_TTL_S = 2.0
_spend: dict[tuple[str, str], tuple[float, date, store.Spend]] = {}  # (database, monitor) -> (read at, day, spend)
_spend_lock = threading.Lock()


def spent_today(session: Session, monitor: Monitor, now: datetime, *, fresh: bool = False) -> store.Spend:
    """The spend of the monitor's judgments created this UTC day: recorded, and expected for those still queued;
    read at most every SPEND_TTL_S per process for ingestion (this process adds what it queues meanwhile, other API
    processes' share of those seconds can overshoot the budget)."""
    key = (str(get_engine().url), monitor.id)
    today = now.date()
    if not fresh:
        with _spend_lock:
            cached = _spend.get(key)
        if cached is not None and cached[1] == today and time.monotonic() - cached[0] < SPEND_TTL_S:
            return cached[2]
    value = store.spent_since(session, monitor.run_id, store.day_start(now))
    with _spend_lock:
        _spend[key] = (time.monotonic(), today, value)
    return value


def add_queued_spend(monitor: Monitor, now: datetime, estimated_usd: float) -> None:
    """This process queued judgments expected to cost ``estimated_usd``: its cached spend counts them at once."""
    key = (str(get_engine().url), monitor.id)
    with _spend_lock:
        cached = _spend.get(key)
        if cached is not None and cached[1] == now.date():
            spend = store.Spend(cached[2].recorded, cached[2].queued + estimated_usd)
            _spend[key] = (cached[0], cached[1], spend)


def budget_paused(monitor: Monitor, spend: store.Spend) -> bool:
    """Over the daily budget: the recorded cost plus the expected cost of the queued judgments reached it."""
    return monitor.daily_budget_usd is not None and spend.committed >= monitor.daily_budget_usd


# -- the run item of a response ----------------------------------------------------------------------------------


def naive_utc(moment: datetime) -> datetime:
    if moment.tzinfo is None:
        return moment
    return moment.astimezone(UTC).replace(tzinfo=None)


def item_payload(response: MonitorResponseIn) -> dict[str, Any]:
    """The run item of a sampled response: its one response is the candidate of its ``system``."""
    meta = {**response.meta, "version": response.version}
    if response.segment is not None:
        meta["segment"] = response.segment
    if response.timestamp is not None:
        meta["timestamp"] = naive_utc(response.timestamp).isoformat()
    item = Item(
        id=response.id,
        dialogue=response.dialogue,
        persona=response.persona,
        memory=response.memory,
        facts=response.facts,
        candidates={response.system: response.response},
        meta=meta,
    )
    return item.model_dump(mode="json")


def publish(settings: Settings, judgment_ids: list[int]) -> None:
    """Send the sampled judgments after the response; unsent (Redis down), the sweepers send them."""
    try:
        queue.enqueue(settings, judgment_ids)
    except Exception:
        try:
            with session_scope() as session:
                store.clear_enqueued(session, judgment_ids)
        except Exception:
            pass  # stamped enqueued: the sweepers re-send them after DJ_REQUEUE_AFTER


# -- ingestion ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ingested:
    """What ``ingest`` stored: new responses, sampled ones, the judgments to publish after the commit."""

    monitor: Monitor
    now: datetime
    stored: store.Stored
    paused: bool
    received: int

    @property
    def judgment_ids(self) -> list[int]:
        return self.stored.judgment_ids

    @property
    def duplicates(self) -> int:
        return self.received - self.stored.accepted

    def after_commit(self) -> None:
        """The transaction committed: this process's cached spend counts the judgments it queued."""
        if self.stored.estimated_cost_usd:
            add_queued_spend(self.monitor, self.now, self.stored.estimated_cost_usd)


def ingest(
    session: Session,
    monitor: Monitor,
    responses: Sequence[MonitorResponseIn],
    settings: Settings,
    *,
    fresh_spend: bool = False,
) -> Ingested:
    """Sample and store the responses in the caller's transaction (not committed here): each id once, the sampled
    ones as items with pending judgments (stamped enqueued: publish them after the commit). A monitor whose config
    no longer plans is 409; more judgments than DJ_MAX_JUDGMENTS is 413; both store nothing. ``fresh_spend``: the
    budget is read from the database, this transaction's judgments included (not this process's cached spend)."""
    now = utcnow()
    paused = budget_paused(monitor, spent_today(session, monitor, now, fresh=fresh_spend))
    rate = 0.0 if paused else monitor.sample_rate
    incoming = []
    for response in responses:
        sampled = rate > 0 and is_sampled(monitor.id, response.id, rate)
        incoming.append(
            store.Incoming(
                response_id=response.id,
                system=response.system,
                version=response.version,
                segment=response.segment or "",
                ts=naive_utc(response.timestamp) if response.timestamp is not None else now,
                sampled=sampled,
                payload=item_payload(response) if sampled else {},
            )
        )
    config, name, project_id = monitor.config, monitor.name, monitor.project_id

    def plan(payloads: list[dict[str, Any]]) -> store.PlannedBatch:
        # only when something is sampled: loading the rubric registry is most of an unsampled request's time;
        # a rubric edited within the last second is planned from the next request on
        registry = get_registry(max_age_s=REGISTRY_MAX_AGE_S)
        request = run_request(config, name, [Item.model_validate(p) for p in payloads])
        try:
            planned = plan_run(request, registry, settings.max_judgments_per_run)
        except PlanError as exc:  # nothing is stored
            if exc.field not in ("items", "options.max_samples"):  # the monitor's config no longer plans
                raise field_error([], f"the monitor's {exc.field}: {exc.message}", 409) from None
            raise field_error(  # more judgments than DJ_MAX_JUDGMENTS
                [],
                f"{len(payloads)} sampled responses: {exc.message} (DJ_MAX_JUDGMENTS="
                f"{settings.max_judgments_per_run} per request); send fewer responses per request",
                413,
            ) from None
        options = request.options.model_dump(mode="json")
        costs = None
        if budgeted:  # the daily budget counts a queued judgment at its expected cost until it is judged
            from judge_api.estimate import expected_costs, priced_pairs, recent_calibration

            prices = load_prices(str(settings.prices_file) if settings.prices_file else None)
            # once the project has judged enough of a pair, at the lengths its judge really writes (issue 24's
            # calibration), not the rubric's stated reply: a stated length far above the judge's pauses early
            calibration = recent_calibration(get_engine(), project_id, registry, priced_pairs(planned, prices))
            costs = expected_costs(planned, registry, {p["id"]: p for p in payloads}, options, prices, calibration)
        return store.PlannedBatch(planned, run_rubrics(request, registry), options, costs)

    budgeted = monitor.daily_budget_usd is not None
    stored = store.store_responses(session, monitor, incoming, plan)
    return Ingested(monitor, now, stored, paused, len(responses))
