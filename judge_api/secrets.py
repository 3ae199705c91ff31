"""Provider keys: read from the environment or from secret files, never stored, never logged, never returned.

``provider_secret("OPENAI_API_KEY")`` looks, in order, at

1. the variable itself (``OPENAI_API_KEY=sk-...``),
2. a file named by ``<NAME>_FILE`` (``OPENAI_API_KEY_FILE=/run/secrets/openai_api_key``; compose or
   Kubernetes secrets),
3. ``$DJ_SECRETS_DIR/<name in lower case>`` (default ``/run/secrets``, where ``docker compose`` mounts
   secrets).

Anything that might carry a key on its way out (judgment errors, log records, API responses) goes through
:func:`scrub`, which replaces every known secret value with ``***``. :func:`install_log_scrubber` makes every
log record of the process pass through it (called by the API at start-up and on a worker's first secret read).
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Mapping
from pathlib import Path

PROVIDER_KEY_VARS = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_COMPATIBLE_API_KEY")
# other variables whose values are secrets too (our own API key for the dashboard / CLI, tokens ...)
_SECRET_NAME = re.compile(r"(?:API_KEY|SECRET|TOKEN|PASSWORD)$", re.IGNORECASE)
MIN_SECRET_LEN = 8  # shorter values ("not-needed", "local") would scrub ordinary words
REDACTED = "***"


class SecretError(RuntimeError):
    """A secret file is configured but cannot be read (the message names the variable, never the content)."""


def _from_file(path: Path, origin: str) -> str | None:
    try:
        value = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        raise SecretError(f"{origin} points at {path}, which does not exist") from None
    except OSError as exc:
        raise SecretError(f"{origin}: cannot read {path} ({type(exc).__name__})") from None
    return value or None


def provider_secret(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The value of secret ``name`` from the environment or a secret file; None when it is not configured."""
    env = os.environ if environ is None else environ
    install_log_scrubber()
    value = (env.get(name) or "").strip()
    if value:
        return value
    file_name = env.get(f"{name}_FILE")
    if file_name:
        return _from_file(Path(file_name), f"{name}_FILE")
    secrets_dir = Path(env.get("DJ_SECRETS_DIR") or "/run/secrets")
    candidate = secrets_dir / name.lower()
    if candidate.is_file():
        return _from_file(candidate, f"{secrets_dir}/{name.lower()}")
    return None


# -- scrubbing ------------------------------------------------------------------------------------------

_cache_lock = threading.Lock()
_cache: tuple[float, tuple[str, ...]] | None = None
_CACHE_TTL_S = 5.0


def _collect(environ: Mapping[str, str]) -> tuple[str, ...]:
    values: set[str] = set()
    for name, value in environ.items():
        if name.endswith("_FILE"):
            base = name[: -len("_FILE")]
            if base in PROVIDER_KEY_VARS or _SECRET_NAME.search(base):
                try:
                    content = Path(value).read_text(encoding="utf-8").strip()
                except OSError:
                    continue
                values.add(content)
        elif name in PROVIDER_KEY_VARS or _SECRET_NAME.search(name):
            values.add(value.strip())
    secrets_dir = Path(environ.get("DJ_SECRETS_DIR") or "/run/secrets")
    for name in PROVIDER_KEY_VARS:
        candidate = secrets_dir / name.lower()
        try:
            if candidate.is_file():
                values.add(candidate.read_text(encoding="utf-8").strip())
        except OSError:
            continue
    # longest first, so a secret containing another is replaced whole
    return tuple(sorted((v for v in values if len(v) >= MIN_SECRET_LEN), key=len, reverse=True))


def known_secrets(refresh: bool = False) -> tuple[str, ...]:
    """Every secret value this process knows (provider keys, API keys, tokens), re-read every few seconds."""
    global _cache
    now = time.monotonic()
    with _cache_lock:
        if refresh or _cache is None or now - _cache[0] > _CACHE_TTL_S:
            _cache = (now, _collect(os.environ))
        return _cache[1]


def reset_secrets_cache() -> None:
    global _cache
    with _cache_lock:
        _cache = None


def scrub(text: str | None) -> str | None:
    """``text`` with every known secret replaced by ``***``."""
    if not text:
        return text
    for secret in known_secrets():
        if secret in text:
            text = text.replace(secret, REDACTED)
    return text


def scrub_str(text: str) -> str:
    return scrub(text) or ""


# -- logging --------------------------------------------------------------------------------------------

_installed = False
_install_lock = threading.Lock()


def install_log_scrubber() -> None:
    """Scrub every log record this process creates (message, arguments and traceback). Idempotent."""
    global _installed
    if _installed:
        return
    with _install_lock:
        if _installed:
            return
        previous = logging.getLogRecordFactory()

        def factory(*args: object, **kwargs: object) -> logging.LogRecord:
            record = previous(*args, **kwargs)
            secrets = known_secrets()
            if not secrets:
                return record
            try:
                message = record.getMessage()
            except Exception:  # a broken format string: let the handler report it as usual
                return record
            cleaned = scrub_str(message)
            if cleaned != message:
                record.msg, record.args = cleaned, None
            if record.exc_info and record.exc_info[0] is not None:
                text = logging.Formatter().formatException(record.exc_info)
                record.exc_text = scrub_str(text)
            return record

        logging.setLogRecordFactory(factory)
        _installed = True
