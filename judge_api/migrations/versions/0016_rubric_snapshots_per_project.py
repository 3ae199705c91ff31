"""rubric snapshots per project: a snapshot one project stores (an imported bundle's too) is never another project's
prompt (issue 42, finding 4). Each stored snapshot is copied to every project whose runs were planned with it.

Revision ID: 0016
Revises: 0015
"""

from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

# the rows are moved through a table without keys (no table is renamed: PostgreSQL would keep the old primary key's
# index name, which the new table's primary key needs)
_HELD = "rubric_snapshots_held"


def _snapshot_columns(with_project: bool) -> list[sa.Column[Any]]:
    project: list[sa.Column[Any]] = [sa.Column("project_id", sa.String(length=64), nullable=False)]
    return [
        *(project if with_project else []),
        sa.Column("rubric_id", sa.String(length=64), nullable=False),
        sa.Column("version", sa.String(length=32), nullable=False),
        sa.Column("content", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
    ]


def upgrade() -> None:
    op.create_table(_HELD, *_snapshot_columns(with_project=True))
    op.execute(
        f"INSERT INTO {_HELD} (project_id, rubric_id, version, content, created_at) "
        "SELECT used.project_id, s.rubric_id, s.version, s.content, s.created_at "
        "FROM rubric_snapshots s JOIN ("
        "  SELECT DISTINCT r.project_id, j.rubric_id, j.rubric_version FROM judgments j JOIN runs r ON r.id = j.run_id"
        ") used ON used.rubric_id = s.rubric_id AND used.rubric_version = s.version"
    )
    op.drop_table("rubric_snapshots")
    op.create_table(
        "rubric_snapshots",
        *_snapshot_columns(with_project=True),
        sa.PrimaryKeyConstraint("project_id", "rubric_id", "version"),
    )
    op.execute(
        f"INSERT INTO rubric_snapshots (project_id, rubric_id, version, content, created_at) "
        f"SELECT project_id, rubric_id, version, content, created_at FROM {_HELD}"
    )
    op.drop_table(_HELD)


def downgrade() -> None:
    op.create_table(_HELD, *_snapshot_columns(with_project=False))
    op.execute(
        f"INSERT INTO {_HELD} (rubric_id, version, content, created_at) "
        "SELECT s.rubric_id, s.version, s.content, s.created_at FROM rubric_snapshots s "
        "WHERE s.project_id = (SELECT MIN(o.project_id) FROM rubric_snapshots o "
        "WHERE o.rubric_id = s.rubric_id AND o.version = s.version)"
    )
    op.drop_table("rubric_snapshots")
    op.create_table(
        "rubric_snapshots", *_snapshot_columns(with_project=False), sa.PrimaryKeyConstraint("rubric_id", "version")
    )
    op.execute(
        f"INSERT INTO rubric_snapshots (rubric_id, version, content, created_at) "
        f"SELECT rubric_id, version, content, created_at FROM {_HELD}"
    )
    op.drop_table(_HELD)
