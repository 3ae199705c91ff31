"""A migrated database (SQLite and PostgreSQL) and a way to store a small run through the real storage code."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from judge_api import planning, repository
from judge_api.config import reset_settings_cache
from judge_api.db import reset_engines, session_scope
from judge_api.migrate import upgrade
from judge_api.rubrics import get_registry
from judge_api.schemas import RunCreate

StoreRun = Callable[..., str]


def item(item_id: str, candidates: dict[str, str], **extra: Any) -> dict[str, Any]:
    return {
        "id": item_id,
        "dialogue": [{"speaker": "user", "text": "I have a beagle called Rex.", "session": 1}],
        "candidates": candidates,
        **extra,
    }


@pytest.fixture
def store_db(settings_env: pytest.MonkeyPatch, db_url: str) -> Iterator[str]:
    settings_env.setenv("DATABASE_URL", db_url)
    reset_settings_cache()
    reset_engines()
    upgrade(db_url)
    yield db_url
    reset_engines()


@pytest.fixture
def store_run(store_db: str) -> StoreRun:
    def store(items: list[dict[str, Any]] | None = None, **request: Any) -> str:
        body = {
            "items": items or [item("i1", {"a": "Rex is a beagle.", "b": "I have no pets."})],
            "rubrics": ["rsum-single"],
            "judges": ["openai:gpt-4o"],
            "aspects": ["consistency"],
            **request,
        }
        req = RunCreate.model_validate(body)
        registry = get_registry()
        planned = planning.plan_run(req, registry, 1_000_000)
        with session_scope() as session:
            return repository.create_run(session, req, planned, rubrics=[registry.get(r) for r in req.rubrics]).id

    return store
