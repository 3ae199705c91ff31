"""The judge cache is scoped to the project (issue 14, finding 1): with auth on, a project that submits the exact
body another project judged gets no cached verdict (the judge is called, nothing of the other project's output is
read), while a re-submission in the same project is served from the cache. ``DJ_SHARED_CACHE=true`` is the
operator's opt-in to one cache for every project (a single-tenant deployment).

The real API (auth on, two projects with their own keys) and the real judge engine, against the loopback judge
simulator."""

from __future__ import annotations

import json
from typing import Any

import pytest

from judge_api.db import session_scope
from judge_api.repository import claims
from judge_simulator.process import SimulatorProcess
from workers.runtime import build_engine

from .conftest import Api, ApiFactory

PRIVATE = "Project B's private draft: the merger closes on 3 March. <<q=73>>"


def private_body(judge: str, candidate: str = PRIVATE) -> dict[str, Any]:
    return {
        "items": [
            {
                "id": "confidential-1",
                "dialogue": [{"speaker": "user", "text": "When does the deal close?"}],
                "candidates": {"bot": candidate},
            }
        ],
        "rubrics": ["rsum-single"],
        "judges": [judge],
        "aspects": ["consistency"],
    }


def judged(api: Api, key: str, body: dict[str, Any]) -> dict[str, Any]:
    """Submit as ``key``, judge the run's judgments with an in-process engine, return the one judgment (as ``key``
    reads it)."""
    run_id = api.submit(key, body)["id"]
    engine = build_engine(standalone=True)
    with session_scope() as session:
        ids = claims.pending_judgment_ids(session, run_id)
    assert [engine.judge(i) for i in ids] == ["done"]
    page = api.client.get(f"/v1/runs/{run_id}/judgments", headers=api.as_key(key))
    assert page.status_code == 200, page.text
    [judgment] = page.json()["items"]
    return dict(judgment)


def two_projects(api_factory: ApiFactory, sim: SimulatorProcess, **env: str) -> Api:
    api = api_factory(auth=True, DJ_JUDGE_URL_ALLOWLIST=sim.base_url, **env)
    api.create_key("team-a", ["submit", "read"], "a")
    api.create_key("team-b", ["submit", "read"], "b")
    sim.reset()
    return api


@pytest.mark.parametrize(
    ("env", "shared"),
    [
        ({}, False),  # auth on: the cache is per project unless the operator opts in
        ({"DJ_SHARED_CACHE": "false"}, False),
        ({"DJ_SHARED_CACHE": "true"}, True),  # single-tenant deployment: one cache
    ],
)
def test_another_projects_identical_body_is_not_cached(
    api_factory: ApiFactory, sim: SimulatorProcess, env: dict[str, str], shared: bool
) -> None:
    judge = f"openai-compatible:sim-judge@{sim.base_url}"
    api = two_projects(api_factory, sim, **env)

    b_first = judged(api, "b", private_body(judge))
    assert not b_first["cached"] and b_first["score"] == 73.0
    assert sim.stats()["total_calls"] == 1

    a_same = judged(api, "a", private_body(judge))
    if shared:
        assert a_same["cached"] and sim.stats()["total_calls"] == 1
    else:
        # A's judgment is its own call: the judge received it, nothing came from B's entry
        assert not a_same["cached"], a_same
        assert sim.stats()["total_calls"] == 2

    # the same project re-submitting is served from its own cache: no call
    calls = sim.stats()["total_calls"]
    for key in ("a", "b"):
        again = judged(api, key, private_body(judge))
        assert again["cached"] and again["score"] == 73.0
    assert sim.stats()["total_calls"] == calls

    # one character changed: a miss for anyone
    changed = judged(api, "a", private_body(judge, PRIVATE.replace("3 March", "4 March")))
    assert not changed["cached"] and sim.stats()["total_calls"] == calls + 1


@pytest.mark.parametrize(("env", "planted"), [({}, False), ({"DJ_SHARED_CACHE": "true"}, True)])
def test_an_imported_bundle_cannot_plant_entries_in_another_projects_cache(
    api_factory: ApiFactory, sim: SimulatorProcess, env: dict[str, str], planted: bool
) -> None:
    """A bundle's cache entries are written by key: a project importing one could plant a reply under a key of
    another project's cache (keys are content addresses anyone can compute). With a per-project cache, an import
    brings no cache entries; with the shared cache (one tenant) it brings them, as before."""
    judge = f"openai-compatible:sim-judge@{sim.base_url}"
    api = two_projects(api_factory, sim, **env)
    a_run = api.submit("a", private_body(judge))["id"]
    engine = build_engine(standalone=True)
    with session_scope() as session:
        ids = claims.pending_judgment_ids(session, a_run)
    assert [engine.judge(i) for i in ids] == ["done"]
    exported = api.client.get(f"/v1/runs/{a_run}/export", headers=api.as_key("a"))
    assert exported.status_code == 200, exported.text
    assert api.client.delete(f"/v1/runs/{a_run}", headers=api.as_key("a")).status_code == 200
    assert api.row_counts()["judge_cache"] == 0

    # B imports A's bundle (as if it had computed A's key itself) under another run id
    lines = [json.loads(line) for line in exported.text.splitlines()]
    lines[0]["run"]["id"] = "run_planted0000000"
    assert any(line["record"] == "cache_entry" for line in lines)
    body = "\n".join(json.dumps(line) for line in lines).encode()
    imported = api.client.post("/v1/runs/import", content=body, headers=api.as_key("b"))
    assert imported.status_code == 201, imported.text
    assert imported.json()["cache_entries"] == (1 if planted else 0)

    calls = sim.stats()["total_calls"]
    again = judged(api, "a", private_body(judge))
    assert again["cached"] is planted
    assert sim.stats()["total_calls"] == calls + (0 if planted else 1)
