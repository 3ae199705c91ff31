"""Build the judge engine for a process: Redis-backed (workers) or in-process (standalone runner)."""

from __future__ import annotations

import threading

from sqlalchemy.orm import sessionmaker

from judge_api import heartbeats, tokens
from judge_api.config import Settings, get_settings
from judge_api.db import engine_for
from judge_api.migrate import upgrade
from judge_api.rubrics import get_registry
from judge_api.secrets import provider_secret
from judge_api.sweeper import redis_client
from workers.batches import BatchStage
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
            settings,
            sessions,
            get_registry(),
            LocalRateLimiter(),
            LocalSingleFlight(),
            stash=LocalReplyStash(),
            batch_stage_factory=BatchStage,
        )
    client = redis_client(settings)
    return JudgeEngine(
        settings,
        sessions,
        get_registry(),
        RedisRateLimiter(client),
        RedisSingleFlight(client, holder=heartbeats.INSTANCE),
        stash=RedisReplyStash(client),
        holder=heartbeats.INSTANCE,  # claims name this process: released within seconds if its heartbeat lapses
        batch_stage_factory=BatchStage,
    )


def warm_tokenizer(settings: Settings) -> bool:
    """Load OpenAI's tokenizer before the worker takes work, when it will need it: cache-aware dispatch counts the
    shared prefix of an OpenAI judge's prompts with it (judge_api.tokens). Loaded lazily, the vocabulary took the
    first batch of a run ~0.8 s of CPU holding the GIL, and every call slot and task of the process stalled with it
    (bench_cost: -10 to -15 % judged/s over an 800-judgment run). Skipped where no OpenAI key is configured (no
    ``openai:`` judge can be called) or cache-aware dispatch is off: the ~150 MB are then not spent."""
    if not settings.cache_aware_dispatch or provider_secret("OPENAI_API_KEY") is None:
        return False
    tokens.warm_up()
    return True


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
