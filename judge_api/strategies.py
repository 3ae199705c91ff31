"""Memory strategies as data: how a chat model is prompted to answer as a system under test (docs/generation.md).

A strategy is a folder ``strategies/<id>/`` holding ``strategy.yaml`` and the Jinja2 templates its steps name. The
pipeline is a list of steps run in order over one state (a dict of named values, ``initial`` first): each step
renders its template with the item's inputs and the state, asks the chat model once (``over: once``) or once per
earlier session, oldest first (``over: previous_sessions``), reads the reply with a named parser and stores it
``into`` a state value. The step that writes ``response`` gives the answer; ``memory`` names the state value stored
with it as the generated memory (what ``dialogue-judge memory-audit`` scores). Adding a strategy is adding a folder;
its version is the hash of the folder and is part of every generation's cache key.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Literal

import jinja2
import jinja2.meta
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from judge_api.config import get_settings
from judge_api.responders import STRATEGY_ID_PATTERN
from judge_api.rubrics import hash_files  # a strategy's version is its folder's hash, as a rubric's

log = logging.getLogger(__name__)

# how a step's reply becomes a state value (workers/responders/parsers.py implements each)
STEP_PARSERS = ("text", "chat_text", "memochat_topics", "memochat_choice")
# the inputs every template may use besides the state values (workers/responders/pipeline.py fills them)
ITEM_INPUTS = (
    "dialog",  # every turn of every session, one "Label: text" line each
    "dialog_lines",  # the same as a list
    "current_session",  # the turns of the current (last) session, the user's last turn included
    "current_lines",  # the current session's turns before the user's last turn, as a list
    "last_user",  # the user's last turn (the one to answer)
    "persona",  # the gold memory: MSC's persona lines, "User: ...\nAssistant: ..."
    "persona_user",
    "persona_bot",
    "item_memory",  # the item's own "memory" field
    "session",  # over previous_sessions: that session, one line per turn
    "session_lines",  # the same as a list
    "session_number",
    "labels",
)


class StrategyError(ValueError):
    """A strategy folder that cannot be loaded, or a strategy id that does not exist."""


class Step(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[a-z0-9_-]{1,40}$")
    template: str = Field(description="file name in the strategy folder")
    system: str | None = Field(default=None, description="file name of a system message template")
    over: Literal["once", "previous_sessions"] = "once"
    when: str | None = Field(default=None, description="Jinja expression over inputs and state; false skips")
    parse: str = "text"
    into: str = Field(pattern=r"^[a-z_][a-z0-9_]{0,40}$")
    max_tokens: int = Field(default=256, ge=1, le=32_000)

    @model_validator(mode="after")
    def _check(self) -> Step:
        if self.parse not in STEP_PARSERS:
            raise ValueError(f"step {self.name!r}: parser {self.parse!r} is unknown (known: {', '.join(STEP_PARSERS)})")
        if self.into in ITEM_INPUTS:
            raise ValueError(f"step {self.name!r}: 'into: {self.into}' would hide the item input of that name")
        return self


class Strategy(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=STRATEGY_ID_PATTERN)
    label: str = Field(description="the name the paper's tables give it")
    description: str
    origin: str
    speaker_labels: dict[str, str] = Field(default_factory=lambda: {"user": "User", "bot": "Assistant"})
    initial: dict[str, Any] = Field(default_factory=dict)
    steps: list[Step] = Field(min_length=1)
    memory: str | None = Field(default=None, description="the state value stored as the generated memory")

    # filled by the loader
    version: str = ""
    folder: str | None = None
    templates: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _check(self) -> Strategy:
        if self.steps[-1].into != "response" or self.steps[-1].over != "once":
            raise ValueError("the last step must be 'over: once' and write 'into: response'")
        if any(step.into == "response" for step in self.steps[:-1]):
            raise ValueError("only the last step writes 'response'")
        known = set(self.initial) | {step.into for step in self.steps}
        if self.memory is not None and self.memory not in known:
            raise ValueError(f"memory: {self.memory!r} is neither an initial value nor written by a step")
        return self


_check_env = jinja2.Environment(autoescape=False)


def load_strategy(path: Path) -> Strategy:
    """Load one strategy folder; templates are compiled and checked against the known inputs and state names."""
    config_path = path / "strategy.yaml"
    try:
        raw = yaml.safe_load(config_path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise StrategyError(f"{config_path}: cannot read strategy: {exc}") from exc
    if not isinstance(raw, dict):
        raise StrategyError(f"{config_path}: a strategy is a YAML mapping")
    try:
        strategy = Strategy.model_validate(raw)
    except ValidationError as exc:
        raise StrategyError(f"{config_path}: {exc}") from exc
    if strategy.id != path.name:
        raise StrategyError(f"{config_path}: id {strategy.id!r} differs from the folder name {path.name!r}")
    known = set(ITEM_INPUTS) | set(strategy.initial)
    templates: dict[str, str] = {}
    for step in strategy.steps:
        names = [step.template] + ([step.system] if step.system else [])
        sources = []
        for name in names:
            template_path = path / name
            if not template_path.is_file():
                raise StrategyError(f"{config_path}: step {step.name!r}: template file {name!r} is missing")
            source = templates[name] = template_path.read_text(encoding="utf-8")
            sources.append((name, source))
        if step.when:
            sources.append((f"{step.name}.when", "{{ " + step.when + " }}"))
        for name, source in sources:
            try:
                parsed = _check_env.parse(source)
            except jinja2.TemplateSyntaxError as exc:
                raise StrategyError(f"{config_path}: {name!r} line {exc.lineno}: {exc.message}") from None
            unknown = sorted(jinja2.meta.find_undeclared_variables(parsed) - known)
            if unknown:
                raise StrategyError(
                    f"{config_path}: {name!r} uses {unknown}, which are neither inputs ({', '.join(ITEM_INPUTS)}) "
                    "nor state written before this step"
                )
        known.add(step.into)
    files = [p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    strategy.templates = templates
    strategy.version = hash_files(files, path)
    strategy.folder = str(path)
    return strategy


class StrategyRegistry:
    """Every strategy in the configured folders, by id (later folders override earlier ones). A folder that fails to
    load is logged and kept in ``errors``; asking for it by name raises its error."""

    def __init__(self, dirs: list[Path]) -> None:
        self.dirs = dirs
        self._strategies: dict[str, Strategy] = {}
        self.errors: dict[str, str] = {}
        for directory in dirs:
            for entry in sorted(directory.iterdir()):
                if entry.is_dir() and (entry / "strategy.yaml").is_file() and not entry.name.startswith((".", "_")):
                    try:
                        strategy = load_strategy(entry)
                    except StrategyError as exc:
                        log.error("strategy skipped: %s", exc)
                        self.errors[entry.name] = str(exc)
                        continue
                    self._strategies[strategy.id] = strategy

    def get(self, strategy_id: str) -> Strategy:
        try:
            return self._strategies[strategy_id]
        except KeyError:
            if strategy_id in self.errors:
                raise StrategyError(f"strategy {strategy_id!r} failed to load: {self.errors[strategy_id]}") from None
            known = ", ".join(sorted(self._strategies))
            raise StrategyError(f"unknown strategy {strategy_id!r} (known: {known})") from None

    def all(self) -> list[Strategy]:
        return [self._strategies[k] for k in sorted(self._strategies)]

    def __contains__(self, strategy_id: object) -> bool:
        return strategy_id in self._strategies


def get_strategies() -> StrategyRegistry:
    return StrategyRegistry(get_settings().strategy_dirs())
