"""runs.data_version: a per-run counter every insert or deletion of the run's judgments, and every write of its
human ratings and label queue, bumps in the same transaction (database triggers), so the report cache reads the
state of a run in one primary-key read plus one index seek instead of counting its judgments (issue 39)

Updates of judgments (claims, verdicts, retries, cancels) are not counted here: each stamps ``updated_at``, whose
maximum is one seek in ``ix_judgments_run_updated``; a trigger on them would take the run's row lock on the workers'
hot path (one statement per verdict).

Revision ID: 0023
Revises: 0022
"""

import sqlalchemy as sa
from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None

# (table, events): the writes that bump their run's data_version
_WATCHED = (
    ("judgments", ("INSERT", "DELETE")),
    ("human_ratings", ("INSERT", "UPDATE", "DELETE")),
    ("label_queue_items", ("INSERT", "UPDATE", "DELETE")),
)


def upgrade() -> None:
    op.add_column("runs", sa.Column("data_version", sa.Integer(), nullable=False, server_default="0"))
    if op.get_bind().dialect.name == "postgresql":
        op.execute(
            """
            CREATE FUNCTION dj_bump_run_data_version() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                UPDATE runs SET data_version = data_version + 1
                WHERE id IN (SELECT DISTINCT run_id FROM changed_rows);
                RETURN NULL;
            END $$
            """
        )
        for table, events in _WATCHED:
            for event in events:
                side = "OLD" if event == "DELETE" else "NEW"
                op.execute(
                    f"CREATE TRIGGER dj_{table}_{event.lower()}_version AFTER {event} ON {table} "
                    f"REFERENCING {side} TABLE AS changed_rows FOR EACH STATEMENT "
                    "EXECUTE FUNCTION dj_bump_run_data_version()"
                )
        return
    # SQLite has row triggers only (one writer at a time: no lock to contend for)
    for table, events in _WATCHED:
        for event in events:
            row = "OLD" if event == "DELETE" else "NEW"
            op.execute(
                f"CREATE TRIGGER dj_{table}_{event.lower()}_version AFTER {event} ON {table} FOR EACH ROW BEGIN "
                f"UPDATE runs SET data_version = data_version + 1 WHERE id = {row}.run_id; END"
            )


def downgrade() -> None:
    for table, events in _WATCHED:
        for event in events:
            if op.get_bind().dialect.name == "postgresql":
                op.execute(f"DROP TRIGGER IF EXISTS dj_{table}_{event.lower()}_version ON {table}")
            else:
                op.execute(f"DROP TRIGGER IF EXISTS dj_{table}_{event.lower()}_version")
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP FUNCTION IF EXISTS dj_bump_run_data_version()")
    op.drop_column("runs", "data_version")
