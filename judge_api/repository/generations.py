"""Runs with ``systems`` (docs/generation.md): the generation tasks (one per item x system), their claims and writes,
and the release of an item once all its generations are settled (its candidates filled, its judgments planned).

A generation is claimed like a judgment (a compare-and-set token with a lease, renewed while the responder works)
and written only by the holder of the claim, once: a stored response or failure is never generated again. The
release is a compare-and-set on ``items.released_at``, so an item's judgments are planned once even when two
workers settle its last generations at the same moment (the sweeper releases what both missed).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy import Row, and_, case, exists, func, insert, or_, select, update
from sqlalchemy.orm import Session

from judge_api.models import Generation, Judgment, Run, RunItem, utcnow
from judge_api.planning import plan_generated_item, run_rubrics
from judge_api.repository.rows import insert_judgment_rows, judgment_row
from judge_api.repository.rubric_snapshots import store_rubric_snapshots
from judge_api.rubrics import RubricRegistry
from judge_api.schemas import GenerationCounts

SETTLED = ("done", "failed")
MAX_FAILURES_SHOWN = 100


def create_generations(session: Session, run_id: str, systems: dict[str, str], item_pks: dict[str, int]) -> int:
    """One pending generation per item x system, in the caller's (the run's) transaction."""
    now = utcnow()
    rows = [
        {
            "run_id": run_id,
            "item_pk": pk,
            "item_key": item_key,
            "system": system,
            "responder": responder,
            "status": "pending",
            "created_at": now,
            "updated_at": now,
        }
        for item_key, pk in item_pks.items()
        for system, responder in systems.items()
    ]
    for start in range(0, len(rows), 5000):
        session.execute(insert(Generation), rows[start : start + 5000])
    return len(rows)


def pending_generation_ids(session: Session, run_id: str | None = None) -> list[int]:
    query = select(Generation.id).where(Generation.status == "pending")
    if run_id is not None:
        query = query.where(Generation.run_id == run_id)
    return list(session.scalars(query.order_by(Generation.id)))


def mark_generations_enqueued(session: Session, ids: Iterable[int] | None = None, run_id: str | None = None) -> None:
    """Stamp generations as sent: the given ids, or a run's pending ones (in the transaction storing the run)."""
    query = update(Generation)
    if run_id is not None:
        query = query.where(Generation.run_id == run_id, Generation.status == "pending")
    else:
        id_list = list(ids or [])
        if not id_list:
            return
        query = query.where(Generation.id.in_(id_list))
    session.execute(query.values(enqueued_at=utcnow()))


def clear_enqueued(session: Session, run_id: str) -> None:
    session.execute(
        update(Generation).where(Generation.run_id == run_id, Generation.status == "pending").values(enqueued_at=None)
    )


def stale_generation_ids(
    session: Session, requeue_after_s: float, lease_s: float, *, include_pending: bool = True, limit: int = 10_000
) -> list[int]:
    """Generations whose worker's lease ran out, and (``include_pending``) pending ones never or not recently sent."""
    now = utcnow()
    stale_enqueue = now - timedelta(seconds=requeue_after_s)
    lost_claims = and_(
        Generation.status == "running",
        Generation.claimed_at < now - timedelta(seconds=lease_s),
        or_(
            Generation.enqueued_at.is_(None),
            Generation.enqueued_at <= Generation.claimed_at,
            Generation.enqueued_at < stale_enqueue,
        ),
    )
    never_sent = and_(Generation.status == "pending", Generation.enqueued_at.is_(None))
    not_recently_sent = and_(Generation.status == "pending", Generation.enqueued_at < stale_enqueue)
    condition = or_(lost_claims, never_sent, not_recently_sent) if include_pending else or_(lost_claims, never_sent)
    return list(session.scalars(select(Generation.id).where(condition).order_by(Generation.id).limit(limit)))


@dataclass(frozen=True)
class GenerationTask:
    id: int
    run_id: str
    item_pk: int
    item_key: str
    system: str
    responder: str
    token: str
    item: dict[str, Any]


def claim_generation(session: Session, generation_id: int, lease_s: float) -> GenerationTask | None:
    """Take a generation for this worker (pending, or running under a lapsed lease); None when it is settled,
    held by a live worker or gone (its run was deleted)."""
    token = uuid.uuid4().hex
    now = utcnow()
    result = session.execute(
        update(Generation)
        .where(
            Generation.id == generation_id,
            or_(
                Generation.status == "pending",
                and_(Generation.status == "running", Generation.claimed_at < now - timedelta(seconds=lease_s)),
            ),
        )
        .values(status="running", claim_token=token, claimed_at=now, updated_at=now)
    )
    session.commit()
    if result.rowcount != 1:  # type: ignore[attr-defined]
        return None
    row = session.execute(
        select(Generation, RunItem.payload)
        .join(RunItem, RunItem.id == Generation.item_pk)
        .where(Generation.id == generation_id)
    ).first()
    if row is None:
        return None
    generation, payload = row
    return GenerationTask(
        generation.id,
        generation.run_id,
        generation.item_pk,
        generation.item_key,
        generation.system,
        generation.responder,
        token,
        dict(payload),
    )


def renew_claim(session: Session, generation_id: int, token: str) -> bool:
    result = session.execute(
        update(Generation)
        .where(Generation.id == generation_id, Generation.claim_token == token, Generation.status == "running")
        .values(claimed_at=utcnow())
    )
    session.commit()
    return result.rowcount == 1  # type: ignore[attr-defined]


def claim_holds(session: Session, generation_id: int, token: str) -> bool:
    """The generation exists and this claim still holds it: checked before each call its responder makes, so a
    generation whose run was deleted starts no call (issue 43)."""
    found = session.scalar(
        select(Generation.id).where(
            Generation.id == generation_id, Generation.claim_token == token, Generation.status == "running"
        )
    )
    session.rollback()
    return found is not None


def write_generation(session: Session, generation_id: int, token: str, values: dict[str, Any]) -> bool:
    """Store a settled generation (``status`` done with ``response``, or failed with ``error``) if this claim still
    holds it; False when another worker took it over (its lease lapsed)."""
    result = session.execute(
        update(Generation)
        .where(Generation.id == generation_id, Generation.claim_token == token, Generation.status == "running")
        .values(**values, claim_token=None, updated_at=utcnow())
    )
    session.commit()
    return result.rowcount == 1  # type: ignore[attr-defined]


def release_item(session: Session, item_pk: int, registry: RubricRegistry) -> list[int]:
    """If every generation of the item is settled and the item is not released yet: fill its candidates with the
    generated responses (``meta.generation.<system>`` records each one: status, responder, error, memory), plan and
    store its judgments and count them in the run, in one transaction. Returns the new pending judgment ids."""
    open_generations = exists().where(Generation.item_pk == item_pk, Generation.status.not_in(SETTLED))
    claimed = session.execute(
        update(RunItem)
        .where(RunItem.id == item_pk, RunItem.released_at.is_(None), ~open_generations)
        .values(released_at=utcnow())
    )
    if claimed.rowcount != 1:  # type: ignore[attr-defined]
        session.rollback()
        return []
    item = session.get(RunItem, item_pk)
    assert item is not None
    run = session.get(Run, item.run_id)
    assert run is not None
    generations = list(session.scalars(select(Generation).where(Generation.item_pk == item_pk).order_by(Generation.id)))
    payload = dict(item.payload)
    candidates = dict(payload.get("candidates") or {})
    meta = dict(payload.get("meta") or {})
    records = dict(meta.get("generation") or {})
    for generation in generations:
        if generation.status == "done" and generation.response is not None:
            candidates[generation.system] = generation.response
        records[generation.system] = {
            "status": generation.status,
            "responder": generation.responder,
            "error": generation.error,
            "memory": generation.memory,
            **{k: v for k, v in (generation.details or {}).items() if k not in ("trace",)},
        }
    payload["candidates"] = candidates
    payload["meta"] = {**meta, "generation": records}
    try:
        request, planned = plan_generated_item(run.config, payload, registry)
    except ValueError as exc:  # the plan cannot be made any more (e.g. a judge URL no longer allowed)
        payload["meta"]["release_error"] = str(exc)
        item.payload = payload
        session.commit()
        return []
    item.payload = payload
    # an item released again (a retried failed generation) keeps the judgments it has; only the new ones are added
    have = set(session.scalars(select(Judgment.dedup_key).where(Judgment.item_pk == item_pk)))
    planned = [p for p in planned if p.dedup_key(run.id) not in have]
    if planned:
        store_rubric_snapshots(session, run.project_id, run_rubrics(request, registry))
        judge_params = request.options.model_dump(mode="json")
        if request.outcome_map:
            judge_params["outcome_map"] = dict(request.outcome_map)
        now = utcnow()
        rows = [judgment_row(run.id, p, item_pk, candidates, judge_params, now) for p in planned]
        insert_judgment_rows(session, rows)
        session.execute(
            update(Run).where(Run.id == run.id).values(n_judgments=Run.n_judgments + len(rows), finished_at=None)
        )
    session.commit()
    ids = select(Judgment.id).where(Judgment.item_pk == item_pk, Judgment.status == "pending")
    return list(session.scalars(ids.order_by(Judgment.id)))


def unreleased_settled_items(session: Session, limit: int = 1000) -> list[int]:
    """Items of runs with systems whose generations are all settled but whose judgments were not planned (the worker
    that settled the last one died, or two settled the last two at once). Read from the generations table, so the
    sweep costs nothing for runs without systems."""
    open_count = func.sum(case((Generation.status.in_(SETTLED), 0), else_=1))
    query = (
        select(Generation.item_pk)
        .join(RunItem, RunItem.id == Generation.item_pk)
        .where(RunItem.released_at.is_(None))
        .group_by(Generation.item_pk)
        .having(open_count == 0)
        .order_by(Generation.item_pk)
        .limit(limit)
    )
    return [int(pk) for pk in session.scalars(query)]


def generation_counts(session: Session, runs: Sequence[Run | Row[Any]]) -> dict[str, GenerationCounts]:
    """Generation progress of the runs that have systems (``Run`` objects or rows with their ``id`` and ``config``)."""
    run_ids = [r.id for r in runs if (r.config or {}).get("systems")]
    if not run_ids:
        return {}
    out = {rid: GenerationCounts() for rid in run_ids}
    rows = session.execute(
        select(Generation.run_id, Generation.status, func.count(Generation.id))
        .where(Generation.run_id.in_(run_ids))
        .group_by(Generation.run_id, Generation.status)
    ).all()
    for run_id, status, n in rows:
        counts = out[run_id]
        counts.total += int(n)
        if status == "done":
            counts.generated += int(n)
        elif status == "failed":
            counts.failed += int(n)
        elif status == "running":
            counts.running += int(n)
            counts.pending += int(n)
        else:
            counts.pending += int(n)
    released = session.execute(
        select(RunItem.run_id, func.count(RunItem.id))
        .where(RunItem.run_id.in_(run_ids), RunItem.released_at.is_not(None))
        .group_by(RunItem.run_id)
    ).all()
    for run_id, n in released:
        out[run_id].items_released = int(n)
    failures = session.execute(
        select(Generation.run_id, Generation.item_key, Generation.system, Generation.error)
        .where(Generation.run_id.in_(run_ids), Generation.status == "failed")
        .order_by(Generation.id)
    )
    for run_id, item_key, system, error in failures:
        if len(out[run_id].failures) < MAX_FAILURES_SHOWN:
            out[run_id].failures.append({"item_id": item_key, "system": system, "error": error or ""})
    return out
