"""each monitor judgment's expected cost while it waits (issue 25: a daily budget that counts the queued judgments)

Revision ID: 0014
Revises: 0013
"""

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("judgments") as batch:
        batch.add_column(sa.Column("estimated_cost_usd", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("judgments") as batch:
        batch.drop_column("estimated_cost_usd")
