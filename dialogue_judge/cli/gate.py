"""``dialogue-judge gate``: fail the build when responses got less consistent (the gate itself is
``dialogue_judge.gate``; this module reads the options and generates a side with a responder when asked)."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from dialogue_judge.cli.support import err, fail, read_items


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
    calibrate: str = typer.Option(
        None,
        "--calibrate",
        help="human: decide on the calibrated (PPI++) drop from the two runs' human labels (docs/gate.md)",
    ),
    calibrate_missing: str = typer.Option(
        "fail",
        "--calibrate-missing",
        help="--calibrate with too few labels: fail (exit 2, default) or judge (decide on the judge alone, said so)",
    ),
    calibrate_min_labels: int = typer.Option(
        10, "--calibrate-min-labels", help="--calibrate: labelled items each run needs at least"
    ),
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
            calibrate=calibrate,
            calibrate_missing=calibrate_missing,
            calibrate_min_labels=calibrate_min_labels,
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
