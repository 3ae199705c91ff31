"""Fixtures of the judging tests (the harness itself lives in harness.py)."""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

from dialogue_judge.testing import OwnRedis, TcpProxy
from judge_api.db import reset_engines
from judge_simulator.process import SimulatorProcess

from .harness import ANTHROPIC_KEY, OPENAI_KEY, Harness


@pytest.fixture
def harness(settings_env: pytest.MonkeyPatch, sim: SimulatorProcess) -> Iterator[Harness]:
    """settings_env (temp DJ_HOME, SQLite, no Redis) + the reset simulator + provider env pointing at it."""
    settings_env.setenv("ANTHROPIC_API_KEY", ANTHROPIC_KEY)
    settings_env.setenv("ANTHROPIC_BASE_URL", sim.root_url)
    settings_env.setenv("OPENAI_API_KEY", OPENAI_KEY)
    settings_env.setenv("OPENAI_BASE_URL", sim.base_url)
    settings_env.delenv("DJ_RATE_LIMITS", raising=False)
    settings_env.delenv("DJ_RUBRICS_PATH", raising=False)
    yield Harness(sim, settings_env)
    reset_engines()


@pytest.fixture
def redis_proxy(own_redis: OwnRedis) -> Iterator[TcpProxy]:
    """own_redis behind a loopback TCP proxy: ``stop()`` cuts Redis off without losing its data."""
    parsed = urlsplit(own_redis.url)
    with TcpProxy(parsed.hostname or "127.0.0.1", parsed.port or 6379) as proxy:
        yield proxy
