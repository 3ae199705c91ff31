"""Fixtures for the gate tests: an isolated standalone environment (temp DJ_HOME and cache, no Redis)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from judge_api.config import reset_settings_cache
from judge_api.db import reset_engines
from judge_api.rubrics import get_registry
from workers.clients import reset_clients


@pytest.fixture
def gate_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[pytest.MonkeyPatch]:
    """Standalone gate environment: temp DJ_HOME and cache, no Redis, fast retries, fresh registries."""
    monkeypatch.setenv("DJ_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    monkeypatch.delenv("REDIS_URL", raising=False)
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    monkeypatch.setenv("DJ_BACKOFF_BASE", "0.01")
    monkeypatch.setenv("DJ_BACKOFF_MAX", "0.05")
    monkeypatch.setenv("DJ_MAX_ATTEMPTS", "2")
    monkeypatch.setenv("DJ_JUDGE_TIMEOUT", "5")
    reset_settings_cache()
    reset_engines()
    get_registry(refresh=True)
    reset_clients()
    yield monkeypatch
    reset_settings_cache()
    reset_engines()
    reset_clients()
