"""Responder specs: the strings that name a system under test, the thing that *produces* the responses a run judges
(docs/generation.md).

* ``<chat model>``: a judge string (``openai:<model>``, ``anthropic:<model>``, ``openai-compatible:<model>@<url>``,
  ``local:smollm2``) used as a chat model, its messages built by the ``full-context`` strategy;
* ``strategy:<name>@<chat model>``: the same chat model behind a memory strategy of ``strategies/<name>/``
  (``current-session``, ``gold-memory``, ``rsum``, ``memochat``, ...);
* ``http:<url>``: a team's own service; the item is POSTed as JSON, the reply is ``{"response": ..., "memory": ...}``;
* ``python:<module>:<function>``: an in-process callable taking the item, returning the response text or
  ``{"response": ..., "memory": ...}``.

Parsing is pure (no strategy folder is read), so the API and the CLI can reject a bad string before anything runs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlparse

from judge_api.judges import JudgeSpec, JudgeSpecError, parse_judge

ResponderKind = Literal["chat", "http", "python"]
DEFAULT_STRATEGY = "full-context"
STRATEGY_ID_PATTERN = r"^[a-z0-9][a-z0-9_.-]{0,63}$"
_DOTTED = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*$")
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
FORMS = (
    "'<chat model>' (a judge string such as 'openai-compatible:<model>@<url>' or 'local:smollm2'), "
    "'strategy:<name>@<chat model>', 'http:<url>' or 'python:<module>:<function>'"
)


class ResponderSpecError(ValueError):
    """A responder string that does not name a system this service can call."""


@dataclass(frozen=True)
class ResponderSpec:
    kind: ResponderKind
    model: JudgeSpec | None = None  # chat
    strategy: str | None = None  # chat
    url: str | None = None  # http
    module: str | None = None  # python
    function: str | None = None  # python

    @property
    def key(self) -> str:
        """Canonical string: the rate-limit identity of an http responder, part of every generation's cache key."""
        if self.kind == "chat":
            assert self.model is not None
            return f"strategy:{self.strategy}@{self.model.key}"
        if self.kind == "http":
            return f"http:{self.url}"
        return f"python:{self.module}:{self.function}"


def parse_responder(spec: str) -> ResponderSpec:
    """Parse and validate a responder string; raises ResponderSpecError with the reason."""
    if not isinstance(spec, str) or ":" not in spec:
        raise ResponderSpecError(f"responder {spec!r} must be {FORMS}")
    prefix, _, rest = spec.partition(":")
    if prefix == "http":
        parsed = urlparse(rest)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ResponderSpecError(f"responder {spec!r}: {rest!r} is not an http(s) URL (write 'http:<url>')")
        return ResponderSpec("http", url=rest)
    if prefix == "python":
        module, sep, function = rest.rpartition(":")
        if not sep or not _DOTTED.match(module) or not _IDENTIFIER.match(function):
            raise ResponderSpecError(
                f"responder {spec!r}: write 'python:<module>:<function>' (e.g. 'python:mybot:reply')"
            )
        return ResponderSpec("python", module=module, function=function)
    strategy = DEFAULT_STRATEGY
    model = spec
    if prefix == "strategy":
        strategy, sep, model = rest.partition("@")
        if not sep or not model:
            raise ResponderSpecError(f"responder {spec!r}: write 'strategy:<name>@<chat model>'")
        if not re.match(STRATEGY_ID_PATTERN, strategy):
            raise ResponderSpecError(f"responder {spec!r}: strategy name {strategy!r} is not valid")
    try:
        judge = parse_judge(model)
    except JudgeSpecError as exc:
        raise ResponderSpecError(f"responder {spec!r}: {exc} (a responder is {FORMS})") from None
    return ResponderSpec("chat", model=judge, strategy=strategy)
