"""Review r39: the hourly sums' triggers with verdict details of every JSON shape (not an object, facts not a list,
a rate that is a string, a boolean, a huge or tiny number), written, retried away and written again: the series is
the one computed from the stored verdicts, and no write fails."""

from __future__ import annotations

from typing import Any

from sqlalchemy import update

from judge_api.db import session_scope
from judge_api.models import Judgment
from tests.repository.test_monitor_hourly import (
    T0,
    add_judgments,
    add_response,
    all_views,
    assert_same,
    hourly_db,  # noqa: F401 (a fixture)
    judgment,
    new_monitor,
    new_series,
    old_series,
)

SHAPES: list[Any] = [
    [1, 2],
    "text",
    5,
    None,
    {"facts": "x", "contradiction_rate": 0.5},
    {"facts": [], "contradiction_rate": "0.5"},
    {"facts": [], "contradiction_rate": True},
    {"facts": [{}], "contradiction_rate": 1e300},
    {"facts": [{}], "contradiction_rate": 5e-324},
    {"facts": [{}], "contradiction_rate": 0.25},
]


def test_details_of_every_shape_keep_the_series_of_the_stored_verdicts(hourly_db: str) -> None:  # noqa: F811
    with session_scope() as session:
        monitor = new_monitor(session)
        rows = []
        for i, details in enumerate(SHAPES):
            pk = add_response(session, monitor, f"r{i}", T0, version=f"v{i % 3}")
            rows.append(judgment(monitor.run_id, pk, f"r{i}", score=float(i), details=details))
        ids = add_judgments(session, rows)
    with session_scope() as session:
        session.execute(update(Judgment).where(Judgment.id.in_(ids[::2])).values(status="pending"))
    with session_scope() as session:
        session.execute(update(Judgment).where(Judgment.id.in_(ids[::4])).values(status="done"))
    with session_scope() as session:
        for bucket, by, filters in all_views(session, monitor):
            assert_same(
                new_series(session, monitor, bucket, by, filters), old_series(session, monitor, bucket, by, filters)
            )
