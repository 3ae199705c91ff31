"""The sweeper re-sends what the queue lost without flooding it: pending judgments whose message may still be queued
wait until the queue drains; claims of dead workers are re-sent at once; a Redis restart re-sends everything."""

from __future__ import annotations

from datetime import timedelta

import pytest
import redis
from sqlalchemy import update

from dialogue_judge.testing import OwnRedis
from judge_api import planning, repository
from judge_api.config import get_settings, reset_settings_cache
from judge_api.db import session_scope
from judge_api.migrate import upgrade
from judge_api.models import Judgment, utcnow
from judge_api.repository import claims
from judge_api.rubrics import get_registry
from judge_api.schemas import RunCreate
from judge_api.sweeper import Sweeper


def test_sweeper_waits_for_a_drained_queue_and_always_resends_dead_claims(
    settings_env: pytest.MonkeyPatch, own_redis: OwnRedis
) -> None:
    settings_env.setenv("REDIS_URL", own_redis.url)
    settings_env.setenv("DJ_REQUEUE_AFTER", "60")
    settings_env.setenv("DJ_CLAIM_LEASE", "60")
    settings_env.setenv("DJ_TASK_BATCH", "1")
    reset_settings_cache()
    settings = get_settings()
    upgrade(settings.resolved_database_url())
    request = RunCreate.model_validate(
        {
            "items": [{"id": f"i{k}", "candidates": {"a": f"x{k}"}} for k in range(4)],
            "rubrics": ["rsum-single"],
            "aspects": ["consistency"],
            "judges": ["openai:gpt-4o"],
        }
    )
    with session_scope() as session:
        planned = planning.plan_run(request, get_registry(), 100)
        run = repository.create_run(session, request, planned, rubrics=[get_registry().get("rsum-single")])
        ids = claims.pending_judgment_ids(session, run.id)
        old = utcnow() - timedelta(seconds=600)
        session.execute(update(Judgment).where(Judgment.id.in_(ids[:3])).values(enqueued_at=old))
        session.execute(
            update(Judgment).where(Judgment.id == ids[3]).values(status="running", claimed_at=old, enqueued_at=old)
        )
    client = redis.Redis.from_url(own_redis.url)
    client.rpush("judgments", "a message still waiting")
    sweeper = Sweeper(settings, client)
    assert sweeper.sweep_once() == 1  # queue busy: only the dead worker's claim
    client.delete("judgments")
    assert sweeper.sweep_once() == 3  # drained: the pending ones whose messages were lost
    assert sweeper.sweep_once() == 0  # just re-sent: nothing is stale now
    assert client.llen("judgments") == 3  # (the first sweep's message went with the deleted list)
