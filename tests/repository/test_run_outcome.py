"""Issue 27.2: a finished run's outcome (GET /v1/runs/{id} ``outcome``) by its judgments' statuses."""

from __future__ import annotations

import pytest

from judge_api.repository.runs import run_outcome
from judge_api.schemas import RunCounts


@pytest.mark.parametrize(
    ("counts", "outcome"),
    [
        ({"done": 24}, "ok"),
        ({"done": 20, "cancelled": 4}, "ok"),  # cancelled past a budget: the run is not partial for it
        ({"done": 23, "unparseable": 1}, "partial"),
        ({"done": 1, "failed": 23}, "partial"),
        ({"unparseable": 24}, "failed"),  # the run: 24 of 24 unparseable
        ({"failed": 3, "unparseable": 2}, "failed"),
        ({"cancelled": 5}, "failed"),  # nothing came back at all
        ({}, "ok"),  # nothing was planned
    ],
)
def test_run_outcome(counts: dict[str, int], outcome: str) -> None:
    assert run_outcome(RunCounts(**counts)) == outcome
