"""Storage: the reads and writes of runs, items, judgments, the judge cache and human ratings. A few modules outside
it still build their own SQL statements; docs/architecture.md names each, and tests/unit/test_import_rules.py holds
the list to the code.

Split by who uses it:

- ``runs``, ``projects``, ``rubric_snapshots``, ``ratings``, ``verdicts`` (imported verdicts), ``frames``,
  ``idempotency_keys``, ``label_queue``: the API's (and the CLI's) reads and writes.
  Their names are re-exported here, so routes call ``repository.create_run`` and the like.
- ``claims``: the workers' claim/write path. Workers import it directly (``from judge_api.repository import claims``).
- ``cache``: the judge cache, used by the workers' batch path and the verdict writer.
- ``report_cache``: the reports ``GET /v1/runs/{id}/report`` keeps per state of the run (re-exported here).
- ``sql``: dialect helpers the modules share.

Writes that belong together happen in one transaction (a run, its items and its judgments are stored together or
not at all). A verdict write is a compare-and-set on the claim token, so a redelivered or duplicated task can never
write a second verdict.
"""

from judge_api.repository.frames import (
    JUDGMENT_FRAME_COLUMNS,
    RATING_FRAME_COLUMNS,
    fact_labels_frame,
    judgments_frame,
    judgments_parts,
    memory_audit_frame,
    ratings_frame,
)
from judge_api.repository.idempotency_keys import (
    find_idempotency_key,
    prune_idempotency_keys,
    record_idempotency_key,
)
from judge_api.repository.label_queue import LabelQueue, label_queue, store_label_queue
from judge_api.repository.projects import DEFAULT_PROJECT, ensure_project
from judge_api.repository.ratings import item_systems, upsert_ratings
from judge_api.repository.report_cache import (
    CachedReport,
    cached_report,
    drop_reports,
    params_key,
    run_state,
    store_report,
)
from judge_api.repository.rubric_snapshots import (
    rubric_content,
    rubric_snapshot,
    rubric_versions,
    store_rubric_snapshots,
)
from judge_api.repository.runs import (
    JUDGMENT_FILTERS,
    cancel_pending,
    create_run,
    get_items,
    get_run,
    item_pks_for,
    item_references,
    judgment_out,
    list_judgments,
    list_runs,
    new_run_id,
    poll_run,
    retry_failed,
    run_counts,
    run_item_keys,
    summarize_runs,
)
from judge_api.repository.verdicts import VerdictImportError, import_verdicts, imported_judges

__all__ = [
    "DEFAULT_PROJECT",
    "JUDGMENT_FILTERS",
    "JUDGMENT_FRAME_COLUMNS",
    "RATING_FRAME_COLUMNS",
    "CachedReport",
    "LabelQueue",
    "VerdictImportError",
    "cached_report",
    "cancel_pending",
    "create_run",
    "drop_reports",
    "ensure_project",
    "fact_labels_frame",
    "find_idempotency_key",
    "get_items",
    "get_run",
    "import_verdicts",
    "imported_judges",
    "item_pks_for",
    "item_references",
    "item_systems",
    "judgment_out",
    "judgments_frame",
    "judgments_parts",
    "label_queue",
    "list_judgments",
    "list_runs",
    "memory_audit_frame",
    "new_run_id",
    "params_key",
    "poll_run",
    "prune_idempotency_keys",
    "ratings_frame",
    "record_idempotency_key",
    "retry_failed",
    "rubric_content",
    "rubric_snapshot",
    "rubric_versions",
    "run_counts",
    "run_item_keys",
    "run_state",
    "store_label_queue",
    "store_report",
    "store_rubric_snapshots",
    "summarize_runs",
    "upsert_ratings",
]
