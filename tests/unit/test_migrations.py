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


def test_rubric_snapshots_become_per_project_and_back(db_url: str, settings_env: object) -> None:
    """Migration 0016 (issue 42, finding 4): a shared snapshot is copied to every project whose runs were planned
    with it; going down keeps one row per rubric version."""
    from sqlalchemy import text
    from sqlalchemy.orm import Session

    from judge_api.planning import plan_run, run_rubrics
    from judge_api.repository import create_run
    from judge_api.rubrics import get_registry
    from judge_api.schemas import RunCreate

    upgrade(db_url)
    engine = create_engine(db_url)
    body = {
        "items": [{"id": "i", "candidates": {"a": "Rex."}}],
        "rubrics": ["rsum-single"],
        "judges": ["openai-compatible:m@http://127.0.0.1:9/v1"],
        "aspects": ["consistency"],
    }
    request = RunCreate.model_validate(body)
    registry = get_registry()
    try:
        with Session(engine) as session:
            for project in ("alpha", "beta"):
                create_run(session, request, plan_run(request, registry, 100), project, run_rubrics(request, registry))
            session.commit()

        def snapshot_rows() -> list[tuple[str, ...]]:
            with engine.connect() as connection:
                columns = [c["name"] for c in inspect(connection).get_columns("rubric_snapshots")]
                chosen = ", ".join(c for c in ("project_id", "rubric_id", "version") if c in columns)
                return [tuple(r) for r in connection.execute(text(f"SELECT {chosen} FROM rubric_snapshots")).all()]

        version = registry.get("rsum-single").version
        assert sorted(snapshot_rows()) == [("alpha", "rsum-single", version), ("beta", "rsum-single", version)]
        with engine.begin() as connection:
            config = alembic_config(db_url)
            config.attributes["connection"] = connection
            command.downgrade(config, "0015")
        assert snapshot_rows() == [("rsum-single", version)]
        with engine.begin() as connection:
            config = alembic_config(db_url)
            config.attributes["connection"] = connection
            command.upgrade(config, "head")
        assert sorted(snapshot_rows()) == [("alpha", "rsum-single", version), ("beta", "rsum-single", version)]
    finally:
        engine.dispose()
