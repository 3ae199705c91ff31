"""stdout holds only the format asked for (issue 36, "Also"): ``submit --wait --format json | jq`` parses, the
run's line and the progress go to stderr; every command with ``--format json`` prints one JSON document and refuses
an unknown format with exit 2."""

from __future__ import annotations

import json
from typing import Any

import pytest
from typer.testing import CliRunner

from dialogue_judge.cli import app, monitor, reports, submit
from tests.unit.test_cli_cache_and_outcome import BASE, FakeClient


class ReportingClient(FakeClient):
    def report(self, run_id: str, **_: Any) -> dict[str, Any]:
        return {"run": {"id": run_id, "name": "demo [x] :smile:"}, "scores": [], "warnings": ["a notice"]}

    def get(self, path: str, **_: Any) -> dict[str, Any]:
        return {"agreement": {"judge_human": []}, "note": ":smile: [b]x[/b]"}

    def monitor_series(self, monitor_id: str, **_: Any) -> dict[str, Any]:
        return {"rows": [], "note": "[bold]:smile:[/bold]"}

    def monitor_info(self, monitor_id: str) -> dict[str, Any]:
        return {"id": monitor_id, "name": "x" * 300 + " [red]:smile:"}


@pytest.fixture
def client(monkeypatch: pytest.MonkeyPatch) -> ReportingClient:
    fake = ReportingClient()
    for module in (submit, reports, monitor):
        monkeypatch.setattr(module, "api_client", lambda api, api_key: fake)
    return fake


def runner() -> CliRunner:
    try:
        return CliRunner(mix_stderr=False)  # type: ignore[call-arg]
    except TypeError:  # click >= 8.2 keeps stderr apart already
        return CliRunner()


def test_submit_wait_format_json_prints_only_the_report_on_stdout(client: ReportingClient) -> None:
    result = runner().invoke(app, [*BASE, "--wait", "--format", "json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)  # what `| jq` reads: the report alone
    assert report["run"] == {"id": "run_x", "name": "demo [x] :smile:"}
    assert "run_x" in result.stderr and "judgments" in result.stderr  # the run's line is a notice


def test_submit_format_json_without_wait_prints_the_created_run_as_json(client: ReportingClient) -> None:
    result = runner().invoke(app, [*BASE, "--format", "json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["id"] == "run_x"


@pytest.mark.parametrize(
    "args",
    [
        ["report", "run_x", "--format", "json"],
        ["agreement", "run_x", "--format", "json"],
        ["monitor", "series", "mon_x", "--format", "json"],
        ["monitor", "show", "mon_x"],
    ],
)
def test_every_json_format_prints_one_json_document_as_is(client: ReportingClient, args: list[str]) -> None:
    result = runner().invoke(app, args, terminal_width=80)
    assert result.exit_code == 0, result.output
    parsed = json.loads(result.stdout)
    assert ":smile:" in json.dumps(parsed)  # no markup or emoji rendering, no wrapping


@pytest.mark.parametrize("args", [[*BASE, "--wait", "--format", "xml"], ["agreement", "run_x", "--format", "xml"]])
def test_an_unknown_format_is_refused_with_exit_2(client: ReportingClient, args: list[str]) -> None:
    result = runner().invoke(app, args)
    assert result.exit_code == 2 and "--format must be" in result.output
    assert client.bodies == []
