"""Monitors (docs/monitoring.md): ``POST/GET/PATCH/DELETE /v1/monitors[/{id}]``, responses posted to a monitor
(``POST /v1/monitors/{id}/responses``: stored once per id, a deterministic sample judged), the sampled responses of
a bucket (``GET .../responses``) and the series (``GET .../series``, JSON or CSV).

Same auth, projects and scopes as runs: another project's monitor is 404; creating, changing, deleting and posting
responses need ``submit``, reading needs ``read``.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, Literal

import pandas as pd
from fastapi import APIRouter, BackgroundTasks, Depends, HTTPException, Query, Request, Response
from pydantic import ValidationError
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from judge_api.admission import check_callback, monitor_response_refusal
from judge_api.alerts import window_seconds
from judge_api.auth import Principal
from judge_api.config import Settings
from judge_api.deps import MAX_OFFSET, app_settings, get_session, require
from judge_api.errors import field_error
from judge_api.guards import JsonTooDeep, loads_json
from judge_api.models import Monitor, utcnow
from judge_api.monitor_ingest import budget_paused, ingest, naive_utc, publish, run_request, spent_today
from judge_api.planning import PlanError, plan_run, run_config
from judge_api.pricing import load_prices, unpriced_budget_refusal
from judge_api.repository import monitors as store
from judge_api.repository import otlp as spans_store
from judge_api.routers.runs import ensure_project_row
from judge_api.routers.verdicts import inlined_schema
from judge_api.rubrics import get_registry
from judge_api.schemas import Item, Page
from judge_api.schemas.monitors import (
    AlertRule,
    MonitorCreate,
    MonitorOut,
    MonitorResponseIn,
    MonitorStatus,
    MonitorUpdate,
    OtlpStatus,
    ResponsesAccepted,
    Series,
)
from judge_api.stats.series import SERIES_COLUMNS, series

router = APIRouter(tags=["monitors"])

CONFIG_FIELDS = ("rubrics", "judges", "aspects", "options")
PLACEHOLDER_SYSTEM = "bot"
REGISTRY_MAX_AGE_S = 1.0  # ingestion looks at the rubric folders at most once a second (judge_api.rubrics)


# -- sampling ----------------------------------------------------------------------------------------------------


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
    otlp = otlp_status(session, monitor, now)
    if otlp is not None and otlp.message:
        message = f"{message}; {otlp.message}"
    return MonitorStatus(
        otlp=otlp,
        state=state,
        message=message,
        paused_until=paused_until,
        spent_today_usd=round(spend.recorded, 6),
        queued_estimate_usd=round(spend.queued, 6),
        responses_today=counts["responses_today"],
        sampled_today=counts["sampled_today"],
        pending_judgments=counts["pending"],
    )


def otlp_status(session: Session, monitor: Monitor, now: datetime) -> OtlpStatus | None:
    """The day's OTLP counts of the monitor (None: no span today), saying why spans were skipped."""
    stats = dict(monitor.otlp_stats or {})
    waiting = spans_store.waiting_count(session, monitor.id)
    received = spans_store.status_count(session, monitor.id, spans_store.RECEIVED)
    if stats.get("day") != now.date().isoformat():
        if not waiting and not received:
            return None
        stats = {"day": now.date().isoformat()}
    notes = []
    if stats.get("no_content"):
        notes.append(
            f"{stats['no_content']} LLM spans today carried no message content: "
            + str(stats.get("last_skip") or "turn the instrumentation's content capture on").split(": ", 1)[-1]
        )
    if stats.get("rejected"):
        last = stats.get("last_rejected")
        notes.append(f"{stats['rejected']} spans rejected today" + (f" (the last: {last})" if last else ""))
    if waiting:
        notes.append(f"{waiting} responses wait for earlier turns of their conversation (at most DJ_OTLP_WAIT)")
    known = {k: int(v) for k, v in stats.items() if k in OtlpStatus.model_fields and k not in ("day", "message")}
    return OtlpStatus(
        day=str(stats["day"]), **{**known, "waiting": waiting, "received": received}, message="; ".join(notes)
    )


def monitor_out(monitor: Monitor, status: MonitorStatus | None = None, default_id: str | None = None) -> MonitorOut:
    config = monitor.config
    return MonitorOut(
        otlp_default=default_id == monitor.id,
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
        if request.otlp_default:
            spans_store.set_default_monitor(session, principal.project_id, monitor.id)
        session.commit()
    except Exception:
        session.rollback()
        raise
    default_id = spans_store.default_monitor_id(session, principal.project_id)
    return monitor_out(monitor, monitor_status(session, monitor), default_id)


@router.get("/v1/monitors", response_model=Page[MonitorOut])
def list_monitors(
    offset: int = Query(0, ge=0, le=MAX_OFFSET),
    limit: int = Query(50, ge=1, le=500),
    principal: Principal = Depends(require("read")),
    session: Session = Depends(get_session),
) -> Page[MonitorOut]:
    total, rows = store.list_monitors(session, principal.project_id, offset, limit)
    default_id = spans_store.default_monitor_id(session, principal.project_id)
    items = [monitor_out(m, monitor_status(session, m), default_id) for m in rows]
    return Page[MonitorOut](total=total, offset=offset, limit=limit, items=items)


@router.get("/v1/monitors/{monitor_id}", response_model=MonitorOut)
def get_monitor(
    monitor_id: str, principal: Principal = Depends(require("read")), session: Session = Depends(get_session)
) -> MonitorOut:
    monitor = monitor_or_404(session, monitor_id, principal)
    default_id = spans_store.default_monitor_id(session, principal.project_id)
    return monitor_out(monitor, monitor_status(session, monitor), default_id)


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
    for name in ("name", "rubrics", "judges", "sample_rate", "alerts", "otlp_default"):
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
        if request.otlp_default is True:
            spans_store.set_default_monitor(session, principal.project_id, monitor.id)
        elif request.otlp_default is False:
            spans_store.clear_default_if(session, monitor.id)
        session.commit()
    except Exception:
        session.rollback()
        raise
    default_id = spans_store.default_monitor_id(session, principal.project_id)
    return monitor_out(monitor, monitor_status(session, monitor), default_id)


@router.delete("/v1/monitors/{monitor_id}")
def delete_monitor(
    monitor_id: str, principal: Principal = Depends(require("submit")), session: Session = Depends(get_session)
) -> dict[str, Any]:
    """Delete the monitor with its responses, judgments, hourly sums and internal run, all or nothing."""
    monitor = monitor_or_404(session, monitor_id, principal)
    try:
        spans_store.clear_default_if(session, monitor.id)
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
    """422 naming the response and field over DJ_MAX_TURNS / DJ_MAX_CHARS_PER_TURN (the gate's rule)."""
    refusal = monitor_response_refusal(response, settings)
    if refusal is not None:
        raise field_error([index, *refusal[0]], refusal[1])


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
        done = ingest(session, monitor, responses, settings)
        session.commit()
    except BaseException:
        session.rollback()
        raise
    done.after_commit()
    if done.judgment_ids:
        background.add_task(publish, settings, done.judgment_ids)
    return ResponsesAccepted(
        accepted=done.stored.accepted, sampled=done.stored.sampled, duplicates=done.duplicates, paused=done.paused
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
    """The series (judge_api.stats.series) of the hourly sums the database keeps as verdicts are written: one
    indexed query grouped by bucket and slice (``store.series_sums``), whatever the number of verdicts."""
    return series(store.series_sums(session, monitor, bucket, by, filters, since, until), bucket, by, confidence)


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
    rows = series_rows(frame)
    if format == "csv":
        out = io.StringIO()
        writer = csv.writer(out)
        writer.writerow(SERIES_COLUMNS)
        for row in rows:
            writer.writerow(["" if row[c] is None else row[c] for c in SERIES_COLUMNS])
        return Response(
            out.getvalue(),
            media_type="text/csv",
            headers={"Content-Disposition": f'attachment; filename="{monitor.id}-series.csv"'},
        )
    body = {"monitor_id": monitor.id, "bucket": bucket, "by": by_list, "confidence": confidence, "rows": rows}
    # the rows are built from the statistics' own columns (``series_rows``): validating tens of thousands of them
    # one by one (90 days of hours) cost more than the query; the JSON is the ``Series`` model's
    return Response(
        json.dumps(body, ensure_ascii=False, allow_nan=False, separators=(",", ":")), media_type="application/json"
    )


def series_rows(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """The series' rows as the ``SeriesRow`` model serialises them to JSON (``bucket_start`` ISO 8601, a blank
    segment null, numbers as Python's), from its columns at once."""
    if frame.empty:
        return []
    columns = [frame[c].tolist() for c in SERIES_COLUMNS]
    iso = {t: pd.Timestamp(t).to_pydatetime().isoformat() for t in set(columns[0])}  # a bucket is many rows
    columns[0] = [iso[t] for t in columns[0]]
    segment = SERIES_COLUMNS.index("segment")
    columns[segment] = [None if s == "" else s for s in columns[segment]]
    return [dict(zip(SERIES_COLUMNS, values, strict=True)) for values in zip(*columns, strict=True)]


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
