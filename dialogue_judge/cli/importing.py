"""``dialogue-judge import-ratings | import-verdicts | import-mtbench | convert``: data from outside brought in: human
ratings and external judges' verdicts for a run, MT-Bench's judgments as a run, public datasets as items."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

from dialogue_judge.cli.support import api_client, console, emit, err, fail
from dialogue_judge.client import ApiError


def import_ratings(
    run_id: str,
    file: Path,
    fmt: str = typer.Option(None, "--format", help="csv or jsonl"),
    scale_min: float = typer.Option(None, "--scale-min", help="the scale of score rows without scale_min/max"),
    scale_max: float = typer.Option(None, "--scale-max", help="(both or neither; a scale is never guessed)"),
    api: str = typer.Option(None),
    api_key: str = typer.Option(None),
) -> None:
    """Import human ratings (CSV with a header, or JSONL) for a run's items.

    A score's scale comes from the scale_min/scale_max columns or from --scale-min/--scale-max; CSV columns that
    are not rating fields (a comment, a timestamp) are ignored and named."""
    from dialogue_judge.ratings import RatingsFileError, read_ratings

    if (scale_min is None) != (scale_max is None):
        raise fail("--scale-min and --scale-max go together")
    scale = (scale_min, scale_max) if scale_min is not None and scale_max is not None else None
    try:
        read = read_ratings(file, fmt, scale)
    except RatingsFileError as exc:
        raise fail(str(exc)) from None
    if read.unrated:
        console.print(f"skipped {read.unrated} rows with no value (not rated yet)", highlight=False)
    if read.ignored:
        console.print(f"ignored columns: {', '.join(read.ignored)}", highlight=False)
    if scale is not None and read.scale_filled:
        console.print(f"scale {scale[0]:g}..{scale[1]:g} (--scale-min/--scale-max) for {read.scale_filled} ratings")
    try:
        result = api_client(api, api_key).post(f"/v1/runs/{run_id}/human-ratings", {"ratings": read.ratings})
    except ApiError as exc:
        raise fail(_rating_rows(exc.message, file, read.rows)) from None
    console.print(f"{result['created']} ratings added, {result['updated']} updated")


def _rating_rows(message: str, file: Path, rows: list[int]) -> str:
    """The API's ``ratings.N.field: ...`` told as the file's row: ``FILE: row R: field: ...``."""
    import re

    match = re.search(r"ratings\.(\d+)(?:\.([\w.]+))?: (.*)", message, re.S)
    if match is None or int(match.group(1)) >= len(rows):
        return message
    index, where, rest = match.groups()
    return f"{message[: match.start()]}{file}: row {rows[int(index)]}: {where + ': ' if where else ''}{rest}"


def import_verdicts(
    run_id: str,
    file: Path,
    fmt: str = typer.Option(
        None, "--format", help="csv, jsonl, fastchat-single, fastchat-pair or alpacaeval (default: detected)"
    ),
    judge: str = typer.Option(None, help="the judge name to store (default: the file's; CSV/JSONL: the judge column)"),
    aspect: str = typer.Option(None, help="the aspect (default: the file's, or overall)"),
    turn: int = typer.Option(None, help="FastChat files: only this turn's verdicts"),
    item_id: str = typer.Option(
        None, "--item-id", help="FastChat files: item id template (default mtbench-{question_id}-t{turn})"
    ),
    scale_min: float = typer.Option(None, help="scores' scale when a row has none (with --scale-max)"),
    scale_max: float = typer.Option(None),
    rubric: str = typer.Option("imported", help="the rubric id stored with the verdicts"),
    api: str = typer.Option(None),
    api_key: str = typer.Option(None),
) -> None:
    """Import an external judge's verdicts into a run: your own CSV/JSONL of scores or A/B/tie verdicts, FastChat
    model_judgment files or AlpacaEval annotations (docs/data-contract.md). Importing the same file again stores
    nothing."""
    from judge_api.verdict_files import FORMATS, VerdictFileError, detect_format

    if not file.is_file():
        raise fail(f"{file}: no such file")
    if fmt is not None and fmt not in FORMATS:
        raise fail(f"--format {fmt!r}: one of {', '.join(FORMATS)}")
    if (scale_min is None) != (scale_max is None):
        raise fail("--scale-min and --scale-max go together")
    content = file.read_bytes()
    try:
        fmt = fmt or detect_format(content, file.name)
    except VerdictFileError as exc:
        raise fail(f"{file}: {exc}") from None
    params = {
        "format": fmt,
        "name": file.name,
        "judge": judge,
        "aspect": aspect,
        "turn": turn,
        "item_id": item_id,
        "scale_min": scale_min,
        "scale_max": scale_max,
        "rubric": rubric,
    }
    try:
        result = api_client(api, api_key).import_verdicts(run_id, content, params)
    except ApiError as exc:
        raise fail(f"{file}: {exc.message}") from None
    console.print(
        f"{result['created']} verdicts imported, {result['unchanged']} already imported from this file "
        f"({result['format']}; judge {', '.join(result['judges'])}; sha256 {result['source']['sha256'][:12]})",
        highlight=False,
    )
    if result.get("ignored_columns"):
        err.print(f"ignored columns: {', '.join(result['ignored_columns'])}", highlight=False)


def import_mtbench_cmd(
    folder: Path = typer.Argument(
        ...,
        help="folder with questions.jsonl, model_answers_6models.jsonl, "
        "gpt4_pair.jsonl and human.jsonl (e.g. ../shared/data/mtbench_human_judgments)",
    ),
    turn: int = typer.Option(1, help="MT-Bench turn (1 or 2); one run per turn"),
    project: str = typer.Option("default"),
) -> None:
    """Import MT-Bench's GPT-4 pairwise verdicts and expert votes as a run (writes to DATABASE_URL directly)."""
    from dialogue_judge.importers import import_mtbench
    from judge_api.config import get_settings
    from judge_api.db import session_scope
    from judge_api.migrate import upgrade

    needed = ["questions.jsonl", "model_answers_6models.jsonl", "gpt4_pair.jsonl", "human.jsonl"]
    missing = [name for name in needed if not (folder / name).is_file()]
    if missing:
        raise fail(f"{folder}: missing {', '.join(missing)}")
    if turn not in (1, 2):
        raise fail("--turn must be 1 or 2")
    upgrade(get_settings().resolved_database_url())
    with session_scope() as session:
        run_id = import_mtbench(session, folder, turn, project)
    emit(run_id)
    err.print(
        f"agreement: dialogue-judge agreement {run_id}   (expert votes only: GET /v1/runs/{run_id}"
        "/agreement?human_prefix=expert_)"
    )


def convert(
    dataset: str = typer.Argument(..., help="msc or mtbench-plus"),
    file: Path = typer.Argument(...),
    limit: int = typer.Option(0, help="at most this many items (0 = all)"),
    every_turn: bool = typer.Option(
        False, "--every-turn", help="msc: one item per bot turn of the current session (default: its last turn)"
    ),
) -> None:
    """Convert a public dataset file to dialogue-judge items (JSONL on stdout, candidates left empty)."""
    from dialogue_judge import datasets

    if not file.is_file():
        raise fail(f"{file}: no such file")
    if dataset == "msc":
        records = list(datasets.read_msc_lines(file)) if file.suffix == ".txt" else [json.loads(file.read_text())]
        if every_turn:
            items = [item for i, r in enumerate(records) for item in datasets.msc_record_to_items(r, f"msc-{i}")]
        else:
            items = [datasets.msc_record_to_item(r, f"msc-{i}") for i, r in enumerate(records)]
    elif dataset == "mtbench-plus":
        items = [datasets.mtbench_plus_to_item(r) for r in json.loads(file.read_text())]
    else:
        raise fail(f"unknown dataset {dataset!r} (msc or mtbench-plus)")
    for item in items[: limit or None]:
        sys.stdout.write(json.dumps(item) + "\n")
