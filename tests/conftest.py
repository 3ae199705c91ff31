"""Shared fixtures: real PostgreSQL and Redis on this machine, the judge simulator, isolated settings."""

from __future__ import annotations

import itertools
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import redis

from dialogue_judge.testing import OwnRedis
from judge_api.config import reset_settings_cache
from judge_api.db import reset_engines
from judge_api.rubrics import get_registry
from tests.soak_variants import SOAK_VARIANTS

pytest_plugins = ["judge_simulator.pytest_fixtures"]

REPO_ROOT = Path(__file__).resolve().parent.parent
SHARED = REPO_ROOT.parent / "shared"
PG_ADMIN = os.environ.get("DJ_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")


@pytest.hookimpl(tryfirst=True)  # before the -m expression deselects
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The long variants listed in tests/soak_variants.py join the soak tests (deselected by the default ``-m``)."""
    for item in items:
        if item.nodeid in SOAK_VARIANTS:
            item.add_marker(pytest.mark.soak)


def _pg_available() -> bool:
    try:
        with psycopg.connect(PG_ADMIN, connect_timeout=3):
            return True
    except psycopg.Error:
        return False


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    if not SHARED.is_dir():
        pytest.skip(f"reference data folder {SHARED} is absent")
    return SHARED


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A fresh PostgreSQL database for one test, dropped afterwards."""
    if not _pg_available():
        pytest.fail(f"PostgreSQL is not reachable at {PG_ADMIN}; .ci/run starts it")
    name = f"dj_test_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield PG_ADMIN.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://") + f"/{name}"
    reset_engines()
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'dj.db'}"


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'dj.db'}"
    else:
        yield request.getfixturevalue("pg_url")


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[OwnRedis]:
    """A throw-away redis-server for one test (it may be killed and restarted by the test)."""
    server = OwnRedis(tmp_path / "redis")
    server.start()
    yield server
    server.kill()


MACHINE_REDIS = os.environ.get("DJ_TEST_REDIS", "redis://127.0.0.1:6379/15")


@pytest.fixture
def machine_redis_url() -> Iterator[str]:
    """A flushed database on the machine's Redis server (127.0.0.1:6379; .ci/run starts it)."""
    client = redis.Redis.from_url(MACHINE_REDIS)
    try:
        client.ping()
    except redis.exceptions.ConnectionError:
        pytest.fail(f"Redis is not reachable at {MACHINE_REDIS}; .ci/run starts it")
    client.flushdb()
    yield MACHINE_REDIS
    client.flushdb()


@pytest.fixture(scope="session")
def private_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OwnRedis]:
    """A redis-server of this test session's own (the machine's shared Redis may serve other sessions, whose
    workers would take this session's messages)."""
    server = OwnRedis(tmp_path_factory.mktemp("redis"))
    server.start()
    yield server
    server.kill()


_redis_db = itertools.cycle(range(1, 16))


@pytest.fixture
def redis_url(private_redis: OwnRedis) -> Iterator[str]:
    """A flushed database on this session's Redis server."""
    url = private_redis.url.rsplit("/", 1)[0] + f"/{next(_redis_db)}"
    client = redis.Redis.from_url(url)
    client.flushdb()
    yield url
    client.flushdb()


@pytest.fixture
def settings_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[pytest.MonkeyPatch]:
    """Isolated settings for in-process tests: a temp DJ_HOME, no Redis, fresh engines and rubric registry."""
    monkeypatch.setenv("DJ_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("REDIS_URL", raising=False)
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.setenv("DJ_BACKOFF_BASE", "0.01")
    monkeypatch.setenv("DJ_BACKOFF_MAX", "0.2")
    monkeypatch.setenv("DJ_JUDGE_TIMEOUT", "5")
    reset_settings_cache()
    reset_engines()
    get_registry(refresh=True)
    from workers.clients import reset_clients

    reset_clients()
    yield monkeypatch
    reset_settings_cache()
    reset_engines()
    reset_clients()
