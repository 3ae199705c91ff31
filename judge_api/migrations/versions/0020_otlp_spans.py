"""otlp_spans: the LLM spans received over OTLP, kept as their conversation's history and, while their earlier turns
are missing, waiting to be judged; projects.default_monitor_id: where spans naming no monitor go; monitors.otlp_stats:
the day's counts of spans received, skipped and why (issue 38)

Revision ID: 0020
Revises: 0019
"""

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "otlp_spans",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("monitor_id", sa.String(32), sa.ForeignKey("monitors.id", ondelete="CASCADE"), nullable=False),
        sa.Column("response_id", sa.String(200), nullable=False),
        sa.Column("conversation_id", sa.String(200), nullable=False, server_default=""),
        sa.Column("started_at", sa.DateTime(), nullable=False),
        sa.Column("received_at", sa.DateTime(), nullable=False),
        sa.Column("release_after", sa.DateTime(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("call", sa.JSON(), nullable=False),
        sa.UniqueConstraint("monitor_id", "response_id", name="uq_otlp_spans_response"),
    )
    op.create_index("ix_otlp_spans_conversation", "otlp_spans", ["monitor_id", "conversation_id", "started_at"])
    op.create_index("ix_otlp_spans_waiting", "otlp_spans", ["status", "release_after"])
    op.create_index("ix_otlp_spans_received", "otlp_spans", ["received_at"])
    with op.batch_alter_table("projects") as batch:
        batch.add_column(sa.Column("default_monitor_id", sa.String(32), nullable=True))
    with op.batch_alter_table("monitors") as batch:
        batch.add_column(sa.Column("otlp_stats", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("monitors") as batch:
        batch.drop_column("otlp_stats")
    with op.batch_alter_table("projects") as batch:
        batch.drop_column("default_monitor_id")
    op.drop_index("ix_otlp_spans_received", "otlp_spans")
    op.drop_index("ix_otlp_spans_waiting", "otlp_spans")
    op.drop_index("ix_otlp_spans_conversation", "otlp_spans")
    op.drop_table("otlp_spans")
