"""Provider batches paid once and never mixed up (issue 36, findings 5, 6 and 9): the real batch clients over the
official SDKs against the simulator's batch protocols, the judge engine on SQLite."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any, cast

import pytest
from sqlalchemy import select, update

from judge_api.db import session_scope
from judge_api.judges import parse_judge
from judge_api.models import ProviderBatch, ProviderBatchJudgment
from judge_api.repository import batches as repo
from workers import batch_clients
from workers import batches as stage_module

from .harness import Harness, dialogue_item
from .test_batch_execution import batch_requests, collect, request


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_an_expired_or_errored_request_is_not_counted_as_a_provider_call(harness: Harness, provider: str) -> None:
    """Only what the provider bills is a call: an expired request (never run) and an errored one (no answer) are
    not; each judgment's calls add up to the simulator's bill."""
    harness.build(DJ_BATCH_POLL="0.1", DJ_MAX_ATTEMPTS="3")
    faults = [
        {"kind": "expire", "match": "Rex 1 ", "times": 1},
        {"kind": "error", "status": 503, "match": "Rex 2 ", "times": 1},
    ]
    harness.sim.set_script({"batch": {"completion_seconds": 0.2, "faults": faults}})
    run_id = harness.create(**request(harness, provider, n=3))
    harness.engine.judge_many(harness.pending(run_id))
    collect(harness, run_id)
    rows = {(r.item_key, r.system_a): r for r in harness.rows(run_id)}
    assert {r.status for r in rows.values()} == {"done"}
    assert (rows[("b1", "a")].attempts, rows[("b1", "a")].provider_calls) == (2, 1)  # expired once, then answered
    assert (rows[("b2", "a")].attempts, rows[("b2", "a")].provider_calls) == (2, 1)  # errored once, then answered
    billed = harness.sim.stats()["bill"]["calls"]
    assert sum(r.provider_calls for r in rows.values()) == billed == len(rows)


def stored_row(pk: int) -> repo.BatchRow:
    with session_scope() as session:
        stored = session.get(ProviderBatch, pk)
        assert stored is not None
        return repo.BatchRow(**{name: getattr(stored, name) for name in repo.BatchRow.__dataclass_fields__})


def stored_custom_ids(pk: int) -> set[str]:
    with session_scope() as session:
        query = select(ProviderBatchJudgment.custom_id).where(ProviderBatchJudgment.batch_pk == pk)
        return set(session.scalars(query).all())


def batch_rows(run_id: str | None = None) -> list[ProviderBatch]:
    with session_scope() as session:
        query = select(ProviderBatch).order_by(ProviderBatch.id)
        if run_id is not None:
            query = query.where(ProviderBatch.run_id == run_id)
        rows = list(session.scalars(query).all())
        for row in rows:
            session.expunge(row)
        return rows


def client_class(provider: str) -> Any:
    return batch_clients.AnthropicBatchClient if provider == "anthropic" else batch_clients.OpenAIBatchClient


def stage(harness: Harness) -> stage_module.BatchStage:
    return cast(stage_module.BatchStage, harness.engine.batch_stage())


@contextlib.contextmanager
def poller_clock_ahead(monkeypatch: pytest.MonkeyPatch, seconds: float) -> Iterator[None]:
    """The poller's clock (workers.batches) runs ``seconds`` ahead of the worker's."""
    real = stage_module.utcnow
    with monkeypatch.context() as patched:
        patched.setattr(stage_module, "utcnow", lambda: real() + timedelta(seconds=seconds))
        yield


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_batch_that_reaches_the_provider_after_its_row_was_given_up_is_read_not_paid_twice(
    harness: Harness, provider: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The submitting worker is slow: before its batch reaches the provider, a poller whose clock is 125 s ahead
    (past the 120 s grace) gives the row up and sends its judgments back. The row stays given up (one way), the
    late batch is taken by a new row with the judgments still waiting and read: each judgment judged once, one
    billed call each, nothing left pending."""
    harness.build(DJ_BATCH_POLL="0.1")
    run_id = harness.create(**request(harness, provider, n=2))
    ids = harness.pending(run_id)
    real_submit = client_class(provider).submit

    def slow_submit(self: Any, requests: Any, tag: str) -> Any:
        (row,) = batch_rows(run_id)
        with poller_clock_ahead(monkeypatch, 125):
            stage(harness).poll(stored_row(row.id))  # finds nothing at the provider yet: gives up
        assert [b.status for b in batch_rows(run_id)] == ["failed"]
        assert {r.status for r in harness.rows(run_id)} == {"pending"}
        return real_submit(self, requests, tag)

    monkeypatch.setattr(client_class(provider), "submit", slow_submit)
    harness.engine.judge_many(ids)
    monkeypatch.setattr(client_class(provider), "submit", real_submit)
    first = batch_rows(run_id)[0]
    assert first.status == "failed" and "taken by batch row" in (first.error or "")  # never reopened
    collect(harness, run_id)
    rows = harness.rows(run_id)
    assert [(r.status, r.attempts, r.provider_calls) for r in rows] == [("done", 1, 1)] * len(ids)
    assert harness.sim.stats()["bill"]["calls"] == len(ids) == len(batch_requests(harness))
    assert [(b.status, b.provider_batch_id is not None) for b in batch_rows(run_id)] == [
        ("failed", False),
        ("ended", True),
    ]


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_late_batch_whose_judgments_were_taken_meanwhile_is_cancelled_and_nothing_is_paid_twice(
    harness: Harness, provider: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As above, but one of the given-up judgments was sent again (another batch) before the late batch arrived:
    the late batch is cancelled before the provider runs it; every judgment is judged once and its calls add up to
    the provider's bill."""
    harness.build(DJ_BATCH_POLL="0.1")
    harness.sim.set_script({"batch": {"completion_seconds": 1.0}})
    run_id = harness.create(**request(harness, provider, n=2))
    ids = harness.pending(run_id)
    real_submit = client_class(provider).submit
    calls = {"n": 0}

    def slow_submit(self: Any, requests: Any, tag: str) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:
            (row,) = batch_rows(run_id)
            with poller_clock_ahead(monkeypatch, 125):
                stage(harness).poll(stored_row(row.id))
            harness.engine.judge_many(ids[:1])  # another worker takes one of them back into a batch of its own
        return real_submit(self, requests, tag)

    monkeypatch.setattr(client_class(provider), "submit", slow_submit)
    harness.engine.judge_many(ids)
    collect(harness, run_id, timeout=40)
    rows = harness.rows(run_id)
    assert {r.status for r in rows} == {"done"}
    assert sum(r.provider_calls for r in rows) == harness.sim.stats()["bill"]["calls"] == len(ids)
    first, *others = batch_rows(run_id)
    assert first.status == "failed" and {b.status for b in others} == {"ended"}
    # the late batch was cancelled: by the row that took what still waited for it, or noted on the given-up row
    assert "cancelled" in (first.error or "") or any(b.cancel_sent_at is not None for b in others)


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_recovery_finds_its_own_batch_among_two_of_the_same_size_and_refuses_the_others_results(
    harness: Harness, provider: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two rows on one key each made a batch of two requests and died before recording it. find() for the first
    row returns its own batch, not the newer one of the same size; every judgment gets its own reply, paid once."""
    harness.build(DJ_BATCH_POLL="0.1")
    runs = []
    for prefix, q in (("a", 40), ("z", 70)):
        body = request(harness, provider, n=2)
        body["items"] = [
            dialogue_item(f"{prefix}{k}", {"a": f"Rex {prefix}{k} <<q={q + k}>>", "b": f"Cat {prefix}{k} <<q={q}>>"})
            for k in range(2)
        ]
        body["aspects"] = ["consistency"]
        runs.append(harness.create(**body))
    made: dict[int, str] = {}

    def died(engine: Any, pk: int, provider_batch_id: str, *_: Any) -> bool:
        made[pk] = provider_batch_id
        raise SystemExit("worker killed after creating the batch")

    with monkeypatch.context() as patched:
        patched.setattr(stage_module.repo, "mark_submitted", died)
        for run_id in runs:
            with pytest.raises(SystemExit):
                harness.engine.judge_many(harness.pending(run_id))
    first, second = (batch_rows(run_id)[0] for run_id in runs)
    assert first.requests == second.requests and len(made) == 2
    client = client_class(provider)(parse_judge(first.judge), harness.engine.settings)
    deadline = time.monotonic() + 20
    while not all(client.retrieve(batch_id).ended for batch_id in made.values()):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    with session_scope() as session:  # their grace is over: the pollers look their batches up
        session.execute(update(ProviderBatch).values(next_poll_at=ProviderBatch.created_at))
    for run_id in runs:
        collect(harness, run_id)
    for run_id, row in zip(runs, (first, second), strict=True):
        assert [(b.status, b.provider_batch_id) for b in batch_rows(run_id)] == [("ended", made[row.id])]
        assert [(r.status, r.attempts, r.provider_calls) for r in harness.rows(run_id)] == [("done", 1, 1)] * 4
    assert harness.sim.stats()["bill"]["calls"] == 8
    own = stored_custom_ids(first.id)
    tag = repo.prefix_of(next(iter(own)))
    found = client.find(tag, own, first.created_at - timedelta(seconds=60), lambda b: False)
    assert found.batch_id == made[first.id] != made[second.id]


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_results_of_another_rows_batch_are_refused_not_written(
    harness: Harness, provider: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A row pointed at another row's batch (as a mistaken adoption would): none of that batch's results is
    written to its judgments, whether their custom ids are not the row's or name another prompt; the row records
    the refusal and its judgments are asked again."""
    harness.build(DJ_BATCH_POLL="0.1")
    mine = harness.create(**request(harness, provider, n=2))
    body = request(harness, provider, n=2)
    body["items"] = [
        dialogue_item(f"o{k}", {"a": f"Other {k} <<q={95 - k}>>", "b": f"Else {k} <<q={90}>>"}) for k in range(2)
    ]
    other = harness.create(**body)
    hold = {"batch": {"completion_seconds": 30.0}}
    harness.sim.set_script(hold)
    harness.engine.judge_many(harness.pending(mine))  # my batch stays open at the provider
    harness.sim.set_script({"batch": {"completion_seconds": 0.1}})
    harness.engine.judge_many(harness.pending(other))
    collect(harness, other)
    (theirs,) = batch_rows(other)
    (row,) = batch_rows(mine)
    their_ids = sorted(stored_custom_ids(theirs.id))
    with session_scope() as session:
        session.execute(
            update(ProviderBatch)
            .where(ProviderBatch.id == row.id)
            .values(provider_batch_id=theirs.provider_batch_id, next_poll_at=ProviderBatch.created_at)
        )
        if provider == "anthropic":  # the same custom ids as theirs, other prompts: refused by the prompt key
            members = session.scalars(
                select(ProviderBatchJudgment).where(ProviderBatchJudgment.batch_pk == row.id)
            ).all()
            by_old: dict[str, str] = {}
            for member in sorted(members, key=lambda m: m.judgment_id):
                member.custom_id = by_old.setdefault(member.custom_id, their_ids[len(by_old) % len(their_ids)])
    stage(harness).poll(stored_row(row.id))
    refused = batch_rows(mine)[0]
    assert refused.status == "ended" and "results refused" in (refused.error or "")
    rows = harness.rows(mine)
    assert {r.status for r in rows} == {"pending"} and all(r.raw_output is None for r in rows)


def test_recovery_finds_its_batch_on_a_server_that_drops_the_metadata(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An OpenAI-compatible server that does not keep a batch's ``metadata`` (it is optional there): the worker
    died after creating the batch, and find() looked only at the metadata, so the row was given up and its
    judgments sent again: the batch the server still ran was paid a second time (issue 36 review). The batch's
    input file carries the row's custom_ids (its row and nonce): recovery reads it when the metadata is absent."""
    harness.build(DJ_BATCH_POLL="0.1")
    run_id = harness.create(**request(harness, "openai", n=2))
    made: dict[int, str] = {}

    def died(engine: Any, pk: int, provider_batch_id: str, *_: Any) -> bool:
        made[pk] = provider_batch_id
        raise SystemExit("worker killed after creating the batch")

    with monkeypatch.context() as patched:
        patched.setattr(stage_module.repo, "mark_submitted", died)
        with pytest.raises(SystemExit):
            harness.engine.judge_many(harness.pending(run_id))
    (row,) = batch_rows(run_id)
    client = batch_clients.OpenAIBatchClient(parse_judge(row.judge), harness.engine.settings)
    deadline = time.monotonic() + 20
    while not client.retrieve(made[row.id]).ended:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    original = batch_clients.openai.resources.Batches.list

    def without_metadata(self: Any, *args: Any, **kwargs: Any) -> Any:
        page = original(self, *args, **kwargs)
        for batch in page.data:
            batch.metadata = None  # what a server that drops it answers
        return page

    monkeypatch.setattr(batch_clients.openai.resources.Batches, "list", without_metadata)
    with session_scope() as session:  # the poller's grace is over: it looks the batch up
        past = row.created_at - timedelta(seconds=stage_module.SUBMIT_GRACE_S + 5)
        session.execute(update(ProviderBatch).values(created_at=past, next_poll_at=past))
    collect(harness, run_id)
    judged = harness.rows(run_id)
    assert [(b.status, b.provider_batch_id) for b in batch_rows(run_id)] == [("ended", made[row.id])]
    assert {(r.status, r.provider_calls) for r in judged} == {("done", 1)}
    assert harness.sim.stats()["bill"]["calls"] == len(judged)  # each paid once
