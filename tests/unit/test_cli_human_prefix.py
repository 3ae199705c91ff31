"""`dialogue-judge agreement RUN --human-prefix expert_` (the README's MT-Bench command) and `report --human-prefix`
send the API's ``?human_prefix=`` (issue 14, finding 2); without the option none is sent."""

from __future__ import annotations

from typing import Any

import pytest
from typer.testing import CliRunner

from dialogue_judge.cli import app, reports
from dialogue_judge.client import ApiError


class FakeClient:
    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def get(self, path: str, **params: Any) -> dict[str, Any]:
        self.calls.append((path, {k: v for k, v in params.items() if v is not None}))
        return {"run_id": "run_x", "n_ratings": 0, "agreement": {}}

    def report(self, run_id: str, n_boot: int = 1000, **params: Any) -> dict[str, Any]:
        self.calls.append((f"/v1/runs/{run_id}/report", {k: v for k, v in params.items() if v is not None}))
        raise ApiError(409, "stop here: the request is what this test checks")


@pytest.fixture
def client(monkeypatch: pytest.MonkeyPatch) -> FakeClient:
    fake = FakeClient()
    monkeypatch.setattr(reports, "api_client", lambda api, api_key: fake)
    return fake


@pytest.mark.parametrize(
    ("args", "path", "params"),
    [
        (["agreement", "run_x", "--human-prefix", "expert_"], "/v1/runs/run_x/agreement", {"human_prefix": "expert_"}),
        (["agreement", "run_x", "--format", "json"], "/v1/runs/run_x/agreement", {}),
        (["report", "run_x", "--human-prefix", "expert_"], "/v1/runs/run_x/report", {"human_prefix": "expert_"}),
        (["report", "run_x"], "/v1/runs/run_x/report", {}),
    ],
)
def test_human_prefix_reaches_the_api(client: FakeClient, args: list[str], path: str, params: dict[str, Any]) -> None:
    result = CliRunner().invoke(app, args)
    assert result.exit_code in (0, 2), result.output  # the fake report answers 409: exit 2 after the request
    [(called_path, called)] = client.calls
    assert called_path == path and called.get("human_prefix") == params.get("human_prefix")
