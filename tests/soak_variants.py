"""Long variants of end-to-end tests that run with the soak tests (``./scripts/test.sh -m soak``), not in the default
run that CI takes: each keeps a sibling in the default run that holds the same promise (the reason names it). The
default run's time is measured with ``--durations`` (docs/operations.md, "Test suite time"); these were the slowest
of ``tests/faults`` and ``tests/e2e`` whose promise another default test already holds."""

from __future__ import annotations

SOAK_VARIANTS: dict[str, str] = {
    "tests/faults/test_recovery.py::test_five_redis_restarts_mid_run_record_every_call_the_provider_saw": (
        "five restarts in one run; one restart mid-run stays in the default run "
        "(tests/faults/test_queue_faults.py::test_redis_restart_mid_run)"
    ),
    "tests/e2e/test_local_model_e2e.py::test_local_smollm2_judges_through_the_real_stack[json-schema]": (
        "the local model with structured output; the free-text rubric through the same stack stays in the default run"
    ),
    "tests/faults/test_idempotent_submit.py::test_api_killed_between_storing_and_answering_then_retried[sqlite]": (
        "four API kills on SQLite; the same on PostgreSQL stays in the default run"
    ),
    "tests/faults/test_service_faults.py::test_api_sigkill_mid_submit[sqlite]": (
        "the API killed mid-submit on SQLite; the same on PostgreSQL stays in the default run"
    ),
    "tests/e2e/test_alerts_e2e.py::"
    "test_planted_regression_fires_one_signed_alert_no_change_fires_none_and_it_resolves[sqlite]": (
        "alerts end to end on SQLite; the same on PostgreSQL stays in the default run (the rules on both databases: "
        "tests/api)"
    ),
    "tests/e2e/test_webhooks_e2e.py::"
    "test_run_callback_arrives_once_signed_after_500s_and_private_urls_are_refused[sqlite]": (
        "the run callback end to end on SQLite; the same on PostgreSQL stays in the default run"
    ),
    "tests/e2e/test_cost_e2e.py::test_anthropic_breakpoints_bill_and_estimate[sqlite]": (
        "Anthropic cache breakpoints billed on SQLite; the same on PostgreSQL stays in the default run"
    ),
    "tests/e2e/test_deletion_e2e.py::test_a_run_pruned_mid_flight_stops_and_leaves_nothing": (
        "prune deletes through the same path as a run deleted mid-flight, which stays in the default run"
    ),
}
