"""OTLP spans into monitor responses (docs/monitoring.md#opentelemetry-traces), in two steps.

``receive`` (the request): each span read (``genai``), its monitor found (``dialogue_judge.monitor``, else the
project's default), what cannot be used counted and explained (``partial_success``), and the usable LLM calls stored
``received`` in one bulk insert, once per trace and span id (an exporter's retry inserts nothing), in the caller's
transaction. Nothing else: an export of 512 spans is answered in tens of milliseconds.

``process_received`` (the processors: every sweeper's ``OtlpProcessor`` thread, woken at once in the receiving
process and polling every second elsewhere; tests call it): claims a monitor's received spans in the order received,
exactly once (``repository.otlp.claim_received``), rebuilds their conversations (``conversations``) with the spans
stored before, releases every response whose history is complete (or whose wait is over) once, and hands them to the
monitors' one ingestion path (``judge_api.monitor_ingest``: sampling, budget, items and pending judgments), all in
one transaction: a processor killed half-way leaves the spans ``received`` for the next one, and nothing judged.
``release_due`` is the sweeper's round: responses whose wait ran out with no new span.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from fastapi import HTTPException
from pydantic import ValidationError
from sqlalchemy.orm import Session

from judge_api.admission import monitor_response_refusal
from judge_api.config import Settings
from judge_api.dberrors import is_outage
from judge_api.models import Monitor, utcnow
from judge_api.monitor_ingest import ingest, is_sampled, publish
from judge_api.otlp.conversations import ConversationIndex, Rebuilt
from judge_api.otlp.decode import OtlpError, SpanRecord
from judge_api.otlp.genai import MONITOR_ATTRIBUTE, LlmCall, RawMessages, ReadOptions, Skip, read_span
from judge_api.repository import otlp as spans_store
from judge_api.schemas.monitors import MonitorResponseIn

log = logging.getLogger(__name__)

NO_MONITOR = (
    f"no monitor: set the resource or span attribute {MONITOR_ATTRIBUTE}=<monitor id or name> (e.g. "
    f"OTEL_RESOURCE_ATTRIBUTES={MONITOR_ATTRIBUTE}=<id>), or make a monitor the project's default "
    '(PATCH /v1/monitors/{id} {"otlp_default": true})'
)
MAX_MEMORY = 200_000  # MonitorResponseIn.memory
RELEASE_LIMIT = 2000  # waiting spans looked at per monitor and round


def read_options(settings: Settings) -> ReadOptions:
    return ReadOptions(
        system_attribute=settings.otlp_system_attribute,
        version_attribute=settings.otlp_version_attribute,
        conversation_attribute=settings.otlp_conversation_attribute,
        persona_attribute=settings.otlp_persona_attribute,
        memory_attribute=settings.otlp_memory_attribute,
    )


@dataclass
class Outcome:
    """What became of an export's spans in the request."""

    received: int = 0
    stored: int = 0
    duplicates: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    reasons: dict[str, str] = field(default_factory=dict)
    """A message per kind of span not used (the first of its kind)."""

    @property
    def rejected(self) -> int:
        return sum(self.skipped.values())

    def message(self) -> str:
        """The partial_success message: every kind of span not used, with its count and what to do."""
        parts = [f"{self.skipped[kind]} span(s) {self.reasons[kind]}" for kind in sorted(self.skipped)]
        return "; ".join(parts)


def _note(outcome: Outcome, kind: str, message: str) -> None:
    outcome.skipped[kind] += 1
    outcome.reasons.setdefault(kind, message)


class _Monitors:
    """The caller's monitors by reference (id or name), looked up once per export; another project's is unknown."""

    def __init__(self, session: Session, project_id: str) -> None:
        self.session = session
        self.project_id = project_id
        self._found: dict[str, Monitor | None] = {}
        self._default: Monitor | bool | None = False

    def get(self, ref: str | None) -> Monitor | None:
        if ref is None:
            return self.default()
        if len(ref) > 200 or text_problem(ref) is not None:  # no monitor is named so; the database cannot be asked
            return None
        if ref not in self._found:
            self._found[ref] = spans_store.find_monitor(self.session, self.project_id, ref)
        return self._found[ref]

    def default(self) -> Monitor | None:
        if self._default is False:
            monitor_id = spans_store.default_monitor_id(self.session, self.project_id)
            self._default = self.get(monitor_id) if monitor_id else None
        return self._default if isinstance(self._default, Monitor) else None


def text_problem(text: str) -> str | None:
    """Why a text cannot be stored (PostgreSQL refuses a NUL character, UTF-8 an unpaired surrogate that OTLP/JSON
    can spell as ``\\ud800``), or None."""
    if "\x00" in text:
        return "carries a NUL character (\\u0000), which cannot be stored"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "carries an unpaired surrogate (not valid Unicode text), which cannot be stored"
    return None


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def raw_within(raw: RawMessages, limit: int) -> bool:
    """Whether messages not parsed yet are sure to pass ``call_refusal`` without parsing them: each JSON text is at
    most ``limit`` characters (a message's text is shorter than the JSON it is read from) and spells no NUL
    character and no surrogate (an escaped pair is not told from a lone one here: such texts are parsed). False
    means: parse them to know. The system messages among the inputs and the instructions are joined (the
    response's memory): together they must be within MAX_MEMORY too."""
    if sum(len(text) + 1 for text in (raw.input, raw.instructions) if text is not None) > MAX_MEMORY:
        return False
    for text in (raw.input, raw.instructions):
        if text is None:
            continue
        if len(text) > limit or "\x00" in text or "\\u0000" in text or _SURROGATE_ESCAPE.search(text):
            return False
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return False
    return True


def raw_limit(settings: Settings) -> int:
    return min(settings.max_chars_per_turn, MAX_MEMORY)


def call_refusal(call: LlmCall, settings: Settings) -> str | None:
    """Why a call cannot become a response (texts over the limits, a NUL character or an unpaired surrogate in
    any text stored), or None. Messages not parsed yet (``call.raw``) are parsed here unless ``raw_within`` tells
    they pass."""
    if call.raw is not None and not raw_within(call.raw, raw_limit(settings)):
        call = call.parsed()  # else its messages pass: they are empty here, the other texts are checked below
    texts = [m.text for m in call.messages] + [call.output, call.memory or "", *(call.persona or [])]
    labels = [call.conversation_id, call.model or "", call.system, call.version, call.segment or ""]
    for text in [*texts, *labels, *(m.role for m in call.messages)]:
        problem = text_problem(text)
        if problem is not None:
            return problem
    if len(call.instructions) > MAX_MEMORY:
        return f"has system instructions of {len(call.instructions)} characters, over the limit of {MAX_MEMORY}"
    longest = max(len(t) for t in texts)
    if longest > settings.max_chars_per_turn:
        return (
            f"has a message of {longest} characters, over the limit of {settings.max_chars_per_turn} "
            "(DJ_MAX_CHARS_PER_TURN)"
        )
    return None


def receive(
    session: Session, project_id: str, spans: Sequence[SpanRecord], settings: Settings, now: datetime | None = None
) -> Outcome:
    """Store the export's usable LLM calls ``received`` (one bulk insert; a known trace and span id is a duplicate)
    and count the rest, in the caller's transaction; ``process_received`` does the rest. Raises OtlpError (400:
    nothing usable; 413: over DJ_MAX_ITEMS) with the counts recorded on the monitors named."""
    now = now or utcnow()
    outcome = Outcome(received=len(spans))
    if len(spans) > settings.max_items_per_run:
        raise OtlpError(
            413,
            f"{len(spans)} spans exceed the limit of {settings.max_items_per_run} per export (DJ_MAX_ITEMS): "
            "send smaller batches (OTEL_BSP_MAX_EXPORT_BATCH_SIZE)",
        )
    monitors = _Monitors(session, project_id)
    options = replace(read_options(settings), defer_messages=True)
    by_monitor: dict[str, list[LlmCall]] = defaultdict(list)
    found: dict[str, Monitor] = {}
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    notes: dict[str, str] = {}
    rejections: dict[str, str] = {}
    for span in spans:
        read = read_span(span, options)
        monitor = monitors.get(read.monitor)
        if isinstance(read, Skip):
            _note(outcome, read.kind, _skip_reason(read))
            if monitor is not None:
                counts[monitor.id]["spans"] += 1
                counts[monitor.id][read.kind if read.kind != "invalid" else "rejected"] += 1
                found[monitor.id] = monitor
                if read.kind == "no_content":
                    notes[monitor.id] = read.message
                elif read.kind == "invalid":
                    rejections[monitor.id] = read.message
            continue
        if monitor is None:
            if read.monitor is None:
                _note(outcome, "no_monitor", NO_MONITOR)
            else:
                _note(
                    outcome, "unknown_monitor", f"name a monitor this key's project does not have ({MONITOR_ATTRIBUTE})"
                )
            continue
        found[monitor.id] = monitor
        counts[monitor.id]["spans"] += 1
        if read.raw is not None and not raw_within(read.raw, raw_limit(settings)):
            # parsed to be checked: stored parsed, as the span's text may be far larger (inline media, history)
            read = read.parsed()
        refusal = call_refusal(read, settings)
        if refusal is not None:
            _note(outcome, "invalid", refusal)
            counts[monitor.id]["rejected"] += 1
            rejections[monitor.id] = f"span {read.response_id} {refusal}"[:500]
            continue
        by_monitor[monitor.id].append(read)
    day = now.date().isoformat()
    if not by_monitor and set(outcome.skipped) - {"not_llm", "tool_call"}:
        spans_store.add_stats(session, list(found), day, {k: dict(v) for k, v in counts.items()}, notes, rejections)
        raise OtlpError(400, "no span of the export could be used: " + outcome.message())
    release_after = now + timedelta(seconds=settings.otlp_wait_s)
    rows = [
        {
            "monitor_id": monitor_id,
            "response_id": call.response_id,
            "conversation_id": call.conversation_id,
            "started_at": started_at(call, now),
            "received_at": now,
            "release_after": release_after,
            "status": spans_store.RECEIVED,
            "call": call.to_json(),
        }
        for monitor_id, calls in by_monitor.items()
        for call in {c.response_id: c for c in calls}.values()
    ]
    inserted = spans_store.insert_spans(session, rows)
    for monitor_id, calls in by_monitor.items():
        fresh = sum(1 for m, _ in inserted if m == monitor_id)
        outcome.stored += fresh
        outcome.duplicates += len(calls) - fresh
        counts[monitor_id]["duplicates"] += len(calls) - fresh
    spans_store.add_stats(session, list(found), day, {k: dict(v) for k, v in counts.items()}, notes, rejections)
    return outcome


def _skip_reason(skip: Skip) -> str:
    if skip.kind == "not_llm":
        return "are not LLM calls (skipped)"
    if skip.kind == "tool_call":
        return (
            "are LLM calls answering with a tool call, no text to judge (skipped; the answer after the tool is judged)"
        )
    if skip.kind == "no_content":
        return "are LLM calls without message content: " + skip.message.split(": ", 1)[-1]
    return "are malformed: " + skip.message


def started_at(call: LlmCall, now: datetime) -> datetime:
    if call.started_ns <= 0:
        return now
    moment = datetime.fromtimestamp(call.started_ns / 1e9, UTC).replace(tzinfo=None)
    return moment if datetime(1970, 1, 2) <= moment < datetime(9000, 1, 1) else now


def conversation_key(call: LlmCall) -> tuple[str, str]:
    """The conversation a call belongs to: its conversation id within its system (two services of one monitor may
    number their conversations alike: neither's turns are the other's history); a call without one is alone."""
    if not call.conversation_id:
        return ("\x00", call.response_id)
    return (call.system, call.conversation_id)


@dataclass
class Settled:
    """A monitor's share of a processing step (or of a sweep): the responses released now, how many of them were
    judged with earlier turns missing, spans still waiting among those looked at."""

    responses: list[MonitorResponseIn]
    waited: int
    waiting: int
    refused: list[str] = field(default_factory=list)
    """Why each response released but refused (its span counted ``rejected``, the last reason kept as the day's
    ``last_rejected``): checked at receipt, a response can still fail a limit that changed since, or the dialogue
    rebuilt of it."""


def settle(
    session: Session, monitor: Monitor, claimed_ids: Sequence[int], now: datetime, settings: Settings
) -> Settled:
    """Release every response that is ready among the spans just claimed, the waiting spans of their conversations
    and the spans whose wait is over: its conversation's history complete with the spans stored (whatever their
    state: a span received and not processed yet is history already), or its wait over. Each release is a
    compare-and-set from ``waiting`` (another processor may release a span first: it is then not handed over
    here); spans still ``received`` are their own processor's to release."""
    claimed = spans_store.rows_by_id(session, claimed_ids)
    conversations = {r.conversation_id for r in claimed if r.conversation_id}
    due = [
        r
        for r in spans_store.due_rows(session, monitor.id, now, RELEASE_LIMIT)
        if r.conversation_id not in conversations
    ]
    conversations |= {r.conversation_id for r in due if r.conversation_id}
    rows = {r.id: r for r in spans_store.conversation_rows(session, monitor.id, conversations)}
    rows.update({r.id: r for r in [*claimed, *due] if not r.conversation_id})
    groups: dict[tuple[str, str], list[tuple[spans_store.SpanRow, LlmCall]]] = defaultdict(list)
    for row in sorted(rows.values(), key=lambda r: r.id):
        call = LlmCall.from_json(row.call)
        groups[conversation_key(call)].append((row, call))
    ready: list[tuple[spans_store.SpanRow, LlmCall, Rebuilt]] = []
    waiting = 0
    hold = settings.otlp_hold == "always"  # every response of a conversation waits DJ_OTLP_WAIT
    for members in groups.values():
        index = ConversationIndex([call for _, call in members], settings.otlp_session_gap_s)
        for row, call in members:
            if row.status != spans_store.WAITING:
                continue
            rebuilt = index.rebuild(call)
            if (rebuilt.complete and not (hold and call.conversation_id)) or row.release_after <= now:
                ready.append((row, call, rebuilt))
            else:
                waiting += 1
    released = spans_store.release(session, [row.id for row, _, _ in ready])
    responses: list[MonitorResponseIn] = []
    refused: list[str] = []
    waited = 0
    for row, call, rebuilt in ready:
        if row.id not in released:
            continue
        response = to_response(call, rebuilt, row.received_at, row.started_at, now, settings)
        if isinstance(response, str):
            refused.append(response)
        else:
            responses.append(response)
            waited += 0 if rebuilt.complete else 1  # judged with earlier turns missing (a refused one is not judged)
    return Settled(responses, waited, waiting, refused)


def to_response(
    call: LlmCall, rebuilt: Rebuilt, received_at: datetime, started: datetime, now: datetime, settings: Settings
) -> MonitorResponseIn | str:
    """The monitor response of a call: its rebuilt dialogue, the instructions as memory (or persona), its slice
    keys; the item's ``meta.otlp`` says where it came from and whether earlier turns were missing. Else why it
    cannot be one."""
    turns = [
        {"speaker": "bot" if t.speaker == "bot" else "user", "text": t.text, "session": t.session}
        for t in rebuilt.dialogue
    ]
    dropped = max(0, len(turns) - settings.max_turns_per_item)
    turns = turns[dropped:]
    instructions = call.instructions
    persona_lines = list(call.persona or [])
    memory = call.memory
    if instructions:
        if settings.otlp_instructions_as == "persona":
            persona_lines = [*persona_lines, *[line for line in instructions.splitlines() if line.strip()]]
        elif memory is None:
            memory = instructions
    meta: dict[str, Any] = {
        "trace_id": call.trace_id,
        "span_id": call.span_id,
        "conversation_id": call.conversation_id or None,
        "convention": call.convention,
        "model": call.model,
        "session": rebuilt.session,
        "complete": rebuilt.complete,
    }
    if not rebuilt.complete:
        waited = (now - received_at).total_seconds()
        meta["incomplete"] = (
            f"judged after waiting {waited:.0f} s (DJ_OTLP_WAIT) with {rebuilt.missing} earlier exchange(s) of the "
            "conversation missing: their spans had not arrived"
        )
    if dropped:
        meta["dropped_turns"] = dropped
    try:
        response = MonitorResponseIn(
            id=call.response_id,
            dialogue=turns,  # type: ignore[arg-type]
            persona={"user": [], "bot": persona_lines} if persona_lines else None,  # type: ignore[arg-type]
            memory=memory,
            response=call.output,
            system=call.system,
            version=call.version,
            segment=call.segment,
            timestamp=started,
            meta={"otlp": meta},
        )
    except ValidationError as exc:  # checked at receipt (call_refusal); a release must not fail the others
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"])
        reason = f"span {call.response_id} cannot become a response: {where}: {error['msg']}"
    else:
        refusal = monitor_response_refusal(response, settings)
        if refusal is None:
            return response
        reason = f"span {call.response_id} cannot become a response: {refusal[1]}"
    log.warning("OTLP %s", reason)
    return reason[:500]


PROCESS_BATCH = 256
"""Spans claimed per monitor and transaction: small enough that SQLite's one writer is held tens of milliseconds
(requests wait for it), large enough to keep up with thousands of spans a second."""

received_event = threading.Event()
"""Set by the receiver after a commit that stored spans: this process's processor wakes at once."""

YIELD_TO_EXPORTS_S = 0.25
"""How long a processor step waits at most for this process's exports in flight to be answered first."""

_exports = threading.Condition()
_exports_in_flight = 0


@contextmanager
def export_in_flight() -> Iterator[None]:
    """An export being received by this process: its processor waits for it before taking its next step."""
    global _exports_in_flight
    with _exports:
        _exports_in_flight += 1
    try:
        yield
    finally:
        with _exports:
            _exports_in_flight -= 1
            _exports.notify_all()


def yield_to_exports(limit_s: float = YIELD_TO_EXPORTS_S) -> None:
    """Wait (``limit_s`` at most) until no export is in flight in this process. In the API process the processor
    shares the interpreter (and SQLite's one writer) with the receiver: a step taken while an export is read slows
    its answer by the step's length. The exporter waits for the answer; the spans' processing can wait a little."""
    deadline = time.monotonic() + limit_s
    with _exports:
        while _exports_in_flight and (left := deadline - time.monotonic()) > 0:
            _exports.wait(left)


BLOCKED_RETRY_S = 30.0
"""A monitor whose step failed (its config no longer plans, a fault of ours) is tried again by this process after
this long, not at every look: its spans stay ``received``/``waiting`` (nothing lost) without spinning a processor on
them, and it neither stops nor crowds out the other monitors' processing."""

_blocked: dict[str, tuple[float, str | None]] = {}
"""monitor id -> (monotonic time this process tries it again, the monitor's config when its step failed: None when
the step failed before the monitor was read, which no config change lifts)"""
_part_limit: dict[str, tuple[int, str]] = {}
"""monitor id -> (sampled responses ingested at a time, the monitor's config it was found with): DJ_MAX_JUDGMENTS
was hit. A config changed since (fewer judges, aspects or rubrics a response) starts again from all at once."""
_blocked_lock = threading.Lock()


def blocked_monitors(session: Session | None = None) -> list[str]:
    """The monitors this process leaves aside for now (a failed step, BLOCKED_RETRY_S ago at most). With a session,
    a monitor whose config changed since its step failed (a PATCH that fixes it) is tried again at once."""
    now = time.monotonic()
    with _blocked_lock:
        for monitor_id in [m for m, (until, _) in _blocked.items() if until <= now]:
            del _blocked[monitor_id]
        blocked = dict(_blocked)
    if session is not None and blocked:
        configs = spans_store.monitor_configs(session, list(blocked))
        with _blocked_lock:
            for monitor_id, (_, key) in blocked.items():
                if key is not None and monitor_id in configs and _config_key(configs[monitor_id]) != key:
                    _blocked.pop(monitor_id, None)
            return sorted(_blocked)
    return sorted(blocked)


def _block(monitor_id: str, config_key: str | None) -> None:
    with _blocked_lock:
        _blocked[monitor_id] = (time.monotonic() + BLOCKED_RETRY_S, config_key)


def _step(session: Session, monitor_id: str, claim: int, now: datetime, settings: Settings) -> int | None:
    """One transaction of one monitor: claim up to ``claim`` received spans, release what is ready, ingest it,
    count it, commit, publish. The responses ingested; None when nothing was claimed or released, or when the
    step failed (the spans are left as they were: claimed ones ``received`` again, released ones ``waiting``): the
    monitor's config no longer plans or any other fault but a database outage leaves the monitor aside for
    BLOCKED_RETRY_S in this process, never stopping the other monitors' processing."""
    limit: int | None = None
    sampled = 0
    config_key: str | None = None  # known once the monitor is read: a failure before is not lifted by a PATCH
    try:
        if not spans_store.lock_monitor(session, monitor_id):  # another processor has it: in order, one at a time
            session.rollback()
            return None
        monitor = session.get(Monitor, monitor_id)
        if monitor is None:
            session.rollback()
            return None
        config_key = _config_key(monitor.config)  # before anything that may fail (settle reads the stored spans)
        claimed = spans_store.claim_received(session, monitor_id, claim) if claim else []
        settled = settle(session, monitor, claimed, now, settings)
        responses = settled.responses
        limit = 1 if monitor.daily_budget_usd is not None else _known_part_limit(monitor_id, config_key)
        sampled = sum(1 for r in responses if is_sampled(monitor.id, r.id, monitor.sample_rate))
        done = [
            ingest(session, monitor, part, settings, fresh_spend=monitor.daily_budget_usd is not None)
            for part in ingest_parts(monitor, responses, limit)
        ]
        if responses or settled.refused:  # last: the monitor row is locked from here to the commit only
            counts = {
                monitor_id: {"responses": len(responses), "waited": settled.waited, "rejected": len(settled.refused)}
            }
            rejected = {monitor_id: settled.refused[-1]} if settled.refused else {}
            spans_store.add_stats(session, [monitor_id], now.date().isoformat(), counts, {}, rejected)
        session.commit()
    except (HTTPException, OtlpError) as exc:  # the monitor's config no longer plans: left as they were
        session.rollback()
        over = isinstance(exc, HTTPException) and exc.status_code == 413 and (limit or sampled) > 1
        if over and config_key is not None:  # (limit and sampled are known after the config only)
            # planned together, the part's sampled responses exceed DJ_MAX_JUDGMENTS: halve it, the next look
            # (a second away) takes the step again in smaller parts
            _part_limit[monitor_id] = (max(1, (limit or sampled) // 2), config_key)
            log.warning(
                "OTLP responses of monitor %s over DJ_MAX_JUDGMENTS: ingested %d sampled at a time from now",
                monitor_id,
                _part_limit[monitor_id][0],
            )
            return None
        _block(monitor_id, config_key)
        log.warning(
            "OTLP responses of monitor %s not processed (tried again in %.0f s): %s", monitor_id, BLOCKED_RETRY_S, exc
        )
        return None
    except Exception as exc:
        session.rollback()
        if is_outage(exc):  # a deadlock with another monitor's ingestion, the database away: next look
            log.warning("OTLP responses of monitor %s not processed now, retried: %s", monitor_id, exc)
            return None
        # a fault of ours with this monitor's spans (a deterministic database error too): the others go on
        _block(monitor_id, config_key)
        log.exception("OTLP responses of monitor %s not processed (tried again in %.0f s)", monitor_id, BLOCKED_RETRY_S)
        return None
    except BaseException:
        session.rollback()
        raise
    judgment_ids = [i for ingested in done for i in ingested.judgment_ids]
    for ingested in done:
        ingested.after_commit()
    if judgment_ids:
        publish(settings, judgment_ids)
    return len(responses) if claimed or responses else None


def _config_key(config: Any) -> str:
    return json.dumps(config, sort_keys=True, default=str)


def _known_part_limit(monitor_id: str, config_key: str) -> int | None:
    """The part size a 413 taught this process for the monitor's current config (None: all at once)."""
    known = _part_limit.get(monitor_id)
    if known is None:
        return None
    if known[1] != config_key:
        _part_limit.pop(monitor_id, None)
        return None
    return known[0]


def ingest_parts(
    monitor: Monitor, responses: list[MonitorResponseIn], limit: int | None
) -> list[list[MonitorResponseIn]]:
    """The responses of a step in the parts ingested one after the other, each ending after ``limit`` responses the
    sample takes (None: all at once). With a daily budget the limit is 1, so the budget is read again (in the
    transaction, its judgments counted) before each sampled response, as if each had been posted alone (a step
    releases hundreds: looked at once, the budget let the whole step be sampled past it). Without one, a part's
    limit is halved each time its sampled responses planned together exceed DJ_MAX_JUDGMENTS (``_part_limit``)."""
    if not responses:
        return []
    if limit is None:
        return [responses]
    parts: list[list[MonitorResponseIn]] = [[]]
    taken = 0
    for response in responses:
        parts[-1].append(response)
        if is_sampled(monitor.id, response.id, monitor.sample_rate):
            taken += 1
            if taken == limit:
                parts.append([])
                taken = 0
    return [part for part in parts if part]


def process_received(
    session_factory: Any, settings: Settings, now: datetime | None = None, batch: int = PROCESS_BATCH
) -> int:
    """Process every span received so far, each monitor's in the order received, ``batch`` spans a transaction;
    returns how many responses were handed to their monitors. Any number of processors may run at once (each span
    is claimed by one); a monitor whose config no longer plans is skipped until it does."""
    total = 0
    session: Session = session_factory()
    try:
        while True:
            monitor_ids = spans_store.received_monitors(session, exclude=blocked_monitors(session))
            session.rollback()
            progressed = False
            for monitor_id in monitor_ids:
                if monitor_id in _blocked:  # failed in this call
                    continue
                yield_to_exports()
                done = _step(session, monitor_id, batch, now or utcnow(), settings)
                if done is not None:
                    total += done
                    progressed = True
            if not progressed:
                return total
    finally:
        session.close()


def release_due(session_factory: Any, settings: Settings, now: datetime | None = None, *, purge: bool = True) -> int:
    """Ingest the responses whose wait is over (their earlier turns never arrived) and, with ``purge``, purge
    history older than DJ_OTLP_HISTORY_DAYS; returns how many responses were ingested. Each monitor in a transaction
    of its own; the judgments are published after its commit. Every processor's look (each second: the wait bound
    is DJ_OTLP_WAIT + about a second, with or without Redis) and the sweeper's round."""
    now = now or utcnow()
    total = 0
    session: Session = session_factory()
    try:
        blocked = set(blocked_monitors(session))
        monitor_ids = [m for m in spans_store.due_monitors(session, now) if m not in blocked]
        session.rollback()
        for monitor_id in monitor_ids:
            total += _step(session, monitor_id, 0, now, settings) or 0
        if purge:
            spans_store.purge_history(session, now - timedelta(days=settings.otlp_history_days))
            session.commit()
    finally:
        session.close()
    return total
