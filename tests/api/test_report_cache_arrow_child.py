"""Issue 39: a run on SQLite read by ADBC's driver in a child process (``repository.frame_columns``) keeps every
promise of the report cache: a write, a retry, a rating, a deletion is in the next report. The same tests as
``test_report_cache.py``, every run read through the child whatever its size."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from judge_api.repository import frame_columns
from tests.api.test_report_cache import (
    test_a_rating_import_and_a_changed_rating_are_in_the_next_report,
    test_a_retry_is_in_the_next_report,
    test_a_second_call_is_served_from_the_cache_with_the_same_figures,
    test_a_verdict_written_after_the_report_is_in_the_next_one,
    test_deleted_judgments_are_not_in_the_next_report,
)

__all__ = [
    "test_a_rating_import_and_a_changed_rating_are_in_the_next_report",
    "test_a_retry_is_in_the_next_report",
    "test_a_second_call_is_served_from_the_cache_with_the_same_figures",
    "test_a_verdict_written_after_the_report_is_in_the_next_one",
    "test_deleted_judgments_are_not_in_the_next_report",
]


@pytest.fixture(autouse=True)
def every_run_through_the_child(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[bool]]:
    served: list[bool] = []
    real = frame_columns.read_sqlite_arrow

    def spy(*args: object, **kwargs: object) -> object:
        table = real(*args, **kwargs)  # type: ignore[arg-type]
        served.append(table is not None)
        return table

    monkeypatch.setattr(frame_columns, "ARROW_CHILD_MIN_ROWS", 0)
    monkeypatch.setattr(frame_columns, "read_sqlite_arrow", spy)
    yield served
    assert served and all(served), served  # the child read every report's frame
