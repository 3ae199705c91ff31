"""Shared patterns, bounds and field checks of the request models."""

from __future__ import annotations

from typing import Literal, TypeVar
from urllib.parse import urlsplit

from pydantic import SecretStr

T = TypeVar("T")
ADAPTIVE_MAX_SAMPLES = 5
Speaker = Literal["user", "bot"]
Mode = Literal["single", "pairwise"]
ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:@/+-]{0,199}$"
SYSTEM_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:@/+ -]{0,99}$"
RATING_BOUND = 1e9  # human rating values and scales: finite and at most this large
# every numeric request field has a range (issue 14): a value outside is a 422 naming the field, never stored
MAX_SEED = 2**32 - 1  # order and planner seeds (Python's random takes any integer; this is plenty)
MAX_JUDGE_SEED = 2**31 - 1 - 16  # a judge's seed, plus the sample index, fits the providers' 32-bit seeds
MAX_BUDGET_USD = 1_000_000.0
MAX_SESSION = 10_000
MAX_SCORE = 1e6  # sample margins and boundaries: on a rubric's scale


CALLBACK_SECRET_MIN = 16


def check_callback_url(value: str | None) -> str | None:
    """A webhook URL: http(s) with a host (where it may point is checked against the allowlist rules later)."""
    if value is None:
        return None
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("callback_url must be an http:// or https:// URL with a host")
    if parts.username or parts.password:
        raise ValueError("callback_url must not carry credentials (user:password@); sign with callback_secret")
    return value


def check_callback_secret(value: SecretStr | None, url: str | None) -> SecretStr | None:
    """The HMAC key of a webhook: required with a callback_url (an unsigned callback cannot be trusted), refused
    without one."""
    if url is not None and value is None:
        raise ValueError("callback_secret is required with callback_url: every callback is signed with it")
    if url is None and value is not None:
        raise ValueError("callback_secret without callback_url: name the URL to call")
    if value is not None and len(value.get_secret_value()) < CALLBACK_SECRET_MIN:
        raise ValueError(f"callback_secret must be at least {CALLBACK_SECRET_MIN} characters")
    return value
