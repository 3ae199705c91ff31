"""POST /v1/runs with ``systems`` (docs/generation.md): what is refused at submit (422 naming the field and the
reason, nothing stored), what is stored (one pending generation per item x system, no judgment yet), and the
generation rows' claim/write/release discipline the workers rely on (a settled generation is never generated again;
an item's judgments are planned once)."""

from __future__ import annotations

import copy
import json
import time
from typing import Any

import pytest
from sqlalchemy import func, select

from judge_api.db import session_scope
from judge_api.models import Generation, Judgment, Run
from judge_api.repository import generations
from judge_api.rubrics import get_registry

from .conftest import ApiFactory, run_body

SIM = "http://127.0.0.1:9/v1"  # allow-listed by the api fixtures; never called here (no worker)
CHAT = f"strategy:rsum@openai-compatible:sim-chat@{SIM}"


def systems_body(systems: dict[str, str], **overrides: Any) -> dict[str, Any]:
    body = run_body(n_items=2, systems=systems, **overrides)
    for entry in body["items"]:
        entry.pop("candidates")
    return body


def with_item_candidates(body: dict[str, Any], candidates: dict[str, str]) -> dict[str, Any]:
    body = copy.deepcopy(body)
    body["items"][0]["candidates"] = candidates
    return body


REFUSED = [
    # (name, auth, body, loc prefix, message fragment)
    (
        "not a responder",
        False,
        systems_body({"mine": "nonsense"}),
        ["body", "systems"],
        "systems.mine: responder 'nonsense' must be",
    ),
    (
        "bad http url",
        False,
        systems_body({"mine": "http:ftp://x"}),
        ["body", "systems"],
        "systems.mine: responder 'http:ftp://x'",
    ),
    ("bad system name", False, systems_body({"-x": CHAT}), ["body", "systems"], "systems.-x: a system name"),
    ("no system", False, systems_body({}), ["body", "systems"], "name at least one system"),
    (
        "unknown strategy",
        False,
        systems_body({"mine": f"strategy:nope@openai-compatible:m@{SIM}"}),
        ["body", "systems", "mine"],
        "unknown strategy 'nope'",
    ),
    (
        "system named like a given candidate",
        False,
        with_item_candidates(systems_body({"a": CHAT}), {"a": "given"}),
        ["body", "items", 0, "candidates", "a"],
        "'a' is also one of the run's systems",
    ),
    (
        "adaptive pairing",
        False,
        systems_body({"x": CHAT, "y": CHAT}, mode=["pairwise"], rubrics=["rsum-pairwise"], pairing="adaptive"),
        ["body"],
        "adaptive pairing and adaptive samples are not supported",
    ),
    (
        "baseline neither given nor a system",
        False,
        systems_body({"x": CHAT, "y": CHAT}, mode=["pairwise"], rubrics=["rsum-pairwise"], baseline="z"),
        ["body"],
        "baseline 'z' is missing",
    ),
    (
        "python responder with auth on",
        True,
        systems_body({"mine": "python:mybot:reply"}),
        ["body", "systems", "mine"],
        "python responders run in-process on the workers and are refused when auth is on",
    ),
    (
        "chat model URL not allow-listed",
        True,
        systems_body({"mine": "strategy:rsum@openai-compatible:m@http://10.0.0.1:8000/v1"}),
        ["body", "systems", "mine"],
        "'http://10.0.0.1:8000/v1' is not in DJ_JUDGE_URL_ALLOWLIST",
    ),
    (
        "http responder not allow-listed",
        True,
        systems_body({"mine": "http:http://10.0.0.1:9000/respond"}),
        ["body", "systems", "mine"],
        "'http://10.0.0.1:9000/respond' is not in DJ_JUDGE_URL_ALLOWLIST",
    ),
]


@pytest.mark.parametrize(("name", "auth", "body", "loc", "reason"), REFUSED, ids=[c[0] for c in REFUSED])
def test_bad_systems_are_refused_naming_the_field_and_nothing_is_stored(
    api_factory: ApiFactory, name: str, auth: bool, body: dict[str, Any], loc: list[Any], reason: str
) -> None:
    api = api_factory(auth=auth)
    headers = {}
    if auth:
        headers = {"Authorization": f"Bearer {api.create_key('alpha', ['submit', 'read'], 'alpha')}"}
    before = api.row_counts()
    response = api.client.post("/v1/runs", json=body, headers=headers)
    assert response.status_code == 422, response.text
    errors = response.json()["detail"]
    assert any(e["loc"][: len(loc)] == loc and reason in e["msg"] for e in errors), errors
    after = api.row_counts()
    assert after == {**before, "projects": after["projects"], "api_keys": after["api_keys"]}
    assert after["runs"] == after["items"] == after["generations"] == after["judgments"] == 0


@pytest.mark.parametrize(
    ("auth", "systems"),
    [
        (False, {"rsum": CHAT, "mine": "python:mybot:reply"}),  # auth off (the embedded default): python is allowed
        (True, {"rsum": CHAT, "ours": "http:http://127.0.0.1:9/v1/respond"}),  # under the allow-list
    ],
    ids=["auth-off-python", "auth-on-allow-listed"],
)
def test_a_run_with_systems_stores_its_generations_and_no_judgment_yet(
    api_factory: ApiFactory, auth: bool, systems: dict[str, str]
) -> None:
    api = api_factory(auth=auth)
    key = "alpha" if auth else None
    if key:
        api.create_key("alpha", ["submit", "read"], key)
    body = with_item_candidates(systems_body(systems), {"given": "A given answer about Rex."})
    created = api.submit(key, body)
    assert (created["n_items"], created["n_generations"], created["n_judgments"]) == (2, 4, 0)
    counts = api.row_counts()
    assert (counts["runs"], counts["items"], counts["generations"], counts["judgments"]) == (1, 2, 4, 0)
    summary = api.client.get(f"/v1/runs/{created['id']}", headers=api.as_key(key)).json()
    assert summary["status"] == "queued"
    assert summary["generation"]["total"] == 4 and summary["generation"]["pending"] == 4
    assert summary["progress"] == 0.0


def test_a_generation_is_written_once_and_an_item_released_once(api_factory: ApiFactory, db_url: str) -> None:
    api = api_factory(auth=False, database_url=db_url)
    body = with_item_candidates(systems_body({"x": CHAT, "y": CHAT}), {"given": "A given answer about Rex."})
    body["items"] = body["items"][:1]
    run_id = api.submit(None, body)["id"]
    with session_scope() as session:
        ids = generations.pending_generation_ids(session, run_id)
        rows = {g.id: g for g in session.scalars(select(Generation).where(Generation.id.in_(ids)))}
    x, y = (next(i for i, g in rows.items() if g.system == s) for s in ("x", "y"))
    with session_scope() as session:
        first = generations.claim_generation(session, x, lease_s=600)
        assert first is not None and first.item["id"] == "item-0" and first.responder == CHAT
        assert generations.claim_generation(session, x, lease_s=600) is None  # held by a live worker
    time.sleep(0.01)
    with session_scope() as session:
        second = generations.claim_generation(session, x, lease_s=0)  # the first worker's lease lapsed: taken over
        assert second is not None and second.token != first.token
        assert not generations.write_generation(session, x, first.token, {"status": "done", "response": "late"})
        assert generations.write_generation(
            session, x, second.token, {"status": "done", "response": "X says Rex.", "memory": "M: dog Rex"}
        )
        assert generations.claim_generation(session, x, lease_s=0) is None  # settled: never generated again
        assert generations.release_item(session, first.item_pk, get_registry()) == []  # y is not settled yet
        task = generations.claim_generation(session, y, lease_s=600)
        assert task is not None
        assert generations.write_generation(session, y, task.token, {"status": "failed", "error": "timeout: slow"})
    with session_scope() as session:
        assert generations.unreleased_settled_items(session) == [first.item_pk]  # what the sweeper would release
        released = generations.release_item(session, first.item_pk, get_registry())
        assert generations.release_item(session, first.item_pk, get_registry()) == []  # once
        assert generations.unreleased_settled_items(session) == []
    with session_scope() as session:
        judged = list(session.scalars(select(Judgment).where(Judgment.run_id == run_id)))
        n_judgments = session.scalar(select(Run.n_judgments).where(Run.id == run_id))
        assert session.scalar(select(func.count(Generation.id)).where(Generation.run_id == run_id)) == 2
    assert sorted(j.id for j in judged) == sorted(released)
    assert sorted(j.system_a for j in judged) == ["given", "x"]  # the failed system y has no judgment
    assert n_judgments == 2
    stored = api.client.get(f"/v1/runs/{run_id}/items").json()["items"][0]
    assert stored["candidates"] == {"given": "A given answer about Rex.", "x": "X says Rex."}
    assert stored["meta"]["generation"]["x"]["memory"] == "M: dog Rex"
    assert stored["meta"]["generation"]["y"] == {
        "status": "failed",
        "responder": CHAT,
        "error": "timeout: slow",
        "memory": None,
    }
    summary = api.client.get(f"/v1/runs/{run_id}").json()
    assert summary["generation"]["generated"] == 1 and summary["generation"]["failed"] == 1
    assert summary["generation"]["failures"] == [{"item_id": "item-0", "system": "y", "error": "timeout: slow"}]
    assert summary["status"] == "running"  # generated, judgments pending


def _settle(run_id: str, outcomes: dict[str, dict[str, Any]]) -> None:
    """Generate the run's pending generations as ``outcomes`` (system -> written values) say, and release the items."""
    with session_scope() as session:
        ids = generations.pending_generation_ids(session, run_id)
        systems = dict(session.execute(select(Generation.id, Generation.system).where(Generation.id.in_(ids))).all())
    for generation_id, system in systems.items():
        with session_scope() as session:
            task = generations.claim_generation(session, generation_id, lease_s=600)
            assert task is not None
            assert generations.write_generation(session, generation_id, task.token, outcomes[system])
    with session_scope() as session:
        for item_pk in generations.unreleased_settled_items(session):
            generations.release_item(session, item_pk, get_registry())


GENERATION_FIELDS = ("item_key", "system", "responder", "status", "response", "memory", "error", "details")


def _generation_rows(run_id: str) -> list[dict[str, Any]]:
    with session_scope() as session:
        rows = session.scalars(select(Generation).where(Generation.run_id == run_id).order_by(Generation.id))
        return [{f: getattr(g, f) for f in GENERATION_FIELDS} for g in rows]


def test_a_bundle_carries_the_generations(api_factory: ApiFactory) -> None:
    """Issue 26.3: export/import of a run with systems keeps its generations rows (old: left out, so the imported
    run's summary had no generation stage and a failed generation could not be retried)."""
    api = api_factory(auth=False)
    body = with_item_candidates(systems_body({"x": CHAT, "y": CHAT}), {"given": "A given answer about Rex."})
    run_id = api.submit(None, body)["id"]
    _settle(
        run_id,
        {
            "x": {"status": "done", "response": "X says Rex.", "memory": "M: dog Rex", "details": {"calls": 2}},
            "y": {"status": "failed", "error": "timeout: slow"},
        },
    )
    before = _generation_rows(run_id)
    summary = api.client.get(f"/v1/runs/{run_id}").json()
    exported = api.client.get(f"/v1/runs/{run_id}/export")
    assert exported.status_code == 200
    assert sum('"record":"generation"' in line for line in exported.text.splitlines()) == 4
    assert api.client.delete(f"/v1/runs/{run_id}").status_code == 200
    assert api.row_counts()["generations"] == 0
    imported = api.client.post("/v1/runs/import", content=exported.content)
    assert imported.status_code == 201, imported.text
    assert imported.json()["generations"] == 4
    assert imported.json()["source_run_id"] == run_id
    run_id = imported.json()["run_id"]  # an import is a new run (issue 42, finding 11)
    assert _generation_rows(run_id) == before and len(before) == 4
    again = api.client.get(f"/v1/runs/{run_id}").json()
    assert again["generation"] == summary["generation"]
    assert again["generation"]["failed"] == 2 and again["generation"]["generated"] == 2


def test_post_runs_jsonl_accepts_systems(api_factory: ApiFactory) -> None:
    """Issue 26.3: ``POST /v1/runs/jsonl`` takes ``system=NAME=RESPONDER`` query parameters (old: no way to name
    systems there); a malformed one is a 422 naming the parameter, nothing stored."""
    api = api_factory(auth=False)
    body = systems_body({"x": CHAT})
    lines = "\n".join(json.dumps(item) for item in body["items"])
    params: dict[str, Any] = {"rubric": "rsum-single", "judge": body["judges"][0], "system": [f"x={CHAT}", f"y={CHAT}"]}
    created = api.client.post("/v1/runs/jsonl", params=params, content=lines)
    assert created.status_code == 202, created.text
    assert (created.json()["n_generations"], created.json()["n_judgments"]) == (4, 0)
    assert api.row_counts()["generations"] == 4
    before = api.row_counts()
    bad = api.client.post("/v1/runs/jsonl", params={**params, "system": ["nameless"]}, content=lines)
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["query", "system", 0]
    assert api.row_counts() == before


def test_retry_sends_a_failed_generation_again_and_judges_only_what_is_new(api_factory: ApiFactory) -> None:
    """Issue 26.3: ``POST /v1/runs/{id}/retry`` retries failed generations too (old: only judgments, the failed
    system stayed unjudged); once generated, the item gets the new system's judgments and keeps the others."""
    api = api_factory(auth=False)
    body = with_item_candidates(systems_body({"x": CHAT, "y": CHAT}), {"given": "A given answer about Rex."})
    body["items"] = body["items"][:1]
    run_id = api.submit(None, body)["id"]
    _settle(
        run_id, {"x": {"status": "done", "response": "X says Rex."}, "y": {"status": "failed", "error": "http 500"}}
    )
    with session_scope() as session:
        first = {j.id: j.system_a for j in session.scalars(select(Judgment).where(Judgment.run_id == run_id))}
    assert sorted(first.values()) == ["given", "x"]

    retried = api.client.post(f"/v1/runs/{run_id}/retry")
    assert retried.status_code == 200 and retried.json()["requeued"] == 1
    summary = api.client.get(f"/v1/runs/{run_id}").json()
    assert summary["generation"]["failed"] == 0 and summary["generation"]["pending"] == 1
    _settle(run_id, {"y": {"status": "done", "response": "Y remembers Rex."}})
    with session_scope() as session:
        after = {j.id: j.system_a for j in session.scalars(select(Judgment).where(Judgment.run_id == run_id))}
        n_judgments = session.scalar(select(Run.n_judgments).where(Run.id == run_id))
    assert sorted(after.values()) == ["given", "x", "y"] and n_judgments == 3
    assert {k: after[k] for k in first} == first  # the judgments it had are kept, none planned twice
    stored = api.client.get(f"/v1/runs/{run_id}/items").json()["items"][0]
    assert stored["candidates"]["y"] == "Y remembers Rex." and stored["meta"]["generation"]["y"]["status"] == "done"
    assert api.client.post(f"/v1/runs/{run_id}/retry").json()["requeued"] == 0  # nothing failed any more
