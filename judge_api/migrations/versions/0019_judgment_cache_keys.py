"""judgment_cache_keys: the re-ask cache keys a judgment used, so deleting its run removes their entries (issue 43)

Revision ID: 0019
Revises: 0018
"""

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "judgment_cache_keys",
        sa.Column("judgment_id", sa.Integer(), sa.ForeignKey("judgments.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("key", sa.String(64), primary_key=True),
    )
    op.create_index("ix_judgment_cache_keys_key", "judgment_cache_keys", ["key"])


def downgrade() -> None:
    op.drop_index("ix_judgment_cache_keys_key", "judgment_cache_keys")
    op.drop_table("judgment_cache_keys")
