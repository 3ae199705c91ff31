"""Judge specs: the strings a run names its judges by.

``openai:<model>``, ``anthropic:<model>``, ``openai-compatible:<model>@<base_url>`` and ``local:<name>`` (the
embedded llama.cpp server). Parsing is pure, so the API can reject an unknown judge before anything is stored.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal
from urllib.parse import urlparse

Provider = Literal["openai", "anthropic", "openai-compatible", "local"]
PROVIDERS: tuple[Provider, ...] = ("openai", "anthropic", "openai-compatible", "local")
LOCAL_MODELS = {"smollm2": "SmolLM2-135M-Instruct.Q4_1.gguf"}
_MODEL_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:/+-]{0,199}$")


class JudgeSpecError(ValueError):
    """A judge string that does not name a judge this service can call."""


@dataclass(frozen=True)
class JudgeSpec:
    provider: Provider
    model: str
    base_url: str | None = None

    @property
    def key(self) -> str:
        """Canonical string; also the rate-limit and cache identity of the judge."""
        if self.provider == "openai-compatible":
            return f"openai-compatible:{self.model}@{self.base_url}"
        return f"{self.provider}:{self.model}"

    @property
    def family(self) -> str:
        name = self.model.lower()
        for needle, family in (
            ("gpt", "openai"),
            ("o1", "openai"),
            ("o3", "openai"),
            ("claude", "anthropic"),
            ("llama", "llama"),
            ("mistral", "mistral"),
            ("mixtral", "mistral"),
            ("qwen", "qwen"),
            ("gemma", "gemma"),
            ("smollm", "smollm"),
        ):
            if needle in name:
                return family
        return self.provider


@lru_cache(maxsize=1024)  # every judgment parses its judge: a frozen spec per string, parsed once
def parse_judge(spec: str) -> JudgeSpec:
    """Parse and validate a judge string; raises JudgeSpecError with the reason."""
    if not isinstance(spec, str) or ":" not in spec:
        raise JudgeSpecError(
            f"judge {spec!r} must look like 'openai:<model>', 'anthropic:<model>', "
            "'openai-compatible:<model>@<base_url>' or 'local:smollm2'"
        )
    provider, _, rest = spec.partition(":")
    if provider not in PROVIDERS:
        raise JudgeSpecError(f"judge {spec!r}: unknown provider {provider!r} (known: {', '.join(PROVIDERS)})")
    if provider == "openai-compatible":
        model, sep, base_url = rest.partition("@")
        if not sep or not base_url:
            raise JudgeSpecError(f"judge {spec!r}: openai-compatible judges need '<model>@<base_url>'")
        parsed = urlparse(base_url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise JudgeSpecError(f"judge {spec!r}: base_url {base_url!r} is not an http(s) URL")
        if parsed.username is not None or parsed.password is not None:  # not echoed: the message may be logged
            raise JudgeSpecError(
                f"judge 'openai-compatible:{model}@...': base_url must not carry credentials (user:password@), "
                "they would be shown with every run's config; give the server's key in OPENAI_COMPATIBLE_API_KEY"
            )
        if not _MODEL_RE.match(model):
            raise JudgeSpecError(f"judge {spec!r}: model name {model!r} is not valid")
        return JudgeSpec("openai-compatible", model, base_url.rstrip("/"))
    if not _MODEL_RE.match(rest):
        raise JudgeSpecError(f"judge {spec!r}: model name {rest!r} is not valid")
    if provider == "local" and rest not in LOCAL_MODELS:
        raise JudgeSpecError(f"judge {spec!r}: unknown local model (known: {', '.join(LOCAL_MODELS)})")
    return JudgeSpec(provider, rest)
