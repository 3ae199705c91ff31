"""Idempotency keys of run submissions: (project, key) -> the run that request created, with the endpoint and the
request's fingerprint (the rules are in ``judge_api/idempotency.py``).

The primary key (project_id, key) is what makes a key race-safe: :func:`record_idempotency_key` inserts the row in
the transaction that stores the run, so of two concurrent requests with one key only one can commit.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from judge_api.models import IdempotencyKey, utcnow


@dataclass(frozen=True)
class StoredKey:
    run_id: str
    endpoint: str
    request_hash: str
    created_at: datetime


def find_idempotency_key(session: Session, project_id: str, key: str, ttl_s: float) -> StoredKey | None:
    """The unexpired record of ``key`` in the project, if any."""
    row = session.scalar(
        select(IdempotencyKey).where(
            IdempotencyKey.project_id == project_id,
            IdempotencyKey.key == key,
            IdempotencyKey.created_at >= utcnow() - timedelta(seconds=ttl_s),
        )
    )
    if row is None:
        return None
    return StoredKey(row.run_id, row.endpoint, row.request_hash, row.created_at)


def record_idempotency_key(
    session: Session, project_id: str, key: str, endpoint: str, fingerprint: str, run_id: str, ttl_s: float
) -> None:
    """Store the key with the run it created, in the caller's transaction (flushed now, so a concurrent holder of
    the key makes this raise ``IntegrityError`` here or at commit). An expired record of the key is replaced."""
    session.execute(
        delete(IdempotencyKey).where(
            IdempotencyKey.project_id == project_id,
            IdempotencyKey.key == key,
            IdempotencyKey.created_at < utcnow() - timedelta(seconds=ttl_s),
        )
    )
    session.add(
        IdempotencyKey(
            project_id=project_id,
            key=key,
            endpoint=endpoint,
            request_hash=fingerprint,
            run_id=run_id,
            created_at=utcnow(),
        )
    )
    session.flush()


def prune_idempotency_keys(session: Session, ttl_s: float) -> int:
    """Forget every key older than ``ttl_s``; returns how many."""
    result = session.execute(
        delete(IdempotencyKey).where(IdempotencyKey.created_at < utcnow() - timedelta(seconds=ttl_s))
    )
    return int(result.rowcount or 0)  # type: ignore[attr-defined]
