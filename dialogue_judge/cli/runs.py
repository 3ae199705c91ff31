"""``dialogue-judge runs [delete | prune | export | import]`` and ``retry``: the runs already submitted."""

from __future__ import annotations

from pathlib import Path

import typer

from dialogue_judge.cli.support import api_client, console, emit, fail
from dialogue_judge.client import ApiError

runs_app = typer.Typer(
    help="List runs (no subcommand), delete or prune them, export a run as a bundle and import one.",
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


@runs_app.command("export")
def runs_export(
    run_id: str,
    out: Path = typer.Option(..., "--out", "-o", help="bundle file to write (JSON Lines)"),
    api: str = typer.Option(None),
    api_key: str = typer.Option(None),
) -> None:
    """Write a whole run (items, judgments, ratings, rubric snapshots, cache entries) as a JSON Lines bundle."""
    try:
        text = api_client(api, api_key).request("GET", f"/v1/runs/{run_id}/export")
    except ApiError as exc:
        raise fail(exc.message) from None
    out.write_text(text, encoding="utf-8")
    emit(f"{run_id}: {text.count(chr(10))} lines written to {out}")


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
