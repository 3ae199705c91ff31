"""What a simulated judge is asked and what it decides (``JudgeRequest``, ``Judgement``), and where the judged
responses stand in a prompt (``locate_response``, ``locate_pair``).

Below both the rule evaluation (``behaviour``) and the fact-level judges (``facts``), so that those two import it and
not each other.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .script import Rule

MARKER = re.compile(r"<<q=(\d+(?:\.\d+)?)>>")
"""Planted-quality marker, e.g. ``<<q=83>>``."""

_FLAGS = re.IGNORECASE | re.DOTALL

# Built-in locators, in tiers: the first tier with any match wins, and within a tier the match that
# starts last in the prompt (the judged response normally follows the dialogue context). Each
# project rubric is covered: hardened ``<untrusted-response ...>`` fences (dj-consistency,
# memory-faithfulness), FastChat ``[The Start of ...]`` blocks (mtbench-pair-v2), ``Response:``
# labels inline or on their own line (rsum-single, rsum-pairwise ``response 1: ... response 2:``)
# and fenced code blocks (memochat-consistency) - labels and fences share a tier, so a "Response:"
# inside an earlier fenced dialogue does not beat the fenced response that follows it.
_LABEL = r"(?:response|answer|reply)"
SINGLE_LOCATORS: tuple[tuple[str, ...], ...] = (
    (r"<untrusted-response\b[^>]*>\s*(?P<response>.*?)\s*</untrusted-response",),
    (r"\[The Start of [^\]\n]*?(?:Answer|Response|Reply)\]\s*(?P<response>.*?)\s*\[The End of",),
    (r"<response>\s*(?P<response>.*?)\s*</response>",),
    (
        # a label line of its own ("Response to judge:"), the block runs to the next blank line
        rf"(?m)^[ \t]*(?:[#*]+[ \t]*)?[\w' ]{{0,30}}?\b{_LABEL}(?:[ \t]+to[ \t]+judge)?[ \t]*:"
        r"(?:\*\*)?[ \t]*\n(?P<response>.*?)(?=\n[ \t]*\n|\Z)",
        # an inline label ("Assistant Response: ..."), the response runs to the end of the line
        rf"\b{_LABEL}[ \t]*:[ \t]*(?P<response>[^\n]*\S[^\n]*)",
        # a fenced block (MemoChat fences each part; the response comes last)
        r"```[^\n`]*\n(?P<response>.*?)```",
    ),
)

PAIR_LOCATORS: tuple[tuple[str, ...], ...] = (
    (
        r"<untrusted-response\b[^>]*>\s*(?P<response_1>.*?)\s*</untrusted-response[^>]*>"
        r".*?<untrusted-response\b[^>]*>\s*(?P<response_2>.*?)\s*</untrusted-response",
    ),
    (
        r"\[The Start of Assistant A'?s? [^\]\n]*\]\s*(?P<response_1>.*?)\s*"
        r"\[The End of Assistant A[^\]\n]*\].*?"
        r"\[The Start of Assistant B'?s? [^\]\n]*\]\s*(?P<response_2>.*?)\s*\[The End of Assistant B",
    ),
    (
        r"<response_?(?:1|a)>\s*(?P<response_1>.*?)\s*</response_?(?:1|a)>"
        r".*?<response_?(?:2|b)>\s*(?P<response_2>.*?)\s*</response_?(?:2|b)>",
    ),
    (
        rf"\b{_LABEL}[ \t]*(?:1|A)[ \t]*[:\]][ \t]*\n?(?P<response_1>.*?)\s*"
        rf"\b{_LABEL}[ \t]*(?:2|B)[ \t]*[:\]][ \t]*\n?(?P<response_2>.*?)(?=\n[ \t]*\n|\Z)",
    ),
)


@lru_cache(maxsize=256)
def compile_pattern(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, _FLAGS)


@dataclass(frozen=True)
class JudgeRequest:
    """The provider-independent view of one completion request."""

    model: str
    prompt: str
    """System prompt and all message texts, joined by blank lines."""
    temperature: float = 1.0
    request_seed: int | None = None


@dataclass(frozen=True)
class Judgement:
    """What the simulated judge decided, before wire formatting.

    ``score`` is the single-mode score, or for pairwise the graded preference for response 1
    (+2 better, +1 slightly better, 0 tie, -1/-2 for response 2). ``verdict`` is the verdict
    phrase (empty for single mode); ``verdict_token`` is a short form for structured outputs
    (``A``/``B``/``C`` or ``1``/``2``/``tie``).
    """

    rule: str
    kind: str
    score: float
    verdict: str
    verdict_token: str
    explanation: str
    text: str


def _locate(
    prompt: str, custom: str | None, tiers: tuple[tuple[str, ...], ...], groups: set[str]
) -> re.Match[str] | None:
    """Match of the rule's own ``response_regex`` (last match), else of the built-in tiers."""
    if custom:
        compiled = compile_pattern(custom)
        if groups <= set(compiled.groupindex):
            matches = list(compiled.finditer(prompt))
            if matches:
                return matches[-1]
    for tier in tiers:
        best: re.Match[str] | None = None
        for pattern in tier:
            for match in compile_pattern(pattern).finditer(prompt):
                if best is None or match.start() > best.start():
                    best = match
        if best is not None:
            return best
    return None


def locate_response(prompt: str, rule: Rule) -> str | None:
    """The judged response of a single-score prompt, or None when no locator matches."""
    match = _locate(prompt, rule.response_regex, SINGLE_LOCATORS, {"response"})
    return match.group("response") if match else None


def locate_pair(prompt: str, rule: Rule) -> tuple[str, str] | None:
    """The two responses of a pairwise prompt in presentation order, or None.

    Without labelled blocks, the last two ``<<q=NN>>`` markers in the prompt stand for them.
    """
    match = _locate(prompt, rule.response_regex, PAIR_LOCATORS, {"response_1", "response_2"})
    if match:
        return match.group("response_1"), match.group("response_2")
    markers = MARKER.findall(prompt)
    if len(markers) >= 2:
        return f"<<q={markers[-2]}>>", f"<<q={markers[-1]}>>"
    return None
