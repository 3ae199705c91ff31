"""judgments (run_id, id): keyset pages of a run's judgments, the JSON cursor and the streaming exports (issue 39)

Revision ID: 0022
Revises: 0021
"""

from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_judgments_run_id_id", "judgments", ["run_id", "id"])


def downgrade() -> None:
    op.drop_index("ix_judgments_run_id_id", "judgments")
