"""runs with systems: the generation tasks (one per item x system) and when an item's judgments were released

Revision ID: 0008
Revises: 0007
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "generations",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("run_id", sa.String(length=32), nullable=False),
        sa.Column("item_pk", sa.Integer(), nullable=False),
        sa.Column("item_key", sa.String(length=200), nullable=False),
        sa.Column("system", sa.String(length=100), nullable=False),
        sa.Column("responder", sa.Text(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("claim_token", sa.String(length=32), nullable=True),
        sa.Column("claimed_at", sa.DateTime(), nullable=True),
        sa.Column("enqueued_at", sa.DateTime(), nullable=True),
        sa.Column("response", sa.Text(), nullable=True),
        sa.Column("memory", sa.Text(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("details", sa.JSON(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=True),
        sa.ForeignKeyConstraint(["item_pk"], ["items.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("item_pk", "system", name="uq_generations_item_system"),
    )
    op.create_index("ix_generations_item_pk", "generations", ["item_pk"])
    op.create_index("ix_generations_run_status", "generations", ["run_id", "status"])
    op.add_column("items", sa.Column("released_at", sa.DateTime(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("items") as batch_op:
        batch_op.drop_column("released_at")
    op.drop_index("ix_generations_run_status", table_name="generations")
    op.drop_index("ix_generations_item_pk", table_name="generations")
    op.drop_table("generations")
