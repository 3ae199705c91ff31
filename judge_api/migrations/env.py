"""Alembic environment; the URL comes from the Config (set by judge_api.migrate) or DATABASE_URL."""

from __future__ import annotations

from alembic import context
from sqlalchemy import engine_from_config, pool

from judge_api.config import get_settings
from judge_api.models import Base

config = context.config
url = config.get_main_option("sqlalchemy.url") or get_settings().resolved_database_url()
config.set_main_option("sqlalchemy.url", url)
target_metadata = Base.metadata


def run_migrations() -> None:
    connectable = config.attributes.get("connection")
    if connectable is not None:
        context.configure(connection=connectable, target_metadata=target_metadata, render_as_batch=True)
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = engine_from_config(
        config.get_section(config.config_ini_section) or {}, prefix="sqlalchemy.", poolclass=pool.NullPool
    )
    with engine.connect() as connection:
        context.configure(connection=connection, target_metadata=target_metadata, render_as_batch=True)
        with context.begin_transaction():
            context.run_migrations()


run_migrations()
