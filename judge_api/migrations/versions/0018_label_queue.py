"""label queues: the items drawn for human labels, with their inclusion probabilities (issue 37)

Revision ID: 0018
Revises: 0017
"""

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "label_queue_items",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("run_id", sa.String(32), sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("item_key", sa.String(200), nullable=False),
        sa.Column("position", sa.Integer(), nullable=True),
        sa.Column("inclusion_probability", sa.Float(), nullable=False),
        sa.Column("strategy", sa.String(16), nullable=False),
        sa.Column("seed", sa.BigInteger(), nullable=False),
        sa.Column("n_requested", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.UniqueConstraint("run_id", "item_key", name="uq_label_queue_item"),
    )
    op.create_index("ix_label_queue_items_run_id", "label_queue_items", ["run_id"])


def downgrade() -> None:
    op.drop_index("ix_label_queue_items_run_id", "label_queue_items")
    op.drop_table("label_queue_items")
