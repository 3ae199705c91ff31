"""``dialogue-judge label-queue`` and ``dialogue-judge calibrated`` against the real API (issue 37, CLI).

The loop a team follows: draw a queue with ``--csv``, fill in the CSV, read it back with ``import-ratings``, print
the calibrated section. The simulator overrates v1 by 45 points; the people's 0-2 ratings rank v2 first.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any, cast

import httpx
import numpy as np
import pytest
from typer.testing import CliRunner

from dialogue_judge.cli import app, calibration, importing
from dialogue_judge.client import ApiClient
from judge_simulator.process import SimulatorProcess

from .conftest import Api, ApiFactory
from .overrated_runs import judge_overrated_run

N_ITEMS = 16
HUMAN_CENTRE = {"v1": 0.6, "v2": 1.4}
OVERRATED = {"v1": 45, "v2": 0}


def runner() -> CliRunner:
    try:
        return CliRunner(mix_stderr=False)  # type: ignore[call-arg]
    except TypeError:  # click >= 8.2 keeps stderr apart already
        return CliRunner()


@pytest.fixture
def judged(
    api_factory: ApiFactory, sim: SimulatorProcess, monkeypatch: pytest.MonkeyPatch
) -> tuple[Api, str, dict[str, np.ndarray]]:
    api = api_factory(auth=False, DJ_JUDGE_URL_ALLOWLIST=sim.base_url)
    run_id, truth = judge_overrated_run(api, sim, N_ITEMS, HUMAN_CENTRE, OVERRATED, seed=7)

    def client(api_url: str | None, api_key: str | None) -> ApiClient:
        wrapped = ApiClient("http://testserver")
        wrapped._http = cast(httpx.Client, api.client)  # the TestClient serves the app in process
        return wrapped

    monkeypatch.setattr(calibration, "api_client", client)
    monkeypatch.setattr(importing, "api_client", client)
    return api, run_id, truth


def invoke(*args: str) -> Any:
    return runner().invoke(app, list(args))


def fill(path: Path, truth: dict[str, np.ndarray], leave_unrated: int = 0) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    for row in rows[leave_unrated:]:
        row["rater"] = "ann"
        row["value"] = f"{truth[row['system']][int(row['item_id'][2:])]:g}"
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return rows


def test_the_queue_csv_round_trips_through_import_ratings_into_calibrated(
    judged: tuple[Api, str, dict[str, np.ndarray]], tmp_path: Path
) -> None:
    api, run_id, truth = judged
    sheet = tmp_path / "labels.csv"
    drawn = invoke(
        "label-queue", run_id, "--n", "12", "--seed", "5", "--csv", str(sheet), "--scale-min", "0", "--scale-max", "2"
    )
    assert drawn.exit_code == 0, drawn.output
    queue = api.client.get(f"/v1/runs/{run_id}/label-queue").json()
    order = [i["item_id"] for i in queue["items"]]
    assert len(order) == 12
    table_ids = [line.split()[1] for line in drawn.stdout.splitlines()[2:]]
    assert table_ids == order  # stdout: the queue, in its order
    assert "drew 12 of 16 items" in drawn.stderr and "import-ratings" in drawn.stderr

    with sheet.open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert list(rows[0]) == calibration.QUEUE_CSV_COLUMNS
    assert [(r["item_id"], r["system"]) for r in rows] == [(i, s) for i in order for s in ("v1", "v2")]
    assert {(r["aspect"], r["rater"], r["value"], r["scale_min"], r["scale_max"]) for r in rows} == {
        ("consistency", "", "", "0", "2")
    }

    fill(sheet, truth, leave_unrated=2)  # one item's two rows not rated yet
    imported = invoke("import-ratings", run_id, str(sheet))
    assert imported.exit_code == 0, imported.output
    assert "skipped 2 rows with no value" in imported.stdout and "22 ratings added" in imported.stdout

    as_json = invoke("calibrated", run_id, "--format", "json", "--ci", "0.9")
    assert as_json.exit_code == 0, as_json.output
    printed = json.loads(as_json.stdout)  # stdout holds the JSON document only
    served = api.client.get(f"/v1/runs/{run_id}/calibrated", params={"ci": 0.9}).json()
    assert printed == served
    section = printed["calibrated"]
    assert section["ci"] == 0.9 and section["labels_from_queue"] == 22
    by_system = {r["system"]: r for r in section["scores"]}
    assert by_system["v2"]["estimate"] > by_system["v1"]["estimate"]  # the people's order, not the judge's
    assert [r["system"] for r in section["ranking"]] == ["v2", "v1"]

    table = invoke("calibrated", run_id, "--n-boot", "50")
    assert table.exit_code == 0, table.output
    assert table.stdout.startswith("Calibrated to people (PPI++)") and table.stderr == ""
    v2_line = next(line for line in table.stdout.splitlines() if line.startswith("v2"))
    assert f"{by_system['v2']['n_labeled']}/{by_system['v2']['n_judged']}" in v2_line
    assert "95% CI" in table.stdout  # the default level

    markdown = invoke("calibrated", run_id, "--format", "markdown", "--n-boot", "50", "--ci", "0.9")
    assert markdown.exit_code == 0, markdown.output
    assert markdown.stdout.startswith("# Calibrated estimates") and "| v2 | consistency |" in markdown.stdout
    assert "90% CI" in markdown.stdout

    shown = invoke("label-queue", run_id, "--show", "--format", "json")
    assert shown.exit_code == 0, shown.output
    shown_queue = json.loads(shown.stdout)
    assert shown_queue["n_labeled"] == 11 and [i["item_id"] for i in shown_queue["items"]] == order


def test_without_ratings_the_command_says_how_to_get_them(judged: tuple[Api, str, dict[str, np.ndarray]]) -> None:
    _, run_id, _ = judged
    table = invoke("calibrated", run_id, "--n-boot", "20")
    assert table.exit_code == 0, table.output
    assert table.stdout == "No calibrated estimates: the run has no human ratings.\n"
    assert f"label-queue {run_id} --n 50" in table.stderr and "import-ratings" in table.stderr
    as_json = invoke("calibrated", run_id, "--format", "json")
    assert json.loads(as_json.stdout)["calibrated"] is None


BAD_INPUT = [
    (["calibrated", "RUN", "--ci", "1.5"], "--ci must be between 0.5 and 1"),
    (["calibrated", "RUN", "--ci", "0.3"], "--ci must be between 0.5 and 1"),  # the API's bounds, named
    (["calibrated", "RUN", "--format", "html"], "--format must be table, markdown or json"),
    (["label-queue", "RUN"], "--n is required"),
    (["label-queue", "RUN", "--n", "0"], "--n must be at least 1"),
    (["label-queue", "RUN", "--n", "5", "--strategy", "random"], "--strategy must be uniform or active"),
    (["label-queue", "RUN", "--n", "5", "--show"], "give one of them"),
    (["label-queue", "RUN", "--n", "5", "--scale-min", "0"], "--scale-min and --scale-max go together"),
    (["label-queue", "RUN", "--n", "5", "--scale-min", "2", "--scale-max", "0"], "must be below"),
    (["label-queue", "RUN", "--n", "17"], "n: the run has 16 items with a single-mode score; n=17 is more"),
    (["label-queue", "RUN", "--show"], "this run has no label queue"),
]


def test_bad_input_exits_2_with_a_message_and_stores_no_queue(judged: tuple[Api, str, dict[str, np.ndarray]]) -> None:
    """Every case against one judged run (judging it is the expensive part), each checked on its own."""
    api, run_id, _ = judged
    failures: list[tuple[object, ...]] = []
    for args, message in BAD_INPUT:
        result = invoke(*[run_id if a == "RUN" else a for a in args])
        if not (result.exit_code == 2 and message in result.stderr and result.stdout == ""):
            failures.append((args, result.exit_code, result.stderr[-300:], result.stdout[-300:]))
        if api.client.get(f"/v1/runs/{run_id}/label-queue").status_code != 404:
            failures.append((args, "a queue was stored"))
            break
    assert not failures, failures


def test_a_second_queue_is_refused(judged: tuple[Api, str, dict[str, np.ndarray]]) -> None:
    _, run_id, _ = judged
    assert invoke("label-queue", run_id, "--n", "4", "--strategy", "active").exit_code == 0
    again = invoke("label-queue", run_id, "--n", "4")
    assert again.exit_code == 2 and "has a label queue already" in again.stderr
