"""Token log-probabilities for OpenAI-style replies (``logprobs: true``, ``top_logprobs: n``).

The reply text is cut into tokens the way common BPE tokenizers do for judge replies: a run of digits is one token
(``"85"``, as cl100k/o200k/Llama 3 encode numbers up to three digits) or, with ``digit_tokens: single``, one token
per digit (tokenizers that split digits, like SmolLM2's); a word with its leading space is one token; every other
character is a token. Every token is certain (logprob 0) except the score of a single-mode verdict (the last
``[[n]]``, else the last ``"score": n``): with the script's ``logprob_spread`` (offset -> probability, e.g.
``{"-1": 0.2, "1": 0.1}``) its alternatives are ``n-1`` with p=0.2 and ``n+1`` with p=0.1, and ``n`` keeps the
rest (0.7). So a test can compute the expected score by hand.
"""

from __future__ import annotations

import math
import re
from typing import Any, Literal

DigitTokens = Literal["whole", "single"]
_TOKENS = {
    "whole": re.compile(r"\d+| ?[A-Za-z]+|\s+|."),
    "single": re.compile(r"\d| ?[A-Za-z]+|\s+|."),
}
_SCORE_AT = (re.compile(r"\[\[\s*(\d+)\s*\]\]"), re.compile(r"\"score\"\s*:\s*(\d+)"))


def _score_start(text: str) -> int | None:
    for pattern in _SCORE_AT:
        matches = list(pattern.finditer(text))
        if matches:
            return matches[-1].start(1)
    return None


def _entry(token: str, logprob: float, top: list[tuple[str, float]]) -> dict[str, Any]:
    return {
        "token": token,
        "logprob": logprob,
        "bytes": list(token.encode()),
        "top_logprobs": [{"token": t, "logprob": lp, "bytes": list(t.encode())} for t, lp in top],
    }


def logprobs_object(
    text: str, top_n: int, spread: dict[int, float], digits: DigitTokens = "whole", single: bool = True
) -> dict[str, Any]:
    """The ``choices[i].logprobs`` object of a chat completion for ``text``."""
    score_start = _score_start(text) if single else None
    content: list[dict[str, Any]] = []
    for match in _TOKENS[digits].finditer(text):
        token = match.group(0)
        if match.start() == score_start and token.isdigit() and spread:
            value = int(token)
            rest = 1.0 - sum(spread.values())
            alternatives = [(token, math.log(rest))] + [
                (str(value + offset), math.log(p)) for offset, p in sorted(spread.items()) if value + offset >= 0
            ]
            alternatives.sort(key=lambda a: -a[1])
            content.append(_entry(token, math.log(rest), alternatives[:top_n]))
        else:
            content.append(_entry(token, 0.0, [(token, 0.0)][:top_n]))
    return {"content": content, "refusal": None}
