"""Provider batches of batch-mode runs (workers.batches): which judgments each holds, its status, who polls it.

A judgment inside an open batch is ``running`` with the batch's claim token (``batch:<id>``) and a claim time moved
past the provider's window (``BATCH_HOLD``): no worker claims it and no sweep re-sends it while the batch is open,
and its result is written with the same compare-and-set on the claim token as a real-time verdict. The join table
``provider_batch_judgments`` (indexed by judgment) says which batch and request hold it.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import Engine, Table, bindparam, case, delete, func, insert, select, update
from sqlalchemy.orm import Session

from judge_api.models import (
    PROVIDER_BATCH_OPEN,
    Judgment,
    ProviderBatch,
    ProviderBatchJudgment,
    Run,
    utcnow,
)

BATCH_TOKEN_PREFIX = "batch:"
CUSTOM_ID_LEAD = "dj"
# a judgment inside a batch keeps its claim this long: the providers' 24 h window and a margin; no lease renewal
BATCH_HOLD = timedelta(hours=25)


def batch_token(batch_pk: int) -> str:
    return f"{BATCH_TOKEN_PREFIX}{batch_pk}"


def custom_id_prefix(batch_pk: int, nonce: str) -> str:
    """What every ``custom_id`` of batch row ``batch_pk`` starts with (and OpenAI's batch metadata carries): the
    row and a random nonce drawn when the row is stored, so no other row (of this deployment or another sharing the
    key) can own a request with the same id. The request's own part follows (a digest of its prompt's key)."""
    return f"{CUSTOM_ID_LEAD}{batch_pk}-{nonce}-"


def prefix_of(custom_id: str) -> str:
    """The row's part of a ``custom_id`` ('' for a request stored before custom ids carried it: ``j<id>``)."""
    return custom_id[: custom_id.rindex("-") + 1] if custom_id.startswith(CUSTOM_ID_LEAD) else ""


@dataclass(frozen=True)
class BatchRow:
    id: int
    run_id: str
    provider: str
    judge: str
    provider_batch_id: str | None
    status: str
    requests: int
    created_at: datetime
    next_poll_at: datetime | None
    cancel_requested_at: datetime | None
    cancel_sent_at: datetime | None


def _batches() -> Table:
    return cast(Table, ProviderBatch.__table__)


def _members() -> Table:
    return cast(Table, ProviderBatchJudgment.__table__)


def _judgments() -> Table:
    return cast(Table, Judgment.__table__)


def open_batch(
    engine: Engine,
    run_id: str,
    provider: str,
    judge: str,
    members: Sequence[tuple[int, str]],
    worker_token: str,
    first_poll_in_s: float,
) -> tuple[int, set[int], str] | None:
    """Store a batch about to be submitted and hand its judgments from the worker's claim to the batch's, in one
    transaction. ``members``: (judgment id, the request's own part of its custom_id); each custom_id is stored as
    ``custom_id_prefix(row, nonce)`` + that part. Returns the batch's id, the judgments it holds (those whose claim
    this worker still had) and the custom_id prefix, or None when it holds none (nothing stored)."""
    now = utcnow()
    nonce = secrets.token_hex(6)
    batches, judgments, joined = _batches(), _judgments(), _members()
    with engine.begin() as connection:
        pk = connection.execute(
            insert(batches)
            .values(
                run_id=run_id,
                provider=provider,
                judge=judge,
                status="submitting",
                requests=0,
                judgments=0,
                created_at=now,
                next_poll_at=now + timedelta(seconds=first_poll_in_s),
            )
            .returning(batches.c.id)
        ).scalar_one()
        ids = [judgment_id for judgment_id, _ in members]
        moved: set[int] = set()
        for start in range(0, len(ids), 5000):
            chunk = ids[start : start + 5000]
            moved |= {
                int(row[0])
                for row in connection.execute(
                    update(judgments)
                    .where(
                        judgments.c.id.in_(chunk),
                        judgments.c.claim_token == worker_token,
                        judgments.c.status == "running",
                    )
                    .values(claim_token=batch_token(pk), claimed_at=now + BATCH_HOLD, updated_at=now)
                    .returning(judgments.c.id)
                )
            }
        if not moved:
            connection.rollback()
            return None
        prefix = custom_id_prefix(int(pk), nonce)
        held = [(judgment_id, prefix + local) for judgment_id, local in members if judgment_id in moved]
        connection.execute(insert(joined), [{"batch_pk": pk, "judgment_id": j, "custom_id": c} for j, c in held])
        connection.execute(
            update(batches).where(batches.c.id == pk).values(requests=len({c for _, c in held}), judgments=len(held))
        )
    return int(pk), moved, prefix


def mark_submitted(engine: Engine, pk: int, provider_batch_id: str, file_id: str | None, poll_in_s: float) -> bool:
    """``submitting`` -> ``open``, a compare-and-set: a row given up meanwhile (``failed``, its judgments sent back)
    is never reopened; False then, and the caller owns the provider batch it made (workers.batches)."""
    now = utcnow()
    with engine.begin() as connection:
        result = connection.execute(
            update(_batches())
            .where(_batches().c.id == pk, _batches().c.status == "submitting")
            .values(
                status="open",
                provider_batch_id=provider_batch_id,
                input_file_id=file_id,
                submitted_at=now,
                next_poll_at=now + timedelta(seconds=poll_in_s),
            )
        )
    return bool(result.rowcount == 1)


def give_up(engine: Engine, pk: int, error: str) -> bool:
    """``submitting`` -> ``failed`` (a compare-and-set): the row's worker is taken for gone before it recorded a
    provider batch. False when the row moved on meanwhile (its worker marked it submitted)."""
    with engine.begin() as connection:
        result = connection.execute(
            update(_batches())
            .where(_batches().c.id == pk, _batches().c.status == "submitting")
            .values(status="failed", ended_at=utcnow(), error=error)
        )
    return bool(result.rowcount == 1)


def adopt_late_batch(
    engine: Engine, given_up: int, provider_batch_id: str, file_id: str | None, poll_in_s: float
) -> tuple[int, set[int], int] | None:
    """A provider batch that was made for row ``given_up`` after the row was given up: a new ``open`` row takes it
    with the judgments of the old one still waiting (pending and unclaimed: not yet re-sent to anyone), under the
    same custom_ids, in one transaction. Returns (the new row, the judgments it holds, how many the old row held),
    or None when none is waiting any more (nothing stored): the caller then cancels the provider batch."""
    now = utcnow()
    batches, judgments, joined = _batches(), _judgments(), _members()
    with engine.begin() as connection:
        old = connection.execute(select(batches).where(batches.c.id == given_up)).mappings().one()
        members = {
            int(j): str(c)
            for j, c in connection.execute(
                select(joined.c.judgment_id, joined.c.custom_id).where(joined.c.batch_pk == given_up)
            )
        }
        pk = connection.execute(
            insert(batches)
            .values(
                run_id=old["run_id"],
                provider=old["provider"],
                judge=old["judge"],
                status="open",
                provider_batch_id=provider_batch_id,
                input_file_id=file_id,
                requests=old["requests"],
                judgments=0,
                created_at=old["created_at"],
                submitted_at=now,
                next_poll_at=now + timedelta(seconds=poll_in_s),
            )
            .returning(batches.c.id)
        ).scalar_one()
        taken: set[int] = set()
        ids = sorted(members)
        for start in range(0, len(ids), 5000):
            taken |= {
                int(row[0])
                for row in connection.execute(
                    update(judgments)
                    .where(
                        judgments.c.id.in_(ids[start : start + 5000]),
                        judgments.c.status == "pending",
                        judgments.c.claim_token.is_(None),
                    )
                    .values(status="running", claim_token=batch_token(pk), claimed_at=now + BATCH_HOLD, updated_at=now)
                    .returning(judgments.c.id)
                )
            }
        if not taken:
            connection.rollback()
            return None
        connection.execute(insert(joined), [{"batch_pk": pk, "judgment_id": j, "custom_id": members[j]} for j in taken])
        connection.execute(update(batches).where(batches.c.id == pk).values(judgments=len(taken)))
        connection.execute(
            update(batches)
            .where(batches.c.id == given_up)
            .values(error=f"reached the provider after it was given up: taken by batch row {pk}")
        )
    return int(pk), taken, len(members)


def custom_ids(engine: Engine, pk: int) -> set[str]:
    """Every custom_id batch row ``pk`` sent (whether or not its judgments are still held)."""
    with engine.connect() as connection:
        rows = connection.execute(select(_members().c.custom_id).where(_members().c.batch_pk == pk))
        return {str(row[0]) for row in rows}


def due_batches(engine: Engine, limit: int = 20) -> list[BatchRow]:
    """Open (or submitting) batches whose next poll is due, oldest first."""
    table = _batches()
    with engine.connect() as connection:
        rows = connection.execute(
            select(*(table.c[name] for name in BatchRow.__dataclass_fields__))
            .where(table.c.status.in_(PROVIDER_BATCH_OPEN), table.c.next_poll_at <= utcnow())
            .order_by(table.c.next_poll_at)
            .limit(limit)
        ).mappings()
        return [BatchRow(**row) for row in rows]


def any_due(session: Session) -> bool:
    query = select(ProviderBatch.id).where(
        ProviderBatch.status.in_(PROVIDER_BATCH_OPEN), ProviderBatch.next_poll_at <= utcnow()
    )
    return session.scalar(query.limit(1)) is not None


def take_poll(engine: Engine, row: BatchRow, lease_s: float) -> bool:
    """Compare-and-set on ``next_poll_at``: one poller at a time per batch; a poller that dies leaves it due again
    after ``lease_s``."""
    table = _batches()
    with engine.begin() as connection:
        result = connection.execute(
            update(table)
            .where(table.c.id == row.id, table.c.next_poll_at == row.next_poll_at, table.c.status == row.status)
            .values(next_poll_at=utcnow() + timedelta(seconds=lease_s))
        )
    return bool(result.rowcount == 1)


def update_batch(engine: Engine, pk: int, **values: Any) -> None:
    with engine.begin() as connection:
        connection.execute(update(_batches()).where(_batches().c.id == pk).values(**values))


def held_members(engine: Engine, pk: int) -> list[tuple[int, str, int]]:
    """(judgment id, custom_id, attempts) of the judgments this batch still holds (not yet written or sent back)."""
    judgments, joined = _judgments(), _members()
    with engine.connect() as connection:
        rows = connection.execute(
            select(joined.c.judgment_id, joined.c.custom_id, judgments.c.attempts)
            .join(judgments, judgments.c.id == joined.c.judgment_id)
            .where(
                joined.c.batch_pk == pk,
                judgments.c.claim_token == batch_token(pk),
                judgments.c.status == "running",
            )
            .order_by(joined.c.judgment_id)
        )
        return [(int(j), str(c), int(a or 0)) for j, c, a in rows]


def send_back(engine: Engine, pk: int, outcomes: Sequence[dict[str, Any]]) -> list[int]:
    """Judgments of batch ``pk`` whose request did not give a verdict: each ``{"jid", "status", "error",
    "attempts", "calls"}`` with status ``pending`` (retried: sent again), ``failed`` or ``cancelled``. A
    compare-and-set on the batch's claim token; returns the ids set back to pending.

    One transaction of a few statements whatever the count: the rows the batch still holds are locked and read
    once, then written by one executemany per kind (pending, or not), not one statement per request."""
    if not outcomes:
        return []
    judgments = _judgments()
    token = batch_token(pk)
    now = utcnow()
    held_by_batch = (judgments.c.claim_token == token, judgments.c.status == "running")
    with engine.begin() as connection:
        ids = [int(outcome["jid"]) for outcome in outcomes]
        held: set[int] = set()
        for start in range(0, len(ids), 5000):
            held |= {
                int(row[0])
                for row in connection.execute(
                    select(judgments.c.id)
                    .where(judgments.c.id.in_(ids[start : start + 5000]), *held_by_batch)
                    .with_for_update()
                )
            }
        kept = [outcome for outcome in outcomes if int(outcome["jid"]) in held]
        for pending in (True, False):
            rows = [
                {
                    "b_jid": int(outcome["jid"]),
                    "b_status": outcome["status"],
                    "b_error": outcome["error"],
                    "b_attempts": outcome["attempts"],
                    "b_calls": int(outcome.get("calls", 0)),
                }
                for outcome in kept
                if (outcome["status"] == "pending") == pending
            ]
            if not rows:
                continue
            values: dict[str, Any] = {
                "status": bindparam("b_status"),
                "error": bindparam("b_error"),
                "attempts": bindparam("b_attempts"),
                "provider_calls": func.coalesce(judgments.c.provider_calls, 0) + bindparam("b_calls"),
                "claim_token": None,
                "updated_at": now,
            }
            if pending:
                values.update(claimed_at=None, enqueued_at=None)
            connection.execute(
                update(judgments).where(judgments.c.id == bindparam("b_jid"), *held_by_batch).values(values), rows
            )
    return [int(outcome["jid"]) for outcome in kept if outcome["status"] == "pending"]


def hand_to_worker(engine: Engine, pk: int, worker_token: str) -> set[int]:
    """A batch the provider cannot take (no batch API): its judgments go back to the worker's claim to be judged in
    real time; the batch is closed as ``failed``."""
    judgments = _judgments()
    now = utcnow()
    with engine.begin() as connection:
        moved = {
            int(row[0])
            for row in connection.execute(
                update(judgments)
                .where(judgments.c.claim_token == batch_token(pk), judgments.c.status == "running")
                .values(claim_token=worker_token, claimed_at=now, updated_at=now)
                .returning(judgments.c.id)
            )
        }
        connection.execute(delete(_members()).where(_members().c.batch_pk == pk))
        connection.execute(
            update(_batches())
            .where(_batches().c.id == pk)
            .values(status="failed", ended_at=now, requests=0, judgments=0, error="no batch API: judged in real time")
        )
    return moved


def tracked(engine: Engine, provider_batch_id: str) -> bool:
    """A provider batch some row already holds (a lookup by count and time must not adopt another run's)."""
    with engine.connect() as connection:
        found = connection.execute(
            select(_batches().c.id).where(_batches().c.provider_batch_id == provider_batch_id).limit(1)
        ).first()
    return found is not None


def run_stopped(engine: Engine, run_id: str) -> bool:
    """The run was cancelled or ran out of budget: a cancelled request's judgment is cancelled, not retried."""
    with engine.connect() as connection:
        row = connection.execute(select(Run.cancelled_at, Run.budget_exhausted_at).where(Run.id == run_id)).first()
    return row is None or row[0] is not None or row[1] is not None


def run_batch_retry(engine: Engine, run_id: str) -> str:
    with engine.connect() as connection:
        config = connection.execute(select(Run.config).where(Run.id == run_id)).scalar()
    return str((config or {}).get("batch_retry") or "batch")


def request_cancel(session: Session, run_id: str) -> int:
    """Ask the run's open batches to be cancelled at the provider (the next poll sends it, at once)."""
    now = utcnow()
    result = session.execute(
        update(ProviderBatch)
        .where(
            ProviderBatch.run_id == run_id,
            ProviderBatch.status.in_(PROVIDER_BATCH_OPEN),
            ProviderBatch.cancel_requested_at.is_(None),
        )
        .values(cancel_requested_at=now, next_poll_at=now)
    )
    return int(result.rowcount)  # type: ignore[attr-defined]


def poll_now(session: Session, run_id: str) -> int:
    """The run's open batches are polled at the next sweep (a retry does not wait out the poll interval)."""
    result = session.execute(
        update(ProviderBatch)
        .where(ProviderBatch.run_id == run_id, ProviderBatch.status.in_(PROVIDER_BATCH_OPEN))
        .values(next_poll_at=utcnow())
    )
    return int(result.rowcount)  # type: ignore[attr-defined]


def open_batches(session: Session, run_id: str) -> int:
    query = select(func.count(ProviderBatch.id)).where(
        ProviderBatch.run_id == run_id, ProviderBatch.status.in_(PROVIDER_BATCH_OPEN)
    )
    return int(session.scalar(query) or 0)


def batch_counts(session: Session, run_ids: Sequence[str]) -> dict[str, dict[str, int]]:
    """Per run: provider batches open and done (ended, or failed before the provider took them, with no request),
    and the requests sent in them."""
    if not run_ids:
        return {}
    is_open = ProviderBatch.status.in_(PROVIDER_BATCH_OPEN)
    rows = session.execute(
        select(
            ProviderBatch.run_id,
            func.sum(case((is_open, 1), else_=0)),
            func.sum(case((is_open, 0), else_=1)),
            func.sum(ProviderBatch.requests),
        )
        .where(ProviderBatch.run_id.in_(list(run_ids)), ProviderBatch.requests > 0)
        .group_by(ProviderBatch.run_id)
    )
    return {str(r): {"open": int(o or 0), "done": int(d or 0), "requests": int(n or 0)} for r, o, d, n in rows}
