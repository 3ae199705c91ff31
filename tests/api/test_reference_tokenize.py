"""The reference metrics' ``tokenize`` option at the edges (issue 26.5): a bad value is a 422 naming the field with
nothing stored, ``submit --tokenize`` sends it (and leaves it out when not given, so the body stays what it was) and
refuses a bad value with exit 2 before any request."""

from __future__ import annotations

from typing import Any

import pytest
from typer.testing import CliRunner

from dialogue_judge.cli import app, submit
from judge_api.config import REPO_ROOT
from judge_api.schemas import RunCreate

from .conftest import Api

ITEMS = str(REPO_ROOT / "examples" / "msc-demo.jsonl")


def _body(**extra: Any) -> dict[str, Any]:
    item = {
        "id": "zh1",
        "dialogue": [{"speaker": "user", "text": "你还记得我的狗叫什么名字吗？"}],
        "reference": "记得，你的小猎犬叫雷克斯！",
        "candidates": {"a": "你的狗叫雷克斯。", "b": "我喜欢猫。"},
    }
    return {"items": [item], "judges": ["reference"], "metrics": ["f1", "bleu-1"], **extra}


@pytest.mark.parametrize("value", ["words", "", "CHAR", 1, None])
def test_a_bad_tokenize_is_a_422_naming_the_field_and_stores_nothing(api: Api, value: Any) -> None:
    before = api.row_counts()
    response = api.client.post("/v1/runs", json=_body(tokenize=value))
    assert response.status_code == 422, response.text
    (error,) = response.json()["detail"]
    assert error["loc"] == ["body", "tokenize"] and "'whitespace', 'char' or 'auto'" in error["msg"]
    assert api.row_counts() == before
    assert api.client.post("/v1/runs/estimate", json=_body(tokenize=value)).status_code == 422


@pytest.mark.parametrize(("tokenize", "version"), [("char", "parlai-nltk-1.tok-char"), ("whitespace", "parlai-nltk-1")])
def test_the_option_is_stored_with_the_run_and_in_each_judgments_version(api: Api, tokenize: str, version: str) -> None:
    created = api.client.post("/v1/runs", json=_body(tokenize=tokenize))
    assert created.status_code == 202, created.text
    run_id = created.json()["id"]
    judgments = api.client.get(f"/v1/runs/{run_id}/judgments").json()["items"]
    assert len(judgments) == 2 * 2 and {j["rubric_version"] for j in judgments} == {version}
    snapshot = api.client.get(f"/v1/rubrics/reference-metrics/versions/{version}")
    assert snapshot.status_code == 200, snapshot.text


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


@pytest.mark.parametrize("value", ["char", "whitespace", "auto"])
def test_submit_sends_tokenize(fake: FakeClient, value: str) -> None:
    result = CliRunner().invoke(app, ["submit", ITEMS, "--metrics", "f1", "--tokenize", value])
    assert result.exit_code == 0, result.output
    (body,) = fake.bodies
    assert body["tokenize"] == value and RunCreate.model_validate(body).tokenize == value


def test_submit_leaves_tokenize_out_unless_given(fake: FakeClient) -> None:
    assert CliRunner().invoke(app, ["submit", ITEMS, "--metrics", "f1"]).exit_code == 0
    assert "tokenize" not in fake.bodies[0] and RunCreate.model_validate(fake.bodies[0]).tokenize == "auto"


def test_submit_refuses_a_bad_tokenize_with_exit_2(fake: FakeClient) -> None:
    result = CliRunner().invoke(app, ["submit", ITEMS, "--metrics", "f1", "--tokenize", "words"])
    assert result.exit_code == 2 and "--tokenize must be one of whitespace, char, auto" in result.output
    assert fake.bodies == []
