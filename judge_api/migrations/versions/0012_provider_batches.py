"""batch execution (issue 24 item 1): a run's execution mode and cancellation, provider batches and the judgments
each holds

Revision ID: 0012
Revises: 0011
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("execution", sa.String(16), nullable=False, server_default="realtime"))
        batch.add_column(sa.Column("cancelled_at", sa.DateTime(), nullable=True))
    op.create_table(
        "provider_batches",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("run_id", sa.String(32), sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("provider", sa.String(32), nullable=False),
        sa.Column("judge", sa.String(300), nullable=False),
        sa.Column("provider_batch_id", sa.String(200), nullable=True),
        sa.Column("input_file_id", sa.String(200), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("provider_status", sa.String(32), nullable=True),
        sa.Column("requests", sa.Integer(), nullable=False),
        sa.Column("judgments", sa.Integer(), nullable=False),
        sa.Column("result_counts", sa.JSON(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("submitted_at", sa.DateTime(), nullable=True),
        sa.Column("ended_at", sa.DateTime(), nullable=True),
        sa.Column("next_poll_at", sa.DateTime(), nullable=True),
        sa.Column("cancel_requested_at", sa.DateTime(), nullable=True),
        sa.Column("cancel_sent_at", sa.DateTime(), nullable=True),
    )
    op.create_index("ix_provider_batches_run_id", "provider_batches", ["run_id"])
    op.create_index("ix_provider_batches_status_poll", "provider_batches", ["status", "next_poll_at"])
    op.create_table(
        "provider_batch_judgments",
        sa.Column(
            "batch_pk",
            sa.Integer(),
            sa.ForeignKey("provider_batches.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("judgment_id", sa.Integer(), sa.ForeignKey("judgments.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("custom_id", sa.String(64), nullable=False),
    )
    op.create_index("ix_provider_batch_judgments_judgment_id", "provider_batch_judgments", ["judgment_id"])


def downgrade() -> None:
    op.drop_index("ix_provider_batch_judgments_judgment_id", "provider_batch_judgments")
    op.drop_table("provider_batch_judgments")
    op.drop_index("ix_provider_batches_status_poll", "provider_batches")
    op.drop_index("ix_provider_batches_run_id", "provider_batches")
    op.drop_table("provider_batches")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("cancelled_at")
        batch.drop_column("execution")
