"""Rubric registry: judge prompts as data.

A rubric is a folder ``rubrics/<id>/`` holding ``rubric.yaml`` (config) and the Jinja2 templates it names, or a
single ``rubrics/<id>.yaml`` with the templates inline. Adding a rubric is adding a folder: no code changes. The
version of a rubric is the hash of its folder's content and is stored with every judgment it produced.
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from judge_api.config import get_settings

log = logging.getLogger(__name__)

PARSERS = ("bracket_score", "pairwise_4way", "pairwise_abc", "json_score", "memory_faithfulness")
Outcome = Literal["win", "tie", "loss"]
DEFAULT_OUTCOME_MAP: dict[str, Outcome] = {"2": "win", "1": "tie", "0": "tie", "-1": "tie", "-2": "loss"}


class RubricError(ValueError):
    """A rubric file that cannot be loaded, or a rubric id that does not exist."""


class AspectConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    label: str | None = None
    description: str | None = None


class MessageTemplate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: Literal["system", "user"]
    template: str | None = Field(default=None, description="file name in the rubric folder")
    text: str | None = Field(default=None, description="inline template text")

    @model_validator(mode="after")
    def _one_source(self) -> MessageTemplate:
        if (self.template is None) == (self.text is None):
            raise ValueError("a message needs exactly one of 'template' (a file) or 'text' (inline)")
        return self


class ContextConfig(BaseModel):
    """How the dialogue context handed to the template is built."""

    model_config = ConfigDict(extra="forbid")

    history: Literal["last_n", "related_turns", "full"] = "last_n"
    last_n_utterances: int = Field(default=10, ge=0)
    speaker_labels: dict[str, str] = Field(default_factory=lambda: {"user": "user", "bot": "bot"})
    max_history_chars: int = Field(default=24_000, ge=100)


class StructuredOutput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = "verdict"
    json_schema: dict[str, Any]


class Rubric(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9_.-]{0,63}$")
    description: str
    origin: str | None = None
    kind: Literal["single", "pairwise"]
    aspects: list[AspectConfig] = Field(min_length=1)
    scale: tuple[float, float] | None = None
    messages: list[MessageTemplate] = Field(min_length=1)
    context: ContextConfig = Field(default_factory=ContextConfig)
    parser: str
    parser_options: dict[str, Any] = Field(default_factory=dict)
    verdicts: dict[str, int] = Field(default_factory=dict, description="verdict label -> preference for the first shown")
    outcome_map: dict[str, Outcome] = Field(default_factory=lambda: dict(DEFAULT_OUTCOME_MAP))
    hardened: bool = Field(default=False, description="fence untrusted text and tell the judge to ignore it")
    options: dict[str, Any] = Field(default_factory=dict)
    structured_output: StructuredOutput | None = None
    extraction_prompt: str | None = Field(
        default=None, description="second-pass prompt mapping a free-text verdict to a label (re-ask)"
    )

    # filled by the loader
    version: str = ""
    folder: str | None = None
    templates: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _check(self) -> Rubric:
        if self.parser not in PARSERS:
            raise ValueError(f"parser {self.parser!r} is unknown (known: {', '.join(PARSERS)})")
        if self.kind == "single" and self.scale is None:
            raise ValueError("a single-score rubric needs a scale [min, max]")
        if self.kind == "pairwise" and not self.verdicts:
            raise ValueError("a pairwise rubric needs verdicts (label -> preference for the first shown)")
        return self

    @property
    def aspect_names(self) -> list[str]:
        return [a.name for a in self.aspects]

    def aspect(self, name: str) -> AspectConfig:
        for aspect in self.aspects:
            if aspect.name == name:
                return aspect
        raise RubricError(f"rubric {self.id!r} has no aspect {name!r} (has: {', '.join(self.aspect_names)})")


def _hash_files(files: list[Path], base: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(files):
        digest.update(str(path.relative_to(base)).encode())
        digest.update(b"\0")
        digest.update(path.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()[:16]


def load_rubric(path: Path) -> Rubric:
    """Load one rubric from a folder (with rubric.yaml) or a single yaml file."""
    if path.is_dir():
        config_path = path / "rubric.yaml"
        files = [p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
        base = path
    else:
        config_path, files, base = path, [path], path.parent
    try:
        raw = yaml.safe_load(config_path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise RubricError(f"{config_path}: cannot read rubric: {exc}") from exc
    if not isinstance(raw, dict):
        raise RubricError(f"{config_path}: a rubric is a YAML mapping")
    try:
        rubric = Rubric.model_validate(raw)
    except ValidationError as exc:
        raise RubricError(f"{config_path}: {exc}") from exc
    templates: dict[str, str] = {}
    for message in rubric.messages:
        if message.template is not None:
            template_path = (path if path.is_dir() else path.parent) / message.template
            if not template_path.is_file():
                raise RubricError(f"{config_path}: template file {message.template!r} is missing")
            templates[message.template] = template_path.read_text(encoding="utf-8")
    rubric.templates = templates
    rubric.version = _hash_files(files, base)
    rubric.folder = str(path)
    return rubric


class RubricRegistry:
    """All rubrics found in the configured folders, by id. Later folders override earlier ones."""

    def __init__(self, dirs: list[Path]) -> None:
        self.dirs = dirs
        self._rubrics: dict[str, Rubric] = {}
        for directory in dirs:
            for entry in sorted(directory.iterdir()):
                if entry.name.startswith((".", "_")):
                    continue
                if entry.is_dir() and (entry / "rubric.yaml").is_file():
                    self._add(load_rubric(entry))
                elif entry.is_file() and entry.suffix in (".yaml", ".yml"):
                    self._add(load_rubric(entry))

    def _add(self, rubric: Rubric) -> None:
        if rubric.id in self._rubrics:
            log.warning("rubric %s from %s overrides %s", rubric.id, rubric.folder, self._rubrics[rubric.id].folder)
        self._rubrics[rubric.id] = rubric

    def get(self, rubric_id: str) -> Rubric:
        try:
            return self._rubrics[rubric_id]
        except KeyError:
            raise RubricError(
                f"unknown rubric {rubric_id!r} (known: {', '.join(sorted(self._rubrics))})"
            ) from None

    def all(self) -> list[Rubric]:
        return [self._rubrics[k] for k in sorted(self._rubrics)]

    def __contains__(self, rubric_id: object) -> bool:
        return rubric_id in self._rubrics


_registry: RubricRegistry | None = None


def get_registry(refresh: bool = False) -> RubricRegistry:
    global _registry
    if _registry is None or refresh:
        _registry = RubricRegistry(get_settings().rubric_dirs())
    return _registry
