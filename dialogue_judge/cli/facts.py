"""``dialogue-judge facts extract`` and ``memory-audit``: items' fact sheets (docs/facts.md) extended by a judge, and
systems' generated memory audited against them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from dialogue_judge.cli.support import emit, err, fail, read_items

facts_app = typer.Typer(help="Fact sheets (docs/facts.md).", no_args_is_help=True)


@facts_app.command("extract")
def facts_extract_cmd(
    file: Path = typer.Argument(..., help="items (JSONL or JSON)"),
    judge: str = typer.Option(..., "--judge", "-j", help="the extracting judge, e.g. openai:gpt-4o"),
    output: Path = typer.Option(..., "--output", "-o", help="write the items with their facts here (JSONL)"),
    rubric: str = typer.Option("fact-extract", "--rubric", "-r", help="a rubric with the fact_extract parser"),
    cache_dir: Path = typer.Option(
        None, "--cache-dir", help="folder of the judge cache database (default: the gate's)"
    ),
    no_cache: bool = typer.Option(False, "--no-cache", help="a temporary database, no cache"),
    workers: int = typer.Option(8, "--workers", min=1, help="judge threads"),
    allow_failed: bool = typer.Option(
        False, "--allow-failed", help="write an item whose extraction failed without extracted facts (else exit 1)"
    ),
    progress: bool = typer.Option(None, "--progress/--no-progress", help="progress bar (default: on a terminal)"),
) -> None:
    """Extend every item's fact sheet with the atomic facts a judge extracts from its memory text and earlier
    sessions' turns (one judgment per item and judge, cached); explicit facts are kept. Exit 1 when an extraction
    failed or was unparseable (unless --allow-failed), 2 on bad input."""
    from pydantic import ValidationError

    from dialogue_judge.facts_extract import extract_facts
    from judge_api.judges import JudgeSpecError, parse_judge
    from judge_api.planning import PlanError
    from judge_api.rubrics import RubricError, get_registry
    from judge_api.schemas import Item

    try:
        parse_judge(judge)
    except JudgeSpecError as exc:
        raise fail(f"--judge: {exc}") from None
    try:
        chosen = get_registry().get(rubric)
    except RubricError as exc:
        raise fail(f"--rubric: {exc}") from None
    if chosen.parser != "fact_extract":
        raise fail(f"--rubric {rubric!r} is not a fact-extract rubric (parser {chosen.parser}, not fact_extract)")
    raws = read_items(file)
    items: list[dict[str, Any]] = []
    seen: set[str] = set()
    for index, raw in enumerate(raws):
        try:
            item = Item.model_validate(raw).model_dump(mode="json")
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"])
            raise fail(f"{file}: item {index}: {where}: {first['msg']}") from None
        if item["id"] in seen:
            raise fail(f"{file}: item {index}: id: duplicate item id {item['id']!r}")
        seen.add(item["id"])
        items.append(item)
    database = None if no_cache else (cache_dir / "gate.db" if cache_dir else None)
    try:
        result = extract_facts(
            raws,
            items,
            chosen,
            judge,
            database=database,
            cache=not no_cache,
            workers=workers,
            allow_failed=allow_failed,
            progress=progress,
        )
    except ValidationError as exc:
        first = exc.errors()[0]
        raise fail(f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}") from None
    except PlanError as exc:
        raise fail(f"{exc.field}: {exc.message}") from None
    for item_id, status, reason in result.failures:
        err.print(f"{'warning' if allow_failed else 'error'}: item {item_id}: {status}: {reason}", highlight=False)
    if result.failures and not allow_failed:
        raise fail(
            f"{len(result.failures)} of {result.judged} extractions failed or were unparseable; nothing written "
            "(--allow-failed writes those items without extracted facts)",
            code=1,
        )
    output.parent.mkdir(parents=True, exist_ok=True)
    partial = output.with_name(output.name + ".partial")
    partial.write_text("".join(json.dumps(item, ensure_ascii=False) + "\n" for item in result.items), encoding="utf-8")
    partial.replace(output)
    err.print(
        f"{output}: {len(result.items)} items; {result.extracted} facts extracted by {result.judged} judgments "
        f"({result.cached} from the cache); {len(result.failures)} failed",
        highlight=False,
    )


def memory_audit_cmd(
    file: Path = typer.Argument(..., help="items (JSONL or JSON): candidates = each system's generated memory"),
    fmt: str = typer.Option("table", "--format", help="table or json"),
    n_boot: int = typer.Option(1000, min=0, help="bootstrap replicates"),
    seed: int = typer.Option(0),
    judge: str = typer.Option(
        None, "--judge", "-j", help="judge-based audit (fact level) with this judge, e.g. openai:gpt-4o"
    ),
    rubric: str = typer.Option("memory-audit", "--rubric", "-r", help="--judge: a rubric with the memory_audit parser"),
    cache_dir: Path = typer.Option(
        None, "--cache-dir", help="--judge: folder of the judge cache database (default: the gate's)"
    ),
    no_cache: bool = typer.Option(False, "--no-cache", help="--judge: a temporary database, no cache"),
    workers: int = typer.Option(8, "--workers", min=1, help="--judge: judge threads"),
) -> None:
    """Memory P/R/F1 per system against gold memory (the item's fact sheet), with bootstrap CIs: lexical, or with
    --judge fact-level (gold facts recalled; generated facts supported / fabricated / wrong relationship) with the
    error-type proportions."""
    import pandas as pd
    from pydantic import ValidationError

    from judge_api.facts import fact_sheet
    from judge_api.schemas import Item
    from judge_api.stats.memory import memory_audit

    if fmt not in ("table", "json"):
        raise fail(f"--format {fmt!r}: table or json")
    items: list[dict[str, Any]] = []
    for index, raw in enumerate(read_items(file)):
        try:
            item = Item.model_validate(raw).model_dump(mode="json")
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"])
            raise fail(f"{file}: item {index}: {where}: {first['msg']}") from None
        if not any(fact["text"].strip() for fact in fact_sheet(item)):
            raise fail(f"{file}: item {index} ({item['id']}): no gold memory (no facts and no persona lines)")
        items.append(item)
    if judge:
        database = None if no_cache else (cache_dir / "gate.db" if cache_dir else None)
        judged = _judged_memory_audit(items, judge, rubric, database, not no_cache, workers, n_boot, seed)
        _print_memory_table(judged, fmt, judged=True)
        return
    rows = []
    for item in items:
        gold = " ".join(fact["text"] for fact in fact_sheet(item))
        for system, generated in item["candidates"].items():
            rows.append({"item_id": item["id"], "system": system, "generated": generated, "gold": gold})
    _print_memory_table(memory_audit(pd.DataFrame(rows), n_boot=n_boot, seed=seed), fmt, judged=False)


def _judged_memory_audit(
    items: list[dict[str, Any]],
    judge: str,
    rubric_id: str,
    database: Path | None,
    cache: bool,
    workers: int,
    n_boot: int,
    seed: int,
) -> Any:
    """Judge every system's memory with the memory-audit rubric in this process (SQLite, the gate's judge cache)
    and summarise the labels per system (``judge_api.stats.memory.judged_memory_audit``)."""
    from pydantic import ValidationError

    from dialogue_judge.gate.standalone import InProcessRunner, default_cache_db, run_in_process
    from judge_api.planning import PlanError
    from judge_api.rubrics import RubricError, get_registry
    from judge_api.schemas import RunCreate
    from judge_api.stats.memory import audit_rows, judged_memory_audit

    try:
        rubric = get_registry().get(rubric_id)
    except RubricError as exc:
        raise fail(f"--rubric: {exc}") from None
    if rubric.parser != "memory_audit":
        raise fail(f"--rubric {rubric_id!r} is not a memory-audit rubric (parser {rubric.parser}, not memory_audit)")
    try:
        request = RunCreate.model_validate(
            {
                "name": "memory-audit",
                "items": items,
                "rubrics": [rubric.id],
                "judges": [judge],
                "mode": ["single"],
                "aspects": rubric.aspect_names[:1],
                "metrics": [],
            }
        )
    except ValidationError as exc:
        first = exc.errors()[0]
        raise fail(f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}") from None
    runner = InProcessRunner((database or default_cache_db()) if cache else None, workers=workers)
    try:
        try:
            run_id = run_in_process(request, runner=runner, progress=False)
        except PlanError as exc:
            raise fail(f"{exc.field}: {exc.message}") from None
        judgments = runner.judgments(run_id)
    finally:
        runner.close()
    failed = [r for r in judgments if r["status"] == "failed"]
    if failed and len(failed) == len(judgments):
        raise fail(f"every judgment failed: {failed[0].get('error')}")
    return judged_memory_audit(audit_rows(judgments), n_boot=n_boot, seed=seed)


def _print_memory_table(table: Any, fmt: str, *, judged: bool) -> None:
    if fmt == "json":
        emit(json.dumps(table.to_dict(orient="records"), indent=2))
        return

    def cell(record: dict[str, Any], name: str) -> str:
        if record[name] is None or record[name] != record[name]:
            return "-"
        if record[name + "_low"] is None:
            return f"{record[name]:.3f}"
        return f"{record[name]:.3f} [{record[name + '_low']:.3f}, {record[name + '_high']:.3f}]"

    names = ["precision", "recall", "f1"]
    header = f"{'system':<24} {'n':>4}  {'precision':<22} {'recall':<22} {'F1':<22}"
    if judged:
        names += ["fabricated_share", "wrong_relationship_share", "missing_share"]
        header = f"{'system':<24} {'n':>4} {'unparsed':>8}  " + " ".join(
            f"{h:<22}" for h in ("precision", "recall", "F1", "fabricated", "wrong relationship", "missing")
        )
    lines = [header.rstrip()]
    for record in table.to_dict(orient="records"):
        lead = f"{record['system']:<24} {record['n']:>4}  "
        if judged:
            lead = f"{record['system']:<24} {record['n']:>4} {record['n_unparseable']:>8}  "
        lines.append((lead + " ".join(f"{cell(record, n):<22}" for n in names)).rstrip())
    if judged:
        lines.append("error columns: share of the system's errors (fabricated + wrong relationship + missing)")
    emit("\n".join(lines))
