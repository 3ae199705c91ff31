"""Monitors (docs/monitoring.md): ``POST/GET/PATCH/DELETE /v1/monitors[/{id}]``, responses posted to a monitor
(``POST /v1/monitors/{id}/responses``: stored once per id, a deterministic sample judged), the sampled responses of
a bucket (``GET .../responses``) and the series (``GET .../series``, JSON or CSV).

Same auth, projects and scopes as runs: another project's monitor is 404; creating, changing, deleting and posting
responses need ``submit``, reading needs ``read``.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import threading
import time
from collections.abc import Sequence
from datetime import UTC, date, datetime, timedelta
from typing import Any, Literal

import pandas as pd
from fastapi import APIRouter, BackgroundTasks, Depends, HTTPException, Query, Request, Response
from pydantic import ValidationError
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from judge_api import queue
from judge_api.admission import check_callback
from judge_api.alerts import window_seconds
from judge_api.auth import Principal
from judge_api.config import Settings
from judge_api.db import get_engine, session_scope
from judge_api.deps import MAX_OFFSET, app_settings, get_session, require
from judge_api.errors import field_error
from judge_api.guards import JsonTooDeep, loads_json
from judge_api.models import Monitor, utcnow
from judge_api.planning import PlanError, plan_run, run_config, run_rubrics
from judge_api.pricing import load_prices, unpriced_budget_refusal
from judge_api.repository import monitors as store
from judge_api.routers.runs import ensure_project_row
from judge_api.routers.verdicts import inlined_schema
from judge_api.rubrics import get_registry
from judge_api.schemas import Item, JudgeOptions, Page, PanelOptions, RunCreate
from judge_api.schemas.monitors import (
    AlertRule,
    MonitorCreate,
    MonitorOut,
    MonitorResponseIn,
    MonitorStatus,
    MonitorUpdate,
    ResponsesAccepted,
    Series,
    SeriesRow,
)
from judge_api.stats.series import SERIES_COLUMNS, hourly_sums, series

router = APIRouter(tags=["monitors"])

CONFIG_FIELDS = ("rubrics", "judges", "aspects", "options")
PLACEHOLDER_SYSTEM = "bot"
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


# -- the monitor's judging config --------------------------------------------------------------------------------


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


def placeholder_item() -> Item:
    return Item(id="placeholder", candidates={PLACEHOLDER_SYSTEM: "placeholder"})


def checked_config(config: dict[str, Any], name: str, settings: Settings) -> dict[str, Any]:
    """The run config of a monitor's judging fields, or 422 naming the field (unknown rubric, a pairwise rubric,
    an aspect no rubric has, a judge the allowlist refuses)."""
    try:
        request = run_request(config, name, [placeholder_item()])
    except ValidationError as exc:
        raise HTTPException(
            422, detail=[{"loc": ["body", *e["loc"]], "msg": e["msg"], "type": e["type"]} for e in exc.errors()]
        ) from None
    try:
        plan_run(request, get_registry(), settings.max_judgments_per_run)
    except PlanError as exc:
        parts = exc.field.replace("]", "").split("[")
        loc: list[str | int] = [int(p) if p.isdigit() else p for p in parts]
        if loc and loc[0] == "mode":
            loc = ["rubrics"]
        raise field_error(loc, exc.message) from None
    return run_config(request)


def check_daily_budget(budget: float | None, judges: list[str], settings: Settings) -> None:
    """422 naming ``daily_budget_usd`` when a judge of the monitor is not in the price table (its calls would count
    $0 and the budget would never pause sampling)."""
    if budget is None:
        return
    prices = load_prices(str(settings.prices_file) if settings.prices_file else None)
    refusal = unpriced_budget_refusal(judges, prices, "daily_budget_usd")
    if refusal is not None:
        raise field_error(["daily_budget_usd"], refusal)


def check_time_rules(retention_days: int | None, rules: list[dict[str, Any]]) -> None:
    """422 naming the rule when retention would delete the verdicts a ``time`` rule compares: its candidate and
    baseline windows must fit in ``retention_days`` (else each look would test a baseline that retention shrinks,
    and the per-window bound would not hold; issue 36 finding 1)."""
    if retention_days is None:
        return
    for index, rule in enumerate(rules):
        compare = rule.get("compare") or {}
        if compare.get("by") != "time":
            continue
        span = window_seconds(compare["candidate"]) + window_seconds(compare["baseline"])
        if span > retention_days * 86_400:
            days = -(-span // 86_400)
            raise field_error(
                ["alerts", index, "compare"],
                f"a time rule compares {compare['candidate']} with the {compare['baseline']} before it, which "
                f"retention_days={retention_days} deletes: set retention_days to at least {days}",
            )


def monitor_config(monitor: Monitor) -> dict[str, Any]:
    return dict(monitor.config)


# -- spend and status --------------------------------------------------------------------------------------------

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


def monitor_status(session: Session, monitor: Monitor, now: datetime | None = None) -> MonitorStatus:
    now = now or utcnow()
    spend = spent_today(session, monitor, now, fresh=True)
    counts = store.day_counts(session, monitor, store.day_start(now))
    queued = f" + ${spend.queued:.4f} expected for the queued judgments" if spend.queued > 0 else ""
    if budget_paused(monitor, spend):
        until = store.day_start(now) + timedelta(days=1)
        state: Literal["active", "paused_budget"] = "paused_budget"
        message = (
            f"sampling paused: ${spend.recorded:.4f} spent today{queued} reached the daily budget of "
            f"${monitor.daily_budget_usd:g}; it resumes at {until:%Y-%m-%d %H:%M} UTC"
        )
        paused_until: datetime | None = until
    else:
        state, paused_until = "active", None
        budget = f" of ${monitor.daily_budget_usd:g}" if monitor.daily_budget_usd is not None else ""
        message = f"sampling {monitor.sample_rate:g} of responses; ${spend.recorded:.4f}{queued}{budget} spent today"
    return MonitorStatus(
        state=state,
        message=message,
        paused_until=paused_until,
        spent_today_usd=round(spend.recorded, 6),
        queued_estimate_usd=round(spend.queued, 6),
        responses_today=counts["responses_today"],
        sampled_today=counts["sampled_today"],
        pending_judgments=counts["pending"],
    )


def monitor_out(monitor: Monitor, status: MonitorStatus | None = None) -> MonitorOut:
    config = monitor.config
    return MonitorOut(
        id=monitor.id,
        name=monitor.name,
        run_id=monitor.run_id,
        rubrics=config["rubrics"],
        judges=config["judges"],
        aspects=config.get("aspects"),
        options=config.get("options") or {},
        sample_rate=monitor.sample_rate,
        daily_budget_usd=monitor.daily_budget_usd,
        retention_days=monitor.retention_days,
        alerts=list(monitor.alerts or []),
        callback_url=monitor.callback_url,
        callback_secret_set=bool(monitor.callback_secret),
        created_at=monitor.created_at,
        updated_at=monitor.updated_at,
        status=status,
    )


def monitor_or_404(session: Session, monitor_id: str, principal: Principal) -> Monitor:
    """The caller's monitor, or 404 (another project's is 404 too, so ids do not leak)."""
    monitor = store.get_monitor(session, monitor_id, principal.project_id)
    if monitor is None:
        raise HTTPException(404, f"monitor {monitor_id!r} not found")
    return monitor


def check_rule_count(rules: Sequence[AlertRule], settings: Settings) -> None:
    if len(rules) > settings.max_rules_per_monitor:
        raise field_error(
            ["alerts"],
            f"{len(rules)} alert rules exceed the limit of {settings.max_rules_per_monitor} per monitor "
            "(DJ_MAX_RULES_PER_MONITOR, GET /v1/limits)",
        )


# -- CRUD --------------------------------------------------------------------------------------------------------


@router.post("/v1/monitors", status_code=201, response_model=MonitorOut)
def create_monitor(
    request: MonitorCreate,
    principal: Principal = Depends(require("submit")),
    session: Session = Depends(get_session),
    settings: Settings = Depends(app_settings),
) -> MonitorOut:
    check_rule_count(request.alerts, settings)
    if store.count_monitors(session, principal.project_id) >= settings.max_monitors_per_project:
        raise HTTPException(
            409,
            detail=[
                {
                    "loc": ["body"],
                    "msg": f"the project has {settings.max_monitors_per_project} monitors, the limit per project "
                    "(DJ_MAX_MONITORS, GET /v1/limits): delete one first",
                    "type": "limit_exceeded",
                }
            ],
        )
    config = checked_config(request.model_dump(mode="json", include=set(CONFIG_FIELDS)), request.name, settings)
    check_callback(request.callback_url, settings)
    check_daily_budget(request.daily_budget_usd, request.judges, settings)
    check_time_rules(request.retention_days, [rule.model_dump(mode="json") for rule in request.alerts])
    ensure_project_row(principal.project_id)
    fields = {
        "name": request.name,
        "config": {k: config[k] for k in CONFIG_FIELDS},
        "sample_rate": request.sample_rate,
        "daily_budget_usd": request.daily_budget_usd,
        "retention_days": request.retention_days,
        "alerts": [rule.model_dump(mode="json") for rule in request.alerts],
        "callback_url": request.callback_url,
        "callback_secret": request.callback_secret,
    }
    try:
        monitor = store.create_monitor(session, principal.project_id, fields, config)
        session.commit()
    except Exception:
        session.rollback()
        raise
    return monitor_out(monitor, monitor_status(session, monitor))


@router.get("/v1/monitors", response_model=Page[MonitorOut])
def list_monitors(
    offset: int = Query(0, ge=0, le=MAX_OFFSET),
    limit: int = Query(50, ge=1, le=500),
    principal: Principal = Depends(require("read")),
    session: Session = Depends(get_session),
) -> Page[MonitorOut]:
    total, rows = store.list_monitors(session, principal.project_id, offset, limit)
    items = [monitor_out(m, monitor_status(session, m)) for m in rows]
    return Page[MonitorOut](total=total, offset=offset, limit=limit, items=items)


@router.get("/v1/monitors/{monitor_id}", response_model=MonitorOut)
def get_monitor(
    monitor_id: str, principal: Principal = Depends(require("read")), session: Session = Depends(get_session)
) -> MonitorOut:
    monitor = monitor_or_404(session, monitor_id, principal)
    return monitor_out(monitor, monitor_status(session, monitor))


@router.patch("/v1/monitors/{monitor_id}", response_model=MonitorOut)
def update_monitor(
    monitor_id: str,
    request: MonitorUpdate,
    principal: Principal = Depends(require("submit")),
    session: Session = Depends(get_session),
    settings: Settings = Depends(app_settings),
) -> MonitorOut:
    """The fields given replace the stored ones (``null`` clears an optional one). New judging fields (rubrics,
    judges, aspects, options) apply to responses sampled from now on."""
    monitor = monitor_or_404(session, monitor_id, principal)
    given = request.model_fields_set
    if request.alerts is not None:
        check_rule_count(request.alerts, settings)
    for name in ("name", "rubrics", "judges", "sample_rate", "alerts"):
        if name in given and getattr(request, name) is None:
            raise field_error([name], f"{name} cannot be cleared (null)")
    updates = request.model_dump(mode="json", include=given)
    config = dict(monitor.config)
    config.update({k: updates[k] for k in CONFIG_FIELDS if k in updates})
    name = updates.get("name", monitor.name)
    run_cfg = checked_config(config, name, settings)
    url = updates["callback_url"] if "callback_url" in given else monitor.callback_url
    secret = updates["callback_secret"] if "callback_secret" in given else monitor.callback_secret
    check_callback(url if "callback_url" in given else None, settings)
    budget = updates["daily_budget_usd"] if "daily_budget_usd" in given else monitor.daily_budget_usd
    check_daily_budget(budget, list(config["judges"]), settings)
    check_time_rules(
        updates["retention_days"] if "retention_days" in given else monitor.retention_days,
        updates["alerts"] if "alerts" in given else list(monitor.alerts or []),
    )
    if (url is None) != (secret is None):
        raise field_error(
            ["callback_secret" if url is not None else "callback_url"],
            "a callback needs both callback_url and callback_secret (>= 16 chars); clear both to remove it",
        )
    try:
        monitor.name = name
        monitor.config = {k: run_cfg[k] for k in CONFIG_FIELDS}
        for field in ("sample_rate", "daily_budget_usd", "retention_days", "alerts"):
            if field in given:
                setattr(monitor, field, updates[field])
        monitor.callback_url, monitor.callback_secret = url, secret
        monitor.updated_at = utcnow()
        store.update_run_config(session, monitor, run_cfg)
        session.commit()
    except Exception:
        session.rollback()
        raise
    return monitor_out(monitor, monitor_status(session, monitor))


@router.delete("/v1/monitors/{monitor_id}")
def delete_monitor(
    monitor_id: str, principal: Principal = Depends(require("submit")), session: Session = Depends(get_session)
) -> dict[str, Any]:
    """Delete the monitor with its responses, judgments, hourly sums and internal run, all or nothing."""
    monitor = monitor_or_404(session, monitor_id, principal)
    try:
        removed = store.delete_monitor(session, monitor)
        session.commit()
    except Exception:
        session.rollback()
        raise
    return {"monitor_id": monitor_id, "deleted": removed}


# -- ingestion ---------------------------------------------------------------------------------------------------


def parse_responses(body: bytes, settings: Settings) -> list[MonitorResponseIn]:
    """A JSON list or JSON Lines of responses, validated; 422 naming the response (its index) and the field."""
    text = body.decode("utf-8", errors="replace")
    stripped = text.lstrip()
    raw: list[Any]
    if stripped.startswith("["):
        try:
            parsed = loads_json(text)
        except json.JSONDecodeError as exc:
            raise field_error([], f"not valid JSON: {exc.msg} (line {exc.lineno})") from None
        except JsonTooDeep as exc:
            raise field_error([], str(exc)) from None
        raw = parsed
    else:
        raw = []
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                raw.append(loads_json(line))
            except json.JSONDecodeError as exc:
                raise field_error([f"line {number}"], f"not valid JSON: {exc.msg}") from None
            except JsonTooDeep as exc:
                raise field_error([f"line {number}"], str(exc)) from None
    if not raw:
        raise field_error([], "no responses: send a JSON list or JSON Lines of responses")
    if len(raw) > settings.max_items_per_run:
        raise field_error(
            [], f"{len(raw)} responses exceed the limit of {settings.max_items_per_run} per request (DJ_MAX_ITEMS)"
        )
    responses: list[MonitorResponseIn] = []
    for index, entry in enumerate(raw):
        if not isinstance(entry, dict):
            raise field_error([index], "a response is a JSON object")
        try:
            response = MonitorResponseIn.model_validate(entry)
        except ValidationError as exc:
            raise HTTPException(
                422,
                detail=[{"loc": ["body", index, *e["loc"]], "msg": e["msg"], "type": e["type"]} for e in exc.errors()],
            ) from None
        check_limits(response, index, settings)
        responses.append(response)
    return responses


def check_limits(response: MonitorResponseIn, index: int, settings: Settings) -> None:
    if len(response.dialogue) > settings.max_turns_per_item:
        raise field_error(
            [index, "dialogue"], f"{len(response.dialogue)} turns exceed the limit of {settings.max_turns_per_item}"
        )
    for turn_index, turn in enumerate(response.dialogue):
        if len(turn.text) > settings.max_chars_per_turn:
            raise field_error(
                [index, "dialogue", turn_index, "text"],
                f"turn of {len(turn.text)} characters exceeds the limit of {settings.max_chars_per_turn} "
                "(DJ_MAX_CHARS_PER_TURN)",
            )
    if len(response.response) > settings.max_chars_per_turn:
        raise field_error(
            [index, "response"],
            f"response of {len(response.response)} characters exceeds the limit of {settings.max_chars_per_turn} "
            "(DJ_MAX_CHARS_PER_TURN)",
        )


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


_RESPONSES_BODY = {  # the body is read raw (a JSON list or JSON Lines); its schema, for the docs and the fuzz tests
    "requestBody": {
        "content": {
            "application/json": {
                "schema": {
                    "type": "array",
                    "minItems": 1,
                    "items": inlined_schema(MonitorResponseIn.model_json_schema()),
                }
            },
            "application/x-ndjson": {"schema": {"type": "string"}},
        },
        "required": True,
    }
}


@router.post(
    "/v1/monitors/{monitor_id}/responses",
    status_code=202,
    response_model=ResponsesAccepted,
    openapi_extra=_RESPONSES_BODY,
)
async def post_responses(
    monitor_id: str,
    request: Request,
    background: BackgroundTasks,
    principal: Principal = Depends(require("submit")),
    session: Session = Depends(get_session),
    settings: Settings = Depends(app_settings),
) -> ResponsesAccepted:
    """Production responses, as a JSON list or JSON Lines. Each id is stored once (a retried batch is acknowledged
    and counted as ``duplicates``); a deterministic sample (``sample_rate``, by the id's hash) becomes pending
    judgments the workers judge; over the daily budget nothing is sampled until the next UTC day."""
    body = await request.body()
    return await run_in_threadpool(_ingest, monitor_id, body, principal, background, session, settings)


def _ingest(
    monitor_id: str,
    body: bytes,
    principal: Principal,
    background: BackgroundTasks,
    session: Session,
    settings: Settings,
) -> ResponsesAccepted:
    """Validate, sample and store in one transaction (off the event loop: a large batch takes a while)."""
    responses = parse_responses(body, settings)
    try:
        monitor = monitor_or_404(session, monitor_id, principal)
        now = utcnow()
        paused = budget_paused(monitor, spent_today(session, monitor, now))
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
        session.commit()
    except BaseException:
        session.rollback()
        raise
    if stored.estimated_cost_usd:
        add_queued_spend(monitor, now, stored.estimated_cost_usd)
    if stored.judgment_ids:
        background.add_task(publish, settings, stored.judgment_ids)
    return ResponsesAccepted(
        accepted=stored.accepted, sampled=stored.sampled, duplicates=len(responses) - stored.accepted, paused=paused
    )


# -- series ------------------------------------------------------------------------------------------------------


def series_frame(
    session: Session,
    monitor: Monitor,
    bucket: str,
    by: Sequence[str],
    confidence: float,
    filters: dict[str, str | None],
    since: datetime | None,
    until: datetime | None,
) -> pd.DataFrame:
    """The series of the hourly sums retention kept plus the verdicts still stored (judge_api.stats.series)."""
    kept = store.hourly_frame(session, monitor, since, until)
    live = hourly_sums(store.verdicts_frame(session, monitor, since, until))
    sums = (
        pd.concat([f for f in (kept, live) if not f.empty], ignore_index=True)
        if not (kept.empty and live.empty)
        else kept
    )
    for column, value in filters.items():
        if value is not None and not sums.empty:
            sums = sums[sums[column] == value]
    return series(sums, bucket, by, confidence)


def _moment(value: str | None, name: str) -> datetime | None:
    if value is None:
        return None
    try:
        return naive_utc(datetime.fromisoformat(value))
    except (ValueError, OverflowError):  # OverflowError: a time that leaves the calendar once moved to UTC
        raise HTTPException(
            422,
            detail=[{"loc": ["query", name], "msg": f"{value!r} is not an ISO 8601 time", "type": "value_error"}],
        ) from None


@router.get("/v1/monitors/{monitor_id}/series", response_model=Series)
def get_series(
    monitor_id: str,
    bucket: Literal["1h", "1d"] = "1h",
    by: list[Literal["version", "system", "segment"]] = Query(default=["version"]),
    aspect: str | None = None,
    rubric: str | None = None,
    judge: str | None = None,
    system: str | None = None,
    version: str | None = None,
    segment: str | None = None,
    since: str | None = Query(None, description="ISO 8601; buckets of responses from this time"),
    until: str | None = Query(None, description="ISO 8601; responses before this time"),
    confidence: float = Query(0.95, ge=0.5, le=0.999),
    format: Literal["json", "csv"] = "json",
    principal: Principal = Depends(require("read")),
    session: Session = Depends(get_session),
) -> Any:
    """Rows ``bucket_start, system, version, segment, rubric_id, aspect, judge, n, mean, ci_low, ci_high,
    contradiction_rate, contradiction_n`` per UTC bucket and slice (the slices not in ``by`` are null: summed over).
    ``format=csv`` for the same rows as CSV."""
    start, end = _moment(since, "since"), _moment(until, "until")
    monitor = monitor_or_404(session, monitor_id, principal)
    filters = {
        "aspect": aspect,
        "rubric_id": rubric,
        "judge": judge,
        "system": system,
        "version": version,
        "segment": "" if segment == "" else segment,
    }
    by_list = list(dict.fromkeys(by))
    frame = series_frame(session, monitor, bucket, by_list, confidence, filters, start, end)
    rows = [SeriesRow.model_validate(_row(r)) for r in frame.to_dict("records")]
    if format == "csv":
        out = io.StringIO()
        writer = csv.writer(out)
        writer.writerow(SERIES_COLUMNS)
        for row in rows:
            data = row.model_dump(mode="json")
            writer.writerow(["" if data[c] is None else data[c] for c in SERIES_COLUMNS])
        return Response(
            out.getvalue(),
            media_type="text/csv",
            headers={"Content-Disposition": f'attachment; filename="{monitor.id}-series.csv"'},
        )
    return Series(monitor_id=monitor.id, bucket=bucket, by=by_list, confidence=confidence, rows=rows)


def _row(record: dict[str, Any]) -> dict[str, Any]:
    out = dict(record)
    out["bucket_start"] = pd.Timestamp(record["bucket_start"]).to_pydatetime()
    if out.get("segment") == "":
        out["segment"] = None
    return out


@router.get("/v1/monitors/{monitor_id}/responses")
def bucket_responses(
    monitor_id: str,
    start: str = Query(..., description="ISO 8601: the bucket's start (a series row's bucket_start)"),
    bucket: Literal["1h", "1d"] = "1h",
    system: str | None = None,
    version: str | None = None,
    segment: str | None = None,
    limit: int = Query(100, ge=1, le=1000),
    principal: Principal = Depends(require("read")),
    session: Session = Depends(get_session),
) -> dict[str, Any]:
    """The sampled responses of one series bucket with their verdicts; each is an item (``response_id``) of the
    monitor's run (``run_id``), which the item explorer opens."""
    begin = _moment(start, "start")
    assert begin is not None
    monitor = monitor_or_404(session, monitor_id, principal)
    end = begin + (timedelta(hours=1) if bucket == "1h" else timedelta(days=1))
    filters = {"system": system, "version": version, "segment": segment}
    rows = store.sampled_responses(session, monitor, begin, end, filters, limit)
    return {"monitor_id": monitor.id, "run_id": monitor.run_id, "start": begin, "end": end, "items": rows}
