"""Read human ratings from CSV or JSONL into the API's HumanRatingIn shape.

CSV as spreadsheets write it: a UTF-8 byte-order mark (Excel's "CSV UTF-8") is read, and columns that are not
fields of a rating (a comment, a timestamp) are ignored and named in ``RatingsFile.ignored``. A score's scale is
never guessed: each row carries ``scale_min``/``scale_max`` or the caller gives one scale for the rows that do not
(``dialogue-judge import-ratings --scale-min 1 --scale-max 5``); otherwise the file is refused, with the range of
values it holds.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from judge_api.schemas import HumanRatingIn

NUMERIC = ("value", "scale_min", "scale_max")
FIELDS = tuple(HumanRatingIn.model_fields)


class RatingsFileError(ValueError):
    pass


@dataclass
class RatingsFile:
    """The ratings of a file, ready for ``POST /v1/runs/{id}/human-ratings``."""

    ratings: list[dict[str, Any]]
    rows: list[int]  # the file's row (CSV, header = 1) or line (JSONL) of each rating
    ignored: list[str] = field(default_factory=list)  # CSV columns that are not rating fields
    scale_filled: int = 0  # score ratings that took the scale given by the caller
    unrated: int = 0  # CSV rows with an empty value: a label queue's rows not rated yet (skipped)


def read_ratings(path: Path, fmt: str | None = None, scale: tuple[float, float] | None = None) -> RatingsFile:
    if not path.is_file():
        raise RatingsFileError(f"{path}: no such file")
    fmt = fmt or ("csv" if path.suffix.lower() == ".csv" else "jsonl")
    rows: list[tuple[int, dict[str, Any]]] = []
    ignored: list[str] = []
    unrated = 0
    if fmt == "csv":
        with path.open(newline="", encoding="utf-8-sig") as handle:  # -sig: a byte-order mark is read, not kept
            reader = csv.DictReader(handle)
            columns = [c for c in reader.fieldnames or [] if c is not None]
            ignored = [c for c in columns if c.strip() not in FIELDS]
            for number, row in enumerate(reader, start=2):
                if None in row:
                    raise RatingsFileError(f"{path}: row {number}: more cells than the header has columns")
                kept = {k.strip(): v for k, v in row.items() if k not in ignored and v not in (None, "")}
                if kept and "value" not in kept and "value" in columns:
                    unrated += 1  # a row of `label-queue --csv` nobody has rated yet
                elif kept:
                    rows.append((number, kept))
    elif fmt == "jsonl":
        for number, line in enumerate(path.read_text(encoding="utf-8-sig").splitlines(), start=1):
            if line.strip():
                try:
                    rows.append((number, json.loads(line)))
                except json.JSONDecodeError as exc:
                    raise RatingsFileError(f"{path}:{number}: not valid JSON: {exc.msg}") from None
    else:
        raise RatingsFileError(f"unknown format {fmt!r} (csv or jsonl)")
    for number, row in rows:
        if not isinstance(row, dict):
            raise RatingsFileError(f"{path}: row {number}: a rating is an object")
        for key in NUMERIC:
            if key in row and isinstance(row[key], str):
                try:
                    row[key] = float(row[key])
                except ValueError:
                    raise RatingsFileError(f"{path}: row {number}: {key} {row[key]!r} is not a number") from None
    filled = _fill_scale(path, rows, scale)
    out = []
    for number, row in rows:
        try:
            out.append(HumanRatingIn.model_validate(row).model_dump(mode="json"))
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise RatingsFileError(f"{path}: row {number}: {where + ': ' if where else ''}{first['msg']}") from None
    if not out:
        unfilled = f" ({unrated} rows have no value yet)" if unrated else ""
        raise RatingsFileError(f"{path}: no ratings{unfilled}")
    return RatingsFile(out, [number for number, _ in rows], ignored, filled, unrated)


def _fill_scale(path: Path, rows: list[tuple[int, dict[str, Any]]], scale: tuple[float, float] | None) -> int:
    """Give the caller's scale to the score rows without one; with none given, refuse such rows (never guess)."""
    lacking = [
        (number, row)
        for number, row in rows
        if row.get("kind", "score") == "score" and ("scale_min" not in row or "scale_max" not in row)
    ]
    if not lacking:
        return 0
    if scale is None:
        number, _ = lacking[0]
        values = [row["value"] for _, row in lacking if isinstance(row.get("value"), float | int)]
        seen = f" (its values range {min(values):g}..{max(values):g})" if values else ""
        raise RatingsFileError(
            f"{path}: row {number}: no scale: {len(lacking)} score rating(s) lack scale_min/scale_max{seen}; add "
            "the columns or give the scale with --scale-min and --scale-max (a scale is never guessed)"
        )
    for _, row in lacking:
        row.setdefault("scale_min", scale[0])
        row.setdefault("scale_max", scale[1])
    return len(lacking)
