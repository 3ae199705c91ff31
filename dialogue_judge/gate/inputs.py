"""What the gate compares: read baseline and candidate responses and merge them into one two-system request.

Each side (``--baseline`` / ``--candidate``) is one of

* a run id (``run_<16 hex>``) of the service (``--api``) or of the standalone database,
* a **full items file** (JSONL, or JSON: a list or ``{"items": [...]}``) whose items carry the dialogue context and
  ``candidates`` with one system (or several, one of them picked with ``--baseline-system`` /
  ``--candidate-system``),
* a **responses file**: one ``{"id": "<item id>", "response": "..."}`` per line, with the shared context from
  ``--items ITEMS.jsonl``,
* in Python (the pytest plugin): a ``{item_id: response}`` mapping or a list of item / response dicts.

The merged items carry the context and two candidates, ``baseline`` and ``candidate``. Both sides must cover the
same item ids (else the gate stops with exit 2 and lists the differences) and, when both bring a context, the
contexts must agree (the gate compares responses to the same dialogue).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BASELINE = "baseline"
CANDIDATE = "candidate"
RUN_ID_RE = re.compile(r"^run_[0-9a-f]{16}$")
CONTEXT_FIELDS = ("dialogue", "persona", "memory", "reference")
MAX_LISTED = 10


class GateInputError(ValueError):
    """The gate's input is unusable; the message says why (exit code 2)."""


@dataclass
class Side:
    """One side of the comparison: responses by item id and, when the source has it, each item's context."""

    label: str
    responses: dict[str, str]
    contexts: dict[str, dict[str, Any]] | None = None
    run_id: str | None = None
    system: str | None = None


def is_run_id(spec: object) -> bool:
    return isinstance(spec, str) and RUN_ID_RE.match(spec) is not None and not Path(spec).exists()


def _listing(ids: Sequence[str]) -> str:
    shown = ", ".join(sorted(ids)[:MAX_LISTED])
    more = len(ids) - MAX_LISTED
    return shown + (f" and {more} more" if more > 0 else "")


def read_records(path: Path) -> list[dict[str, Any]]:
    """JSON Lines, or a JSON list / ``{"items": [...]}``; every record must be an object."""
    if not path.is_file():
        raise GateInputError(f"{path}: no such file")
    text = path.read_text(encoding="utf-8")
    records: list[Any]
    if path.suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise GateInputError(f"{path}: not valid JSON: {exc}") from None
        records = data.get("items", data) if isinstance(data, dict) else data
        if not isinstance(records, list):
            raise GateInputError(f"{path}: expected a list of items or {{'items': [...]}}")
    else:
        records = []
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise GateInputError(f"{path}:{number}: not valid JSON: {exc.msg}") from None
    if not records:
        raise GateInputError(f"{path}: no records")
    for number, record in enumerate(records, start=1):
        if not isinstance(record, dict):
            raise GateInputError(f"{path}: record {number} is not a JSON object")
    return records


def _context(record: Mapping[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in record.items() if key not in ("candidates", "response")}


def side_from_records(records: Sequence[Mapping[str, Any]], label: str, system: str | None = None) -> Side:
    """Full items (with ``candidates``) or responses (``{"id", "response"}``) -> one side."""
    responses: dict[str, str] = {}
    contexts: dict[str, dict[str, Any]] = {}
    for number, record in enumerate(records, start=1):
        item_id = record.get("id")
        if not isinstance(item_id, str) or not item_id:
            raise GateInputError(f"{label}: record {number} has no string 'id'")
        if item_id in responses:
            raise GateInputError(f"{label}: item {item_id!r} appears twice")
        if "candidates" in record:
            candidates = record["candidates"]
            if not isinstance(candidates, Mapping) or not candidates:
                raise GateInputError(f"{label}: item {item_id!r} has no candidates")
            if system is not None:
                if system not in candidates:
                    raise GateInputError(
                        f"{label}: item {item_id!r} has no candidate {system!r} (has: {', '.join(sorted(candidates))})"
                    )
                text = candidates[system]
            elif len(candidates) == 1:
                text = next(iter(candidates.values()))
            else:
                raise GateInputError(
                    f"{label}: item {item_id!r} has {len(candidates)} candidates ({', '.join(sorted(candidates))});"
                    " name the one to compare with --baseline-system / --candidate-system"
                )
            contexts[item_id] = _context(record)
        elif "response" in record:
            text = record["response"]
        else:
            raise GateInputError(f"{label}: item {item_id!r} has neither 'candidates' nor 'response'")
        if not isinstance(text, str):
            raise GateInputError(f"{label}: the response for item {item_id!r} is not a string")
        responses[item_id] = text
    if contexts and len(contexts) != len(responses):
        raise GateInputError(f"{label}: mixes full items and bare responses")
    return Side(label, responses, contexts or None, system=system)


def load_side(spec: Any, label: str, system: str | None = None) -> Side:
    """A file path, an in-memory mapping ``{item_id: response}`` or a list of item / response dicts."""
    if isinstance(spec, Side):
        return spec
    if isinstance(spec, Mapping):
        bad = [k for k, v in spec.items() if not isinstance(k, str) or not isinstance(v, str)]
        if bad:
            raise GateInputError(f"{label}: a responses mapping must map item ids to response strings")
        return Side(label, dict(spec))
    if isinstance(spec, (str, Path)):
        path = Path(spec)
        return side_from_records(read_records(path), str(path), system)
    if isinstance(spec, Sequence):
        return side_from_records(list(spec), label, system)
    raise GateInputError(f"{label}: expected a file, a run id, a mapping of responses or a list of items")


def load_items(spec: Any) -> dict[str, dict[str, Any]]:
    """The shared context (``--items``): item id -> the item without its candidates."""
    if isinstance(spec, (str, Path)):
        records = read_records(Path(spec))
        label = str(spec)
    elif isinstance(spec, Sequence):
        records, label = list(spec), "items"
    else:
        raise GateInputError("items: expected a file or a list of item dicts")
    contexts: dict[str, dict[str, Any]] = {}
    for number, record in enumerate(records, start=1):
        item_id = record.get("id") if isinstance(record, Mapping) else None
        if not isinstance(item_id, str):
            raise GateInputError(f"{label}: record {number} has no string 'id'")
        contexts[item_id] = _context(record)
    return contexts


def _same_context(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    return all(a.get(key) == b.get(key) for key in CONTEXT_FIELDS)


def merge_sides(
    baseline: Side, candidate: Side, items: Mapping[str, dict[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """One item per id with the shared context and the candidates ``baseline`` and ``candidate``.

    Raises ``GateInputError`` listing the ids that only one side has, ids without a context, or ids whose
    contexts differ between the two sides.
    """
    only_b = sorted(set(baseline.responses) - set(candidate.responses))
    only_c = sorted(set(candidate.responses) - set(baseline.responses))
    if only_b or only_c:
        parts = []
        if only_b:
            parts.append(f"{len(only_b)} only in the baseline ({_listing(only_b)})")
        if only_c:
            parts.append(f"{len(only_c)} only in the candidate ({_listing(only_c)})")
        raise GateInputError("baseline and candidate do not cover the same items: " + "; ".join(parts))
    ids = sorted(baseline.responses)
    if not ids:
        raise GateInputError("there are no items to compare")
    if items is not None:
        missing = [i for i in ids if i not in items]
        if missing:
            raise GateInputError(f"{len(missing)} item(s) have no context in --items: {_listing(missing)}")
        contexts: Mapping[str, dict[str, Any]] = items
    elif baseline.contexts is not None and candidate.contexts is not None:
        differ = [i for i in ids if not _same_context(baseline.contexts[i], candidate.contexts[i])]
        if differ:
            raise GateInputError(
                f"{len(differ)} item(s) have a different dialogue context in the baseline and the candidate "
                f"({_listing(differ)}); the gate compares responses to the same context (use --items to give it)"
            )
        contexts = baseline.contexts
    elif baseline.contexts is not None or candidate.contexts is not None:
        contexts = baseline.contexts if baseline.contexts is not None else candidate.contexts  # type: ignore[assignment]
    else:
        raise GateInputError("responses files carry no dialogue context: give the items with --items ITEMS.jsonl")
    merged = []
    for item_id in ids:
        context = {k: v for k, v in contexts[item_id].items() if k != "id"}
        merged.append(
            {
                "id": item_id,
                **context,
                "candidates": {BASELINE: baseline.responses[item_id], CANDIDATE: candidate.responses[item_id]},
            }
        )
    return merged


def validate_items(merged: list[dict[str, Any]]) -> list[Any]:
    """Validate the merged items as ``judge_api.schemas.Item``; errors name the item."""
    from pydantic import ValidationError

    from judge_api.schemas import Item

    out = []
    for record in merged:
        try:
            out.append(Item.model_validate(record))
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first.get("loc", ()))
            raise GateInputError(f"item {record.get('id')!r}: {where}: {first.get('msg')}") from None
        if not out[-1].candidates:
            missing = "candidates: an item needs at least one candidate response"
            raise GateInputError(f"item {record.get('id')!r}: {missing}")
    return out
