"""``dialogue-judge report | agreement``: a run's report and its judge-human agreement, as the API computes them."""

from __future__ import annotations

import json
from typing import Any

import typer

from dialogue_judge.cli.support import api_client, emit, fail
from dialogue_judge.client import ApiError

HUMAN_PREFIX_HELP = "only human raters whose id starts with this (MT-Bench: expert_), as the API's ?human_prefix="


def render_report(report: dict[str, Any], fmt: str) -> str:
    from judge_api.stats.render import report_to_markdown, report_to_table

    if fmt == "json":
        return json.dumps(report, indent=2)
    if fmt == "md":
        return str(report_to_markdown(report))
    return str(report_to_table(report))


def report(
    run_id: str,
    fmt: str = typer.Option("table", "--format", help="table, json or md"),
    n_boot: int = typer.Option(None, help="bootstrap replicates (default: the report's, as the dashboard shows)"),
    panel_judge: list[str] = typer.Option(None, "--panel-judge", help="the panel's members (default: the run's)"),
    panel_aggregate: str = typer.Option(None, help="the panel's aggregate: mean or median (default: the run's)"),
    panel_quorum: int = typer.Option(
        None, "--panel-quorum", min=1, help="members a unit needs for a panel verdict (default: the run's)"
    ),
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
            panel_quorum=panel_quorum,
            human_prefix=human_prefix,
        )
        emit(render_report(report, fmt))
    except ApiError as exc:
        raise fail(exc.message) from None


def agreement(
    run_id: str,
    fmt: str = typer.Option("table", "--format", help="table or json"),
    human_prefix: str = typer.Option(None, "--human-prefix", help=HUMAN_PREFIX_HELP),
    api: str = typer.Option(None),
    api_key: str = typer.Option(None),
) -> None:
    """Judge-human and human-human agreement for a run with human ratings."""
    if fmt not in ("table", "json"):
        raise fail(f"--format must be table or json (got {fmt!r})")
    try:
        result = api_client(api, api_key).get(f"/v1/runs/{run_id}/agreement", human_prefix=human_prefix)
    except ApiError as exc:
        raise fail(exc.message) from None
    if fmt == "json":
        emit(json.dumps(result, indent=2))
    else:
        from judge_api.stats.render import agreement_to_table

        emit(agreement_to_table(result["agreement"]))
