"""Read human ratings from CSV or JSONL into the API's HumanRatingIn shape."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from judge_api.schemas import HumanRatingIn

NUMERIC = ("value", "scale_min", "scale_max")


class RatingsFileError(ValueError):
    pass


def read_ratings(path: Path, fmt: str | None = None) -> list[dict[str, Any]]:
    if not path.is_file():
        raise RatingsFileError(f"{path}: no such file")
    fmt = fmt or ("csv" if path.suffix.lower() == ".csv" else "jsonl")
    rows: list[dict[str, Any]] = []
    if fmt == "csv":
        with path.open(newline="", encoding="utf-8") as handle:
            for row in csv.DictReader(handle):
                rows.append({k: v for k, v in row.items() if v not in (None, "")})
    elif fmt == "jsonl":
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise RatingsFileError(f"{path}:{number}: not valid JSON: {exc.msg}") from None
    else:
        raise RatingsFileError(f"unknown format {fmt!r} (csv or jsonl)")
    out = []
    for number, row in enumerate(rows, start=2 if fmt == "csv" else 1):
        for key in NUMERIC:
            if key in row and isinstance(row[key], str):
                try:
                    row[key] = float(row[key])
                except ValueError:
                    raise RatingsFileError(f"{path}: row {number}: {key} {row[key]!r} is not a number") from None
        try:
            out.append(HumanRatingIn.model_validate(row).model_dump(mode="json"))
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise RatingsFileError(f"{path}: row {number}: {where}: {first['msg']}") from None
    if not out:
        raise RatingsFileError(f"{path}: no ratings")
    return out
