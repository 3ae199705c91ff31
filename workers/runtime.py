"""Build the judge engine for a process: Redis-backed (workers) or in-process (standalone runner)."""

from __future__ import annotations

import threading

from sqlalchemy.orm import sessionmaker

from judge_api.config import Settings, get_settings
from judge_api.db import engine_for
from judge_api.migrate import upgrade
from judge_api.rubrics import get_registry
from judge_api.sweeper import redis_client
from workers.execute import JudgeEngine
from workers.ratelimit import LocalRateLimiter, RedisRateLimiter
from workers.singleflight import LocalSingleFlight, RedisSingleFlight
from workers.stash import LocalReplyStash, RedisReplyStash

_engine: JudgeEngine | None = None
_lock = threading.Lock()


def build_engine(settings: Settings | None = None, *, standalone: bool = False) -> JudgeEngine:
    settings = settings or get_settings()
    url = settings.resolved_database_url()
    upgrade(url)
    sessions = sessionmaker(bind=engine_for(url), expire_on_commit=False)
    if standalone or settings.resolved_redis_url() is None:
        return JudgeEngine(
            settings, sessions, get_registry(), LocalRateLimiter(), LocalSingleFlight(), stash=LocalReplyStash()
        )
    client = redis_client(settings)
    return JudgeEngine(
        settings,
        sessions,
        get_registry(),
        RedisRateLimiter(client),
        RedisSingleFlight(client),
        stash=RedisReplyStash(client),
    )


def engine() -> JudgeEngine:
    global _engine
    with _lock:
        if _engine is None:
            _engine = build_engine()
        return _engine


def reset() -> None:
    global _engine
    with _lock:
        _engine = None
