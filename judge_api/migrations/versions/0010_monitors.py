"""monitors (issue 25): the monitors, every response posted to them, the hourly sums retention keeps, the internal
run of a monitor, and an index for a monitor's spend today

Revision ID: 0010
Revises: 0009
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "monitors",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("project_id", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("run_id", sa.String(length=32), nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("sample_rate", sa.Float(), nullable=False),
        sa.Column("daily_budget_usd", sa.Float(), nullable=True),
        sa.Column("retention_days", sa.Integer(), nullable=True),
        sa.Column("alerts", sa.JSON(), nullable=False),
        sa.Column("callback_url", sa.Text(), nullable=True),
        sa.Column("callback_secret", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(["project_id"], ["projects.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_monitors_project_id", "monitors", ["project_id"])
    op.create_table(
        "monitor_responses",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("monitor_id", sa.String(length=32), nullable=False),
        sa.Column("response_id", sa.String(length=200), nullable=False),
        sa.Column("system", sa.String(length=100), nullable=False),
        sa.Column("version", sa.String(length=100), nullable=False),
        sa.Column("segment", sa.String(length=100), nullable=False),
        sa.Column("ts", sa.DateTime(), nullable=False),
        sa.Column("received_at", sa.DateTime(), nullable=False),
        sa.Column("sampled", sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(["monitor_id"], ["monitors.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("monitor_id", "response_id", name="uq_monitor_responses_id"),
    )
    op.create_index("ix_monitor_responses_received", "monitor_responses", ["monitor_id", "received_at"])
    op.create_table(
        "monitor_hourly",
        sa.Column("monitor_id", sa.String(length=32), nullable=False),
        sa.Column("hour_start", sa.DateTime(), nullable=False),
        sa.Column("system", sa.String(length=100), nullable=False),
        sa.Column("version", sa.String(length=100), nullable=False),
        sa.Column("segment", sa.String(length=100), nullable=False),
        sa.Column("rubric_id", sa.String(length=64), nullable=False),
        sa.Column("aspect", sa.String(length=64), nullable=False),
        sa.Column("judge", sa.String(length=300), nullable=False),
        sa.Column("n", sa.Integer(), nullable=False),
        sa.Column("total", sa.Float(), nullable=False),
        sa.Column("total_sq", sa.Float(), nullable=False),
        sa.Column("fact_n", sa.Integer(), nullable=False),
        sa.Column("fact_total", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["monitor_id"], ["monitors.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint(
            "monitor_id", "hour_start", "system", "version", "segment", "rubric_id", "aspect", "judge"
        ),
    )
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("monitor_id", sa.String(length=32), nullable=True))
    op.create_index("ix_runs_monitor_id", "runs", ["monitor_id"])
    op.create_index("ix_judgments_run_created", "judgments", ["run_id", "created_at"])


def downgrade() -> None:
    op.drop_index("ix_judgments_run_created", table_name="judgments")
    op.drop_index("ix_runs_monitor_id", table_name="runs")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("monitor_id")
    op.drop_table("monitor_hourly")
    op.drop_index("ix_monitor_responses_received", table_name="monitor_responses")
    op.drop_table("monitor_responses")
    op.drop_index("ix_monitors_project_id", table_name="monitors")
    op.drop_table("monitors")
