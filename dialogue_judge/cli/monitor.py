"""``dialogue-judge monitor ...``: create, list, show, change and delete monitors, post responses to one and print
its series (docs/monitoring.md). Registered on the main app by ``dialogue_judge.cli``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from dialogue_judge.cli.support import api_client, console, emit, fail, read_items
from dialogue_judge.client import ApiClient, ApiError

monitor_app = typer.Typer(
    help="Monitors: a deterministic sample of production responses judged, with series and alerts.",
    no_args_is_help=True,
)
API_HELP = "API URL (default DJ_API_URL or http://127.0.0.1:8000)"
KEY_HELP = "API key (default DJ_API_KEY)"


def _client(api: str | None, api_key: str | None) -> ApiClient:
    return api_client(api, api_key)


def _fail(message: str) -> typer.Exit:
    return fail(message)


def _print(text: str) -> None:
    console.print(text, highlight=False, markup=False)


def _summary(monitor: dict[str, Any]) -> str:
    status = monitor.get("status") or {}
    budget = f" budget ${monitor['daily_budget_usd']:g}/day" if monitor.get("daily_budget_usd") is not None else ""
    return (
        f"{monitor['id']}  {monitor['name']}  rate {monitor['sample_rate']:g}{budget}  "
        f"{status.get('state', '?')}: {status.get('message', '')}"
    )


@monitor_app.command("create")
def create(
    name: str = typer.Option(None, help="the monitor's name"),
    rubric: list[str] = typer.Option(None, "--rubric", "-r"),
    judge: list[str] = typer.Option(None, "--judge", "-j"),
    aspect: list[str] = typer.Option(None, "--aspect", help="subset of the rubrics' aspects"),
    sample_rate: float = typer.Option(None, help="share of responses judged, 0-1"),
    daily_budget: float = typer.Option(None, help="USD a day; over it sampling pauses until the next UTC day"),
    retention_days: int = typer.Option(None, help="delete judgments after this many days (hourly sums are kept)"),
    file: Path = typer.Option(None, help="a JSON monitor body (alerts, callback...); the options above override it"),
    api: str = typer.Option(None, help=API_HELP),
    api_key: str = typer.Option(None, help=KEY_HELP),
) -> None:
    """Create a monitor and print its id."""
    body: dict[str, Any] = {}
    if file is not None:
        if not file.is_file():
            raise _fail(f"{file}: no such file")
        try:
            body = json.loads(file.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise _fail(f"{file}: not valid JSON: {exc}") from None
        if not isinstance(body, dict):
            raise _fail(f"{file}: expected a JSON object (a monitor body)")
    given = {
        "name": name,
        "rubrics": rubric or None,
        "judges": judge or None,
        "aspects": aspect or None,
        "sample_rate": sample_rate,
        "daily_budget_usd": daily_budget,
        "retention_days": retention_days,
    }
    body.update({k: v for k, v in given.items() if v is not None})
    for required, option in (("name", "--name"), ("rubrics", "--rubric"), ("judges", "--judge")):
        if required not in body:
            raise _fail(f"{option} is required (or give it in --file)")
    body.setdefault("sample_rate", 1.0 if sample_rate is None else sample_rate)
    try:
        created = _client(api, api_key).create_monitor(body)
    except ApiError as exc:
        raise _fail(exc.message) from None
    _print(_summary(created))


@monitor_app.command("list")
def list_monitors(
    api: str = typer.Option(None, help=API_HELP), api_key: str = typer.Option(None, help=KEY_HELP)
) -> None:
    """List the monitors with their sampling state."""
    try:
        monitors = _client(api, api_key).monitors()
    except ApiError as exc:
        raise _fail(exc.message) from None
    for monitor in monitors:
        _print(_summary(monitor))


@monitor_app.command("show")
def show(
    monitor_id: str,
    api: str = typer.Option(None, help=API_HELP),
    api_key: str = typer.Option(None, help=KEY_HELP),
) -> None:
    """Print a monitor (JSON), with its status today."""
    try:
        monitor = _client(api, api_key).monitor_info(monitor_id)
    except ApiError as exc:
        raise _fail(exc.message) from None
    emit(json.dumps(monitor, indent=2, default=str))


@monitor_app.command("delete")
def delete(
    monitor_id: str,
    api: str = typer.Option(None, help=API_HELP),
    api_key: str = typer.Option(None, help=KEY_HELP),
) -> None:
    """Delete a monitor with its responses, judgments and series."""
    try:
        _client(api, api_key).request("DELETE", f"/v1/monitors/{monitor_id}")
    except ApiError as exc:
        raise _fail(exc.message) from None
    _print(f"deleted {monitor_id}")


@monitor_app.command("log")
def log(
    monitor_id: str,
    file: Path = typer.Argument(..., help="responses as JSON Lines or a JSON list"),
    batch: int = typer.Option(500, help="responses per request"),
    api: str = typer.Option(None, help=API_HELP),
    api_key: str = typer.Option(None, help=KEY_HELP),
) -> None:
    """Post responses to a monitor (each id is stored once: sending a file again stores nothing new)."""
    if batch < 1:
        raise _fail("--batch must be at least 1")
    responses = read_items(file)
    client = _client(api, api_key)
    totals = {"accepted": 0, "sampled": 0, "duplicates": 0}
    paused = False
    for start in range(0, len(responses), batch):
        chunk = responses[start : start + batch]
        try:
            answer = client.request("POST", f"/v1/monitors/{monitor_id}/responses", json=chunk, retry=True)
        except ApiError as exc:
            where = f"responses {start}-{start + len(chunk) - 1}"
            raise _fail(f"{where}: {exc.message} ({totals['accepted']} accepted before)") from None
        for key in totals:
            totals[key] += int(answer[key])
        paused = paused or bool(answer.get("paused"))
    note = "  (sampling paused by the daily budget)" if paused else ""
    _print(f"accepted {totals['accepted']}, sampled {totals['sampled']}, duplicates {totals['duplicates']}{note}")


@monitor_app.command("series")
def series(
    monitor_id: str,
    bucket: str = typer.Option("1h", help="1h or 1d"),
    by: list[str] = typer.Option(["version"], "--by", help="version, system and/or segment"),
    aspect: str = typer.Option(None),
    rubric: str = typer.Option(None),
    since: str = typer.Option(None, help="ISO 8601 time"),
    fmt: str = typer.Option("table", "--format", help="table, csv or json"),
    api: str = typer.Option(None, help=API_HELP),
    api_key: str = typer.Option(None, help=KEY_HELP),
) -> None:
    """Print a monitor's series: per bucket and slice, n, mean and its interval (and fact-check contradiction
    rates)."""
    if fmt not in ("table", "csv", "json"):
        raise _fail(f"--format must be table, csv or json (got {fmt!r})")
    if bucket not in ("1h", "1d"):
        raise _fail(f"--bucket must be 1h or 1d (got {bucket!r})")
    params: dict[str, Any] = {"bucket": bucket, "by": by, "aspect": aspect, "rubric": rubric, "since": since}
    try:
        data = _client(api, api_key).monitor_series(monitor_id, format="csv" if fmt == "csv" else None, **params)
    except ApiError as exc:
        raise _fail(exc.message) from None
    if fmt == "csv":  # written as is: rich would read [..] as markup and :name: as emoji
        emit(str(data))
        return
    if fmt == "json":
        emit(json.dumps(data, indent=2))
        return
    for row in data["rows"]:
        slices = " ".join(f"{s}={row[s]}" for s in ("system", "version", "segment") if row[s] is not None)
        interval = "" if row["ci_low"] is None else f" [{row['ci_low']:.2f}, {row['ci_high']:.2f}]"
        contradiction = "" if row["contradiction_rate"] is None else f"  contradiction {row['contradiction_rate']:.3f}"
        # no mean when no verdict of the bucket has a score (n=0: e.g. every fact-check verdict n/a)
        mean = "n/a" if row["mean"] is None else f"{row['mean']:.2f}"
        _print(
            f"{row['bucket_start']}  {slices}  {row['rubric_id']}/{row['aspect']}  n={row['n']}  "
            f"mean {mean}{interval}{contradiction}"
        )
