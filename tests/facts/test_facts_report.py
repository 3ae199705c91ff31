"""The report's facts section on a simulator-judged fact-check run: per system the exact contradiction and retention
rates (planted with ``<<f:ID=L>>`` markers) with bootstrap CIs, unparseable judgments counted apart, the
most-contradicted facts with their text and source; through the API and the CLI's table / Markdown / JSON."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from dialogue_judge.cli import app, reports
from dialogue_judge.client import ApiClient
from dialogue_judge.gate.standalone import run_in_process
from judge_api.config import reset_settings_cache
from judge_api.db import reset_engines
from judge_api.schemas import RunCreate
from judge_simulator.process import SimulatorProcess

PERSONA = {"user": ["I have two dogs.", "I live in Oslo."], "bot": ["I am a nurse."]}
FACTS = [
    {"id": "dogs", "text": "The user has two dogs.", "source": "session 1 turn 2"},
    {"id": "job", "text": "The bot works as a nurse.", "source": "persona.bot"},
]
# per system: the response to item a (persona facts user.1, user.2, bot.1) and to item b (explicit facts dogs, job)
RESPONSES = {
    # a: 1 supported -> rate 0; b: 2 supported -> rate 0; retention 3/3
    "keeper": (
        "How are your two dogs <<f:user.1=s>>?",
        "Your two dogs <<f:dogs=s>> miss you. My nursing shifts <<f:job=s>> are long.",
    ),
    # a: c, s, n -> 1/3; b: c, c -> 2/2; mean rate (1/3 + 1) / 2 = 2/3; retention 1 / (1 + 3) = 0.25
    "breaker": (
        "Your three dogs <<f:user.1=c>> in Oslo <<f:user.2=s>> are loud.",
        "Your cat <<f:dogs=c>> is cute. As a teacher <<f:job=c>> I know.",
    ),
    # a: unparseable (forged evidence); b: c, n -> 1/2; rate 0.5 over one item; retention 0 / 1 = 0
    "forger": (
        "Your dogs <<f:user.1=s!>> are sweet.",
        "Your one dog <<f:dogs=c>> is sweet.",
    ),
}


def _items() -> list[dict[str, Any]]:
    dialogue = [{"speaker": "user", "text": "Guess what my dogs did today!", "session": 2}]
    return [
        {
            "id": "a",
            "dialogue": dialogue,
            "persona": PERSONA,
            "candidates": {s: r[0] for s, r in RESPONSES.items()},
        },
        {
            "id": "b",
            "dialogue": dialogue,
            "persona": PERSONA,
            "facts": FACTS,
            "candidates": {s: r[1] for s, r in RESPONSES.items()},
        },
    ]


@pytest.fixture
def judged(settings_env: pytest.MonkeyPatch, sim: SimulatorProcess, tmp_path: Path) -> Iterator[tuple[TestClient, str]]:
    database = tmp_path / "facts.db"
    request = RunCreate.model_validate(
        {
            "items": _items(),
            "rubrics": ["fact-check"],
            "judges": [f"openai-compatible:sim-judge@{sim.base_url}"],
            "aspects": ["consistency"],
        }
    )
    run_id = run_in_process(request, database=database, workers=2, progress=False)
    settings_env.setenv("DATABASE_URL", f"sqlite:///{database}")
    settings_env.setenv("DJ_AUTH", "false")
    reset_settings_cache()
    reset_engines()
    from judge_api.app import create_app

    with TestClient(create_app()) as client:
        yield client, run_id


def test_report_facts_section_has_exact_planted_rates(judged: tuple[TestClient, str]) -> None:
    client, run_id = judged
    response = client.get(f"/v1/runs/{run_id}/report", params={"n_boot": 300})
    assert response.status_code == 200, response.text
    facts = response.json()["facts"]
    rows = {r["system"]: r for r in facts["systems"]}
    assert sorted(rows) == ["breaker", "forger", "keeper"]
    expected = {
        # system: (responses, unparseable, supported, contradicted, not_addressed, contradiction rate, retention)
        "keeper": (2, 0, 3, 0, 2, 0.0, 1.0),
        "breaker": (2, 0, 1, 3, 1, 2 / 3, 0.25),
        "forger": (1, 1, 0, 1, 1, 0.5, 0.0),
    }
    for system, (n, bad, sup, con, na, rate, retention) in expected.items():
        row = rows[system]
        got = (row["n_responses"], row["n_unparseable"], row["supported"], row["contradicted"], row["not_addressed"])
        assert got == (n, bad, sup, con, na), system
        assert row["contradiction_rate"] == pytest.approx(rate), system
        assert row["retention_rate"] == pytest.approx(retention), system
        assert row["contradiction_rate_ci_low"] <= row["contradiction_rate"] <= row["contradiction_rate_ci_high"]
        assert row["retention_rate_ci_low"] <= row["retention_rate"] <= row["retention_rate_ci_high"]
    # breaker's items have rates 1/3 and 1: every bootstrap mean lies between them
    assert rows["breaker"]["contradiction_rate_ci_low"] >= 1 / 3 - 1e-9
    assert rows["breaker"]["contradiction_rate_ci_high"] <= 1.0 + 1e-9
    assert rows["breaker"]["contradiction_rate_ci_low"] < rows["breaker"]["contradiction_rate_ci_high"]
    assert rows["keeper"]["contradiction_rate_ci_low"] == rows["keeper"]["contradiction_rate_ci_high"] == 0.0
    assert rows["keeper"]["most_contradicted"] == []
    assert [(f["item_id"], f["fact_id"], f["count"]) for f in rows["breaker"]["most_contradicted"]] == [
        ("a", "user.1", 1),
        ("b", "dogs", 1),
        ("b", "job", 1),
    ]
    top = facts["most_contradicted"]
    assert top[0] == {
        "item_id": "b",
        "fact_id": "dogs",
        "text": "The user has two dogs.",
        "source": "session 1 turn 2",
        "count": 2,
        "systems": ["breaker", "forger"],
    }
    assert [(f["item_id"], f["fact_id"], f["count"], f["source"]) for f in top[1:]] == [
        ("a", "user.1", 1, "persona.user"),
        ("b", "job", 1, "persona.bot"),
    ]
    assert top[1]["text"] == "I have two dogs."


def test_report_without_fact_check_has_no_facts_section(judged: tuple[TestClient, str]) -> None:
    client, _ = judged
    body = {
        "items": [{**_items()[0], "candidates": {"s": "Fine. <<q=70>>"}}],
        "rubrics": ["rsum-single"],
        "judges": ["openai-compatible:sim-judge@http://127.0.0.1:9/v1"],
        "aspects": ["consistency"],
    }
    created = client.post("/v1/runs", json=body)
    assert created.status_code == 202, created.text
    report = client.get(f"/v1/runs/{created.json()['id']}/report", params={"n_boot": 0}).json()
    assert report["facts"] is None


@pytest.mark.parametrize(
    ("fmt", "needles"),
    [
        ("table", ["Facts (fact-check)", "Most-contradicted facts", "0.667", "0.250", "breaker, forger"]),
        ("md", ["## Facts (fact-check)", "## Most-contradicted facts", "| b | dogs | session 1 turn 2 | 2 |"]),
    ],
)
def test_cli_report_shows_the_facts(
    judged: tuple[TestClient, str], monkeypatch: pytest.MonkeyPatch, fmt: str, needles: list[str]
) -> None:
    client, run_id = judged

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
    facts = json.loads(shown.stdout)["facts"]
    assert {r["system"]: r["contradiction_rate"] for r in facts["systems"]} == pytest.approx(
        {"keeper": 0.0, "breaker": 2 / 3, "forger": 0.5}
    )


FILTERS: list[tuple[dict[str, str], set[tuple[str, str, str]]]] = [
    ({"label": "contradicted"}, {("a", "breaker", "user.1"), ("b", "breaker", "dogs"), ("b", "breaker", "job"),
                                 ("b", "forger", "dogs")}),
    ({"label": "contradicted", "system": "forger"}, {("b", "forger", "dogs")}),
    ({"label": "contradicted", "source": "persona"}, {("a", "breaker", "user.1"), ("b", "breaker", "job")}),
    ({"label": "contradicted", "source": "session"}, {("b", "breaker", "dogs"), ("b", "forger", "dogs")}),
    ({"label": "contradicted", "source": "session 1"}, {("b", "breaker", "dogs"), ("b", "forger", "dogs")}),
    ({"label": "contradicted", "source": "sess"}, set()),
    ({"label": "supported", "item_id": "a"}, {("a", "keeper", "user.1"), ("a", "breaker", "user.2")}),
]  # fmt: skip


def test_fact_labels_endpoint_filters(judged: tuple[TestClient, str]) -> None:
    client, run_id = judged
    for params, expected in FILTERS:
        response = client.get(f"/v1/runs/{run_id}/facts", params=params)
        assert response.status_code == 200, response.text
        page = response.json()
        assert page["total"] == len(expected), params
        assert {(r["item_id"], r["system"], r["fact_id"]) for r in page["items"]} == expected, params


def test_fact_labels_carry_text_and_evidence(judged: tuple[TestClient, str]) -> None:
    client, run_id = judged
    page = client.get(f"/v1/runs/{run_id}/facts", params={"system": "breaker", "item_id": "b", "limit": 1}).json()
    assert page["total"] == 2 and len(page["items"]) == 1
    assert page["items"][0] | {"judgment_id": 0} == {
        "judgment_id": 0,
        "item_id": "b",
        "system": "breaker",
        "judge": page["items"][0]["judge"],
        "rubric_id": "fact-check",
        "aspect": "consistency",
        "sample_index": 0,
        "fact_id": "dogs",
        "text": "The user has two dogs.",
        "source": "session 1 turn 2",
        "label": "contradicted",
        "evidence": "Your cat <<f:dogs=c>>",
    }


def test_fact_labels_bad_query_is_422_naming_the_field(judged: tuple[TestClient, str]) -> None:
    client, run_id = judged
    for params, field in (({"label": "maybe"}, "label"), ({"limit": 0}, "limit"), ({"offset": -1}, "offset")):
        response = client.get(f"/v1/runs/{run_id}/facts", params=params)
        assert response.status_code == 422 and field in response.text, params
    assert client.get("/v1/runs/run_nope/facts").status_code == 404
