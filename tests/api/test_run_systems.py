"""POST /v1/runs with ``systems`` (docs/generation.md): what is refused at submit (422 naming the field and the
reason, nothing stored), what is stored (one pending generation per item x system, no judgment yet), and the
generation rows' claim/write/release discipline the workers rely on (a settled generation is never generated again;
an item's judgments are planned once)."""

from __future__ import annotations

import copy
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
