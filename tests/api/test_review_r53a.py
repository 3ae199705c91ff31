"""Review r53a: the frame read in parts through GET /v1/runs/{id}/report (SQLite children, PostgreSQL snapshot
parts). See tests/repository/test_review_r53a.py for the findings."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import select

from judge_api.config import reset_settings_cache
from judge_api.db import session_scope
from judge_api.models import Run
from judge_api.repository import frame_columns, frames
from tests.api.conftest import ApiFactory
from tests.api.test_report_cache import _figures, _judge, _judgment_ids, _report, _run


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_the_report_of_a_finished_run_read_in_parts_equals_one_readers(
    api_factory: ApiFactory, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, backend: str
) -> None:
    """Checks whether the API path actually reads in parts (the route's session must be unwritten on PostgreSQL,
    outside a transaction on SQLite) and that the report is the same as one reader's."""
    url = request.getfixturevalue("pg_url") if backend == "postgresql" else None
    api = api_factory(database_url=url, DJ_REPORT_CACHE="false", DJ_REPORT_FRESH_SECONDS="0")
    monkeypatch.setattr(frame_columns, "ARROW_CHILD_MIN_ROWS", 0)
    monkeypatch.setattr(frame_columns, "PARALLEL_MIN_ROWS", 0)
    monkeypatch.setattr(frames, "available_cpus", lambda: 64)  # the parts asked, whatever this machine's CPUs
    used: list[str] = []
    real_sqlite = frame_columns.read_sqlite_parts
    real_pg = frame_columns.read_postgresql_parts

    def spy_sqlite(*args: Any) -> Any:
        read = real_sqlite(*args)
        used.append("sqlite-parts" if read is not None else "sqlite-parts-failed")
        return read

    def spy_pg(*args: Any) -> Any:
        read = real_pg(*args)
        used.append("pg-parts" if read is not None else "pg-parts-declined")
        return read

    monkeypatch.setattr(frame_columns, "read_sqlite_parts", spy_sqlite)
    monkeypatch.setattr(frame_columns, "read_postgresql_parts", spy_pg)
    run_id = _run(api, 15)
    _judge(_judgment_ids(run_id), seed=3)
    assert api.client.get(f"/v1/runs/{run_id}").status_code == 200  # the poll stamps it finished
    with session_scope() as session:
        assert session.scalar(select(Run.finished_at).where(Run.id == run_id)) is not None
    monkeypatch.setenv("DJ_FRAME_READERS", "1")
    reset_settings_cache()
    one = _report(api, run_id, n_boot=50)
    assert used == []
    monkeypatch.setenv("DJ_FRAME_READERS", "3")
    reset_settings_cache()
    parts = _report(api, run_id, n_boot=50)
    assert _figures(parts) == _figures(one)
    assert used and all(u in ("sqlite-parts", "pg-parts") for u in used), used
