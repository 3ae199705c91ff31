"""The workers' claim/write path: pending and stale work, claims (compare-and-set tokens with a lease), and verdict
writes. A verdict is written only by the holder of the judgment's claim, so a redelivered task never writes twice."""

from __future__ import annotations

import functools
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import Connection, Engine, Table, and_, bindparam, exists, func, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session, sessionmaker

from judge_api.models import (
    Judgment,
    JudgmentCacheKey,
    Run,
    RunItem,
    utcnow,
)
from judge_api.repository.cache import insert_entries


def pending_judgment_ids(session: Session, run_id: str | None = None) -> list[int]:
    query = select(Judgment.id).where(Judgment.status == "pending")
    if run_id is not None:
        query = query.where(Judgment.run_id == run_id)
    return list(session.scalars(query.order_by(Judgment.id)))


def pending_of_judge(engine: Engine, run_id: str, judge: str, limit: int) -> list[int]:
    """A run's pending judgments of one judge (a batch run's next provider batch), oldest first."""
    query = (
        select(Judgment.id)
        .where(Judgment.run_id == run_id, Judgment.status == "pending", Judgment.judge == judge)
        .order_by(Judgment.id)
        .limit(limit)
    )
    with engine.connect() as connection:
        return [int(row[0]) for row in connection.execute(query)]


def mark_enqueued(session: Session, ids: Iterable[int]) -> None:
    ids = list(ids)
    now = utcnow()
    for start in range(0, len(ids), 5000):
        session.execute(update(Judgment).where(Judgment.id.in_(ids[start : start + 5000])).values(enqueued_at=now))


def clear_enqueued(session: Session, ids: Iterable[int]) -> None:
    """Their send failed: pending again with no stamp, so the next sweep sends them."""
    ids = list(ids)
    for start in range(0, len(ids), 5000):
        chunk = ids[start : start + 5000]
        session.execute(
            update(Judgment).where(Judgment.id.in_(chunk), Judgment.status == "pending").values(enqueued_at=None)
        )


def stale_judgment_ids(
    session: Session,
    requeue_after_s: float,
    lease_s: float,
    limit: int = 50_000,
    *,
    include_pending: bool = True,
    sent_before: datetime | None = None,
) -> list[int]:
    """Running judgments whose worker's lease ran out and, with ``include_pending``, pending ones that were never
    enqueued or not recently (last sent ``requeue_after_s`` ago, or before ``sent_before`` when it is given)."""
    now = utcnow()
    stale_enqueue = now - timedelta(seconds=requeue_after_s) if sent_before is None else sent_before
    stale_claim = now - timedelta(seconds=lease_s)
    lost_claims = and_(
        Judgment.status == "running",
        Judgment.claimed_at < stale_claim,
        # not re-sent since the claim (or long ago): one message per lost claim, not one per sweep
        or_(
            Judgment.enqueued_at.is_(None),
            Judgment.enqueued_at <= Judgment.claimed_at,
            Judgment.enqueued_at < stale_enqueue,
        ),
    )
    never_sent = and_(Judgment.status == "pending", Judgment.enqueued_at.is_(None))
    not_recently_sent = and_(Judgment.status == "pending", Judgment.enqueued_at < stale_enqueue)
    condition = or_(lost_claims, never_sent, not_recently_sent) if include_pending else or_(lost_claims, never_sent)
    query = select(Judgment.id).where(condition).order_by(Judgment.id).limit(limit)
    return list(session.scalars(query))


def claim_judgment(session: Session, judgment_id: int, lease_s: float) -> str | None:
    """Take a judgment for this worker; None if it is finished or another live worker holds it."""
    token = uuid.uuid4().hex
    now = utcnow()
    result = session.execute(
        update(Judgment)
        .where(
            Judgment.id == judgment_id,
            or_(
                Judgment.status == "pending",
                and_(Judgment.status == "running", Judgment.claimed_at < now - timedelta(seconds=lease_s)),
            ),
        )
        .values(status="running", claim_token=token, claimed_at=now, updated_at=now)
    )
    session.commit()
    return token if result.rowcount == 1 else None  # type: ignore[attr-defined]


@dataclass(frozen=True, slots=True)
class JudgmentTask:
    """What a worker needs of a stored judgment to ask its judge: the row's plan, its item, its run's budget and
    project (the judge cache's scope)."""

    id: int
    run_id: str
    status: str
    rubric_id: str
    rubric_version: str
    aspect: str
    judge: str
    judge_params: dict[str, Any]
    system_a: str
    system_b: str | None
    order: str | None
    sample_index: int
    item: dict[str, Any]
    budget_usd: float | None
    project_id: str
    attempts: int = 0
    execution: str = "realtime"  # the run's: 'batch' sends the judgment through a provider batch (workers.batches)
    plan_open: bool = False  # the run's planning was open when this was read (an adaptive run: judge_api.adaptive)


def _task_query() -> Any:
    judgments, items, runs = _judgments(), cast(Table, RunItem.__table__), cast(Table, Run.__table__)
    columns = [judgments.c[name] for name in JudgmentTask.__slots__ if name in judgments.c]
    return (
        select(
            *columns,
            items.c.payload.label("item"),
            runs.c.budget_usd,
            runs.c.project_id,
            runs.c.execution,
            runs.c.plan_open,
        )
        .join_from(judgments, items, items.c.id == judgments.c.item_pk)
        .join(runs, runs.c.id == judgments.c.run_id)
        .where(judgments.c.id.in_(bindparam("ids", expanding=True)))
    )


def load_tasks(engine: Engine, judgment_ids: Sequence[int]) -> list[JudgmentTask]:
    """The judgments of ``judgment_ids`` that exist, with their items and run budgets, in one query."""
    if not judgment_ids:
        return []
    with engine.connect() as connection:
        rows = connection.execute(_TASK_QUERY, {"ids": list(judgment_ids)}).mappings().all()
    return [JudgmentTask(**row) for row in rows]


HOLDER_CHARS = 16  # a claim token is the holder's instance id (judge_api.heartbeats.INSTANCE) + 16 random hex


def new_token(holder: str = "") -> str:
    """A claim token naming its holder, so the claims of a worker whose heartbeat lapsed can be found
    (:func:`release_holder`); without a holder, 32 random hex characters (nobody's to release early)."""
    if len(holder) != HOLDER_CHARS:
        return uuid.uuid4().hex
    return holder + uuid.uuid4().hex[:HOLDER_CHARS]


def claim_many(
    engine: Engine, judgment_ids: Sequence[int], lease_s: float, token: str | None = None
) -> tuple[str, set[int]]:
    """Take every judgment of ``judgment_ids`` that is pending (or whose claim has lapsed) in one statement.

    Returns the claim token (``token``, or a new one) and the ids taken; the others are finished or held by a live
    worker. Judgments ``token`` already holds are taken again: a batch retried after the database came back keeps
    the claims whose hand-back failed, rather than waiting out their lease."""
    token = token or uuid.uuid4().hex
    if not judgment_ids:
        return token, set()
    now = utcnow()
    params = {"ids": list(judgment_ids), "token": token, "now": now, "cutoff": now - timedelta(seconds=lease_s)}
    with engine.begin() as connection:
        return token, {int(row[0]) for row in connection.execute(_CLAIM, params)}


def release_holder(
    session: Session, holder: str, limit: int = 50_000, *, enqueued_at: datetime | None = None
) -> list[int]:
    """Hand back as pending every judgment the (dead) instance ``holder`` has claimed; returns their ids.

    Its verdicts can no longer be written (each write is a compare-and-set on the token released here), and the
    replies it paid for wait in the stash for the next claim. ``enqueued_at`` is the stamp of the re-send the
    caller makes once this is committed (None: not sent, so the next sweep sends them)."""
    if len(holder) != HOLDER_CHARS:
        return []
    table = _judgments()
    ids = list(
        session.scalars(
            select(table.c.id)
            .where(table.c.status == "running", table.c.claim_token.like(holder + "%"))
            .order_by(table.c.id)
            .limit(limit)
        )
    )
    if not ids:
        return []
    released = session.execute(
        update(table)
        .where(table.c.id.in_(ids), table.c.status == "running", table.c.claim_token.like(holder + "%"))
        .values(status="pending", claim_token=None, claimed_at=None, enqueued_at=enqueued_at, updated_at=utcnow())
        .returning(table.c.id)
    )
    return sorted(int(row[0]) for row in released)


def renew_claims(engine: Engine, held: dict[int, str]) -> int:
    """Move the claim time of judgments this worker still holds (id -> claim token) to now; returns how many."""
    table = _judgments()
    now = utcnow()
    by_token: dict[str, list[int]] = {}
    for judgment_id, token in held.items():
        by_token.setdefault(token, []).append(judgment_id)
    renewed = 0
    with engine.begin() as connection:
        for token, ids in by_token.items():
            renewed += connection.execute(
                update(table)
                .where(table.c.id.in_(ids), table.c.claim_token == token, table.c.status == "running")
                .values(claimed_at=now)
            ).rowcount
    return renewed


def write_verdicts(
    engine: Engine,
    verdicts: Sequence[tuple[int, str, dict[str, Any]]],
    cache_rows: Sequence[dict[str, Any]] = (),
    stamp: datetime | None = None,
    paid_rows: Sequence[Sequence[dict[str, Any]]] | None = None,
) -> list[bool]:
    """Store claimed judgments' verdicts, and the cache entries of the replies they paid for, in one transaction.

    ``verdicts`` are (judgment id, claim token, column values). Each verdict is a compare-and-set on its claim
    token: False for a claim that was lost (nothing written for that row). ``cache_rows`` are written either way
    (content-addressed: an entry that exists is kept). ``paid_rows`` (one list per verdict) are the entries each
    verdict's claim paid for: written with a verdict that is written, or whose row another claim holds now (its
    lease lapsed: the reply spares that claim a second call), never for a judgment that is gone (its run deleted,
    issue 43). The rows are written (and the gone ones read ``FOR SHARE``) before the entries, so a run's deletion,
    which locks its judgments first (``retention.delete_run``), either finds the entries or keeps them out.

    ``stamp`` (the rows' ``updated_at``) is the same on every try of a group: when a connection was cut while a
    commit was under way, the retry cannot tell from the compare-and-set whether that commit went through, and
    a row already carrying this stamp was written by it (True, not a lost claim whose calls are added again)."""
    now = stamp or utcnow()
    params = [
        {**{f"v_{k}": v for k, v in values.items()}, "jid": judgment_id, "token": token, "v_updated_at": now}
        for judgment_id, token, values in verdicts
    ]
    by_columns: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for (_, _, values), row in zip(verdicts, params, strict=True):
        by_columns.setdefault(tuple(sorted(values)), []).append(row)
    owned = list(paid_rows) if paid_rows is not None else [() for _ in verdicts]
    with engine.connect() as connection:  # closing without a commit rolls back
        insert_entries(connection, engine, cache_rows)
        # the common case: every claim still holds, and one executemany per column set writes the group
        if engine.dialect.supports_sane_multi_rowcount:
            written = sum(connection.execute(_verdict_update(cols), rows).rowcount for cols, rows in by_columns.items())
            if written == len(params):
                insert_entries(connection, engine, [row for rows in owned for row in rows])
                _bump_if_overtaken(connection, [judgment_id for judgment_id, _, _ in verdicts], now)
                connection.commit()
                return [True] * len(params)
            connection.rollback()  # a claim was lost: write row by row to learn which
            insert_entries(connection, engine, cache_rows)
        results = [
            connection.execute(_verdict_update(tuple(sorted(values))), row).rowcount == 1
            for (_, _, values), row in zip(verdicts, params, strict=True)
        ]
        table = _judgments()
        missed = [judgment_id for (judgment_id, _, _), ok in zip(verdicts, results, strict=True) if not ok]
        if stamp is not None and missed:
            ours = set(
                connection.scalars(select(table.c.id).where(table.c.id.in_(missed), table.c.updated_at == stamp))
            )
            results = [ok or judgment_id in ours for (judgment_id, _, _), ok in zip(verdicts, results, strict=True)]
        lost = [judgment_id for (judgment_id, _, _), ok in zip(verdicts, results, strict=True) if not ok]
        lost_rows = [rows for (judgment_id, _, _), rows in zip(verdicts, owned, strict=True) if judgment_id in lost]
        alive = set(_existing_rows(connection, lost)) if any(lost_rows) else set()
        insert_entries(
            connection,
            engine,
            [
                row
                for (judgment_id, _, _), ok, rows in zip(verdicts, results, owned, strict=True)
                if ok or judgment_id in alive
                for row in rows
            ],
        )
        _bump_if_overtaken(
            connection, [judgment_id for (judgment_id, _, _), ok in zip(verdicts, results, strict=True) if ok], now
        )
        connection.commit()
        return results


def _bump_if_overtaken(connection: Connection, judgment_ids: Sequence[int], stamp: datetime) -> None:
    """Bump the ``data_version`` of the runs of these just-written judgments where another row was written at or after
    their ``stamp`` (review r39). The report cache's state is ``data_version`` + ``max(updated_at)``: a verdict stamped
    before the run's last write (the writer takes its stamp before waiting for the database's lock, and keeps it on
    every retry of a group) changes neither, and the kept report would be served without it for good. The common
    case (the stamp is the run's latest) reads one index seek per run and takes no lock on the run's row."""
    if not judgment_ids:
        return
    table = _judgments()
    later = table.alias("later")
    own = sorted(set(judgment_ids))
    runs = select(table.c.run_id).where(table.c.id.in_(own)).distinct().scalar_subquery()
    # another write with the same stamp (two clocks read in the same microsecond) leaves the maximum as it was too
    overtaken = exists(
        select(later.c.id).where(later.c.run_id == Run.id, later.c.updated_at >= stamp, later.c.id.not_in(own))
    )
    connection.execute(update(Run).where(Run.id.in_(runs), overtaken).values(data_version=Run.data_version + 1))


def _existing_rows(connection: Connection, judgment_ids: Sequence[int]) -> list[int]:
    """Which of these judgments exist, read ``FOR SHARE`` (PostgreSQL): a deletion under way is waited for."""
    table = _judgments()
    return list(connection.scalars(select(table.c.id).where(table.c.id.in_(judgment_ids)).with_for_update(read=True)))


def claim_holds(engine: Engine, judgment_id: int, token: str) -> bool:
    """The judgment exists and this claim still holds it: checked before each provider call, so a judgment whose
    run was deleted (or whose claim another worker took over) starts no call (issue 43)."""
    table = _judgments()
    with engine.connect() as connection:
        found = connection.execute(
            select(table.c.id).where(
                table.c.id == judgment_id, table.c.claim_token == token, table.c.status == "running"
            )
        ).first()
    return found is not None


def store_judgment_cache_rows(
    engine: Engine, judgment_id: int, cache_rows: Sequence[dict[str, Any]], own_key: str | None
) -> bool:
    """Write the cache entries a judgment's claim paid for outside its verdict's write (a key's single-flight holder
    fills the cache before others look it up), only while the judgment exists: False (nothing written) when it is
    gone, its run deleted. ``own_key``: the judgment's own cache key (its first request), recorded on the row in the
    same transaction, so deleting the run finds the entry even before the verdict is written (issue 43)."""
    table = _judgments()
    with engine.begin() as connection:
        if own_key is not None:
            exists = (
                connection.execute(update(table).where(table.c.id == judgment_id).values(cache_key=own_key)).rowcount
                == 1
            )
        else:
            exists = bool(_existing_rows(connection, [judgment_id]))
        if exists:
            insert_entries(connection, engine, cache_rows)
    return exists


def record_cache_keys(engine: Engine, judgment_id: int, keys: Sequence[str]) -> bool:
    """Record cache keys the judgment uses besides its own (a re-ask's), before it looks them up or pays for them,
    only while the judgment exists: deleting its run then removes their entries too (issue 43 review)."""
    table = cast(Table, JudgmentCacheKey.__table__)
    with engine.begin() as connection:
        exists = bool(_existing_rows(connection, [judgment_id]))
        if exists and keys:
            dialect = postgresql if engine.dialect.name == "postgresql" else sqlite
            connection.execute(
                dialect.insert(table).on_conflict_do_nothing(),
                [{"judgment_id": judgment_id, "key": key} for key in keys],
            )
    return exists


@functools.lru_cache(maxsize=64)
def _verdict_update(columns: tuple[str, ...]) -> Any:
    """The compare-and-set UPDATE of a verdict writing ``columns`` (built once per column set)."""
    table = _judgments()
    # bind names differ from the column names: SQLAlchemy reserves those for its own SET parameters
    values: dict[str, Any] = {c: bindparam(f"v_{c}", type_=table.c[c].type) for c in (*columns, "updated_at")}
    _accumulate(table, values)
    values["claim_token"] = None
    return (
        update(table)
        .where(table.c.id == bindparam("jid"), table.c.claim_token == bindparam("token"), table.c.status == "running")
        .values(values)
    )


def _judgments() -> Table:
    return cast(Table, Judgment.__table__)


# what the provider was paid is added to the row, never overwritten: calls of a claim that was lost (recorded by
# add_unused_calls) and of an earlier attempt of the judgment stay counted when the verdict is written
ACCUMULATED_COLUMNS = ("provider_calls", "cost_usd", "list_cost_usd", "cache_saved_usd")


def _accumulate(table: Table, values: dict[str, Any]) -> None:
    for column in ACCUMULATED_COLUMNS:
        if column in values:
            values[column] = func.coalesce(table.c[column], 0) + func.coalesce(values[column], 0)


def add_unused_calls(engine: Engine, unused: Sequence[dict[str, Any]]) -> None:
    """Count provider calls whose verdict was not used (the claim was lost) on their judgments' rows: ``unused``
    holds {"jid", "calls", "cost"}. A run's provider_calls and cost then equal what the provider saw."""
    table = _judgments()
    statement = (
        update(table)
        .where(table.c.id == bindparam("jid"))
        .values(
            provider_calls=func.coalesce(table.c.provider_calls, 0) + bindparam("calls"),
            cost_usd=func.coalesce(table.c.cost_usd, 0.0) + bindparam("cost"),
        )
    )
    ids = sorted({int(u["jid"]) for u in unused})
    with engine.begin() as connection:
        connection.execute(statement, list(unused))
        # the row's cost changed without a new updated_at (its claim belongs to another writer, whose retry check
        # reads updated_at): the run's report cache is told through its data_version instead (issue 39)
        runs = select(table.c.run_id).where(table.c.id.in_(ids)).distinct().scalar_subquery()
        connection.execute(update(Run).where(Run.id.in_(runs)).values(data_version=Run.data_version + 1))


def _claim_statement() -> Any:
    table = _judgments()
    return (
        update(table)
        .where(
            table.c.id.in_(bindparam("ids", expanding=True)),
            or_(
                table.c.status == "pending",
                and_(
                    table.c.status == "running",
                    or_(table.c.claimed_at < bindparam("cutoff"), table.c.claim_token == bindparam("token")),
                ),
            ),
        )
        .values(
            status="running", claim_token=bindparam("token"), claimed_at=bindparam("now"), updated_at=bindparam("now")
        )
        .returning(table.c.id)
    )


_CLAIM = _claim_statement()


_TASK_QUERY = _task_query()


def complete_judgment(session: Session, judgment_id: int, token: str, values: dict[str, Any]) -> bool:
    """Write the verdict if this worker still holds the claim. Exactly one writer ever succeeds."""
    stamp = utcnow()
    values = {**values, "updated_at": stamp, "claim_token": None}
    result = session.execute(
        update(Judgment)
        .where(Judgment.id == judgment_id, Judgment.claim_token == token, Judgment.status == "running")
        .values(**values)
    )
    if result.rowcount == 1:  # type: ignore[attr-defined]
        _bump_if_overtaken(session.connection(), [judgment_id], stamp)
    session.commit()
    return result.rowcount == 1  # type: ignore[attr-defined]


VERDICT_COLUMNS = (
    "status",
    "error",
    "explanation",
    "details",
    "score",
    "verdict",
    "preference",
    "outcome",
    "raw_output",
    "prompt_hash",
    "cache_key",
    "injection_flags",
    "attempts",
    "provider_calls",
    "input_tokens",
    "output_tokens",
    "cached_input_tokens",
    "cache_write_tokens",
    "latency_ms",
    "cost_usd",
    "list_cost_usd",
    "cache_saved_usd",
    "cached",
)


def complete_pending_many(sessions: sessionmaker[Session], writes: Sequence[dict[str, Any]]) -> int:
    """Write verdicts that needed no provider call (cache hits) straight onto pending rows, in one statement.

    The ``status = 'pending'`` condition is the compare-and-set: a row another worker claimed or finished is left
    alone, so each judgment is still written once. Returns how many rows were written."""
    if not writes:
        return 0
    now = utcnow()
    defaults: dict[str, Any] = {
        "attempts": 0,
        "provider_calls": 0,
        "input_tokens": 0,
        "output_tokens": 0,
        "cached_input_tokens": 0,
        "cache_write_tokens": 0,
        "cost_usd": 0.0,
        "list_cost_usd": 0.0,
        "cache_saved_usd": 0.0,
        "cached": False,
        "injection_flags": [],
    }
    params = []
    for write in writes:
        row = {f"v_{c}": write.get(c) if write.get(c) is not None else defaults.get(c) for c in VERDICT_COLUMNS}
        params.append({"jid": write["jid"], "v_updated_at": now, **row})
    table = cast(Table, Judgment.__table__)
    # bind names differ from the column names: SQLAlchemy reserves those for its own SET parameters
    values = {c: bindparam(f"v_{c}", type_=table.c[c].type) for c in (*VERDICT_COLUMNS, "updated_at")}
    _accumulate(table, values)
    statement = update(table).where(table.c.id == bindparam("jid"), table.c.status == "pending").values(values)
    with sessions() as session:
        result = session.execute(statement, params)
        _bump_if_overtaken(session.connection(), [int(write["jid"]) for write in writes], now)
        session.commit()
    return int(result.rowcount) if result.rowcount is not None and result.rowcount >= 0 else len(params)  # type: ignore[attr-defined]


def release_judgment(session: Session, judgment_id: int, token: str, values: dict[str, Any]) -> bool:
    """Hand a claimed judgment back as pending (e.g. the worker is shutting down)."""
    return complete_judgment(session, judgment_id, token, {**values, "status": "pending", "claimed_at": None})


def run_spend(session: Session, run_id: str) -> float:
    return float(
        session.scalar(select(func.coalesce(func.sum(Judgment.cost_usd), 0.0)).where(Judgment.run_id == run_id)) or 0.0
    )
