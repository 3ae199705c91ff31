"""Claims name their holder, and a sweeper hands back the claims and single-flight locks of a worker whose heartbeat
lapsed at its next look, leaving a live worker's alone (issue 29), on SQLite and PostgreSQL with a real Redis."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
import redis
from sqlalchemy import select, update

from dialogue_judge.testing import OwnRedis
from judge_api import heartbeats, planning, repository
from judge_api import sweeper as sweeper_module
from judge_api.config import get_settings, reset_settings_cache
from judge_api.db import get_engine, session_scope
from judge_api.migrate import upgrade
from judge_api.models import Judgment, utcnow
from judge_api.repository import claims
from judge_api.rubrics import get_registry
from judge_api.schemas import RunCreate
from judge_api.sweeper import DEATH_KEY, Sweeper

DEAD = "d" * 16
LIVE = "a" * 16


def plan(n: int) -> list[int]:
    request = RunCreate.model_validate(
        {
            "items": [{"id": f"i{k}", "candidates": {"a": f"x{k}"}} for k in range(n)],
            "rubrics": ["rsum-single"],
            "aspects": ["consistency"],
            "judges": ["openai:gpt-4o"],
        }
    )
    with session_scope() as session:
        planned = planning.plan_run(request, get_registry(), 100)
        run = repository.create_run(session, request, planned, rubrics=[get_registry().get("rsum-single")])
        return claims.pending_judgment_ids(session, run.id)


@pytest.fixture
def database(settings_env: pytest.MonkeyPatch, db_url: str, own_redis: OwnRedis) -> str:
    settings_env.setenv("DATABASE_URL", db_url)
    settings_env.setenv("REDIS_URL", own_redis.url)
    settings_env.setenv("DJ_TASK_BATCH", "1")
    reset_settings_cache()
    upgrade(db_url)
    return db_url


def test_a_claim_token_names_its_holder_and_a_retry_retakes_its_own_claims(database: str) -> None:
    ids = plan(3)
    engine = get_engine()
    token = claims.new_token(DEAD)
    assert token.startswith(DEAD) and len(token) == 32
    assert len(claims.new_token("")) == 32 and not claims.new_token("").startswith(DEAD)
    assert claims.claim_many(engine, ids, 30.0, token) == (token, set(ids))
    assert claims.claim_many(engine, ids, 30.0)[1] == set()  # held by a live claim: nobody else takes them
    # the same batch after the database came back: its claims whose hand-back failed are its own again
    assert claims.claim_many(engine, ids, 30.0, token) == (token, set(ids))
    with session_scope() as session:
        assert claims.release_holder(session, LIVE) == []
        assert claims.release_holder(session, DEAD) == ids
    with session_scope() as session:
        rows = session.execute(select(Judgment.status, Judgment.claim_token, Judgment.enqueued_at)).all()
    assert rows == [("pending", None, None)] * 3
    assert claims.claim_many(engine, ids, 30.0)[1] == set(ids)


def test_the_sweeper_releases_a_dead_workers_claims_and_locks_at_its_next_look(
    database: str, own_redis: OwnRedis
) -> None:
    ids = plan(4)
    engine = get_engine()
    client = redis.Redis.from_url(own_redis.url)
    claims.claim_many(engine, ids[:2], 30.0, claims.new_token(DEAD))
    claims.claim_many(engine, ids[2:], 30.0, claims.new_token(LIVE))
    # both beat once; then the dead one's key lapses (as when its process is killed) and the live one keeps beating
    heartbeats.beat(client, "w-dead", instance=DEAD, ttl_s=60)
    heartbeats.beat(client, "w-live", instance=LIVE, ttl_s=60)
    client.set("dj:inflight:k1", DEAD + "f" * 32)
    client.set("dj:inflight:k2", LIVE + "f" * 32)
    client.rpush("judgments", "a message still queued")
    sweeper = Sweeper(get_settings(), client)
    assert sweeper.check_workers() == 0  # both alive
    client.delete(next(k for k in client.scan_iter("dj:heartbeat:*") if b"w-dead" in k))
    assert heartbeats.dead_instances(client) == {DEAD: "w-dead"}
    assert sweeper.check_workers() == 2
    with session_scope() as session:
        status = dict(session.execute(select(Judgment.id, Judgment.status)).tuples().all())
    assert [status[i] for i in ids] == ["pending", "pending", "running", "running"]
    assert client.llen("judgments") == 3  # the two released judgments were sent again at once
    assert client.get("dj:inflight:k1") is None  # its waiters take the lock over now, not after the lease
    assert client.get("dj:inflight:k2") is not None
    assert heartbeats.dead_instances(client) == {}  # buried: released once
    assert client.get(DEATH_KEY) is not None  # what it took and never claimed is re-sent once the queue drains
    assert sweeper.check_workers() == 0
    client.delete("judgments")
    assert sweeper.check_workers() == 0  # drained: nothing from before the death is pending (all re-sent or held)
    assert client.get(DEATH_KEY) is None


def test_the_release_is_committed_before_the_resend(database: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker takes the re-sent message at once. It must find the judgments pending, not still held by the dead
    worker: it would skip them, and they would wait out the 60 s requeue delay (CI: a killed worker's run finished
    71 s after the kill instead of within 25 s). Before the fix the message went out inside the releasing
    transaction, and another connection still saw them running."""
    ids = plan(3)
    claims.claim_many(get_engine(), ids, 30.0, claims.new_token(DEAD))
    seen_at_send: list[tuple[str, str | None]] = []

    def enqueue(_settings: object, sent: list[int]) -> int:
        with get_engine().connect() as other:  # what a worker's own connection reads when the message arrives
            rows = other.execute(select(Judgment.status, Judgment.claim_token).where(Judgment.id.in_(sent)))
            seen_at_send.extend(rows.tuples().all())
        return len(sent)

    monkeypatch.setattr(sweeper_module.queue, "enqueue", enqueue)
    assert sweeper_module.release_dead_worker(get_settings(), DEAD) == 3
    assert seen_at_send == [("pending", None)] * 3
    with session_scope() as session:
        stamped = session.scalars(select(Judgment.enqueued_at).where(Judgment.id.in_(ids))).all()
    assert all(at is not None for at in stamped)  # sent: the sweeps do not send them again


def test_a_failed_resend_leaves_the_released_judgments_for_the_next_sweep(
    database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = plan(2)
    claims.claim_many(get_engine(), ids, 30.0, claims.new_token(DEAD))

    def broker_away(_settings: object, _sent: list[int]) -> int:
        raise redis.exceptions.ConnectionError("Redis is away")

    monkeypatch.setattr(sweeper_module.queue, "enqueue", broker_away)
    with pytest.raises(redis.exceptions.ConnectionError):
        sweeper_module.release_dead_worker(get_settings(), DEAD)
    with session_scope() as session:
        assert claims.stale_judgment_ids(session, 60.0, 30.0) == ids  # pending, never sent: the next sweep sends


def test_the_drained_queue_resend_leaves_the_claims_released_at_the_death_alone(
    database: str, own_redis: OwnRedis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once the queue drains after a death, what was sent before the death and is still pending goes out again, but
    not the claims released (and sent) at the death. The cut-off was an age measured at the look, so a look slower
    than the release (here 0.2 s inside the query; a full run on SQLite hit it) re-sent them: 2 instead of 0."""
    ids = plan(3)
    client = redis.Redis.from_url(own_redis.url)
    claims.claim_many(get_engine(), ids[:2], 30.0, claims.new_token(DEAD))
    heartbeats.beat(client, "w-dead", instance=DEAD, ttl_s=60)
    sweeper = Sweeper(get_settings(), client)
    client.delete(next(k for k in client.scan_iter("dj:heartbeat:*") if b"w-dead" in k))
    assert sweeper.check_workers() == 2  # released and sent; the queue holds their message (DJ_TASK_BATCH=1: two)
    with session_scope() as session:  # ids[2] was sent before the death and never taken (a dead worker's prefetch)
        session.execute(
            update(Judgment).where(Judgment.id == ids[2]).values(enqueued_at=utcnow() - timedelta(seconds=5))
        )
    client.delete("judgments")
    original = claims.stale_judgment_ids

    def slow_look(*args: object, **kwargs: object) -> list[int]:
        time.sleep(0.2)
        return original(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(claims, "stale_judgment_ids", slow_look)
    assert sweeper.check_workers() == 1  # ids[2] alone
    assert client.llen("judgments") == 1
    assert client.get(DEATH_KEY) is None
