"""Issue 27.3: the judge cache can be bypassed. ``options.cache``: 'use' (default) answers a repeated request from
the cache; 'refresh' asks again and replaces the entries; 'off' neither reads nor writes. ``retry`` with
``unparseable`` re-asks the unparseable judgments past the cache. Before, a judge's unparseable replies stayed in
the cache for good: re-submitting after fixing the judge returned the same unparseable verdicts."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError
from sqlalchemy import select

from judge_api.db import session_scope
from judge_api.idempotency import request_hash
from judge_api.models import CacheEntry
from judge_api.repository import runs as run_store
from judge_api.schemas import RunCreate

from .harness import Harness, dialogue_item

MALFORMED = {"faults": [{"kind": "malformed", "first_n": 1000, "text": "I cannot decide."}]}


def request(harness: Harness, cache: str | None = None) -> dict[str, Any]:
    options = {"cache": cache} if cache else {}
    return {
        "items": [dialogue_item(f"i{k}", {"a": f"Rex is {k}. <<q={60 + k}>>"}) for k in range(3)],
        "rubrics": ["rsum-single"],
        "judges": [harness.judge("openai-compatible")],
        "aspects": ["consistency"],
        "options": options,
    }


def cache_rows() -> list[CacheEntry]:
    with session_scope() as session:
        return list(session.scalars(select(CacheEntry).order_by(CacheEntry.key)))


def test_refresh_asks_again_for_an_identical_body_and_replaces_the_entries(harness: Harness) -> None:
    harness.sim.set_script(MALFORMED)
    first = harness.run(**request(harness))
    assert harness.calls() == 3 and {r.status for r in harness.rows(first)} == {"unparseable"}
    stale = {row.key: row.raw_output for row in cache_rows()}
    assert set(stale.values()) == {"I cannot decide."}

    harness.sim.reset(restore_script=True)  # the judge is fixed
    again = harness.run(**request(harness))  # 'use': the cache answers with the unparseable replies
    assert harness.calls() == 0 and {r.status for r in harness.rows(again)} == {"unparseable"}

    refreshed = harness.run(**request(harness, "refresh"))
    assert harness.calls() == 3  # the simulator counted three new requests for the identical body
    rows = harness.rows(refreshed)
    assert {r.status for r in rows} == {"done"} and sorted(float(r.score or 0) for r in rows) == [60.0, 61.0, 62.0]
    assert all(not r.cached and r.provider_calls == 1 for r in rows)
    now = {row.key: row.raw_output for row in cache_rows()}
    assert now.keys() == stale.keys() and "I cannot decide." not in now.values()  # replaced, not added

    harness.sim.reset()
    after = harness.run(**request(harness))  # 'use' again: the refreshed entries answer
    assert harness.calls() == 0 and {r.status for r in harness.rows(after)} == {"done"}


def test_off_neither_reads_nor_writes_the_cache(harness: Harness) -> None:
    off = harness.run(**request(harness, "off"))
    assert harness.calls() == 3 and {r.status for r in harness.rows(off)} == {"done"}
    assert cache_rows() == []  # nothing written

    harness.run(**request(harness))  # 'use' fills the cache
    assert len(cache_rows()) == 3
    harness.sim.reset()
    harness.sim.set_script(MALFORMED)
    entries = {row.key: row.raw_output for row in cache_rows()}
    off_again = harness.run(**request(harness, "off"))
    assert harness.calls() == 3  # the entries were there and were not read
    assert {r.status for r in harness.rows(off_again)} == {"unparseable"}
    assert {row.key: row.raw_output for row in cache_rows()} == entries  # nor overwritten


def test_retry_unparseable_reasks_past_the_cache(harness: Harness) -> None:
    harness.sim.set_script(MALFORMED)
    run_id = harness.run(**request(harness))
    assert {r.status for r in harness.rows(run_id)} == {"unparseable"}
    harness.sim.reset(restore_script=True)

    with session_scope() as session:  # a plain retry sends failed and cancelled judgments only
        assert run_store.retry_failed(session, run_id) == 0
        session.commit()
    with session_scope() as session:
        assert run_store.retry_failed(session, run_id, unparseable=True) == 3
        session.commit()
    summary = harness.summary(run_id)
    assert summary.counts.pending == 3 and summary.status != "done"  # unfinished again
    harness.judge_all(run_id)
    rows = harness.rows(run_id)
    assert harness.calls() == 3  # asked again, not answered from the cached unparseable replies
    assert {r.status for r in rows} == {"done"} and all(r.judge_params["cache"] == "refresh" for r in rows)
    assert harness.summary(run_id).status == "done"
    assert "I cannot decide." not in {row.raw_output for row in cache_rows()}


def test_the_default_stays_out_of_the_idempotency_fingerprint(harness: Harness) -> None:
    """A body that leaves ``cache`` out and one that sends its default are one request (commit ac23f6b); another
    mode is another request."""
    body = request(harness)
    explicit = {**body, "options": {"cache": "use"}}
    assert request_hash(RunCreate.model_validate(body)) == request_hash(RunCreate.model_validate(explicit))
    refresh = {**body, "options": {"cache": "refresh"}}
    assert request_hash(RunCreate.model_validate(body)) != request_hash(RunCreate.model_validate(refresh))


def test_the_cache_option_is_validated(harness: Harness) -> None:
    with pytest.raises(ValidationError, match=r"options\.cache"):
        RunCreate.model_validate({**request(harness), "options": {"cache": "sometimes"}})


@pytest.mark.parametrize("mode", ["refresh", "off"])
def test_batch_runs_honour_the_cache_mode(harness: Harness, mode: str) -> None:
    """Batch execution (workers.batches) writes its entries as the run's option says: 'refresh' replaces the
    unparseable entry, 'off' leaves it as it was."""
    from .test_batch_execution import collect

    harness.build(DJ_BATCH_POLL="0.1")
    harness.sim.set_script(MALFORMED)
    harness.run(**request(harness))
    stale = {row.key: row.raw_output for row in cache_rows()}
    harness.sim.reset(restore_script=True)
    harness.sim.set_script({"batch": {"completion_seconds": 0.2}})
    run_id = harness.create(**{**request(harness, mode), "execution": "batch"})
    harness.engine.judge_many(harness.pending(run_id))
    collect(harness, run_id)
    assert {r.status for r in harness.rows(run_id)} == {"done"}  # asked, not answered from the stale entries
    now = {row.key: row.raw_output for row in cache_rows()}
    assert now.keys() == stale.keys()
    if mode == "off":
        assert now == stale
    else:
        assert "I cannot decide." not in now.values()
