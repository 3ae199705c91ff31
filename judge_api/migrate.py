"""Apply Alembic migrations programmatically (the API, the worker and the CLI call this at start-up)."""

from __future__ import annotations

import threading
from pathlib import Path

from alembic import command
from alembic.config import Config

from judge_api.db import engine_for

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
_lock = threading.Lock()
_done: set[str] = set()


def alembic_config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("sqlalchemy.url", url)
    return config


def upgrade(url: str) -> None:
    """Bring the database at ``url`` to the newest schema. Safe to call from several processes."""
    with _lock:
        if url in _done:
            return
        engine = engine_for(url)
        with engine.begin() as connection:
            if engine.dialect.name == "postgresql":
                # serialise concurrent start-ups (API and workers migrating at once)
                connection.exec_driver_sql("SELECT pg_advisory_xact_lock(7262019)")
            config = alembic_config(url)
            config.attributes["connection"] = connection
            command.upgrade(config, "head")
        _done.add(url)
