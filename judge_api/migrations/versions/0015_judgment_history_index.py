"""a run's judgments by (rubric, version, judge), newest first: the estimate's calibration probes a project's most
recent runs for their succeeded judgments of a rubric version and judge (judge_api.repository.history)

Revision ID: 0015
Revises: 0014
"""

from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_judgments_history", "judgments", ["run_id", "rubric_id", "rubric_version", "judge", "id"])


def downgrade() -> None:
    op.drop_index("ix_judgments_history", "judgments")
