"""judge cache keeps the token log-probabilities of a reply's numbers (expected scoring)

Revision ID: 0006
Revises: 0005
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("judge_cache", sa.Column("logprobs", sa.JSON(), nullable=True))


def downgrade() -> None:
    op.drop_column("judge_cache", "logprobs")
