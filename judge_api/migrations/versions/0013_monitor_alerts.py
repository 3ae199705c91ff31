"""monitor alerts (issue 25.4): one row per alert of a monitor's rule, with its evidence and resolution

Revision ID: 0013
Revises: 0012
"""

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "monitor_alerts",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("monitor_id", sa.String(length=32), nullable=False),
        sa.Column("rule", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("definition", sa.String(length=16), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("epoch", sa.Integer(), nullable=False),
        sa.Column("start_id", sa.Integer(), nullable=False),
        sa.Column("last_id", sa.Integer(), nullable=False),
        sa.Column("resolved_last_id", sa.Integer(), nullable=True),
        sa.Column("opened_at", sa.DateTime(), nullable=False),
        sa.Column("resolved_at", sa.DateTime(), nullable=True),
        sa.Column("evidence", sa.JSON(), nullable=False),
        sa.Column("resolution", sa.JSON(), nullable=True),
        sa.ForeignKeyConstraint(["monitor_id"], ["monitors.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("monitor_id", "rule", "definition", "epoch", "start_id", name="uq_monitor_alerts_stream"),
    )
    op.create_index("ix_monitor_alerts_rule", "monitor_alerts", ["monitor_id", "rule", "opened_at"])


def downgrade() -> None:
    op.drop_index("ix_monitor_alerts_rule", table_name="monitor_alerts")
    op.drop_table("monitor_alerts")
