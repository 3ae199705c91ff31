"""A migrated database (SQLite and PostgreSQL) and a way to store a small run through the real storage code."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import Table

from judge_api import planning, repository
from judge_api.config import reset_settings_cache
from judge_api.db import reset_engines, session_scope
from judge_api.migrate import upgrade
from judge_api.repository import frame_columns, frames
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


# the frame read in parts (issue 39: test_frame_parts.py, test_review_r53a.py)


@pytest.fixture
def readers(settings_env: pytest.MonkeyPatch) -> Callable[[int], None]:
    """Sets ``DJ_FRAME_READERS``; every run is read by the children whatever its size."""
    settings_env.setattr(frame_columns, "ARROW_CHILD_MIN_ROWS", 0)
    settings_env.setattr(frame_columns, "PARALLEL_MIN_ROWS", 0)
    settings_env.setattr(frames, "available_cpus", lambda: 64)  # the parts asked, whatever this machine's CPUs

    def set_readers(count: int) -> None:
        settings_env.setenv("DJ_FRAME_READERS", str(count))
        reset_settings_cache()

    return set_readers


@pytest.fixture
def parts_read(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The WHERE clauses of each parallel read, as ``read_sqlite_parts`` was given them."""
    calls: list[list[str]] = []
    real = frame_columns.read_sqlite_parts

    def spy(database: str, table: Table, run_id: str, chunk: int, wheres: list[str]) -> Any:
        calls.append(list(wheres))
        return real(database, table, run_id, chunk, wheres)

    monkeypatch.setattr(frame_columns, "read_sqlite_parts", spy)
    return calls


@pytest.fixture
def pg_parts(settings_env: pytest.MonkeyPatch) -> list[int]:
    """Every run is read in parts whatever its size; the number of parts each parallel read made."""
    settings_env.setattr(frame_columns, "PARALLEL_MIN_ROWS", 0)
    settings_env.setattr(frames, "available_cpus", lambda: 64)
    made: list[int] = []
    real = frame_columns.read_postgresql_parts

    def spy(connection: Any, table: Table, run_id: str, readers: int) -> Any:
        read = real(connection, table, run_id, readers)
        made.append(-1 if read is None else readers)
        return read

    settings_env.setattr(frame_columns, "read_postgresql_parts", spy)
    return made
