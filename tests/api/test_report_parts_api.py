"""Issue 39: GET /v1/runs/{id}/report reads the run in parts (``repository.judgments_parts``, ``stats.parts``) and
answers what the report of the whole frame says, on SQLite and PostgreSQL: every figure equal but the cost
section's float sums (added part by part), with ratings and reference metrics too."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd
import pytest

from judge_api import repository
from judge_api.db import session_scope
from judge_api.repository import frames as repository_frames
from judge_api.stats.report import build_report
from tests.api.conftest import ApiFactory
from tests.api.test_report_cache import NO_WINDOW, _figures, _judge, _judgment_ids, _report, _run
from tests.stats.test_report_parts import COST_RTOL, _differences

PART_ROWS = 7


@pytest.fixture
def parts_read(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The rows of each part the report route reads, parts of ``PART_ROWS`` rows."""
    sizes: list[int] = []
    real = repository.judgments_parts

    def parts(*args: Any, **kwargs: Any) -> Any:
        for part in real(*args, **kwargs):
            sizes.append(len(part))
            yield part

    monkeypatch.setattr(repository_frames, "REPORT_PART_ROWS", PART_ROWS)
    monkeypatch.setattr(repository, "judgments_parts", parts)
    return sizes


def _whole_report(run_id: str, ratings: bool, **options: Any) -> dict[str, Any]:
    with session_scope() as session:
        frame = repository.judgments_frame(session, run_id)
        rated = repository.ratings_frame(session, run_id)
    return build_report(frame, rated if ratings else None, **options)


def _assert_same(whole: dict[str, Any], got: dict[str, Any]) -> None:
    for path, a, b in _differences(whole, got):
        assert path.startswith(".cost.") and isinstance(a, float), (path, a, b)
        assert math.isclose(a, b, rel_tol=COST_RTOL), (path, a, b)


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_the_report_read_in_parts_says_what_the_whole_frame_says(
    api_factory: ApiFactory, parts_read: list[int], backend: str, request: pytest.FixtureRequest
) -> None:
    url = request.getfixturevalue("pg_url") if backend == "postgres" else None
    api = api_factory(database_url=url, **NO_WINDOW)
    run_id = _run(api, n_items=12)
    rows = _judgment_ids(run_id)
    _judge(rows[: len(rows) - 5])
    _judge(rows[len(rows) - 5 :], status="failed")
    got = _figures(_report(api, run_id, n_boot=40))
    n = len(rows)
    assert parts_read == [PART_ROWS] * (n // PART_ROWS) + ([n % PART_ROWS] if n % PART_ROWS else [])
    whole = _whole_report(run_id, False, n_boot=40, panel=None)
    _assert_same({k: whole[k] for k in got if k in whole}, {k: got[k] for k in got if k in whole})
    assert got["counts"]["n_rows"] == n and got["counts"]["by_status"]["failed"] == 5


def test_ratings_read_beside_the_parts(api_factory: ApiFactory, parts_read: list[int]) -> None:
    api = api_factory(**NO_WINDOW)
    run_id = _run(api, n_items=12)
    rows = _judgment_ids(run_id)
    _judge(rows)
    with session_scope() as session:
        frame = repository.judgments_frame(session, run_id)
    single = frame[(frame["mode"] == "single") & (frame["status"] == "done")].head(20)
    ratings = [
        {
            "item_id": str(r.item_id),
            "system": str(r.system_a),
            "aspect": str(r.aspect),
            "rater": "ann",
            "value": float(r.score),
            "scale_min": 1,
            "scale_max": 10,
        }
        for r in single.itertuples()
    ]
    response = api.client.post(f"/v1/runs/{run_id}/human-ratings", json={"ratings": ratings})
    assert response.status_code == 201, response.text
    got = _figures(_report(api, run_id, n_boot=40))
    assert len(parts_read) > 1 and got["agreement"] is not None
    whole = _whole_report(run_id, True, n_boot=40)
    _assert_same({k: whole[k] for k in got if k in whole}, {k: got[k] for k in got if k in whole})


@pytest.mark.parametrize("rows", [1, 5, 1000])
def test_the_parts_are_the_frame_in_order(api_factory: ApiFactory, rows: int) -> None:
    api = api_factory()
    run_id = _run(api, n_items=6)
    _judge(_judgment_ids(run_id)[:20])
    with session_scope() as session:
        frame = repository.judgments_frame(session, run_id)
        parts = list(repository.judgments_parts(session, run_id, rows=rows))
    assert [len(p) for p in parts][:-1] == [rows] * (len(parts) - 1) and 0 < len(parts[-1]) <= rows
    joined = pd.concat([p.astype({c: object for c in p.columns}) for p in parts], ignore_index=True)
    pd.testing.assert_frame_equal(joined, frame.astype({c: object for c in frame.columns}))
    with session_scope() as session, pytest.raises(ValueError, match="at least 1"):
        list(repository.judgments_parts(session, run_id, rows=0))
