"""adaptive plans: whether a run may still plan, its planning round (compare-and-set) and the state of its adaptive ranking

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("plan_open", sa.Boolean(), nullable=False, server_default=sa.false()))
        batch.create_index("ix_runs_plan_open", ["plan_open"])
        batch.add_column(sa.Column("plan_round", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("plan_state", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("plan_state")
        batch.drop_column("plan_round")
        batch.drop_index("ix_runs_plan_open")
        batch.drop_column("plan_open")
