"""judgments.cache_key: the judge-cache entry a judgment's verdict came from (deleting a run removes the entries
only that run used)

Revision ID: 0005
Revises: 0004
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("judgments") as batch:
        batch.add_column(sa.Column("cache_key", sa.String(length=64), nullable=True))
        batch.create_index("ix_judgments_cache_key", ["cache_key"])


def downgrade() -> None:
    with op.batch_alter_table("judgments") as batch:
        batch.drop_index("ix_judgments_cache_key")
        batch.drop_column("cache_key")
