"""``dialogue-judge calibrated | label-queue``: the judge's numbers on the humans' scale (PPI++), and the items to
label next so that the interval stays valid (docs/calibration.md)."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import typer

from dialogue_judge.cli.support import api_client, emit, err, fail
from dialogue_judge.client import ApiClient, ApiError

FORMATS = ("table", "markdown", "json")
STRATEGIES = ("uniform", "active")
# the columns ``dialogue-judge import-ratings`` reads (dialogue_judge.ratings); value is left for the rater
QUEUE_CSV_COLUMNS = ["item_id", "system", "aspect", "rater", "value", "scale_min", "scale_max"]
REFERENCE_JUDGE = "reference"  # the lexical metrics (F1, BLEU): not something people rate
HOW_TO_LABEL = (
    "label a random sample first: dialogue-judge label-queue {run} --n 50 --csv labels.csv, then rate the items on "
    "the dashboard's Annotate page or fill in labels.csv and run dialogue-judge import-ratings {run} labels.csv"
)


def calibrated(
    run_id: str,
    ci: float = typer.Option(
        0.95, "--ci", help="the intervals' level, between 0.5 and 1 (exclusive), as the API takes it"
    ),
    fmt: str = typer.Option("table", "--format", help="table, markdown or json"),
    n_boot: int = typer.Option(None, "--n-boot", help="bootstrap replicates of the judge-only intervals (tables)"),
    human_prefix: str = typer.Option(None, "--human-prefix", help="only human raters whose id starts with this"),
    api: str = typer.Option(None),
    api_key: str = typer.Option(None),
) -> None:
    """Print a run's calibrated estimates: judge-only, human-only and calibrated (PPI++) intervals side by side."""
    if fmt not in FORMATS:
        raise fail(f"--format must be table, markdown or json (got {fmt!r})")
    if not 0.5 < ci < 1:  # the API's bounds (routers/reports.CI_LEVEL): refused here, with the option's name
        raise fail(f"--ci must be between 0.5 and 1, exclusive (got {ci:g}); 0.95 is a 95% interval")
    client = api_client(api, api_key)
    try:
        if fmt == "json":
            result = client.get(f"/v1/runs/{run_id}/calibrated", ci=ci, human_prefix=human_prefix)
            section = result.get("calibrated")
            emit(json.dumps(result, indent=2))
        else:
            # the report carries the judge-only intervals (its scores) at the same level as the calibrated section
            report = client.report(run_id, n_boot=n_boot, ci=ci, human_prefix=human_prefix)
            section = report.get("calibrated")
            from judge_api.stats.render import calibrated_to_markdown, calibrated_to_table

            emit(calibrated_to_markdown(report) if fmt == "markdown" else calibrated_to_table(report))
    except ApiError as exc:
        raise fail(exc.message) from None
    if not section:
        err.print("the run has no human ratings; " + HOW_TO_LABEL.format(run=run_id), highlight=False)


def label_queue(
    run_id: str,
    n: int = typer.Option(None, "--n", help="items to draw (in expectation for active)"),
    strategy: str = typer.Option("uniform", "--strategy", help="uniform or active"),
    seed: int = typer.Option(0, "--seed", help="the draw's seed (recorded with the queue)"),
    show: bool = typer.Option(False, "--show", help="print the run's existing queue instead of drawing one"),
    csv_file: Path = typer.Option(None, "--csv", help="also write the drawn items as a CSV for import-ratings"),
    scale_min: float = typer.Option(None, "--scale-min", help="the humans' scale, written into the CSV"),
    scale_max: float = typer.Option(None, "--scale-max", help="(both or neither)"),
    fmt: str = typer.Option("table", "--format", help="table or json"),
    api: str = typer.Option(None),
    api_key: str = typer.Option(None),
) -> None:
    """Draw the items people should label (seeded and recorded), or with --show print the run's queue; --csv
    writes one row per drawn item x judged system x aspect, value empty, for import-ratings to read back."""
    if fmt not in ("table", "json"):
        raise fail(f"--format must be table or json (got {fmt!r})")
    if (scale_min is None) != (scale_max is None):
        raise fail("--scale-min and --scale-max go together")
    if scale_min is not None and scale_max is not None and scale_min >= scale_max:
        raise fail(f"--scale-min {scale_min:g} must be below --scale-max {scale_max:g}")
    if show and n is not None:
        raise fail("--show prints the existing queue; --n draws a new one: give one of them")
    if not show:
        if n is None:
            raise fail("--n is required to draw a queue (or --show to print the existing one)")
        if n < 1:
            raise fail(f"--n must be at least 1 (got {n})")
        if strategy not in STRATEGIES:
            raise fail(f"--strategy must be uniform or active (got {strategy!r})")
        if seed < 0:
            raise fail(f"--seed must be 0 or more (got {seed})")
    if csv_file is not None and (csv_file.is_dir() or not csv_file.parent.is_dir()):
        raise fail(f"--csv {csv_file}: {'is a directory' if csv_file.is_dir() else 'its folder does not exist'}")
    client = api_client(api, api_key)
    try:
        if show:
            queue = client.get(f"/v1/runs/{run_id}/label-queue")
        else:
            queue = client.post(f"/v1/runs/{run_id}/label-queue", {"n": n, "strategy": strategy, "seed": seed})
            err.print(f"drew {queue['n_drawn']} of {queue['n_eligible']} items ({queue['strategy']})", highlight=False)
        rows = _csv_rows(client, run_id, queue, scale_min, scale_max) if csv_file is not None else []
    except ApiError as exc:
        raise fail(exc.message) from None
    emit(json.dumps(queue, indent=2) if fmt == "json" else queue_to_table(queue))
    if csv_file is not None:
        write_queue_csv(csv_file, rows)
        scale_hint = "" if scale_min is not None else " --scale-min MIN --scale-max MAX"
        err.print(
            f"wrote {len(rows)} rows to {csv_file}: fill in rater and value, then "
            f"dialogue-judge import-ratings {run_id} {csv_file}{scale_hint}",
            highlight=False,
        )


def queue_to_table(queue: dict[str, Any]) -> str:
    items = queue.get("items") or []
    lines = [
        f"label queue: {queue['strategy']}, seed {queue['seed']}, {queue['n_drawn']} of {queue['n_eligible']} "
        f"items drawn, {queue['n_labeled']} labeled",
        f"{'#':>4}  {'item_id':<24}  {'p':>6}  labeled",
    ]
    lines += [
        f"{i['position']:>4}  {i['item_id']:<24}  {i['inclusion_probability']:>6.3f}  {'yes' if i['labeled'] else 'no'}"
        for i in items
    ]
    return "\n".join(lines)


def _csv_rows(
    client: ApiClient, run_id: str, queue: dict[str, Any], scale_min: float | None, scale_max: float | None
) -> list[dict[str, Any]]:
    """One row per drawn item x system x aspect the judges scored in single mode, in the queue's order."""
    order = {str(i["item_id"]): i["position"] for i in queue.get("items") or []}
    judged: set[tuple[str, str, str]] = set()
    for row in client.all_judgments(run_id, mode="single", status="done"):
        if row["item_id"] in order and row["judge"] != REFERENCE_JUDGE and row.get("score") is not None:
            judged.add((str(row["item_id"]), str(row["system_a"]), str(row["aspect"])))
    scale = {"scale_min": "" if scale_min is None else f"{scale_min:g}", "scale_max": ""}
    if scale_max is not None:
        scale["scale_max"] = f"{scale_max:g}"
    return [
        {"item_id": item, "system": system, "aspect": aspect, "rater": "", "value": "", **scale}
        for item, system, aspect in sorted(judged, key=lambda key: (order[key[0]], key[1], key[2]))
    ]


def write_queue_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    try:
        with path.open("w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, QUEUE_CSV_COLUMNS)
            writer.writeheader()
            writer.writerows(rows)
    except OSError as exc:
        raise fail(f"--csv {path}: {exc.strerror or exc}") from None
