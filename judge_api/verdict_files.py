"""Read an external judge's verdict file into verdict rows (``schemas.VerdictIn`` fields), for
``POST /v1/runs/{id}/verdicts`` and ``dialogue-judge import-verdicts`` (docs/data-contract.md, "Imported verdicts").

Formats:

* ``csv`` / ``jsonl``: one verdict per row with the ``VerdictIn`` fields (``item_id``, ``system``, ``system_b``,
  ``aspect``, ``judge``, ``score``, ``scale_min``, ``scale_max``, ``verdict``, ``order``, ``explanation``). A CSV may
  start with a UTF-8 BOM; columns that are not verdict fields are ignored and named in the answer.
* ``fastchat-single``: FastChat's ``model_judgment/<judge>_single.jsonl`` (``question_id``, ``model``,
  ``judge: [model, prompt]``, ``user_prompt``, ``judgment``, ``score``, ``turn``): scores on 1-10; ``score: -1``
  (FastChat found no rating in the reply) is stored as an unparseable judgment.
* ``fastchat-pair``: FastChat's ``model_judgment/<judge>_pair.jsonl`` (``question_id``, ``model_1``, ``model_2``,
  ``g1_winner``, ``g2_winner``, ``judge``, ``g1_judgment``, ``g2_judgment``, ``turn``): game 1 showed ``model_1``
  first (order ``ab``), game 2 ``model_2`` first (order ``ba``); FastChat already maps both winners back to the
  model names. Each line gives two verdicts; ``error`` is stored as unparseable.
* ``alpacaeval``: AlpacaEval's annotations JSON (a list of ``instruction``, ``output_1``, ``generator_1``,
  ``output_2``, ``generator_2``, ``annotator``, ``preference``): the item is the run's item whose last user turn is
  the instruction, and both outputs must be that item's candidate texts; ``preference`` 1 = output_1 better, 2 =
  output_2 better, 1.5 = tie (a weighted annotator's value in between: the nearer side; the value is kept in
  ``details``); no preference (0 or null) is unparseable. AlpacaEval randomises the presentation order and stores
  the preference un-swapped, so the order is unknown (None).

FastChat rows name their item by ``item_id`` (a template over ``question_id`` and ``turn``; default
``mtbench-{question_id}-t{turn}``, the ids of ``dialogue-judge import-mtbench``); ``turn`` keeps one turn's rows.
Every error names the row (``row N`` of a CSV counting the header as row 1, ``line N`` of JSON Lines, ``record N``
of a JSON list) and the field.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

FORMATS = ("csv", "jsonl", "fastchat-single", "fastchat-pair", "alpacaeval")
VERDICT_FIELDS = (
    "item_id",
    "system",
    "system_b",
    "aspect",
    "judge",
    "score",
    "scale_min",
    "scale_max",
    "verdict",
    "order",
    "explanation",
)
NUMERIC_FIELDS = ("score", "scale_min", "scale_max")
DEFAULT_ITEM_ID = "mtbench-{question_id}-t{turn}"
FASTCHAT_SCALE = (1.0, 10.0)
_FASTCHAT_WINNER = {"model_1": "A", "model_2": "B", "tie": "tie"}


class VerdictFileError(ValueError):
    """A file that cannot be read as verdicts: ``where`` names the row (or None for the whole file) and ``field``
    the field at fault."""

    def __init__(self, where: str | None, field_name: str | None, message: str) -> None:
        self.where = where
        self.field = field_name
        self.message = message
        super().__init__(": ".join(p for p in (where, field_name, message) if p))


@dataclass
class VerdictFile:
    """The verdict rows of a file: ``(where, fields)`` pairs, ``where`` naming the row in error messages."""

    format: str
    rows: list[tuple[str, dict[str, Any]]]
    sha256: str
    ignored_columns: list[str] = field(default_factory=list)
    scale: tuple[float, float] | None = None
    """The scale the format states for its scores (FastChat single: 1-10), used for rows without their own."""


def sha256_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _text(data: bytes) -> str:
    try:
        return data.decode("utf-8-sig")  # a spreadsheet's CSV starts with a BOM
    except UnicodeDecodeError as exc:
        raise VerdictFileError(None, None, f"not UTF-8 text (byte {exc.start})") from None


def _json_lines(text: str) -> list[tuple[str, Any]]:
    out = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            out.append((f"line {number}", json.loads(line)))
        except json.JSONDecodeError as exc:
            raise VerdictFileError(f"line {number}", None, f"not valid JSON: {exc.msg}") from None
    return out


def _objects(records: list[tuple[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    for where, record in records:
        if not isinstance(record, dict):
            raise VerdictFileError(where, None, f"expected a JSON object, got {type(record).__name__}")
    return records


def detect_format(data: bytes, name: str | None = None) -> str:
    """The format of a verdict file, from its name and its first record."""
    suffix = (name or "").lower().rsplit(".", 1)[-1] if name and "." in name else ""
    if suffix in ("csv", "tsv"):
        return "csv"
    text = _text(data).lstrip()
    if text.startswith("["):
        return "alpacaeval"
    first_line = text.split("\n", 1)[0].strip()
    try:
        first = json.loads(first_line) if first_line else None
    except json.JSONDecodeError:
        first = None
    if not isinstance(first, dict):
        if suffix in ("jsonl", "json", "ndjson"):
            return "jsonl"
        return "csv"
    if "g1_winner" in first or "g2_winner" in first:
        return "fastchat-pair"
    if "question_id" in first and "model" in first and "score" in first:
        return "fastchat-single"
    return "jsonl"


def _number(where: str, name: str, value: Any) -> float | None:
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        raise VerdictFileError(where, name, f"{value!r} is not a number")
    if isinstance(value, (int, float)):
        number = float(value)
    else:
        try:
            number = float(str(value).strip())
        except ValueError:
            raise VerdictFileError(where, name, f"{value!r} is not a number") from None
    if not math.isfinite(number):
        raise VerdictFileError(where, name, f"{value!r} is not a finite number")
    return number


def _rows(data: bytes, fmt: str) -> tuple[list[tuple[str, dict[str, Any]]], list[str]]:
    text = _text(data)
    if fmt == "csv":
        reader = csv.DictReader(io.StringIO(text, newline=""))
        try:
            header = [h for h in (reader.fieldnames or []) if h is not None]
        except csv.Error as exc:
            raise VerdictFileError("row 1", None, f"not readable as CSV: {exc}") from None
        if not header:
            raise VerdictFileError(None, None, "the CSV has no header row")
        ignored = [h for h in header if h.strip() not in VERDICT_FIELDS]
        rows = []
        number = 1
        try:
            for number, row in enumerate(reader, start=2):
                if None in row:
                    raise VerdictFileError(f"row {number}", None, "more cells than the header has columns")
                fields = {k.strip(): v for k, v in row.items() if k.strip() in VERDICT_FIELDS and v not in (None, "")}
                rows.append((f"row {number}", fields))
        except csv.Error as exc:
            raise VerdictFileError(f"row {number + 1}", None, f"not readable as CSV: {exc}") from None
        return rows, ignored
    records = _objects(_json_lines(text))
    ignored = sorted({k for _, r in records for k in r} - set(VERDICT_FIELDS))
    return [(w, {k: v for k, v in r.items() if k in VERDICT_FIELDS}) for w, r in records], ignored


def _require(where: str, record: Mapping[str, Any], *names: str) -> None:
    for name in names:
        if record.get(name) in (None, ""):
            raise VerdictFileError(where, name, "missing")


_TEMPLATE = re.compile(r"^(?:[^{}]|\{question_id\}|\{turn\})*$")


def _item_id(where: str, template: str, record: Mapping[str, Any]) -> str:
    if not _TEMPLATE.match(template):
        raise VerdictFileError(
            where, "item_id", f"the template {template!r} cannot be filled: use {{question_id}} and {{turn}} only"
        )
    return template.format(question_id=record["question_id"], turn=record.get("turn", 1))


def _fastchat_judge(where: str, record: Mapping[str, Any]) -> tuple[str, str | None]:
    raw = record.get("judge")
    if isinstance(raw, (list, tuple)) and raw and isinstance(raw[0], str):
        return raw[0], str(raw[1]) if len(raw) > 1 else None
    if isinstance(raw, str) and raw:
        return raw, None
    raise VerdictFileError(where, "judge", "expected [judge model, prompt name]")


def _turn_of(where: str, record: Mapping[str, Any]) -> int:
    turn = record.get("turn", 1)
    if isinstance(turn, bool) or not isinstance(turn, int):
        raise VerdictFileError(where, "turn", f"{turn!r} is not a turn number")
    return turn


def _fastchat_single(
    data: bytes, judge: str | None, aspect: str | None, turn: int | None, item_template: str
) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for where, record in _objects(_json_lines(_text(data))):
        _require(where, record, "question_id", "model", "judge")
        if "score" not in record:
            raise VerdictFileError(where, "score", "missing")
        row_turn = _turn_of(where, record)
        if turn is not None and row_turn != turn:
            continue
        model, prompt = _fastchat_judge(where, record)
        score = _number(where, "score", record["score"])
        failed = score is None or score == -1  # FastChat writes -1 when the reply held no [[rating]]
        out.append(
            (
                where,
                {
                    "item_id": _item_id(where, item_template, record),
                    "system": record["model"],
                    "aspect": aspect or "overall",
                    "judge": judge or model,
                    "score": None if failed else score,
                    "unparseable": failed,
                    "explanation": record.get("judgment"),
                    "details": {"question_id": record["question_id"], "turn": row_turn, "prompt": prompt},
                },
            )
        )
    return out


def _fastchat_pair(
    data: bytes, judge: str | None, aspect: str | None, turn: int | None, item_template: str
) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for where, record in _objects(_json_lines(_text(data))):
        _require(where, record, "question_id", "model_1", "model_2", "judge")
        row_turn = _turn_of(where, record)
        if turn is not None and row_turn != turn:
            continue
        model, prompt = _fastchat_judge(where, record)
        item_id = _item_id(where, item_template, record)
        games = [(g, order) for g, order in (("g1", "ab"), ("g2", "ba")) if f"{g}_winner" in record]
        if not games:
            raise VerdictFileError(where, "g1_winner", "missing (and no g2_winner)")
        for game, order in games:
            winner = record[f"{game}_winner"]
            if winner != "error" and winner not in _FASTCHAT_WINNER:
                raise VerdictFileError(where, f"{game}_winner", f"{winner!r} is not model_1, model_2, tie or error")
            out.append(
                (
                    f"{where} ({game})",
                    {
                        "item_id": item_id,
                        "system": record["model_1"],
                        "system_b": record["model_2"],
                        "aspect": aspect or "overall",
                        "judge": judge or model,
                        "verdict": _FASTCHAT_WINNER.get(winner),
                        "order": order,
                        "unparseable": winner == "error",
                        "explanation": record.get(f"{game}_judgment"),
                        "details": {"question_id": record["question_id"], "turn": row_turn, "prompt": prompt},
                    },
                )
            )
    return out


def _last_user_text(item: Mapping[str, Any]) -> str | None:
    for turn in reversed(item.get("dialogue") or []):
        if turn.get("speaker") == "user":
            return str(turn.get("text", "")).strip()
    return None


def _alpacaeval(
    data: bytes, judge: str | None, aspect: str | None, items: Sequence[Mapping[str, Any]]
) -> list[tuple[str, dict[str, Any]]]:
    try:
        records = json.loads(_text(data))
    except json.JSONDecodeError as exc:
        raise VerdictFileError(None, None, f"not valid JSON: {exc.msg} (line {exc.lineno})") from None
    if not isinstance(records, list):
        raise VerdictFileError(None, None, "expected a JSON list of annotations")
    by_instruction: dict[str, list[Mapping[str, Any]]] = {}
    for item in items:
        text = _last_user_text(item)
        if text:
            by_instruction.setdefault(text, []).append(item)
    out = []
    for where, record in _objects([(f"record {n}", r) for n, r in enumerate(records, start=1)]):
        _require(where, record, "instruction", "generator_1", "generator_2", "output_1", "output_2")
        if not (judge or record.get("annotator")):
            raise VerdictFileError(where, "annotator", "missing (or name the judge)")
        matches = by_instruction.get(str(record["instruction"]).strip(), [])
        if not matches:
            raise VerdictFileError(where, "instruction", "matches the last user turn of no item of the run")
        if len(matches) > 1:
            ids = ", ".join(str(m["id"]) for m in matches[:5])
            raise VerdictFileError(where, "instruction", f"matches several items of the run ({ids})")
        item = matches[0]
        candidates = item.get("candidates") or {}
        for side in ("1", "2"):
            system = record[f"generator_{side}"]
            if system not in candidates:
                raise VerdictFileError(
                    where, f"generator_{side}", f"{system!r} is not a candidate of item {item['id']!r}"
                )
            if str(candidates[system]).strip() != str(record[f"output_{side}"]).strip():
                raise VerdictFileError(
                    where, f"output_{side}", f"differs from the run's response of {system!r} in item {item['id']!r}"
                )
        preference = _number(where, "preference", record.get("preference"))
        failed = preference is None or preference == 0
        if not failed and preference is not None and not 1.0 <= preference <= 2.0:
            raise VerdictFileError(where, "preference", f"{preference:g} is not between 1 and 2")
        verdict = None
        if not failed and preference is not None:
            verdict = "A" if preference < 1.5 else "B" if preference > 1.5 else "tie"
        details = {"preference": preference}
        if record.get("dataset") is not None:
            details["dataset"] = record["dataset"]
        out.append(
            (
                where,
                {
                    "item_id": item["id"],
                    "system": record["generator_1"],
                    "system_b": record["generator_2"],
                    "aspect": aspect or "overall",
                    "judge": judge or record["annotator"],
                    "verdict": verdict,
                    "unparseable": failed,
                    "explanation": record.get("raw_completion")
                    if isinstance(record.get("raw_completion"), str)
                    else None,
                    "details": details,
                },
            )
        )
    return out


def read_verdict_file(
    data: bytes,
    fmt: str | None = None,
    *,
    name: str | None = None,
    judge: str | None = None,
    aspect: str | None = None,
    turn: int | None = None,
    item_id: str | None = None,
    items: Sequence[Mapping[str, Any]] = (),
) -> VerdictFile:
    """Read ``data`` (``fmt`` or detected) into verdict rows; raises ``VerdictFileError``.

    ``judge`` / ``aspect`` override the file's judge name and aspect; ``turn`` and ``item_id`` (a template over
    ``question_id`` and ``turn``) apply to FastChat files; ``items`` (the run's item payloads) to AlpacaEval's."""
    fmt = fmt or detect_format(data, name)
    if fmt not in FORMATS:
        raise VerdictFileError(None, "format", f"unknown format {fmt!r} (one of {', '.join(FORMATS)})")
    template = item_id or DEFAULT_ITEM_ID
    ignored: list[str] = []
    scale: tuple[float, float] | None = None
    if fmt in ("csv", "jsonl"):
        rows, ignored = _rows(data, fmt)
        for where, row in rows:
            for key in NUMERIC_FIELDS:
                if key in row:
                    row[key] = _number(where, key, row[key])
            if judge is not None:
                row["judge"] = judge
            if aspect is not None:
                row["aspect"] = aspect
    elif fmt == "fastchat-single":
        rows, scale = _fastchat_single(data, judge, aspect, turn, template), FASTCHAT_SCALE
    elif fmt == "fastchat-pair":
        rows = _fastchat_pair(data, judge, aspect, turn, template)
    else:
        rows = _alpacaeval(data, judge, aspect, items)
    if not rows:
        raise VerdictFileError(None, None, "no verdicts" + (f" of turn {turn}" if turn is not None else ""))
    return VerdictFile(fmt, rows, sha256_of(data), ignored, scale)
