"""One gate for every way a run's rows get in: ``POST /v1/runs`` and ``POST /v1/runs/jsonl`` (a RunCreate) and
``POST /v1/runs/import`` (a bundle, read back as the RunCreate its run was submitted as, then its rows) pass
``admit_run``: the run limits (DJ_MAX_ITEMS, DJ_MAX_TURNS, DJ_MAX_CHARS_PER_TURN, DJ_MAX_JUDGMENTS), storable
values, systems (responders under the auth rules and the URL allowlist), the callback URL rules, a budget's priced
judges and the plan (rubrics known to this deployment, judges under DJ_JUDGE_URL_ALLOWLIST); a bundle's rows then
pass ``admit_bundle_rows`` with the same judge and responder checks (``planning.judge_refusal``,
``responder_refusal``). Both take a slot of the caller's DJ_RUNS_PER_MINUTE (``submission_slot``).

Every refusal is a 4xx naming the field (``judge_api.errors.field_error``), raised before anything is stored.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from fastapi import HTTPException
from pydantic import ValidationError

from judge_api import reach, webhooks
from judge_api.auth import Principal
from judge_api.config import Settings
from judge_api.errors import field_error
from judge_api.guards import check_storable
from judge_api.models import GENERATION_STATUSES, JUDGMENT_STATUSES
from judge_api.planning import PlanError, PlannedJudgment, judge_refusal, plan_run, with_placeholders
from judge_api.pricing import load_prices, unpriced_budget_refusal
from judge_api.reference_metrics import REFERENCE_RUBRIC
from judge_api.repository.retention import Bundle
from judge_api.repository.verdicts import IMPORTED_VERSION
from judge_api.responders import parse_responder
from judge_api.rubrics import RubricRegistry
from judge_api.schemas import JudgeOptions, RunCreate
from judge_api.schemas.monitors import MonitorResponseIn
from judge_api.schemas.ratings import MAX_RATINGS
from judge_api.stats.label_sampling import STRATEGIES
from judge_api.strategies import StrategyError, StrategyRegistry, get_strategies
from judge_api.submit_limit import SubmitRateLimit


def admit_run(request: RunCreate, settings: Settings, registry: RubricRegistry) -> list[PlannedJudgment]:
    """The run's planned judgments (a run with systems: planned with a placeholder response of every system, as
    its judgments will be once generated), or a 422 naming the field at fault."""
    check_run_limits(request, settings)
    check_storable(request)
    check_systems(request, settings)
    check_callback(request.callback_url, settings)
    check_budget(request, settings)
    to_plan = with_placeholders(request) if request.systems else request
    try:
        return plan_run(to_plan, registry, settings.max_judgments_per_run)
    except PlanError as exc:
        raise plan_error(exc) from None


def plan_error(exc: PlanError) -> Exception:
    parts = exc.field.replace("]", "").split("[")
    loc: list[str | int] = [int(p) if p.isdigit() else p for p in parts]
    return field_error(loc, exc.message)


@dataclass
class SubmissionSlot:
    """A slot of the caller's DJ_RUNS_PER_MINUTE taken for one submission."""

    rate_limit: SubmitRateLimit
    who: str
    reservation: str | None

    def give_back(self) -> None:
        self.rate_limit.release(self.who, self.reservation)


@contextmanager
def submission_slot(rate_limit: SubmitRateLimit, principal: Principal, settings: Settings) -> Iterator[SubmissionSlot]:
    """Take a slot of the caller's DJ_RUNS_PER_MINUTE (429 with Retry-After when none is left); a submission that is
    refused or fails gives it back (it does not count)."""
    who = principal.key_id or "anonymous"
    slot = SubmissionSlot(rate_limit, who, rate_limit.reserve(who, settings.runs_per_minute))
    try:
        yield slot
    except BaseException:
        slot.give_back()
        raise


def check_run_limits(request: RunCreate, settings: Settings) -> None:
    """422 naming the field when a run is larger than the server accepts (DJ_MAX_ITEMS, DJ_MAX_TURNS,
    DJ_MAX_CHARS_PER_TURN), or an item has nothing to judge: no candidate and no run ``systems``, or a given
    candidate named like one of the systems."""
    if len(request.items) > settings.max_items_per_run:
        raise field_error(
            ["items"],
            f"{len(request.items)} items exceed the limit of {settings.max_items_per_run} per run (DJ_MAX_ITEMS)",
        )
    systems = request.systems or {}
    for index, item in enumerate(request.items):
        if not item.candidates and not systems:
            raise field_error(
                ["items", index, "candidates"],
                "an item needs at least one candidate response (or give the run 'systems' that generate them)",
            )
        for name in item.candidates:
            if name in systems:
                raise field_error(
                    ["items", index, "candidates", name],
                    f"{name!r} is also one of the run's systems (its response is generated): rename the system or "
                    "drop the given candidate",
                )
        if len(item.dialogue) > settings.max_turns_per_item:
            raise field_error(
                ["items", index, "dialogue"],
                f"{len(item.dialogue)} turns exceed the limit of {settings.max_turns_per_item}",
            )
        for turn_index, turn in enumerate(item.dialogue):
            if len(turn.text) > settings.max_chars_per_turn:
                raise field_error(
                    ["items", index, "dialogue", turn_index, "text"],
                    f"turn of {len(turn.text)} characters exceeds the limit of "
                    f"{settings.max_chars_per_turn} (DJ_MAX_CHARS_PER_TURN)",
                )
        for system, response in item.candidates.items():
            if len(response) > settings.max_chars_per_turn:
                raise field_error(
                    ["items", index, "candidates", system],
                    f"response of {len(response)} characters exceeds the limit of "
                    f"{settings.max_chars_per_turn} (DJ_MAX_CHARS_PER_TURN)",
                )
        if item.persona is not None:
            for side in ("user", "bot"):
                for line_index, line in enumerate(getattr(item.persona, side)):
                    if len(line) > settings.max_chars_per_turn:
                        raise field_error(
                            ["items", index, "persona", side, line_index],
                            f"persona line of {len(line)} characters exceeds the limit of "
                            f"{settings.max_chars_per_turn} (DJ_MAX_CHARS_PER_TURN)",
                        )


def monitor_response_refusal(response: MonitorResponseIn, settings: Settings) -> tuple[list[str | int], str] | None:
    """Where and why a response posted to a monitor (``POST /v1/monitors/{id}/responses``, or rebuilt from OTLP
    spans) is larger than the server accepts (DJ_MAX_TURNS, DJ_MAX_CHARS_PER_TURN), or None."""
    if len(response.dialogue) > settings.max_turns_per_item:
        return ["dialogue"], f"{len(response.dialogue)} turns exceed the limit of {settings.max_turns_per_item}"
    for turn_index, turn in enumerate(response.dialogue):
        if len(turn.text) > settings.max_chars_per_turn:
            return (
                ["dialogue", turn_index, "text"],
                f"turn of {len(turn.text)} characters exceeds the limit of {settings.max_chars_per_turn} "
                "(DJ_MAX_CHARS_PER_TURN)",
            )
    if len(response.response) > settings.max_chars_per_turn:
        return (
            ["response"],
            f"response of {len(response.response)} characters exceeds the limit of {settings.max_chars_per_turn} "
            "(DJ_MAX_CHARS_PER_TURN)",
        )
    return None


def check_systems(request: RunCreate, settings: Settings) -> None:
    """422 naming ``systems.<name>`` when a system cannot be run by this service's workers (``responder_refusal``)."""
    strategies: StrategyRegistry | None = None
    for name, text in (request.systems or {}).items():
        refusal = responder_refusal(text, settings)
        if refusal is not None:
            raise field_error(["systems", name], refusal)
        spec = parse_responder(text)  # validated by the schema already
        if spec.kind == "chat" and spec.strategy is not None:
            strategies = strategies or get_strategies()
            try:
                strategies.get(spec.strategy)
            except StrategyError as exc:
                raise field_error(["systems", name], str(exc)) from None


def responder_refusal(text: str, settings: Settings) -> str | None:
    """Why the workers may not run responder ``text`` (None: they may): not a responder string, a ``python:``
    responder while auth is on (an API user must not make the workers import a module of their choosing), or a chat
    model or http responder whose URL DJ_JUDGE_URL_ALLOWLIST does not allow (as judge URLs: none once auth is on
    without an allowlist). The one check of a responder, for a submitted run's systems and an imported bundle's
    generation rows alike."""
    try:
        spec = parse_responder(text)
    except ValueError as exc:
        return str(exc)
    return reach.responder_refusal(spec, settings)


def check_budget(request: RunCreate, settings: Settings) -> None:
    """422 naming ``budget_usd`` when the run has a budget and a judge whose model the price table does not list:
    its calls would be counted at $0 and the budget would never stop them (judge_api.pricing)."""
    if request.budget_usd is None:
        return
    prices = load_prices(str(settings.prices_file) if settings.prices_file else None)
    refusal = unpriced_budget_refusal(request.judges, prices, "budget_usd")
    if refusal is not None:
        raise field_error(["budget_usd"], refusal)


def check_callback(url: str | None, settings: Settings) -> None:
    """422 naming ``callback_url`` when the service may not POST there (with auth on: a private host not under
    DJ_CALLBACK_URL_ALLOWLIST; judge_api/webhooks.py)."""
    if url is None:
        return
    refusal = webhooks.callback_url_refusal(url, settings)
    if refusal is not None:
        raise field_error(["callback_url"], refusal)


# -- bundles (POST /v1/runs/import) ------------------------------------------------------------------------------


IMPORTED_STATUSES = frozenset({"done", "unparseable"})


def admit_bundle(bundle: Bundle, settings: Settings, registry: RubricRegistry) -> None:
    """422 naming the bundle's line and field unless the bundle passes what its run would pass if submitted
    (``admit_run`` on the RunCreate its header's config and items make) and every row it carries besides passes the
    same checks: judgments within DJ_MAX_JUDGMENTS, each of a rubric this deployment knows (or one the bundle brings
    a snapshot of: its content is checked where it is stored) and a judge ``planning.judge_refusal`` allows, with
    request options a run may set; generations of the run's systems only, each responder allowed by
    ``responder_refusal``; no monitor's run; a callback URL under the callback rules."""
    run = bundle.run
    if run.get("monitor_id") is not None:
        raise field_error(
            ["line 1: run.monitor_id"], "a monitor's internal run cannot be imported: create the monitor here"
        )
    callback_refusal = webhooks.callback_url_refusal(run["callback_url"], settings) if run.get("callback_url") else None
    if callback_refusal is not None:
        raise field_error(["line 1: run.callback_url"], callback_refusal)
    request = bundle_request(bundle)
    for column in ("budget_usd", "execution"):  # the run's columns as its config says: what the gate checked
        if column in run and run[column] != getattr(request, column):
            raise field_error([f"line 1: run.{column}"], f"is not the config's {column} ({getattr(request, column)!r})")
    try:
        admit_run(request, settings, registry)
    except HTTPException as exc:
        raise _in_bundle(exc, bundle) from None
    _admit_judgments(bundle, request, settings, registry)
    ratings = bundle.rows.get("rating", [])
    if len(ratings) > MAX_RATINGS:
        raise field_error(["rating"], f"{len(ratings)} ratings exceed the limit of {MAX_RATINGS}, as a request's")
    systems = request.systems or {}
    seen: set[tuple[str, str]] = set()
    for index, row in enumerate(bundle.rows.get("generation", [])):
        where = bundle.where("generation", index)
        if row["system"] not in systems:
            raise field_error([f"{where}.system"], f"{row['system']!r} is not one of the run's systems")
        if (row["item_key"], row["system"]) in seen:
            raise field_error([where], f"item {row['item_key']!r} by {row['system']!r} twice")
        seen.add((row["item_key"], row["system"]))
        refusal = responder_refusal(row["responder"], settings)
        if refusal is not None:
            raise field_error([f"{where}.responder"], refusal)
        if row.get("status", "pending") not in GENERATION_STATUSES:
            raise field_error([f"{where}.status"], f"must be one of {list(GENERATION_STATUSES)}")
    _admit_label_queue(bundle, {item.id for item in request.items})


def _admit_label_queue(bundle: Bundle, item_ids: set[str]) -> None:
    """A label queue (issue 37) as ``POST /v1/runs/{id}/label-queue`` stores one: one strategy and seed, each item of
    the run once, a probability in (0, 1] (the calibrated estimate divides by it), distinct positions."""
    rows = bundle.rows.get("label_queue_item", [])
    positions: set[int] = set()
    seen: set[str] = set()
    for index, row in enumerate(rows):
        where = bundle.where("label_queue_item", index)
        if row["item_key"] not in item_ids or row["item_key"] in seen:
            raise field_error(
                [f"{where}.item_key"], f"{row['item_key']!r} is not an item of the run, or is queued twice"
            )
        seen.add(row["item_key"])
        if row["strategy"] not in STRATEGIES or (row["strategy"], row["seed"]) != (
            rows[0]["strategy"],
            rows[0]["seed"],
        ):
            raise field_error([f"{where}.strategy"], f"one of {list(STRATEGIES)}, the same on every row of the queue")
        if not 0.0 < float(row["inclusion_probability"]) <= 1.0:
            raise field_error([f"{where}.inclusion_probability"], "must be in (0, 1]")
        position = row.get("position")
        if position is not None and (position < 0 or position in positions):
            raise field_error([f"{where}.position"], "positions are distinct and not negative")
        if position is not None:
            positions.add(position)


def bundle_request(bundle: Bundle) -> RunCreate:
    """The RunCreate the bundle's run was submitted as (its stored config and its items' payloads), or 422."""
    config = bundle.run.get("config")
    if not isinstance(config, dict):
        raise field_error(["line 1: run.config"], "must be the run's config (a JSON object)")
    items = bundle.rows.get("item", [])
    for index, row in enumerate(items):
        payload = row["payload"]
        if not isinstance(payload, dict) or payload.get("id") != row["item_key"]:
            raise field_error([f"{bundle.where('item', index)}.payload"], "must be the item whose id is item_key")
    # a run with systems: an item's generated responses are in its candidates, named as the systems
    systems = config.get("systems") or {}
    payloads = [
        {**row["payload"], "candidates": {k: v for k, v in candidates.items() if k not in systems}}
        if isinstance(candidates := row["payload"].get("candidates"), dict) and isinstance(systems, dict)
        else row["payload"]
        for row in items
    ]
    try:
        return RunCreate.model_validate({**config, "items": payloads})
    except ValidationError as exc:
        problems = [
            {"loc": _bundle_loc(list(e["loc"]), bundle), "msg": e["msg"], "type": e["type"]} for e in exc.errors()
        ]
        raise HTTPException(422, detail=problems) from None


def _admit_judgments(bundle: Bundle, request: RunCreate, settings: Settings, registry: RubricRegistry) -> None:
    judgments = bundle.rows.get("judgment", [])
    systems = {item.id: {*item.candidates, *(request.systems or {})} for item in request.items}
    if len(judgments) > settings.max_judgments_per_run:
        raise field_error(
            ["judgment"],
            f"{len(judgments)} judgments exceed the limit of {settings.max_judgments_per_run} per run "
            "(DJ_MAX_JUDGMENTS)",
        )
    snapshotted = {row["rubric_id"] for row in bundle.rows.get("rubric_snapshot", [])}
    for index, row in enumerate(judgments):
        where = bundle.where("judgment", index)
        _admit_judgment_shape(row, where, request)
        for side in ("system_a", "system_b"):
            if row.get(side) is not None and row[side] not in systems[row["item_key"]]:
                raise field_error([f"{where}.{side}"], f"{row[side]!r} is not a system of item {row['item_key']!r}")
        if row["rubric_version"] == IMPORTED_VERSION:  # a verdict imported from a file: no judge is ever asked
            if row.get("status") not in IMPORTED_STATUSES or not row.get("source"):
                raise field_error(
                    [f"{where}.status"],
                    f"an imported verdict (rubric_version {IMPORTED_VERSION!r}) is one of {sorted(IMPORTED_STATUSES)} "
                    "with the SHA-256 of its file in source",
                )
            continue
        rubric_id = row["rubric_id"]
        if rubric_id not in registry and rubric_id != REFERENCE_RUBRIC and rubric_id not in snapshotted:
            raise field_error(
                [f"{where}.rubric_id"],
                f"unknown rubric {rubric_id!r}: not a rubric of this deployment, and the bundle brings no snapshot "
                "of it",
            )
        refusal = judge_refusal(row["judge"])
        if refusal is not None:
            raise field_error([f"{where}.judge"], refusal)
        params = row["judge_params"]
        if not isinstance(params, dict):
            raise field_error([f"{where}.judge_params"], "must be a JSON object of the run's options")
        try:
            JudgeOptions.model_validate({k: v for k, v in params.items() if k != "outcome_map"})
        except ValidationError as exc:
            first = exc.errors()[0]
            raise field_error(
                [f"{where}.judge_params", *first["loc"]], f"not an option a run may set: {first['msg']}"
            ) from None


def _admit_judgment_shape(row: dict[str, Any], where: str, request: RunCreate) -> None:
    """A judgment row is one the planner could have made for the run: a known status, one of the run's modes with its
    systems (single: system_a only; pairwise: two distinct systems), a sample index not negative, details an object.
    (Such rows stored as they came made the report, the label queue and the judgments list answer 500.)"""
    if row.get("status") not in JUDGMENT_STATUSES:
        raise field_error([f"{where}.status"], f"must be one of {list(JUDGMENT_STATUSES)}")
    modes = list(request.mode) if isinstance(request.mode, list | tuple) else [request.mode]
    if row.get("mode") not in modes:
        raise field_error([f"{where}.mode"], f"must be one of the run's modes {modes}")
    a, b = row.get("system_a"), row.get("system_b")
    if row["mode"] == "single" and (a is None or b is not None):
        raise field_error([f"{where}.system_b"], "a single-mode judgment names system_a and no system_b")
    if row["mode"] == "pairwise" and (a is None or b is None or a == b):
        raise field_error([f"{where}.system_b"], "a pairwise judgment names two distinct systems")
    sample = row.get("sample_index")
    if not isinstance(sample, int) or isinstance(sample, bool) or sample < 0:
        raise field_error([f"{where}.sample_index"], "must be an integer, not negative")
    if row.get("details") is not None and not isinstance(row["details"], dict):
        raise field_error([f"{where}.details"], "must be a JSON object or null")


def _in_bundle(exc: HTTPException, bundle: Bundle) -> HTTPException:
    """A refusal of the bundle's RunCreate, its locations turned into the bundle's lines."""
    if not isinstance(exc.detail, list):
        return exc
    detail = [{**d, "loc": _bundle_loc(list(d["loc"])[1:], bundle)} for d in exc.detail]
    return HTTPException(exc.status_code, detail=detail, headers=exc.headers)


def _bundle_loc(loc: list[Any], bundle: Bundle) -> list[Any]:
    """``items[3].dialogue`` of the RunCreate -> the item's line and field; anything else is the run's config."""
    if len(loc) >= 2 and loc[0] == "items" and isinstance(loc[1], int) and loc[1] < len(bundle.lines.get("item", [])):
        return ["body", f"{bundle.where('item', loc[1])}.payload", *loc[2:]]
    if loc and loc[0] == "items":
        return ["body", "item", *loc[1:]]
    return ["body", "line 1: run.config", *loc]
