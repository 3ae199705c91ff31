"""the running state of monitors' compare rules, kept across retention (issue 36 finding 1)

Only the table: an existing rule's state is computed at its first evaluation after the upgrade from the verdicts
still kept, which is what the rule tested at its last look before the upgrade (the stream it read then), so its
behaviour carries on; from there on the state is updated with new verdicts only.

Revision ID: 0017
Revises: 0016
"""

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "monitor_rule_states",
        sa.Column("monitor_id", sa.String(32), sa.ForeignKey("monitors.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("rule", sa.String(64), primary_key=True),
        sa.Column("definition", sa.String(16), nullable=False),
        sa.Column("rubric_id", sa.String(64), nullable=False),
        sa.Column("aspect", sa.String(64), nullable=False),
        sa.Column("judge", sa.String(300), nullable=False),
        sa.Column("start_id", sa.Integer, nullable=False),
        sa.Column("counted_id", sa.Integer, nullable=False),
        sa.Column("state", sa.JSON, nullable=False),
        sa.Column("worst", sa.JSON, nullable=False),
        sa.Column("updated_at", sa.DateTime, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("monitor_rule_states")
