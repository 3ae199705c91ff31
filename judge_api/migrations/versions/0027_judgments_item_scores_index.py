"""judgments: ``score`` joins the covering index of the dashboard's item-level reads (issue 39, Compare runs).

``ix_judgments_order_outcomes`` (run_id, mode, status, item_key, system_a, system_b, aspect, judge, order, outcome,
preference) gains ``score``: a run's single scores summed per (item, system, aspect, judge) (``/item-scores``,
``/score-deltas``, ``/worse-items``) are then grouped along the index, in key order, without reading the rows, as the
pairwise order outcomes already were. One index serves both (a second one would cost every insert again).

Revision ID: 0027
Revises: 0026
"""

from alembic import op

revision = "0027"
down_revision = "0026"
branch_labels = None
depends_on = None

COLUMNS = ["run_id", "mode", "status", "item_key", "system_a", "system_b", "aspect", "judge", "order", "outcome"]


def upgrade() -> None:
    op.drop_index("ix_judgments_order_outcomes", "judgments")
    op.create_index("ix_judgments_order_outcomes", "judgments", [*COLUMNS, "preference", "score"])


def downgrade() -> None:
    op.drop_index("ix_judgments_order_outcomes", "judgments")
    op.create_index("ix_judgments_order_outcomes", "judgments", [*COLUMNS, "preference"])
