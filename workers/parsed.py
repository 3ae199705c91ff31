"""What a verdict parser returns (``ParsedVerdict``) and the reading every JSON-answering parser shares.

Below the parser registry (``parsing``) and the parsers that check a reply against the judged item (``factcheck``,
``factextract``, ``memoryaudit``): they import this module, the registry imports them, and nothing imports back.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


@dataclass
class ParsedVerdict:
    ok: bool
    score: float | None = None
    verdict: str | None = None
    preference: int | None = None  # for the response shown first
    explanation: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    method: str | None = None


def last_json_object(text: str) -> dict[str, Any] | None:
    """The last *top-level* JSON object in the text (objects nested in it are part of it, not candidates)."""
    decoder = json.JSONDecoder()
    found: dict[str, Any] | None = None
    index = text.find("{")
    while index != -1:
        try:
            value, end = decoder.raw_decode(text, index)
        except json.JSONDecodeError:
            index = text.find("{", index + 1)
            continue
        if isinstance(value, dict):
            found = value
        index = text.find("{", end)
    return found
