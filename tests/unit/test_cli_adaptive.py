"""`dialogue-judge submit --pairing adaptive / --samples adaptive`: the request the CLI sends; bad flags exit 2."""

from __future__ import annotations

from typing import Any

import pytest
from typer.testing import CliRunner

from dialogue_judge.cli import app, submit
from judge_api.config import REPO_ROOT
from judge_api.schemas import RunCreate

ITEMS = str(REPO_ROOT / "examples" / "msc-demo.jsonl")
BASE = ["submit", ITEMS, "--judge", "openai:gpt-4o", "--rubric", "rsum-pairwise", "--mode", "pairwise"]


class FakeClient:
    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []

    def create_run(self, body: dict[str, Any]) -> dict[str, Any]:
        self.bodies.append(body)
        return {"id": "run_x", "n_items": len(body["items"]), "n_judgments": 16}


@pytest.fixture
def client(monkeypatch: pytest.MonkeyPatch) -> FakeClient:
    fake = FakeClient()
    monkeypatch.setattr(submit, "api_client", lambda api, api_key: fake)
    return fake


def test_adaptive_flags_make_an_adaptive_request(client: FakeClient) -> None:
    args = [
        *BASE,
        "--pairing", "adaptive", "--confidence", "0.9", "--max-calls", "40", "--top-k", "1",
        "--samples", "adaptive", "--max-samples", "4", "--temperature", "0.7",
    ]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    (body,) = client.bodies
    assert body["pairing"] == "adaptive" and body["adaptive"] == {"confidence": 0.9, "max_calls": 40, "top_k": 1}
    assert body["options"]["samples"] == "adaptive" and body["options"]["max_samples"] == 4
    request = RunCreate.model_validate(body)  # what the API will accept
    assert request.adaptive is not None and request.adaptive.top_k == 1


def test_without_adaptive_flags_the_request_is_unchanged(client: FakeClient) -> None:
    result = CliRunner().invoke(app, [*BASE, "--samples", "3", "--temperature", "0.5"])
    assert result.exit_code == 0, result.output
    (body,) = client.bodies
    assert body["pairing"] == "all" and "adaptive" not in body and body["options"]["samples"] == 3
    assert "max_samples" not in body["options"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--samples", "many"], "--samples must be a count or 'adaptive'"),
        (["--confidence", "0.9"], "need --pairing adaptive"),
        (["--top-k", "2", "--baseline", "gold"], "need --pairing adaptive"),
    ],
)
def test_bad_adaptive_flags_exit_2(client: FakeClient, extra: list[str], message: str) -> None:
    result = CliRunner().invoke(app, [*BASE, *extra])
    assert result.exit_code == 2
    assert message in result.output
    assert client.bodies == []
