"""Flag judgments whose untrusted inputs try to steer the judge.

Flags are stored with the judgment (and shown in reports); they never change a score by themselves. Fencing and
neutralisation (workers.prompting) are what keep the injected text from working.
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections import OrderedDict
from typing import Any

from workers.textnorm import normalise

PATTERNS: dict[str, re.Pattern[str]] = {
    "ignore_instructions": re.compile(
        r"\b(ignore|disregard|forget|override)\b[^.\n]{0,40}\b(previous|prior|above|earlier|all|system|judge)\b"
        r"[^.\n]{0,20}\b(instructions?|prompts?|rules?|guidelines?)\b",
        re.IGNORECASE,
    ),
    "role_override": re.compile(
        r"\b(you are now|act as the judge|as the (judge|evaluator)|new instructions?|system prompt)\b", re.IGNORECASE
    ),
    "fake_score": re.compile(
        r"\[\s*\[\s*\d{1,3}(?:\s*/\s*\d{1,3})?\s*\]\s*\]|\b(rating|score)\s*[:=]\s*\d{1,3}\b", re.IGNORECASE
    ),
    "fake_verdict": re.compile(
        r"\[\s*\[\s*[ABC]\s*\]\s*\]|\bresponse\s*[12]\s*is\s*(slightly\s+)?better\b", re.IGNORECASE
    ),
    "score_request": re.compile(
        r"\b(give|rate|score|award)\b[^.\n]{0,30}\b(100|full marks|highest|maximum|perfect)\b", re.IGNORECASE
    ),
    "fence_escape": re.compile(r"<\s*/?\s*untrusted|\[\s*The (Start|End) of|```", re.IGNORECASE),
    "chat_template": re.compile(
        r"<\|\s*(?:im_start|im_end|system|user|assistant|endoftext|eot_id)\s*\|>|\[/?INST\]|<</?SYS>>",
        re.IGNORECASE,
    ),
}


# flags of texts seen lately, by digest: an item's context is the same text for each of its candidates' judgments,
# and a batch run prepares each judgment again when its provider batch is collected (workers.batches)
_SEEN_MAX = 4096
_seen: OrderedDict[bytes, tuple[str, ...]] = OrderedDict()
_seen_lock = threading.Lock()


def detect(text: str) -> list[str]:
    digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()
    with _seen_lock:
        found = _seen.get(digest)
        if found is not None:
            _seen.move_to_end(digest)
            return list(found)
    clean = normalise(text)
    flags = tuple(name for name, pattern in PATTERNS.items() if pattern.search(clean))
    with _seen_lock:
        _seen[digest] = flags
        while len(_seen) > _SEEN_MAX:
            _seen.popitem(last=False)
    return list(flags)


def scan_item(item: dict[str, Any], systems: list[str]) -> list[str]:
    """Flags as ``<where>:<pattern>``, e.g. ``candidate:rsum:fake_score`` or ``dialogue:ignore_instructions``."""
    flags: list[str] = []
    for system in systems:
        for name in detect(item["candidates"][system]):
            flags.append(f"candidate:{system}:{name}")
    context = "\n".join(t["text"] for t in item.get("dialogue") or [])
    persona = item.get("persona") or {}
    context += "\n" + "\n".join((persona.get("user") or []) + (persona.get("bot") or []))
    context += "\n" + (item.get("memory") or "")
    for name in detect(context):
        flags.append(f"context:{name}")
    return sorted(set(flags))
