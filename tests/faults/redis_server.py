"""A private redis-server for live tests.

The machine's shared Redis hands DB indices 1-15 to every pytest process (tests/conftest.py ``redis_url``), so two
sessions running at once share a queue: one's workers take (and skip) the other's messages and a flush drops them.
Live tests of queue behaviour therefore run their own server; it also lets a test kill and restart Redis.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from dialogue_judge.testing import OwnRedis


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[OwnRedis]:
    server = OwnRedis(tmp_path / "redis")
    server.start()
    yield server
    server.kill()
