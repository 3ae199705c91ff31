"""judgments remember where an imported verdict came from (its file's SHA-256) and the scale of an imported score

Revision ID: 0007
Revises: 0006
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("judgments", sa.Column("source", sa.String(length=64), nullable=True))
    op.add_column("judgments", sa.Column("scale_min", sa.Float(), nullable=True))
    op.add_column("judgments", sa.Column("scale_max", sa.Float(), nullable=True))


def downgrade() -> None:
    op.drop_column("judgments", "scale_max")
    op.drop_column("judgments", "scale_min")
    op.drop_column("judgments", "source")
