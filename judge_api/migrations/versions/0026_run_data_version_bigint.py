"""runs.data_version as a 64-bit integer (review r39): every inserted judgment of a run bumps it (one statement per
row under psycopg's executemany, one row trigger per row on SQLite), and a monitor's run is never done, so a 32-bit
counter on PostgreSQL overflows after 2^31 writes and from then on every insert of the run's judgments, ratings or
label queue fails ("integer out of range"). SQLite's integers are 64-bit already.

Revision ID: 0026
Revises: 0025
"""

import sqlalchemy as sa
from alembic import op

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.alter_column("runs", "data_version", type_=sa.BigInteger(), existing_type=sa.Integer())


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("UPDATE runs SET data_version = data_version % 2147483647")
        op.alter_column("runs", "data_version", type_=sa.Integer(), existing_type=sa.BigInteger())
