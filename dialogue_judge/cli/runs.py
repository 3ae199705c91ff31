"""``dialogue-judge runs [delete | prune | export | import]`` and ``retry``: the runs already submitted."""

from __future__ import annotations

from pathlib import Path

import httpx
import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from dialogue_judge.cli.support import api_client, console, emit, err, fail
from dialogue_judge.client import ApiError

runs_app = typer.Typer(
    help="List runs (no subcommand), delete or prune them, export a run (a bundle, or its judgments as JSON Lines, "
    "CSV or Parquet) and import a bundle.",
    invoke_without_command=True,
)


@runs_app.callback()
def runs(ctx: typer.Context, limit: int = 20, api: str = typer.Option(None), api_key: str = typer.Option(None)) -> None:
    """List runs with their progress."""
    if ctx.invoked_subcommand is not None:
        return
    try:
        page = api_client(api, api_key).get("/v1/runs", limit=limit)
    except ApiError as exc:
        raise fail(exc.message) from None
    for run in page["items"]:
        console.print(
            f"{run['id']}  {run['status']:<16} {run.get('outcome') or '':<8} {run['progress'] * 100:5.1f}%  "
            f"{run['n_judgments']:>7} judgments  ${run['cost_usd']:.4f}  {run['name'] or ''}"
        )
        if run.get("economy") and run.get("message"):
            console.print(f"    {run['message']}")


@runs_app.command("delete")
def runs_delete(
    run_ids: list[str] = typer.Argument(..., help="run ids"),
    api: str = typer.Option(None),
    api_key: str = typer.Option(None),
) -> None:
    """Delete runs with their items, judgments, ratings and what only they used (each all or nothing)."""
    client = api_client(api, api_key)
    for run_id in run_ids:
        try:
            result = client.request("DELETE", f"/v1/runs/{run_id}")
        except ApiError as exc:
            raise fail(f"{run_id}: {exc.message}") from None
        removed = ", ".join(f"{n} {what}" for what, n in result["deleted"].items())
        emit(f"{run_id} deleted ({removed})")


@runs_app.command("prune")
def runs_prune(
    older_than: str = typer.Option(..., "--older-than", help="age, e.g. 30d, 12h, 2w"),
    dry_run: bool = typer.Option(False, "--dry-run", help="list what would be deleted"),
    api: str = typer.Option(None),
    api_key: str = typer.Option(None),
) -> None:
    """Delete the runs created more than --older-than ago."""
    try:
        result = api_client(api, api_key).request(
            "POST", "/v1/runs/prune", params={"older_than": older_than, "dry_run": dry_run}
        )
    except ApiError as exc:
        raise fail(exc.message) from None
    ids = result["matched"] if dry_run else result["deleted"]
    for run_id in ids:
        emit(run_id)
    emit(f"{len(ids)} runs {'would be deleted' if dry_run else 'deleted'}")


EXPORT_FORMATS = ("bundle", "jsonl", "csv", "parquet")


@runs_app.command("export")
def runs_export(
    run_id: str,
    out: Path = typer.Option(..., "--out", "-o", help="file to write"),
    fmt: str = typer.Option(
        "bundle",
        "--format",
        help="bundle: the whole run as JSON Lines ('runs import' reads it); jsonl, csv, parquet: the run's "
        "judgments as the data contract's judgments frame (docs/data-contract.md)",
    ),
    system: str = typer.Option(None, help="judgments: only this system's (either side of a pair)"),
    judge: str = typer.Option(None, help="judgments: only this judge's"),
    aspect: str = typer.Option(None, help="judgments: only this aspect"),
    status: str = typer.Option(None, help="judgments: only this status (done, failed, unparseable, ...)"),
    mode: str = typer.Option(None, help="judgments: single or pairwise"),
    item_id: str = typer.Option(None, "--item-id", help="judgments: only this item's"),
    api: str = typer.Option(None),
    api_key: str = typer.Option(None),
) -> None:
    """Write a run to a file as the API streams it (memory stays flat at any size): a bundle (items, judgments,
    ratings, rubric snapshots, cache entries) or its judgments as JSON Lines, CSV or Parquet, with the filters."""
    if fmt not in EXPORT_FORMATS:
        raise fail(f"--format must be one of {', '.join(EXPORT_FORMATS)} (got {fmt!r})")
    filters = {"system": system, "judge": judge, "aspect": aspect, "status": status, "mode": mode, "item_id": item_id}
    chosen = {k: v for k, v in filters.items() if v is not None}
    if fmt == "bundle" and chosen:
        raise fail(f"--{next(iter(chosen)).replace('_', '-')} filters judgments; a bundle is the whole run")
    path = f"/v1/runs/{run_id}/export" if fmt == "bundle" else f"/v1/runs/{run_id}/judgments"
    params = {} if fmt == "bundle" else {"format": fmt, **chosen}
    partial = out.with_name(out.name + ".part")
    lines = 0
    written = 0
    client = api_client(api, api_key)
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[detail]}"),
        TimeElapsedColumn(),
        console=err,
        transient=True,
    ) as progress:
        task = progress.add_task(f"exporting {run_id} ({fmt})", total=None, detail="")

        def advance(block: bytes) -> None:
            nonlocal lines, written
            lines += block.count(b"\n")
            written += len(block)
            rows = f"{lines:,} lines, " if fmt != "parquet" else ""
            progress.update(
                task, completed=lines if fmt in ("jsonl", "csv") else 0, detail=f"{rows}{written / 1e6:.1f} MB"
            )

        total: str | None = None

        def start(headers: httpx.Headers) -> None:
            nonlocal total
            total = headers.get("x-total-count")
            if total is not None and fmt in ("jsonl", "csv"):
                progress.update(task, total=int(total) + (1 if fmt == "csv" else 0))

        try:
            with partial.open("wb") as sink:
                client.download(path, sink, params, on_chunk=advance, on_start=start)
        except ApiError as exc:
            partial.unlink(missing_ok=True)
            raise fail(exc.message) from None
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
    partial.replace(out)
    if fmt == "bundle":
        emit(f"{run_id}: {lines} lines written to {out}")
    else:
        count = total if total is not None else "?"
        emit(f"{run_id}: {count} judgments written to {out} ({fmt}, {written:,} bytes)")


@runs_app.command("import")
def runs_import(
    bundle: Path = typer.Argument(..., help="a bundle written by 'runs export'"),
    api: str = typer.Option(None),
    api_key: str = typer.Option(None),
) -> None:
    """Store an exported run in this deployment as a new run of your project (a new run id; unfinished judgments are
    judged here)."""
    if not bundle.is_file():
        raise fail(f"{bundle}: no such file")
    try:
        result = api_client(api, api_key).request(
            "POST", "/v1/runs/import", content=bundle.read_bytes(), headers={"Content-Type": "application/x-ndjson"}
        )
    except ApiError as exc:
        raise fail(exc.message) from None
    emit(
        f"{result['run_id']} imported from {result.get('source_run_id', '?')}: {result['items']} items, "
        f"{result['judgments']} judgments"
    )


def retry(
    run_id: str,
    unparseable: bool = typer.Option(
        False,
        "--unparseable",
        help="also re-ask the unparseable judgments, past the judge cache (replacing its entries)",
    ),
    api: str = typer.Option(None),
    api_key: str = typer.Option(None),
) -> None:
    """Send a run's failed (and budget-cancelled) judgments again; --unparseable also those whose reply could not be
    parsed (after fixing the judge: the cache would otherwise answer with the same replies)."""
    try:
        result = api_client(api, api_key).post(f"/v1/runs/{run_id}/retry", {"unparseable": True} if unparseable else {})
    except ApiError as exc:
        raise fail(exc.message) from None
    console.print(f"re-queued {result['requeued']} judgments")
