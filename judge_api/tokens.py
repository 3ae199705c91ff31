"""Token counts of prompt text before it is sent (the estimate; is a prefix long enough to be cached?).

OpenAI judges are counted with OpenAI's own tokenizer: ``bpe-openai`` ships the o200k_base (gpt-4o, gpt-4.1, gpt-5,
o-series) and cl100k_base (gpt-4, gpt-3.5) vocabularies inside the package, so nothing is downloaded at run time
(tiktoken fetches its BPE files from the internet on first use). A chat request adds a few tokens per message
(``MESSAGE_OVERHEAD``), as OpenAI's cookbook counts them.

Every other judge is approximated: Anthropic publishes no offline tokenizer (its count_tokens is an API call), and
self-hosted models have their own. The approximation is ``APPROX_CHARS_PER_TOKEN`` characters a token, the
average of o200k_base on English dialogue text; Anthropic's tokenizer is denser on English (more tokens per
character), so the estimate of a Claude judge's input tends to be low by up to ~15-20 %: the estimate says so.
"""

from __future__ import annotations

import threading
from functools import lru_cache
from typing import Any

from judge_api.judges import JudgeSpec

APPROX_CHARS_PER_TOKEN = 3.8
MESSAGE_OVERHEAD = 4  # tokens a chat message adds around its content (role, separators)
REPLY_PRIMING = 3  # every reply is primed with <|start|>assistant<|message|>

_lock = threading.Lock()


def encoding_name(spec: JudgeSpec) -> str | None:
    """The OpenAI tokenizer of an ``openai:`` judge, None for judges counted by approximation."""
    if spec.provider != "openai":
        return None
    model = spec.model
    if model.startswith(("gpt-4-", "gpt-3.5")) or model == "gpt-4":
        return "cl100k_base"
    return "o200k_base"


@lru_cache(maxsize=4)
def _encoding(name: str) -> Any:
    import bpe_openai  # imported on first use: ~0.2 s to load a vocabulary

    with _lock:
        return bpe_openai.get_encoding(name)


def warm_up(name: str = "o200k_base") -> None:
    """Load an OpenAI vocabulary now (about 0.8 s of CPU holding the GIL, ~150 MB) instead of in the first call
    that counts tokens (workers.runtime.warm_tokenizer)."""
    _encoding(name)


def exact(spec: JudgeSpec) -> bool:
    """Is ``count_text`` the provider's own count for this judge?"""
    return encoding_name(spec) is not None


def count_text(spec: JudgeSpec, text: str, chars_per_token: float | None = None) -> int:
    """Tokens of ``text`` for ``spec``'s model (exact for OpenAI judges, approximated otherwise: at
    ``chars_per_token`` when given, e.g. a ratio observed on the judge's earlier calls, else the stated one)."""
    name = encoding_name(spec)
    if name is None:
        return round(len(text) / (chars_per_token or APPROX_CHARS_PER_TOKEN))
    return len(_encoding(name).encode_ordinary(text))


def count_messages(spec: JudgeSpec, messages: list[dict[str, str]], chars_per_token: float | None = None) -> int:
    """Input tokens of a chat request with ``messages``."""
    return sum(count_text(spec, m["content"], chars_per_token) + MESSAGE_OVERHEAD for m in messages) + REPLY_PRIMING


def request_overhead(messages: list[dict[str, str]]) -> int:
    """The tokens :func:`count_messages` adds to the messages' content."""
    return len(messages) * MESSAGE_OVERHEAD + REPLY_PRIMING
