"""Batch runs through the API (issue 24 item 1): the run's execution mode and its provider batches in
GET /v1/runs/{id}; cancellation and retry reach the open batches; a run with open batches is not deleted."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from sqlalchemy import func, select, update

from judge_api.db import session_scope
from judge_api.models import Judgment, ProviderBatch, ProviderBatchJudgment, Run, WebhookDelivery, utcnow
from judge_api.repository.batches import batch_token

from .conftest import Api, run_body


def open_a_batch(run_id: str, holds: int) -> tuple[int, list[int]]:
    """A provider batch as a worker leaves it once submitted: its judgments running under the batch's claim."""
    with session_scope() as session:
        ids = list(session.scalars(select(Judgment.id).where(Judgment.run_id == run_id).order_by(Judgment.id)))[:holds]
        batch = ProviderBatch(
            run_id=run_id,
            provider="openai",
            judge="openai:gpt-4o",
            status="open",
            provider_batch_id="batch_x",
            requests=holds,
            judgments=holds,
            next_poll_at=utcnow(),
        )
        session.add(batch)
        session.flush()
        session.execute(
            update(Judgment).where(Judgment.id.in_(ids)).values(status="running", claim_token=batch_token(batch.id))
        )
        return batch.id, ids


def statuses(run_id: str) -> dict[str, int]:
    with session_scope() as session:
        rows = session.scalars(select(Judgment.status).where(Judgment.run_id == run_id)).all()
    return {s: rows.count(s) for s in set(rows)}


def test_a_batch_run_shows_its_provider_batches(api: Api) -> None:
    realtime = api.submit(body=run_body(2))
    assert api.client.get(f"/v1/runs/{realtime['id']}").json()["batches"] is None
    created = api.submit(body=run_body(2, execution="batch"))
    run: dict[str, Any] = api.client.get(f"/v1/runs/{created['id']}").json()
    assert run["execution"] == "batch" and run["batches"] == {"open": 0, "done": 0, "requests": 0}
    open_a_batch(created["id"], 3)
    run = api.client.get(f"/v1/runs/{created['id']}").json()
    assert run["batches"] == {"open": 1, "done": 0, "requests": 3}
    assert run["status"] == "running"


def test_cancel_reaches_the_open_batches_and_retry_resumes(api: Api) -> None:
    created = api.submit(body=run_body(2, execution="batch"))
    run_id = created["id"]
    batch_pk, _held = open_a_batch(run_id, 2)
    assert api.client.delete(f"/v1/runs/{run_id}").status_code == 409  # open batches: cancel first
    response = api.client.post(f"/v1/runs/{run_id}/cancel")
    assert response.status_code == 200, response.text
    pending_before = created["n_judgments"] - 2
    assert response.json() == {"run_id": run_id, "cancelled": pending_before, "batches_cancelling": 1}
    with session_scope() as session:
        batch = session.get(ProviderBatch, batch_pk)
        assert batch is not None and batch.cancel_requested_at is not None
        assert session.get(Run, run_id).cancelled_at is not None  # type: ignore[union-attr]
    assert statuses(run_id) == {"running": 2, "cancelled": pending_before}  # the batch's own end their way
    response = api.client.post(f"/v1/runs/{run_id}/retry")
    assert response.json()["requeued"] == pending_before
    with session_scope() as session:
        assert session.get(Run, run_id).cancelled_at is None  # type: ignore[union-attr]
        batch = session.get(ProviderBatch, batch_pk)
        assert batch is not None and batch.next_poll_at is not None and batch.next_poll_at <= utcnow()
    assert statuses(run_id) == {"running": 2, "pending": pending_before}
    assert api.client.get(f"/v1/runs/{run_id}").json()["status"] == "running"


def test_the_estimate_of_a_batch_run_prices_it_at_the_batch_price(api: Api) -> None:
    body = run_body(2, judges=["openai:gpt-4o"], execution="batch")
    estimate = api.client.post("/v1/runs/estimate", json=body).json()
    assert estimate["cost_usd"]["batch"] == estimate["cost_usd"]["realtime"] * 0.5
    assert any("execution 'batch'" in note for note in estimate["notes"])


def test_prune_keeps_a_batch_run_with_open_batches(api: Api) -> None:
    """Pruning, like a delete, leaves a run whose provider batches are open: deleting its rows would orphan a batch
    the provider keeps running and billing, with no row left to poll or cancel it (issue 43 review)."""
    created = api.submit(body=run_body(2, execution="batch"))
    run_id = created["id"]
    batch_pk, _held = open_a_batch(run_id, 2)
    with session_scope() as session:
        session.execute(update(Run).where(Run.id == run_id).values(created_at=utcnow() - timedelta(days=2)))
    response = api.client.post("/v1/runs/prune", params={"older_than": "1d"})
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["deleted"] == [] and answer["matched"] == [run_id]
    assert run_id in answer["skipped"] and "open provider batches" in answer["skipped"][run_id]
    with session_scope() as session:
        assert session.get(ProviderBatch, batch_pk) is not None and session.get(Run, run_id) is not None


def test_a_deleted_run_counts_its_provider_batches_and_webhook_deliveries(api: Api) -> None:
    """The delete's answer counts every kind of row it removed: an ended provider batch (with the judgments it held)
    and a run.finished delivery went by ON DELETE CASCADE, uncounted (issue 43 review)."""
    created = api.submit(body=run_body(2, execution="batch"))
    run_id = created["id"]
    batch_pk, held = open_a_batch(run_id, 2)
    with session_scope() as session:
        session.execute(update(ProviderBatch).where(ProviderBatch.id == batch_pk).values(status="ended"))
        session.add_all([ProviderBatchJudgment(batch_pk=batch_pk, judgment_id=j, custom_id=f"c{j}") for j in held])
        project_id = session.get(Run, run_id).project_id  # type: ignore[union-attr]
        session.add(
            WebhookDelivery(
                id="d1",
                event_key=f"run.finished:{run_id}",
                project_id=project_id,
                event="run.finished",
                run_id=run_id,
                url="https://example.com/hook",
                secret="s",
                payload={},
            )
        )
    response = api.client.delete(f"/v1/runs/{run_id}")
    assert response.status_code == 200, response.text
    deleted = response.json()["deleted"]
    assert deleted["provider_batches"] == 1 and deleted["webhook_deliveries"] == 1, deleted
    with session_scope() as session:
        assert session.scalar(select(func.count()).select_from(ProviderBatchJudgment)) == 0
        assert session.scalar(select(func.count()).select_from(WebhookDelivery)) == 0


def test_a_delete_racing_a_batch_being_opened_answers_409_not_a_deadlock(api_factory: Any, pg_url: str) -> None:
    """A worker opening a provider batch (its row inserted, then the judgments' claims handed to it, one
    transaction) while the run is deleted: the delete locked the judgments, then waited on the run row the batch row
    references, while the worker waited on the judgments: a deadlock (one of them aborted, the delete a 500). The
    delete now locks the run row first and checks for open batches under that lock: it waits, then answers 409
    (issue 43 review)."""
    import threading

    from sqlalchemy import create_engine, insert

    api = api_factory(database_url=pg_url)
    run_id = api.submit(body=run_body(2, execution="batch"))["id"]
    engine = create_engine(pg_url)
    answer: dict[str, Any] = {}
    try:
        with engine.connect() as worker:
            pk = worker.execute(
                insert(ProviderBatch.__table__)  # type: ignore[arg-type]
                .values(run_id=run_id, provider="openai", judge="openai:gpt-4o", status="submitting", requests=0)
                .values(judgments=0, created_at=utcnow())
                .returning(ProviderBatch.__table__.c.id)
            ).scalar_one()
            deleting = threading.Thread(
                target=lambda: answer.update(response=api.client.delete(f"/v1/runs/{run_id}")), daemon=True
            )
            deleting.start()
            deleting.join(1.5)  # the delete is under way, waiting on a lock this transaction holds
            worker.execute(
                update(Judgment).where(Judgment.run_id == run_id).values(claim_token=batch_token(pk), status="running")
            )
            worker.commit()
        deleting.join(30)
    finally:
        engine.dispose()
    response = answer["response"]
    assert response.status_code == 409, response.text
    with session_scope() as session:
        assert session.get(ProviderBatch, pk) is not None and session.get(Run, run_id) is not None
