"""The report's memory_audit section (issue 26.4): per system the fact-level precision / recall / F1 and the error-type
shares of memory-audit judgments, with bootstrap CIs and counts; exact figures on planted labels, the same numbers
``dialogue-judge memory-audit --judge`` prints, no section without memory-audit judgments; through build_report, the
API, and the CLI's table / Markdown / JSON."""

from __future__ import annotations

import json
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import httpx
import pandas as pd
import pytest
from fastapi.testclient import TestClient
from test_facts_memory_judged import items as simulator_items
from typer.testing import CliRunner

from dialogue_judge.cli import app, reports
from dialogue_judge.client import ApiClient
from dialogue_judge.gate.standalone import run_in_process
from judge_api.config import reset_settings_cache
from judge_api.db import reset_engines
from judge_api.schemas import RunCreate
from judge_api.stats.memory import audit_rows, judged_memory_audit
from judge_api.stats.render import report_to_markdown, report_to_table
from judge_api.stats.report import build_report
from judge_simulator.process import SimulatorProcess
from workers.memoryaudit import memory_figures

JUDGE = "openai-compatible:sim-judge@http://127.0.0.1:9/v1"
FIGURES = ("precision", "recall", "f1")
SHARES = ("fabricated_share", "wrong_relationship_share", "missing_share")
# (system, item, gold labels, generated labels); None: an unparseable judgment, "failed": a failed one
PLANTED: list[tuple[str, str, list[str] | str | None, list[str]]] = [
    # keeper a: P 1, R 2/3, F1 4/5; b: P 1/2, R 1/2, F1 1/2; errors fabricated 1, missing 2
    ("keeper", "a", ["recalled", "recalled", "missing"], ["supported", "supported"]),
    ("keeper", "b", ["recalled", "missing"], ["supported", "fabricated"]),
    ("keeper", "c", None, []),
    ("keeper", "c", "failed", []),
    # mixer a: P 1/4, R 1/3, F1 2/7; b, two samples: (P 1/2, R 1, F1 2/3) and (P 1, R 1/2, F1 2/3), averaged first
    ("mixer", "a", ["missing", "missing", "recalled"],
     ["wrong_relationship", "supported", "fabricated", "wrong_relationship"]),
    ("mixer", "b", ["recalled", "recalled"], ["supported", "wrong_relationship"]),
    ("mixer", "b", ["recalled", "missing"], ["supported"]),
]  # fmt: skip
# system: (items, parsed, unparsed, failed, P, R, F1, errors (fabricated, wrong relationship, missing))
EXPECTED = {
    "keeper": (2, 2, 2, 1, Fraction(3, 4), Fraction(7, 12), Fraction(13, 20), (1, 0, 2)),
    "mixer": (2, 3, 0, 0, Fraction(1, 2), Fraction(13, 24), Fraction(10, 21), (1, 3, 3)),
}


def planted_judgments() -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for system, item, gold, generated in PLANTED:
        row = {"item_id": item, "system_a": system, "rubric_id": "memory-audit", "aspect": "memory", "judge": JUDGE}
        if gold is None:
            rows.append({**row, "status": "unparseable", "details": None})
        elif gold == "failed":
            rows.append({**row, "status": "failed", "details": None})
        else:
            rows.append({**row, "status": "done", "details": memory_figures(list(gold), generated)})
    return rows


def judgments_frame(judgments: list[dict[str, Any]]) -> pd.DataFrame:
    """The judgments frame of the planted memory audits (the report's other sections read it)."""
    return pd.DataFrame(
        [
            {"judgment_id": k, "run_id": "run_m", "item_id": j["item_id"], "mode": "single",
             "system_a": j["system_a"], "aspect": j["aspect"], "judge": j["judge"], "rubric_id": j["rubric_id"],
             "status": j["status"], "score": (j["details"] or {}).get("memory_score")}
            for k, j in enumerate(judgments)
        ]
    )  # fmt: skip


@pytest.fixture(scope="module")
def planted_report() -> dict[str, Any]:
    judgments = planted_judgments()
    return build_report(judgments_frame(judgments), n_boot=300, seed=3, memory_audit=audit_rows(judgments))


def test_section_has_exact_figures_on_planted_labels(planted_report: dict[str, Any]) -> None:
    section = planted_report["memory_audit"]
    assert section["error_types"] == ["fabricated", "wrong_relationship", "missing"]
    rows = {r["system"]: r for r in section["systems"]}
    assert sorted(rows) == ["keeper", "mixer"]
    for system, (n_items, parsed, unparsed, failed, p, r, f1, errors) in EXPECTED.items():
        row = rows[system]
        assert (row["rubric_id"], row["aspect"], row["judge"]) == ("memory-audit", "memory", JUDGE)
        assert (row["n_items"], row["n_parsed"], row["n_unparseable"], row["n_failed"]) == (
            n_items,
            parsed,
            unparsed,
            failed,
        ), system
        assert (row["precision"], row["recall"], row["f1"]) == pytest.approx((float(p), float(r), float(f1)))
        assert (row["fabricated"], row["wrong_relationship"], row["missing"]) == errors
        assert row["errors"] == sum(errors)
        shares = tuple(float(Fraction(n, sum(errors))) for n in errors)
        assert tuple(row[s] for s in SHARES) == pytest.approx(shares)
        for name in (*FIGURES, *SHARES):
            assert row[f"{name}_ci_low"] <= row[name] + 1e-12 and row[name] <= row[f"{name}_ci_high"] + 1e-12
    # two items per system: every bootstrap mean lies between the two items' figures
    keeper, mixer = rows["keeper"], rows["mixer"]
    assert keeper["precision_ci_low"] >= 0.5 - 1e-12 and keeper["precision_ci_high"] <= 1.0 + 1e-12
    assert keeper["precision_ci_low"] < keeper["precision_ci_high"]
    assert mixer["f1_ci_low"] >= 2 / 7 - 1e-12 and mixer["f1_ci_high"] <= 2 / 3 + 1e-12
    assert keeper["wrong_relationship_share_ci_low"] == keeper["wrong_relationship_share_ci_high"] == 0.0
    json.dumps(planted_report, allow_nan=False)


def test_section_is_the_cli_computation(planted_report: dict[str, Any]) -> None:
    """One computation: the section's figures are judged_memory_audit's (what the CLI command prints)."""
    cli_table = judged_memory_audit(audit_rows(planted_judgments()), n_boot=300, seed=3)
    for record in cli_table.to_dict(orient="records"):
        row = next(r for r in planted_report["memory_audit"]["systems"] if r["system"] == record["system"])
        assert (row["n_items"], row["n_unparseable"]) == (record["n"], record["n_unparseable"])
        for name in (*FIGURES, *SHARES):
            got = (row[name], row[f"{name}_ci_low"], row[f"{name}_ci_high"])
            assert got == (record[name], record[f"{name}_low"], record[f"{name}_high"]), name


def test_section_is_per_judge() -> None:
    judgments = planted_judgments()
    other = [{**j, "judge": "openai:gpt-4o"} for j in judgments if j["system_a"] == "mixer"]
    report = build_report(judgments_frame(judgments + other), n_boot=50, memory_audit=audit_rows(judgments + other))
    keys = [(r["judge"], r["system"]) for r in report["memory_audit"]["systems"]]
    assert keys == [(JUDGE, "keeper"), (JUDGE, "mixer"), ("openai:gpt-4o", "mixer")]
    mixers = [r for r in report["memory_audit"]["systems"] if r["system"] == "mixer"]
    assert mixers[0]["precision"] == mixers[1]["precision"] == pytest.approx(0.5)


def test_no_section_without_memory_audit_judgments(planted_report: dict[str, Any]) -> None:
    frame = judgments_frame(planted_judgments())
    assert build_report(frame, n_boot=0)["memory_audit"] is None
    assert build_report(frame, n_boot=0, memory_audit=audit_rows([]))["memory_audit"] is None
    text = report_to_table(build_report(frame, n_boot=0))
    assert "Memory audit" not in text


def test_table_and_markdown_show_the_figures(planted_report: dict[str, Any]) -> None:
    text = report_to_table(planted_report)
    assert "Memory audit (judge-based, fact level)" in text
    assert "Memory audit: error types (share of all errors)" in text
    keeper = next(line for line in text.splitlines() if line.startswith("keeper") and "0.750" in line)
    assert "0.583" in keeper and "0.650" in keeper  # P 3/4, R 7/12, F1 13/20
    mixer = [line for line in text.splitlines() if line.startswith("mixer")]
    assert any("0.476" in line for line in mixer)  # F1 10/21
    assert any("0.143" in line and "0.429" in line for line in mixer)  # shares 1/7, 3/7, 3/7
    md = report_to_markdown(planted_report)
    assert "## Memory audit (judge-based, fact level)" in md
    header = next(line for line in md.splitlines() if line.startswith("| system | judge | errors"))
    assert "| fabricated | share | 95% CI | wrong relationship | share | 95% CI | missing |" in header
    row = next(line for line in md.splitlines() if line.startswith("| keeper | ") and "| 3 | 1 | 0.333 |" in line)
    assert "| 0 | 0.000 |" in row and "| 2 | 0.667 |" in row


# -- through the service: a run judged with the memory-audit rubric on the simulator --------------------------------
@pytest.fixture
def judged(
    settings_env: pytest.MonkeyPatch, sim: SimulatorProcess, tmp_path: Path
) -> Iterator[tuple[TestClient, str, str]]:
    database = tmp_path / "memory.db"
    judge = f"openai-compatible:sim-judge@{sim.base_url}"
    request = RunCreate.model_validate(
        {"items": simulator_items(), "rubrics": ["memory-audit"], "judges": [judge], "aspects": ["memory"]}
    )
    run_id = run_in_process(request, database=database, workers=2, progress=False)
    settings_env.setenv("DATABASE_URL", f"sqlite:///{database}")
    settings_env.setenv("DJ_AUTH", "false")
    reset_settings_cache()
    reset_engines()
    from judge_api.app import create_app

    with TestClient(create_app()) as client:
        yield client, run_id, judge


def test_api_report_has_the_planted_figures_and_equals_the_cli_command(
    judged: tuple[TestClient, str, str], tmp_path: Path
) -> None:
    client, run_id, judge = judged
    response = client.get(f"/v1/runs/{run_id}/report", params={"n_boot": 300})
    assert response.status_code == 200, response.text
    rows = {r["system"]: r for r in response.json()["memory_audit"]["systems"]}
    assert sorted(rows) == ["faithful", "forger", "swapper"]
    swapper, faithful, forger = rows["swapper"], rows["faithful"], rows["forger"]
    assert (swapper["precision"], swapper["recall"], swapper["f1"]) == pytest.approx((3 / 8, 5 / 12, 11 / 28))
    assert (swapper["fabricated"], swapper["wrong_relationship"], swapper["missing"]) == (1, 3, 3)
    assert tuple(swapper[s] for s in SHARES) == pytest.approx((1 / 7, 3 / 7, 3 / 7))
    assert (faithful["precision"], faithful["recall"], faithful["f1"]) == pytest.approx((1.0, 3 / 4, 5 / 6))
    assert (forger["n_items"], forger["n_parsed"], forger["n_unparseable"], forger["n_failed"]) == (1, 1, 1, 0)

    path = tmp_path / "memories.jsonl"
    path.write_text("".join(json.dumps(i) + "\n" for i in simulator_items()))
    args = ["memory-audit", str(path), "--judge", judge, "--cache-dir", str(tmp_path / "cache"), "--n-boot", "300"]
    printed = CliRunner().invoke(app, [*args, "--format", "json"])
    assert printed.exit_code == 0, printed.output
    for record in json.loads(printed.stdout):
        row = rows[record["system"]]
        assert (row["n_items"], row["n_unparseable"]) == (record["n"], record["n_unparseable"])
        for name in (*FIGURES, *SHARES):
            got = (row[name], row[f"{name}_ci_low"], row[f"{name}_ci_high"])
            assert got == (record[name], record[f"{name}_low"], record[f"{name}_high"]), (record["system"], name)


def test_api_report_without_memory_audit_has_no_section(judged: tuple[TestClient, str, str]) -> None:
    client, _, _ = judged
    body = {
        "items": [{**simulator_items()[0], "candidates": {"s": "Fine. <<q=70>>"}}],
        "rubrics": ["rsum-single"],
        "judges": [JUDGE],
        "aspects": ["consistency"],
    }
    created = client.post("/v1/runs", json=body)
    assert created.status_code == 202, created.text
    report = client.get(f"/v1/runs/{created.json()['id']}/report", params={"n_boot": 0}).json()
    assert report["memory_audit"] is None


@pytest.mark.parametrize(
    ("fmt", "needles"),
    [
        ("table", ["Memory audit (judge-based, fact level)", "0.375", "0.417", "0.393", "0.143", "0.429"]),
        ("md", ["## Memory audit (judge-based, fact level)", "## Memory audit: error types (share of all errors)"]),
    ],
)
def test_cli_report_shows_the_memory_audit(
    judged: tuple[TestClient, str, str], monkeypatch: pytest.MonkeyPatch, fmt: str, needles: list[str]
) -> None:
    client, run_id, _ = judged

    def through_app(request: httpx.Request) -> httpx.Response:
        answer = client.request(request.method, str(request.url.raw_path, "ascii"), content=request.content)
        return httpx.Response(answer.status_code, headers=answer.headers, content=answer.content)

    transport = httpx.MockTransport(through_app)
    monkeypatch.setattr(reports, "api_client", lambda *_: ApiClient("http://testserver", transport=transport))
    result = CliRunner().invoke(app, ["report", run_id, "--format", fmt, "--n-boot", "100"])
    assert result.exit_code == 0, result.output
    for needle in needles:
        assert needle in result.stdout, needle
    shown = CliRunner().invoke(app, ["report", run_id, "--format", "json", "--n-boot", "100"])
    section = json.loads(shown.stdout)["memory_audit"]
    assert {r["system"]: r["f1"] for r in section["systems"]} == pytest.approx(
        {"faithful": 5 / 6, "forger": 2 / 3, "swapper": 11 / 28}
    )
