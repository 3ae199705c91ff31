"""report_cache: a run's report per state of the run and query, and the index that reads a run's last write
(issue 39)

Revision ID: 0021
Revises: 0020
"""

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "report_cache",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("run_id", sa.String(32), sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("project_id", sa.String(100), nullable=False),
        sa.Column("params_key", sa.String(64), nullable=False),
        sa.Column("state", sa.Text(), nullable=False),
        sa.Column("computed_at", sa.DateTime(), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.UniqueConstraint("run_id", "params_key", name="uq_report_cache_run_params"),
    )
    op.create_index("ix_report_cache_run_id", "report_cache", ["run_id"])
    op.create_index("ix_judgments_run_updated", "judgments", ["run_id", "updated_at"])


def downgrade() -> None:
    op.drop_index("ix_judgments_run_updated", "judgments")
    op.drop_index("ix_report_cache_run_id", "report_cache")
    op.drop_table("report_cache")
