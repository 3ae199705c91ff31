"""The API keeps what it loaded at startup out of the cyclic garbage collector while it serves: a full collection
walked every module, schema and warmed-up statistics object (some 250,000) inside whichever request triggered it,
0.15 s of CPU and half a second on a busy machine (the p99 of bench/bench_ingest.py). Shutdown hands them back, so
an app started in a test process leaks nothing."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from judge_api.config import reset_settings_cache
from judge_api.db import reset_engines


def test_startup_objects_are_frozen_while_serving_and_released_at_shutdown(
    settings_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    settings_env.setenv("DATABASE_URL", f"sqlite:///{tmp_path / 'api.db'}")
    reset_settings_cache()
    reset_engines()
    from judge_api.app import create_app

    gc.unfreeze()
    app = create_app()
    assert gc.get_freeze_count() == 0
    with TestClient(app) as client:
        frozen = gc.get_freeze_count()
        assert frozen > 50_000, frozen  # the startup's objects, not walked by a full collection now
        assert client.get("/healthz").status_code == 200
        assert all(len(gc.get_objects(generation)) < frozen for generation in range(3))
    assert gc.get_freeze_count() == 0
