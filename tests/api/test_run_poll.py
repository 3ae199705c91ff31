"""GET /v1/runs/{id}, the status poll clients repeat (``dialogue-judge submit --wait``): it answers what the runs list
answers for the same run at every stage of its life, stamps ``finished_at`` once when the run settles and stores it,
and keeps the auth of every other read route (401 / 403 / 404 across projects, the caller on request.state)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import exc as sa_exc
from sqlalchemy import select, update
from starlette.types import Receive, Scope, Send

from judge_api import deps
from judge_api.auth import Principal
from judge_api.db import session_scope
from judge_api.models import Judgment, Run, utcnow

from .conftest import Api, ApiFactory, run_body
from .test_batch_runs import open_a_batch
from .test_run_systems import CHAT, systems_body, with_item_candidates


def poll(api: Api, run_id: str, key: str | None = None) -> dict[str, Any]:
    """The poll's answer, checked against the run's entry in GET /v1/runs (``summarize_runs``) read right after."""
    response = api.client.get(f"/v1/runs/{run_id}", headers=api.as_key(key))
    assert response.status_code == 200, response.text
    polled: dict[str, Any] = response.json()
    listed = api.client.get("/v1/runs", headers=api.as_key(key)).json()["items"]
    assert [polled] == [entry for entry in listed if entry["id"] == run_id]
    return polled


def set_judgments(run_id: str, values: list[dict[str, Any]]) -> None:
    """The run's judgments in id order get ``values`` (one dict each, the rest left as they are)."""
    with session_scope() as session:
        ids = session.scalars(select(Judgment.id).where(Judgment.run_id == run_id).order_by(Judgment.id)).all()
        for judgment_id, changes in zip(ids, values, strict=False):
            if changes:
                session.execute(update(Judgment).where(Judgment.id == judgment_id).values(**changes))


def stored_finished_at(run_id: str) -> datetime | None:
    with session_scope() as session:
        return session.scalar(select(Run.finished_at).where(Run.id == run_id))


def test_the_poll_follows_a_run_to_its_end_and_stamps_finished_at_once(api_factory: ApiFactory, db_url: str) -> None:
    api = api_factory(database_url=db_url)
    run_id = api.submit(body=run_body(3))["id"]  # 3 items x 2 candidates: 6 judgments
    queued = poll(api, run_id)
    assert (queued["status"], queued["outcome"], queued["finished_at"], queued["progress"]) == ("queued", None, None, 0)
    assert queued["counts"]["pending"] == 6 and queued["n_judgments"] == 6

    set_judgments(run_id, [{"status": "running"}])
    assert poll(api, run_id)["status"] == "running"

    spent = {"cost_usd": 0.0125, "input_tokens": 100, "output_tokens": 7, "provider_calls": 1}
    set_judgments(run_id, [{"status": "done", **spent}, {"status": "done", "cached": True}, {"status": "failed"}])
    running = poll(api, run_id)
    assert running["status"] == "running" and running["finished_at"] is None and stored_finished_at(run_id) is None
    assert running["counts"] | {"done": 2, "failed": 1, "pending": 3} == running["counts"]
    assert (running["cost_usd"], running["input_tokens"], running["output_tokens"]) == (0.0125, 100, 7)
    assert (running["provider_calls"], running["cached"], running["progress"]) == (1, 1, 0.5)

    set_judgments(run_id, [{}, {}, {}, {"status": "done"}, {"status": "unparseable"}, {"status": "cancelled"}])
    before = utcnow()
    done = poll(api, run_id)
    assert (done["status"], done["outcome"], done["progress"]) == ("done", "partial", 1.0)
    # the poll stored the time it stamped (committed: read back in another session), and a later poll keeps it
    stamped = datetime.fromisoformat(done["finished_at"])
    assert stored_finished_at(run_id) == stamped and stamped >= before
    assert poll(api, run_id)["finished_at"] == done["finished_at"]

    # more work for a finished run (a released item's judgments, a monitor's new sample) opens it again
    with session_scope() as session:
        session.execute(update(Run).where(Run.id == run_id).values(n_judgments=Run.n_judgments + 1, finished_at=None))
    reopened = poll(api, run_id)
    assert (reopened["status"], reopened["outcome"], reopened["finished_at"]) == ("running", None, None)
    assert stored_finished_at(run_id) is None


def test_the_poll_of_a_cancelled_and_of_a_budget_exhausted_run(api_factory: ApiFactory, db_url: str) -> None:
    api = api_factory(database_url=db_url)
    cancelled = api.submit(body=run_body(2))["id"]
    set_judgments(cancelled, [{"status": "done", "cost_usd": 0.5}])
    assert api.client.post(f"/v1/runs/{cancelled}/cancel").status_code == 200
    summary = poll(api, cancelled)
    assert (summary["status"], summary["outcome"]) == ("done", "ok")
    assert summary["message"] == "cancelled: 3 judgments were not judged" and summary["finished_at"] is not None

    exhausted = api.submit(body=run_body(2))["id"]
    set_judgments(exhausted, [{"status": "done", "cost_usd": 0.02}] + [{"status": "cancelled"}] * 3)
    with session_scope() as session:
        session.execute(update(Run).where(Run.id == exhausted).values(budget_usd=0.02, budget_exhausted_at=utcnow()))
    summary = poll(api, exhausted)
    assert (summary["status"], summary["budget_exhausted"], summary["budget_usd"]) == ("budget_exhausted", True, 0.02)
    assert summary["message"].startswith("budget of $0.0200 reached: 3 judgments were not scheduled")


def test_the_poll_of_a_batch_run_and_of_a_run_with_systems(api_factory: ApiFactory, db_url: str) -> None:
    api = api_factory(database_url=db_url)
    batch = api.submit(body=run_body(2, execution="batch"))["id"]
    assert poll(api, batch)["batches"] == {"open": 0, "done": 0, "requests": 0}
    open_a_batch(batch, 3)
    summary = poll(api, batch)
    assert summary["batches"] == {"open": 1, "done": 0, "requests": 3} and summary["status"] == "running"
    assert summary["execution"] == "batch"

    # no judgment planned yet: the run's summary comes from its row and its generations alone
    body = with_item_candidates(systems_body({"x": CHAT}), {"given": "A given answer about Rex."})
    generating = api.submit(body=body)["id"]
    summary = poll(api, generating)
    assert (summary["status"], summary["n_judgments"], summary["counts"]["pending"]) == ("queued", 0, 0)
    assert summary["generation"]["total"] == 2 and summary["generation"]["pending"] == 2
    assert summary["finished_at"] is None and summary["progress"] == 0


def test_the_poll_keeps_the_auth_of_every_read_route(secured: Api) -> None:
    run_id = secured.submit("alpha")["id"]
    url = f"/v1/runs/{run_id}"
    assert secured.client.get(url).status_code == 401
    secured.create_key("alpha", ["submit"], "alpha-submit")
    denied = secured.client.get(url, headers=secured.as_key("alpha-submit"))
    assert denied.status_code == 403
    assert denied.json()["detail"] == (
        "this API key lacks the 'read' scope needed here (it has: submit); create a key with --scope read"
    )
    foreign = secured.client.get(url, headers=secured.as_key("beta"))
    assert foreign.status_code == 404 and foreign.json()["detail"] == f"run {run_id!r} not found"
    for own in ("alpha", "alpha-read", "alpha-admin"):
        assert poll(secured, run_id, own)["id"] == run_id

    # the caller is on request.state for what runs around the route (as require() leaves it)
    seen: list[Principal | None] = []
    app = secured.client.app

    async def spy(scope: Scope, receive: Receive, send: Send) -> None:
        await app(scope, receive, send)
        seen.append(scope.get("state", {}).get("principal"))

    assert TestClient(spy).get(url, headers=secured.as_key("alpha-read")).status_code == 200
    assert len(seen) == 1 and seen[0] is not None
    assert (seen[0].project_id, seen[0].scopes) == ("alpha", frozenset({"read"}))


@pytest.mark.parametrize("client", [("203.0.113.7", 5555), ("::1", 5555)])
def test_with_auth_off_the_poll_serves_loopback_clients_only(api: Api, client: tuple[str, int]) -> None:
    run_id = api.submit()["id"]
    response = TestClient(api.client.app, client=client).get(f"/v1/runs/{run_id}")
    if client[0] == "::1":
        assert response.status_code == 200 and response.json()["id"] == run_id
    else:
        assert response.status_code == 401 and "DJ_AUTH=true" in response.json()["detail"]
        assert response.headers["www-authenticate"] == "Bearer"
    assert api.client.get("/v1/runs/run_doesnotexist00").json()["detail"] == "run 'run_doesnotexist00' not found"


def test_a_database_outage_during_the_poll_is_a_503_to_retry(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    run_id = api.submit()["id"]

    def database_away(*args: Any, **kwargs: Any) -> Principal:
        raise sa_exc.OperationalError("SELECT 1", {}, Exception("server closed the connection unexpectedly"))

    monkeypatch.setattr(deps, "authenticate", database_away)
    response = api.client.get(f"/v1/runs/{run_id}")
    assert response.status_code == 503 and response.headers["retry-after"] == "2"
    assert response.json()["detail"].startswith("the database is unavailable right now")
