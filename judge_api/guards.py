"""Checks on a validated request body that Pydantic cannot express: a value the database cannot store as sent."""

from __future__ import annotations

import json
import math
from typing import Any

from pydantic import BaseModel

from judge_api.errors import MAX_JSON_DEPTH, field_error


class JsonTooDeep(ValueError):
    """A JSON text nests arrays and objects deeper than MAX_JSON_DEPTH."""

    def __init__(self) -> None:
        super().__init__(f"nested too deeply (more than {MAX_JSON_DEPTH} levels of arrays and objects)")


def loads_json(text: str) -> Any:
    """``json.loads`` that refuses deep nesting with JsonTooDeep (a ValueError) rather than a RecursionError (thousands
    of levels) or a value deep enough to trip a later step (validation, storage); json.JSONDecodeError as usual."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise JsonTooDeep() from None
    if text.count("[") + text.count("{") > MAX_JSON_DEPTH and _depth_exceeds(value, MAX_JSON_DEPTH):
        raise JsonTooDeep()
    return value


def _depth_exceeds(value: Any, limit: int) -> bool:
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else None
        if children is None:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False


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
