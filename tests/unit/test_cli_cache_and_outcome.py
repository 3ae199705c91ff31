"""`dialogue-judge submit --cache`, `retry --unparseable` (issue 27.3) and `submit --wait`'s exit code by the run's
outcome (issue 27.2): the requests the CLI sends and the codes it exits with."""

from __future__ import annotations

from typing import Any

import pytest
from typer.testing import CliRunner

from dialogue_judge.cli import app, runs, submit
from judge_api.config import REPO_ROOT
from judge_api.schemas import RunCreate

ITEMS = str(REPO_ROOT / "examples" / "msc-demo.jsonl")
BASE = ["submit", ITEMS, "--judge", "openai:gpt-4o", "--rubric", "rsum-single"]


class FakeClient:
    def __init__(self, outcome: str = "ok") -> None:
        self.bodies: list[dict[str, Any]] = []
        self.posts: list[tuple[str, dict[str, Any]]] = []
        self.outcome = outcome

    def create_run(self, body: dict[str, Any]) -> dict[str, Any]:
        self.bodies.append(body)
        return {"id": "run_x", "n_items": len(body["items"]), "n_judgments": 4}

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.posts.append((path, body))
        return {"run_id": "run_x", "requeued": 4}

    def run(self, run_id: str) -> dict[str, Any]:
        counts = {"done": 0, "failed": 0, "unparseable": 4, "cancelled": 0, "pending": 0, "running": 0}
        if self.outcome != "failed":
            counts.update(done=4 if self.outcome == "ok" else 2, unparseable=0 if self.outcome == "ok" else 2)
        return {
            "id": run_id,
            "status": "done",
            "outcome": self.outcome,
            "n_judgments": 4,
            "counts": counts,
            "cached": 0,
        }

    def report(self, run_id: str, **_: Any) -> dict[str, Any]:
        return {"run": {"id": run_id}, "scores": []}


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeClient:
    client = FakeClient()
    for module in (submit, runs):  # submit and retry
        monkeypatch.setattr(module, "api_client", lambda api, api_key: client)
    monkeypatch.setattr(submit, "render_report", lambda report, fmt: "report")
    return client


@pytest.mark.parametrize("mode", ["refresh", "off"])
def test_submit_cache_sends_the_option(fake: FakeClient, mode: str) -> None:
    result = CliRunner().invoke(app, [*BASE, "--cache", mode])
    assert result.exit_code == 0, result.output
    (body,) = fake.bodies
    assert body["options"]["cache"] == mode and RunCreate.model_validate(body).options.cache == mode


def test_submit_leaves_the_default_cache_out_of_the_body(fake: FakeClient) -> None:
    assert CliRunner().invoke(app, BASE).exit_code == 0
    assert "cache" not in fake.bodies[0]["options"]  # the body and its idempotency fingerprint as before


def test_submit_refuses_an_unknown_cache_mode(fake: FakeClient) -> None:
    result = CliRunner().invoke(app, [*BASE, "--cache", "sometimes"])
    assert result.exit_code == 2 and "--cache must be use, refresh or off" in result.output
    assert fake.bodies == []


def test_retry_unparseable_asks_for_it(fake: FakeClient) -> None:
    assert CliRunner().invoke(app, ["retry", "run_x"]).exit_code == 0
    assert CliRunner().invoke(app, ["retry", "run_x", "--unparseable"]).exit_code == 0
    assert fake.posts == [("/v1/runs/run_x/retry", {}), ("/v1/runs/run_x/retry", {"unparseable": True})]


@pytest.mark.parametrize(("outcome", "code"), [("ok", 0), ("partial", 0), ("failed", 3)])
def test_submit_wait_exits_by_the_outcome(fake: FakeClient, outcome: str, code: int) -> None:
    fake.outcome = outcome
    result = CliRunner().invoke(app, [*BASE, "--wait"])
    assert result.exit_code == code, result.output
    if outcome == "failed":
        assert "nothing usable came back" in result.output
    if outcome == "partial":
        assert "partial" in result.output
