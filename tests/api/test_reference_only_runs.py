"""A run of reference metrics only (issue 26.1): ``judges: ["reference"]`` and no rubric is accepted by the API (it
answered 422 "judge 'reference' must look like ..."), estimated at no cost, and sent by ``submit --judge reference``
or ``submit --metrics ...`` without a judge."""

from __future__ import annotations

from typing import Any

import pytest
from typer.testing import CliRunner

from dialogue_judge.cli import app, submit
from judge_api.config import REPO_ROOT
from judge_api.schemas import RunCreate

from .conftest import Api

ITEMS = str(REPO_ROOT / "examples" / "msc-demo.jsonl")


def _body() -> dict[str, Any]:
    item = {
        "id": "r1",
        "dialogue": [{"speaker": "user", "text": "Do you remember my dog's name?"}],
        "reference": "Yes, your beagle is called Rex!",
        "candidates": {"a": "Your beagle Rex!", "b": "I like cats."},
    }
    return {"items": [item], "judges": ["reference"], "metrics": ["f1", "bleu-1", "bleu-2"]}


def test_post_runs_accepts_reference_only_and_estimates_no_cost(api: Api) -> None:
    estimate = api.client.post("/v1/runs/estimate", json=_body())
    assert estimate.status_code == 200, estimate.text
    assert estimate.json()["provider_calls"] == 0 and set(estimate.json()["cost_usd"].values()) == {0}
    created = api.client.post("/v1/runs", json=_body())
    assert created.status_code == 202, created.text
    assert created.json()["n_judgments"] == 2 * 3  # candidates x metrics
    run = api.client.get(f"/v1/runs/{created.json()['id']}").json()
    assert run["judges"] == ["reference"] and run["rubrics"] == []


def test_post_runs_names_the_field_when_reference_is_mixed_with_a_judge(api: Api) -> None:
    response = api.client.post("/v1/runs", json={**_body(), "judges": ["reference", "openai:gpt-4o"]})
    assert response.status_code == 422 and "'reference' (the reference metrics) stands alone" in response.text
    assert api.client.post("/v1/runs", json={**_body(), "judges": ["openai:gpt-4o"]}).status_code == 422


class FakeClient:
    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []

    def create_run(self, body: dict[str, Any]) -> dict[str, Any]:
        self.bodies.append(body)
        return {"id": "run_x", "n_items": len(body["items"]), "n_judgments": 4}


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeClient:
    client = FakeClient()
    monkeypatch.setattr(submit, "api_client", lambda api, api_key: client)
    return client


@pytest.mark.parametrize(
    "args", [["--judge", "reference"], ["--metrics", "f1,bleu-1,bleu-2"], ["--metric", "f1", "--metric", "bleu-1"]]
)
def test_submit_sends_a_reference_only_run(fake: FakeClient, args: list[str]) -> None:
    result = CliRunner().invoke(app, ["submit", ITEMS, *args])
    assert result.exit_code == 0, result.output
    (body,) = fake.bodies
    assert body["judges"] == ["reference"] and body["rubrics"] == []
    RunCreate.model_validate(body)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "--judge is needed"),
        (["--judge", "reference", "--rubric", "rsum-single"], "--rubric: --judge reference"),
    ],
)
def test_submit_refuses_with_exit_2(fake: FakeClient, args: list[str], message: str) -> None:
    result = CliRunner().invoke(app, ["submit", ITEMS, *args])
    assert result.exit_code == 2 and message in result.output and fake.bodies == []


def test_submit_with_a_judge_keeps_the_default_rubric(fake: FakeClient) -> None:
    assert CliRunner().invoke(app, ["submit", ITEMS, "--judge", "openai:gpt-4o"]).exit_code == 0
    assert fake.bodies[0]["rubrics"] == ["rsum-single"] and fake.bodies[0]["judges"] == ["openai:gpt-4o"]
