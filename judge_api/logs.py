"""Structured logs: with ``DJ_LOG_FORMAT=json`` every line is one JSON object with the time, level, logger and
message, plus the judgment in hand when there is one (``run_id``, ``judgment_id``, ``judge``, ``attempt``: set with
:func:`context` by the judge path). Prompts, replies and keys are never put in a line: the fields are ids, and
messages go through the secrets scrubber (``judge_api.secrets``)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

CONTEXT_FIELDS = ("run_id", "judgment_id", "judge", "attempt")
_context: ContextVar[dict[str, Any] | None] = ContextVar("dj_log_context", default=None)


@contextmanager
def context(**fields: Any) -> Iterator[None]:
    """Add ``fields`` to every log line of this thread (or task) inside the block."""
    token = _context.set({**(_context.get() or {}), **fields})
    try:
        yield
    finally:
        _context.reset(token)


def current_context() -> dict[str, Any]:
    return dict(_context.get() or {})


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in current_context().items():
            if key in CONTEXT_FIELDS and value is not None:
                line[key] = value
        if record.exc_info and record.exc_info[0] is not None:
            line["exception"] = record.exc_text or self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False, default=str)


def use_json(logger: logging.Logger | None = None) -> None:
    """Give every handler of ``logger`` (default: the root logger) the JSON formatter; the root gets a stderr
    handler when it has none."""
    target = logger or logging.getLogger()
    if not target.handlers and logger is None:
        target.addHandler(logging.StreamHandler())
    for handler in target.handlers:
        handler.setFormatter(JsonFormatter())


def configure(log_format: str) -> None:
    """Apply ``DJ_LOG_FORMAT`` to this process's loggers (root, uvicorn's, Celery's): text leaves them alone."""
    if log_format != "json":
        return
    use_json()
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access", "celery", "celery.task"):
        logger = logging.getLogger(name)
        if logger.handlers:
            use_json(logger)
