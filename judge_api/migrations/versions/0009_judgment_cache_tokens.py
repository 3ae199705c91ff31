"""each judgment's prompt-cache tokens and its bill against list price (issue 24: a bill that equals the provider's)

Revision ID: 0009
Revises: 0008
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

COLUMNS = (
    ("cached_input_tokens", sa.Integer()),
    ("cache_write_tokens", sa.Integer()),
    ("list_cost_usd", sa.Float()),
    ("cache_saved_usd", sa.Float()),
)


def upgrade() -> None:
    with op.batch_alter_table("judgments") as batch:
        for name, kind in COLUMNS:
            batch.add_column(sa.Column(name, kind, nullable=False, server_default="0"))
    # rows judged before: their cost was list price, nothing was read from a cache
    op.execute("UPDATE judgments SET list_cost_usd = cost_usd")


def downgrade() -> None:
    with op.batch_alter_table("judgments") as batch:
        for name, _ in reversed(COLUMNS):
            batch.drop_column(name)
