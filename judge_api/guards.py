"""Checks on a validated request body that Pydantic cannot express: a value the database cannot store as sent."""

from __future__ import annotations

import json
import math
from typing import Any

from pydantic import BaseModel

from judge_api.errors import field_error


def _value_problem(value: Any) -> str | None:
    if isinstance(value, str):
        if "\x00" in value:
            return "contains a NUL character (\\u0000), which cannot be stored"
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return "contains an unpaired surrogate (not valid Unicode text)"
    elif isinstance(value, float) and not math.isfinite(value):
        return "must be a finite number (NaN and Infinity cannot be stored)"
    return None


def _find_unstorable(value: Any, loc: list[str | int]) -> tuple[list[str | int], str] | None:
    problem = _value_problem(value)
    if problem:
        return loc, problem
    if isinstance(value, dict):
        for key, child in value.items():
            key_problem = _value_problem(key)
            if key_problem:
                return [*loc, str(key).replace("\x00", "\\u0000")], f"key {key_problem}"
            found = _find_unstorable(child, [*loc, key])
            if found:
                return found
    elif isinstance(value, (list, tuple)):
        for index, child in enumerate(value):
            found = _find_unstorable(child, [*loc, index])
            if found:
                return found
    return None


def check_storable(model: BaseModel) -> None:
    """422 naming the field when a value cannot be stored as sent (NUL, lone surrogate, NaN / Infinity).

    One JSON encoding of the whole body is the fast path; only a body that fails it is walked field by field.
    """
    data = model.model_dump(mode="python")
    try:
        encoded = json.dumps(data, ensure_ascii=False, allow_nan=False, default=str)
        encoded.encode("utf-8")
        if "\\u0000" not in encoded:
            return
    except (ValueError, UnicodeEncodeError):
        pass
    found = _find_unstorable(data, [])
    if found:
        raise field_error(found[0], found[1])
