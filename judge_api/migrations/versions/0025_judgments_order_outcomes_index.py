"""judgments: two covering indexes for the dashboard's reads at 1M judgments (issue 39).

* (run_id, mode, status, item_key, system_a, system_b, aspect, judge, order, outcome, preference): the order
  outcomes of a run's pairwise keys grouped along the index, in key order, without reading the rows;
* (run_id, status, cost_usd, input_tokens, output_tokens, provider_calls, cached, id): a run's counts and totals
  (``GET /v1/runs``, ``GET /v1/runs/{id}``, read by every page's sidebar) without reading the rows.

Revision ID: 0025
Revises: 0022
"""

from alembic import op

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None

COLUMNS = ["run_id", "mode", "status", "item_key", "system_a", "system_b", "aspect", "judge", "order", "outcome"]


COUNTS = ["run_id", "status", "cost_usd", "input_tokens", "output_tokens", "provider_calls", "cached", "id"]


def upgrade() -> None:
    op.create_index("ix_judgments_order_outcomes", "judgments", [*COLUMNS, "preference"])
    op.create_index("ix_judgments_run_counts", "judgments", COUNTS)


def downgrade() -> None:
    op.drop_index("ix_judgments_run_counts", "judgments")
    op.drop_index("ix_judgments_order_outcomes", "judgments")
