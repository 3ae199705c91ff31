"""``dialogue-judge submit``: items to a run, retried with one idempotency key; ``--wait`` follows the run with a
progress bar and exits by its outcome; ``--estimate`` prints the cost and time instead."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from dialogue_judge.cli.reports import render_report
from dialogue_judge.cli.support import api_client, emit, err, fail, read_items
from dialogue_judge.client import ApiClient, ApiError


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


def _say_retrying(attempt: int, delay: float, problem: str) -> None:
    err.print(
        f"submission attempt {attempt} failed ({problem}); retrying in {delay:.1f} s with the same key", highlight=False
    )


def submit(
    file: Path = typer.Argument(..., help="items as JSONL (one item per line) or JSON"),
    rubric: list[str] = typer.Option(None, "--rubric", "-r", help="default rsum-single"),
    judge: list[str] = typer.Option(
        None, "--judge", "-j", help="'reference' alone (or no judge with --metrics): reference metrics only, no cost"
    ),
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
    metrics: str = typer.Option(None, "--metrics", help="the same, comma-separated (f1,bleu-1,bleu-2)"),
    tokenize: str = typer.Option(
        None,
        "--tokenize",
        help="reference metrics' tokens: auto (default: each CJK character a token for CJK references, else "
        "whitespace), char or whitespace (ParlAI's)",
    ),
    panel_judge: list[str] = typer.Option(None, "--panel-judge", help="the panel's members (default: every judge)"),
    panel_aggregate: str = typer.Option("mean", help="the panel's aggregate of scores: mean or median"),
    panel_quorum: int = typer.Option(
        None, "--panel-quorum", min=1, help="members a unit needs for a panel verdict (default: a majority)"
    ),
    budget: float = typer.Option(None, help="stop scheduling calls when the run has cost this many USD"),
    name: str = typer.Option(None),
    system: list[str] = typer.Option(
        None,
        "--system",
        help="NAME=RESPONDER: a system under test the workers generate responses with before judging "
        "(repeatable; docs/generation.md); items may then come without candidates",
    ),
    cache: str = typer.Option(
        "use",
        "--cache",
        help="the judge cache: use (answer repeated requests from it), refresh (ask again, replace the entries), "
        "off (neither read nor write)",
    ),
    wait: bool = typer.Option(
        False, help="wait with a progress bar and print the report; exit 3 if nothing usable came back"
    ),
    estimate: bool = typer.Option(
        False, "--estimate", help="print what the run would cost and take (POST /v1/runs/estimate); submit nothing"
    ),
    batch: bool = typer.Option(
        False, "--batch", help="judge through the providers' batch APIs at the batch price (results within 24 h)"
    ),
    batch_retry: str = typer.Option(
        None, help="--batch: retry errored or expired requests in a later 'batch' (default) or in 'realtime'"
    ),
    fmt: str = typer.Option(
        "table",
        "--format",
        help="stdout's format: table, json, md (--wait: the report's; else json prints the created run)",
    ),
    api: str = typer.Option(None, help="API URL (default DJ_API_URL or http://127.0.0.1:8000)"),
    api_key: str = typer.Option(None, help="API key (default DJ_API_KEY)"),
    retry_for: float = typer.Option(
        30.0, min=0, help="keep retrying the submission this many seconds after a connection error or a 5xx"
    ),
) -> None:
    """Submit items for judging.

    The submission carries an Idempotency-Key (a fresh UUID) and is retried with the same key when the connection
    breaks or the API answers 5xx, so it creates exactly one run even when the API dies mid-request."""
    if fmt not in ("table", "json", "md"):
        raise fail(f"--format must be table, json or md (got {fmt!r})")
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
    if cache not in ("use", "refresh", "off"):
        raise fail(f"--cache must be use, refresh or off (got {cache!r})")
    if cache != "use":  # left out at its default: the body (and its idempotency fingerprint) stays what it was
        options["cache"] = cache
    if max_samples is not None:
        options["max_samples"] = max_samples
    if sample_boundary:
        options["sample_boundaries"] = sample_boundary
    metric = [*(metric or []), *[m.strip() for m in (metrics or "").split(",") if m.strip()]]
    if not judge:
        if not metric or metric == ["none"]:
            raise fail("--judge is needed (or --metrics f1,bleu-1,bleu-2 alone for reference metrics only)")
        judge = ["reference"]
    if judge == ["reference"] and rubric:
        raise fail("--rubric: --judge reference computes reference metrics only, with no rubric")
    body: dict[str, Any] = {
        "name": name or file.stem,
        "items": items,
        "rubrics": [] if judge == ["reference"] else (rubric or ["rsum-single"]),
        "judges": judge,
        "mode": mode,
        "pairing": chosen_pairing,
        "baseline": baseline,
        "orders": orders,
        "aspects": aspect or None,
        "budget_usd": budget,
        "options": options,
        "panel": {"judges": panel_judge or None, "aggregate": panel_aggregate, "quorum": panel_quorum},
    }
    if batch_retry is not None and not batch:
        raise fail("--batch-retry needs --batch")
    if batch:
        body["execution"] = "batch"
        if batch_retry is not None:
            body["batch_retry"] = batch_retry
    if chosen_pairing == "adaptive":
        body["adaptive"] = {k: v for k, v in adaptive.items() if v is not None}
    if metric:
        body["metrics"] = [] if metric == ["none"] else metric
    if tokenize is not None:  # left out unless given: the body (and its idempotency fingerprint) stays what it was
        from judge_api.reference_tokens import TOKENIZE_OPTIONS

        if tokenize not in TOKENIZE_OPTIONS:
            raise fail(f"--tokenize must be one of {', '.join(TOKENIZE_OPTIONS)} (got {tokenize!r})")
        body["tokenize"] = tokenize
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
            line = (
                f"{created['id']}  {created['n_items']} items  {created['n_generations']} responses to generate, "
                "judgments planned as they arrive"
            )
        else:
            line = f"{created['id']}  {created['n_items']} items  {created['n_judgments']} judgments"
        # stdout holds only the format asked for: with --wait the report, so the run's line is a notice
        if wait:
            err.print(line, highlight=False, markup=False)
        elif fmt == "json":
            emit(json.dumps(created, indent=2))
        else:
            emit(line)
        if wait:
            finished = wait_for_run(client, created["id"])
            emit(render_report(client.report(created["id"]), fmt))
    except ApiError as exc:
        raise fail(exc.message) from None
    if wait:
        raise typer.Exit(outcome_exit_code(finished))


EXIT_NOTHING_USABLE = 3


def outcome_exit_code(run: dict[str, Any]) -> int:
    """``submit --wait``'s exit code from the finished run's outcome: 0 ok, 0 partial (with a warning on stderr),
    3 failed (nothing usable came back: every judgment failed, could not be parsed or was cancelled)."""
    counts = run.get("counts") or {}
    bad = f"{counts.get('unparseable', 0)} unparseable, {counts.get('failed', 0)} failed"
    if run.get("outcome") == "failed":
        err.print(
            f"[red]run {run['id']} failed: nothing usable came back ({bad}, {counts.get('cancelled', 0)} cancelled "
            f"of {run.get('n_judgments', 0)}); once the judge is fixed: "
            f"dialogue-judge retry {run['id']} --unparseable[/red]",
            highlight=False,
        )
        return EXIT_NOTHING_USABLE
    if run.get("outcome") == "partial":
        err.print(f"[yellow]run {run['id']} is partial: {counts.get('done', 0)} done, {bad}[/yellow]", highlight=False)
    return 0


def format_estimate(figures: dict[str, Any]) -> str:
    cost = figures["cost_usd"]
    seconds = figures["seconds"]
    lines = [
        f"judgments         {figures['judgments']}  ({figures['cached_judgments']} from the judge cache)",
        f"provider calls    {figures['provider_calls']}",
        f"input tokens      {figures['input_tokens']}  ({figures['cached_input_tokens']} from the prompt cache)",
        f"output tokens     {figures['output_tokens']}",
        "cost USD          "
        + (
            f"real-time {cost['realtime']:.4f}  batch {cost['batch']:.4f}  list price {cost['list']:.4f}"
            if cost is not None
            else "unknown: not in the price table: " + ", ".join(figures.get("unpriced_judges") or [])
        ),
        "time              "
        + ("no rate limit configured" if seconds is None else f"{seconds:.0f} s at the rate limits"),
    ]
    lines += [f"note: {note}" for note in figures.get("notes") or []]
    return "\n".join(lines)
