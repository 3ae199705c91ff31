"""``dialogue-judge generate``: the responses of systems under test, written as items ready for submit
(docs/generation.md)."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from dialogue_judge.cli.support import err, fail, read_items


def generate(
    items: Path = typer.Argument(..., help="items (JSONL or JSON) whose dialogue ends with the user's turn to answer"),
    system: list[str] = typer.Option(
        ...,
        "--system",
        "-s",
        help="NAME=RESPONDER, repeatable: a chat model ('openai-compatible:<model>@<url>', 'local:smollm2', ...), "
        "'strategy:<name>@<chat model>', 'http:<url>' or 'python:<module>:<function>'",
    ),
    output: Path = typer.Option(..., "--output", "-o", help="candidates JSONL (reused and completed when it exists)"),
    concurrency: int = typer.Option(None, "--concurrency", min=1, help="items in flight (default DJ_CALL_CONCURRENCY)"),
    max_tokens: int = typer.Option(None, "--max-tokens", min=1, help="cap every chat call's max_tokens"),
    memory_out: Path = typer.Option(None, "--memory-out", help="also write each system's generated memory as items"),
    progress: bool = typer.Option(None, "--progress/--no-progress", help="progress bar (default: on a terminal)"),
) -> None:
    """Generate the responses of systems under test (memory strategies on a chat model, a service, a function):
    items with their candidates filled, ready for submit. Failures are recorded per item, never empty responses."""
    from dialogue_judge.generation import (
        GenerationInputError,
        build_systems,
        check_items,
        parse_system_args,
        run_generation,
    )
    from judge_api.config import get_settings

    settings = get_settings()
    try:
        parsed = parse_system_args(list(system))
        rows = read_items(items)
        check_items(rows)
        systems = build_systems(parsed, settings, max_tokens)
    except GenerationInputError as exc:
        raise fail(str(exc)) from None
    _, summary = run_generation(
        rows,
        systems,
        output,
        concurrency=concurrency or settings.call_concurrency,
        progress=sys.stderr.isatty() if progress is None else progress,
        memory_out=memory_out,
        console=err,
    )
    for item_id, name, error in summary.failures:
        err.print(f"[yellow]failed:[/yellow] {item_id} / {name}: {error}", highlight=False)
    err.print(
        f"{output}: {summary.items} items x {len(systems)} systems: generated {summary.generated}, "
        f"reused {summary.reused}, failed {summary.failed}" + (f"; memories in {memory_out}" if memory_out else ""),
        highlight=False,
    )
