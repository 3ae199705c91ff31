"""Issue 28.3: a batch never waits for good on a verdict write. The Celery task used to wait on ``written.result()``
with no timeout while the lease keeper renewed its claims, so a write that never resolved left its judgment
``running`` for ever (neither the task nor the sweeper would send it again). Now the batch waits at most
``WRITE_BACKSTOP_LEASES`` claim leases, hands the claims back and raises ``HandedBack`` (the task's retry)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future
from typing import Any

import pytest

from judge_api.repository import claims
from workers.execute import WRITE_BACKSTOP_LEASES, HandedBack
from workers.writer import VerdictWrite, VerdictWriter

from .harness import Harness, dialogue_item

LEASE_S = 1.0


class SwallowsFirstWrite(VerdictWriter):
    """A write stage that loses the first verdict handed to it: its future never resolves (a writer thread stuck
    or gone with the verdict in hand). Every later verdict is written as usual."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.swallowed: list[int] = []

    def submit(self, item: VerdictWrite) -> Future[bool]:
        if not self.swallowed:
            self.swallowed.append(item.judgment_id)
            return item.written
        return super().submit(item)


@pytest.mark.parametrize("judgments", [1, 3], ids=["single", "dispatched"])
def test_a_write_that_never_resolves_hands_the_batch_back_and_the_retry_finishes_it(
    harness: Harness, judgments: int
) -> None:
    engine = harness.build(DJ_CLAIM_LEASE=str(LEASE_S))
    run_id = harness.create(
        items=[dialogue_item(f"b{k}", {"a": f"Rex {k} <<q={60 + k}>>"}) for k in range(judgments)],
        rubrics=["rsum-single"],
        judges=[harness.judge("openai-compatible")],
        aspects=["consistency"],
    )
    ids = harness.pending(run_id)
    writer = SwallowsFirstWrite(engine.db, engine.flight, 0.0, 64, engine.stash)
    engine._writer = writer
    outcome: list[Any] = []

    def task() -> None:
        try:
            outcome.append(engine.judge_many(ids))
        except BaseException as exc:
            outcome.append(exc)

    started = time.monotonic()
    thread = threading.Thread(target=task, daemon=True)  # the old code never returns: the thread is left behind
    thread.start()
    backstop = WRITE_BACKSTOP_LEASES * LEASE_S
    thread.join(backstop + 30)  # margin for a loaded machine
    assert not thread.is_alive(), "the batch still waits on a write that never resolves"
    assert time.monotonic() - started >= backstop
    (raised,) = outcome
    assert isinstance(raised, HandedBack) and "did not resolve" in str(raised)

    (stuck,) = writer.swallowed
    rows = {row.id: row for row in harness.rows(run_id)}
    assert (rows[stuck].status, rows[stuck].claim_token) == ("pending", None)  # handed back, not left running
    assert all(row.status == "done" for jid, row in rows.items() if jid != stuck)
    assert harness.calls() == judgments

    # the task's retry (Celery autoretry_for HandedBack) sends the batch again: the stuck judgment is finished from
    # its stashed reply, without a second provider call
    assert engine.judge_many(ids)["done"] == 1
    rows = {row.id: row for row in harness.rows(run_id)}
    assert [row.status for row in rows.values()] == ["done"] * judgments
    assert sorted(row.score or 0.0 for row in rows.values()) == [60.0 + k for k in range(judgments)]
    assert rows[stuck].provider_calls == 1
    assert harness.calls() == judgments
    with harness.engine.sessions() as session:
        assert claims.pending_judgment_ids(session, run_id) == []
