"""judgments (run_id, mode, status, item_key, system_a, system_b, aspect, judge, order, outcome, preference): the
order outcomes of a run's pairwise keys grouped along one covering index, in key order (issue 39, the dashboard)

Revision ID: 0023
Revises: 0022
"""

from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None

COLUMNS = ["run_id", "mode", "status", "item_key", "system_a", "system_b", "aspect", "judge", "order", "outcome"]


def upgrade() -> None:
    op.create_index("ix_judgments_order_outcomes", "judgments", [*COLUMNS, "preference"])


def downgrade() -> None:
    op.drop_index("ix_judgments_order_outcomes", "judgments")
