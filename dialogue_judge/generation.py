"""``dialogue-judge generate``: the responses of systems under test for a file of items, written as items whose
candidates a run can judge (docs/generation.md). Shared by the CLI and the examples.

The output file is written as it goes (one line per item once all its systems are settled) and rewritten in the
input's order at the end; a rerun over an existing output reuses every response whose cache key (item + responder
string + strategy version) is unchanged, so an interrupted generation resumes where it stopped.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from judge_api.config import Settings
from judge_api.responders import ResponderSpecError, parse_responder
from judge_api.schemas import ID_PATTERN, SYSTEM_PATTERN
from judge_api.strategies import get_strategies
from workers.local_judge import SMOKE_TEST_WARNING
from workers.ratelimit import LocalRateLimiter
from workers.responders.callers import CallCache, Responder, build_responder
from workers.responders.generate import GenerationSummary, generate, previous_records


class GenerationInputError(ValueError):
    """Bad input to a generation (CLI: exit 2 with the message), found before anything is generated."""


@dataclass(frozen=True)
class SystemArg:
    name: str
    responder: str


def parse_system_args(values: list[str]) -> list[SystemArg]:
    """``NAME=RESPONDER`` options; the name is a system name of the items' candidates."""
    systems: list[SystemArg] = []
    for value in values:
        name, sep, responder = value.partition("=")
        if not sep or not responder:
            raise GenerationInputError(
                f"--system {value!r}: write NAME=RESPONDER (e.g. rsum=strategy:rsum@local:smollm2)"
            )
        if not re.match(SYSTEM_PATTERN, name):
            raise GenerationInputError(
                f"--system {value!r}: system name {name!r} must be 1-100 letters, digits or _.:@/+- "
            )
        if any(s.name == name for s in systems):
            raise GenerationInputError(f"--system {value!r}: system {name!r} is named twice")
        systems.append(SystemArg(name, responder))
    if not systems:
        raise GenerationInputError("--system: name at least one system (NAME=RESPONDER)")
    return systems


def check_items(items: list[dict[str, Any]]) -> None:
    seen: set[str] = set()
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            raise GenerationInputError(f"items[{index}]: an item is a JSON object")
        item_id = item.get("id")
        if not isinstance(item_id, str) or not re.match(ID_PATTERN, item_id):
            raise GenerationInputError(f"items[{index}].id: missing or not a valid id")
        if item_id in seen:
            raise GenerationInputError(f"items[{index}].id: duplicate id {item_id!r}")
        seen.add(item_id)
        if not isinstance(item.get("dialogue"), list) or not item["dialogue"]:
            raise GenerationInputError(f"items[{index}].dialogue: a responder needs the dialogue to answer")


def build_systems(systems: list[SystemArg], settings: Settings, max_tokens: int | None = None) -> dict[str, Responder]:
    strategies = get_strategies()
    limiter, cache = LocalRateLimiter(), CallCache()
    built: dict[str, Responder] = {}
    for system in systems:
        try:
            spec = parse_responder(system.responder)
            built[system.name] = build_responder(
                spec, settings, strategies, limiter=limiter, cache=cache, max_tokens=max_tokens
            )
        except ResponderSpecError as exc:
            raise GenerationInputError(f"--system {system.name}={system.responder}: {exc}") from None
    return built


def uses_local_model(systems: dict[str, Responder]) -> bool:
    return any(r.spec.model is not None and r.spec.model.provider == "local" for r in systems.values())


def read_output(path: Path) -> list[dict[str, Any]]:
    """An earlier output's lines (a torn last line, from an interrupted run, is ignored)."""
    if not path.is_file():
        return []
    lines = []
    for raw in path.read_text(encoding="utf-8").splitlines():
        try:
            line = json.loads(raw)
        except json.JSONDecodeError:
            continue
        if isinstance(line, dict):
            lines.append(line)
    return lines


def run_generation(
    items: list[dict[str, Any]],
    systems: dict[str, Responder],
    output: Path,
    *,
    concurrency: int,
    progress: bool = True,
    memory_out: Path | None = None,
    console: Console | None = None,
) -> tuple[list[dict[str, Any]], GenerationSummary]:
    console = console or Console(stderr=True, soft_wrap=True)
    if uses_local_model(systems):
        console.print(f"[yellow]{SMOKE_TEST_WARNING} (here as the chat model of a system under test)[/yellow]")
    previous = previous_records(read_output(output))
    output.parent.mkdir(parents=True, exist_ok=True)
    with (
        output.open("a", encoding="utf-8") as handle,
        Progress(
            TextColumn("[bold]generating"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[detail]}"),
            TimeElapsedColumn(),
            console=console,
            disable=not progress,
        ) as bar,
    ):
        task = bar.add_task("generate", total=len(items) * len(systems), detail="")

        def on_item(item: dict[str, Any]) -> None:
            handle.write(json.dumps(item) + "\n")
            handle.flush()

        def on_progress(done: int, total: int, summary: GenerationSummary) -> None:
            detail = f"generated {summary.generated} · reused {summary.reused} · failed {summary.failed}"
            bar.update(task, completed=done, total=total, detail=detail)

        outputs, summary = generate(
            items, systems, concurrency=concurrency, previous=previous, on_item=on_item, on_progress=on_progress
        )
    tmp = output.with_name(output.name + ".tmp")
    tmp.write_text("".join(json.dumps(item) + "\n" for item in outputs), encoding="utf-8")
    tmp.replace(output)
    if memory_out is not None:
        write_memories(outputs, memory_out)
    return outputs, summary


def write_memories(outputs: list[dict[str, Any]], path: Path) -> int:
    """Items whose candidates are each system's generated memory: the input of ``dialogue-judge memory-audit``."""
    lines = []
    for item in outputs:
        memories = {
            system: record["memory"]
            for system, record in (item.get("meta") or {}).get("generation", {}).items()
            if record.get("status") == "done" and isinstance(record.get("memory"), str) and record["memory"].strip()
        }
        if memories:
            lines.append({**{k: v for k, v in item.items() if k != "meta"}, "candidates": memories})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return len(lines)
