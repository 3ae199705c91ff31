"""``gate --api URL --calibrate human`` against the API (auth on): the gate reads each run's human ratings and label
queue over HTTP (``ApiBackend.run_ratings`` / ``run_label_queue``) with a read-only key, and decides as it does
standalone. The API runs in process (the test client's transport stands in for the network)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from dialogue_judge import client as client_module
from dialogue_judge.gate import GateConfig, run_gate
from judge_api.db import session_scope
from judge_api.repository import claims
from judge_simulator.process import SimulatorProcess
from workers.runtime import build_engine

from .conftest import Api, ApiFactory

N = 60
MAX_DROP = 5.0  # judge points on 1-100: 0.101 on the humans' 0-2 scale


def _items(system: str, markers: np.ndarray) -> list[dict[str, Any]]:
    return [
        {
            "id": f"item-{i:03d}",
            "dialogue": [{"speaker": "user", "text": f"Do you remember my beagle? ({i})"}],
            "candidates": {system: f"Rex ({system}). <<q={markers[i]}>>"},
        }
        for i in range(N)
    ]


def _judged_run(api: Api, judge: str, system: str, markers: np.ndarray) -> str:
    body = {"items": _items(system, markers), "rubrics": ["rsum-single"], "judges": [judge], "aspects": ["consistency"]}
    run_id = api.submit("alpha", body)["id"]
    engine = build_engine(standalone=True)
    with session_scope() as session:
        ids = claims.pending_judgment_ids(session, run_id)
    assert {engine.judge(i) for i in ids} == {"done"}
    return run_id


def _rate(api: Api, run_id: str, system: str, values: np.ndarray, items: list[int], seed: int) -> None:
    noisy = np.clip(np.round(values + np.random.default_rng(seed).normal(0.0, 0.1, values.size), 1), 0.0, 2.0)
    ratings = [
        {
            "item_id": f"item-{i:03d}",
            "system": system,
            "aspect": "consistency",
            "rater": "ann",
            "value": float(noisy[i]),
            "scale_min": 0,
            "scale_max": 2,
        }
        for i in items
    ]
    response = api.client.post(
        f"/v1/runs/{run_id}/human-ratings", json={"ratings": ratings}, headers=api.as_key("alpha")
    )
    assert response.status_code == 201, response.text


@pytest.fixture
def served(api_factory: ApiFactory, sim: SimulatorProcess, monkeypatch: pytest.MonkeyPatch) -> tuple[Api, str]:
    api = api_factory(auth=True, DJ_JUDGE_URL_ALLOWLIST=sim.base_url)
    api.create_key("alpha", ["submit", "read"], "alpha")
    api.create_key("alpha", ["read"], "alpha-read")
    api.create_key("beta", ["submit", "read"], "beta")
    original = client_module.ApiClient.__init__

    def in_process(self: Any, base_url: str, api_key: str | None = None, *args: Any, **kwargs: Any) -> None:
        original(self, base_url, api_key, *args, **kwargs)
        self._http.close()  # the app in process, not the network; the key's header as the client sends it
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = TestClient(api.client.app, base_url=base_url, headers=headers, raise_server_exceptions=False)

    monkeypatch.setattr(client_module.ApiClient, "__init__", in_process)
    sim.reset(restore_script=True)
    return api, f"openai-compatible:sim-judge@{sim.base_url}"


def _gate(judge: str, baseline: str, candidate: str, key: str) -> Any:
    return run_gate(
        GateConfig(
            baseline=baseline,
            candidate=candidate,
            judge=judge,
            max_drop=MAX_DROP,
            api="http://testserver",
            api_key=key,
            progress=False,
            calibrate="human",
        )
    )


def test_the_gate_over_the_api_calibrates_with_a_read_only_key(served: tuple[Api, str]) -> None:
    api, judge = served
    rng = np.random.default_rng(7)
    truth = np.round(np.clip(rng.normal(1.0, 0.3, N), 0.4, 1.6), 1)
    worse = np.round(truth - 0.4, 1)
    on_judge = 1 + 49.5 * truth
    baseline = _judged_run(api, judge, "v1", np.clip(np.round(on_judge), 1, 100).astype(int))
    # the judge puts the candidate 20 points above the baseline; people find it 0.4 worse
    candidate = _judged_run(api, judge, "v2", np.clip(np.round(on_judge + 20), 1, 100).astype(int))
    labelled = sorted(int(i) for i in rng.choice(N, 30, replace=False))
    _rate(api, baseline, "v1", truth, labelled, seed=1)
    _rate(api, candidate, "v2", worse, labelled, seed=2)

    result = _gate(judge, baseline, candidate, api.keys["alpha-read"])
    assert result.status == "regression", result.headline
    (entry,) = result.calibration
    assert entry["paired"] is True and entry["n_labels_both"] == 30
    assert entry["ci_low"] < 0.4 < entry["ci_high"]
    assert entry["judge_only"]["verdict"] == "no_regression"
    assert result.calls.reused and result.calls.provider_calls == 0
    text = result.markdown() + str(result.to_dict())
    assert all(secret not in text for secret in api.keys.values())

    # another project's key reads nothing of the runs: the gate stops (exit 2) naming the service's 404
    foreign = _gate(judge, baseline, candidate, api.keys["beta"])
    assert foreign.status == "error" and "not found" in foreign.headline

    # an active label queue on the candidate, read over the API: its labels are then weighted, and a drawn item
    # still to label fails closed
    made = api.client.post(
        f"/v1/runs/{candidate}/label-queue",
        json={"n": 20, "strategy": "active", "seed": 1},
        headers=api.as_key("alpha"),
    )
    assert made.status_code == 201, made.text
    result = _gate(judge, baseline, candidate, api.keys["alpha-read"])
    assert result.status == "error" and "active label queue" in result.headline
