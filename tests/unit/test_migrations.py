"""The Alembic migrations build exactly the schema the ORM models declare (a model change without a migration
fails here), on both supported databases, and a database at an older revision upgrades in place."""

from __future__ import annotations

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, inspect

from judge_api.migrate import alembic_config, upgrade
from judge_api.models import Base


def test_migrations_match_the_models(db_url: str) -> None:
    upgrade(db_url)
    engine = create_engine(db_url)
    try:
        with engine.connect() as connection:
            diff = compare_metadata(MigrationContext.configure(connection), Base.metadata)
    finally:
        engine.dispose()
    assert diff == [], f"the models and the migrations disagree: {diff}"


def test_an_older_database_upgrades_to_head(db_url: str) -> None:
    engine = create_engine(db_url)
    try:
        with engine.begin() as connection:
            config = alembic_config(db_url)
            config.attributes["connection"] = connection
            command.upgrade(config, "0001")
        assert "rubric_snapshots" not in inspect(engine).get_table_names()
        with engine.begin() as connection:
            config = alembic_config(db_url)
            config.attributes["connection"] = connection
            command.upgrade(config, "head")
        assert "rubric_snapshots" in inspect(engine).get_table_names()
    finally:
        engine.dispose()
