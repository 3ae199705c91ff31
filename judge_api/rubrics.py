"""Rubric registry: judge prompts as data.

A rubric is a folder ``rubrics/<id>/`` holding ``rubric.yaml`` (config) and the Jinja2 templates it names, or a
single ``rubrics/<id>.yaml`` with the templates inline. Adding a rubric is adding a folder: no code changes. The
version of a rubric is the hash of its folder's content and is stored with every judgment it produced.
"""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path
from time import monotonic
from typing import Any, Literal

import jinja2
import jinja2.meta
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from judge_api.config import get_settings

log = logging.getLogger(__name__)

PARSERS = (
    "bracket_score",
    "pairwise_4way",
    "pairwise_abc",
    "json_score",
    "memory_faithfulness",
    "fact_check",
    "memory_audit",
    "fact_extract",
)
FACT_PARSERS = ("fact_check", "memory_audit", "fact_extract")
"""The parsers of kind ``facts`` rubrics (docs/facts.md): ``fact_check`` labels a response's facts against the
item's fact sheet, ``memory_audit`` audits a generated memory against the gold facts, ``fact_extract`` splits the
item's memory text and earlier sessions' turns into atomic facts."""
PAIRWISE_PARSERS = ("pairwise_4way", "pairwise_abc")
Outcome = Literal["win", "tie", "loss"]
PREFERENCE_LEVELS = ("2", "1", "0", "-1", "-2")
DEFAULT_OUTCOME_MAP: dict[str, Outcome] = {"2": "win", "1": "tie", "0": "tie", "-1": "tie", "-2": "loss"}
# The named inputs a template may use (workers.prompting.build_variables fills exactly these).
TEMPLATE_INPUTS = (
    "aspect",
    "aspect_label",
    "aspect_description",
    "dialog",
    "persona",
    "memory",
    "reference",
    "question",
    "response",
    "response1",
    "response2",
    "options",
    "facts",
    "sources",
)


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
    kind: Literal["single", "pairwise", "facts"]
    aspects: list[AspectConfig] = Field(min_length=1)
    scale: tuple[float, float] | None = None
    messages: list[MessageTemplate] = Field(min_length=1)
    context: ContextConfig = Field(default_factory=ContextConfig)
    parser: str
    parser_options: dict[str, Any] = Field(default_factory=dict)
    verdicts: dict[str, int] = Field(
        default_factory=dict, description="verdict label -> preference for the first shown"
    )
    outcome_map: dict[str, Outcome] = Field(default_factory=lambda: dict(DEFAULT_OUTCOME_MAP))
    hardened: bool = Field(default=False, description="fence untrusted text and tell the judge to ignore it")
    options: dict[str, Any] = Field(default_factory=dict)
    structured_output: StructuredOutput | None = None
    extraction_prompt: str | None = Field(
        default=None, description="second-pass prompt mapping a free-text verdict to a label (re-ask)"
    )
    typical_reply_tokens: int | None = Field(
        default=None,
        ge=1,
        description="output tokens of a typical judge reply, for the run estimate (POST /v1/runs/estimate); "
        "unset: a default per kind",
    )
    scoring: Literal["parsed", "expected"] = Field(
        default="parsed",
        description="single scores: the parsed integer, or its probability-weighted expectation over the judge's "
        "token log-probabilities (G-Eval; falls back to the parsed score, with the reason, when there are none)",
    )

    # filled by the loader
    version: str = ""
    folder: str | None = None
    templates: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _check(self) -> Rubric:
        if self.parser not in PARSERS:
            raise ValueError(f"parser {self.parser!r} is unknown (known: {', '.join(PARSERS)})")
        if (self.parser in PAIRWISE_PARSERS) != (self.kind == "pairwise"):
            raise ValueError(f"parser {self.parser!r} does not fit a {self.kind} rubric")
        if (self.parser in FACT_PARSERS) != (self.kind == "facts"):
            raise ValueError(
                f"parser {self.parser!r} does not fit a {self.kind} rubric "
                "(kind facts needs fact_check, memory_audit or fact_extract)"
            )
        if self.kind == "facts" and self.scale != (1, 100):
            raise ValueError("a facts rubric's scale is [1, 100] (the 1-100 scores of docs/facts.md)")
        if self.scoring == "expected" and self.kind != "single":
            raise ValueError("scoring: expected applies to single-score rubrics only")
        if self.kind == "single" and self.scale is None:
            raise ValueError("a single-score rubric needs a scale [min, max]")
        if self.scale is not None and self.scale[0] >= self.scale[1]:
            raise ValueError(f"scale {list(self.scale)} must be [min, max] with min < max")
        if self.kind == "pairwise" and not self.verdicts:
            raise ValueError("a pairwise rubric needs verdicts (label -> preference for the first shown)")
        for label, preference in self.verdicts.items():
            if str(preference) not in PREFERENCE_LEVELS:
                raise ValueError(f"verdict {label!r}: preference {preference} is not one of -2..2")
        unknown = sorted(set(self.outcome_map) - set(PREFERENCE_LEVELS))
        if unknown:
            raise ValueError(f"outcome_map keys {unknown} are not preference levels {list(PREFERENCE_LEVELS)}")
        return self

    @property
    def mode(self) -> Literal["single", "pairwise"]:
        """The run mode the rubric serves: a facts rubric judges one response at a time and yields a score."""
        return "pairwise" if self.kind == "pairwise" else "single"

    @property
    def aspect_names(self) -> list[str]:
        return [a.name for a in self.aspects]

    def aspect(self, name: str) -> AspectConfig:
        for aspect in self.aspects:
            if aspect.name == name:
                return aspect
        raise RubricError(f"rubric {self.id!r} has no aspect {name!r} (has: {', '.join(self.aspect_names)})")


def hash_files(files: list[Path], base: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(files):
        digest.update(str(path.relative_to(base)).encode())
        digest.update(b"\0")
        digest.update(path.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()[:16]


_check_env = jinja2.Environment(autoescape=False)


def _check_template(config_path: Path, name: str, source: str) -> None:
    """Compile a template and check that it only uses the known inputs, so mistakes show at load time."""
    try:
        parsed = _check_env.parse(source)
    except jinja2.TemplateSyntaxError as exc:
        raise RubricError(f"{config_path}: template {name!r} line {exc.lineno}: {exc.message}") from None
    unknown = sorted(jinja2.meta.find_undeclared_variables(parsed) - set(TEMPLATE_INPUTS))
    if unknown:
        raise RubricError(
            f"{config_path}: template {name!r} uses unknown inputs {unknown} (known: {', '.join(TEMPLATE_INPUTS)})"
        )


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
            source = templates[message.template] = template_path.read_text(encoding="utf-8")
        else:
            source = message.text or ""
        _check_template(config_path, message.template or "inline text", source)
    rubric.templates = templates
    rubric.version = hash_files(files, base)
    rubric.folder = str(path)
    return rubric


class RubricRegistry:
    """All rubrics found in the configured folders, by id. Later folders override earlier ones.

    A rubric that fails to load does not take the others down (a typo in one user file must not stop the
    service): its error is logged and kept in ``errors`` (by file or folder name), and asking for it by that
    name raises the RubricError. ``strict=True`` raises the first error instead.
    """

    def __init__(self, dirs: list[Path], strict: bool = False) -> None:
        self.dirs = dirs
        self._rubrics: dict[str, Rubric] = {}
        self.errors: dict[str, str] = {}
        for directory in dirs:
            for entry in sorted(directory.iterdir()):
                if entry.name.startswith((".", "_")):
                    continue
                if (entry.is_dir() and (entry / "rubric.yaml").is_file()) or (
                    entry.is_file() and entry.suffix in (".yaml", ".yml")
                ):
                    try:
                        self._add(load_rubric(entry))
                    except RubricError as exc:
                        if strict:
                            raise
                        log.error("rubric skipped: %s", exc)
                        self.errors[entry.stem if entry.is_file() else entry.name] = str(exc)

    def _add(self, rubric: Rubric) -> None:
        if rubric.id in self._rubrics:
            log.warning("rubric %s from %s overrides %s", rubric.id, rubric.folder, self._rubrics[rubric.id].folder)
        self._rubrics[rubric.id] = rubric

    def get(self, rubric_id: str) -> Rubric:
        try:
            return self._rubrics[rubric_id]
        except KeyError:
            if rubric_id in self.errors:
                raise RubricError(f"rubric {rubric_id!r} failed to load: {self.errors[rubric_id]}") from None
            raise RubricError(f"unknown rubric {rubric_id!r} (known: {', '.join(sorted(self._rubrics))})") from None

    def all(self) -> list[Rubric]:
        return [self._rubrics[k] for k in sorted(self._rubrics)]

    def __contains__(self, rubric_id: object) -> bool:
        return rubric_id in self._rubrics


_registry: RubricRegistry | None = None
_signature: tuple[tuple[str, int, int], ...] | None = None
_checked_at = 0.0  # monotonic() of the last look at the folders


def _folder_signature(dirs: list[Path]) -> tuple[tuple[str, int, int], ...]:
    """Cheap fingerprint of the rubric folders (paths, mtimes, sizes): a change means reload."""
    entries: list[tuple[str, int, int]] = []
    for directory in dirs:
        for root, _, files in os.walk(directory):
            for name in files:
                try:
                    stat = os.stat(os.path.join(root, name))
                except OSError:
                    continue
                entries.append((os.path.join(root, name), stat.st_mtime_ns, stat.st_size))
    return tuple(sorted(entries))


def get_registry(refresh: bool = False, max_age_s: float = 0.0) -> RubricRegistry:
    """The registry of the configured folders; reloaded when a rubric file is added, edited or removed.

    Looking at the folders walks and stats every rubric file (about a millisecond); a hot path (a monitor's sampled
    responses) passes ``max_age_s`` to take the registry as it was when the folders were looked at that recently."""
    global _registry, _signature, _checked_at
    dirs = get_settings().rubric_dirs()
    now = monotonic()
    fresh_enough = max_age_s > 0 and 0 <= now - _checked_at < max_age_s
    if fresh_enough and not refresh and _registry is not None and _registry.dirs == dirs:
        return _registry
    signature = _folder_signature(dirs)
    if _registry is None or refresh or signature != _signature or _registry.dirs != dirs:
        _registry = RubricRegistry(dirs)
        _signature = signature
    _checked_at = now
    return _registry
