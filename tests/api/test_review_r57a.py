"""Review r57a: GET /v1/runs/{id}/report read in parts (``repository.judgments_parts``, ``stats.parts``) against the
report of the whole frame (``build_report(repository.judgments_frame(...))``), on small parts (the route's part size
monkeypatched): the cost section's sums over parts, and runs at the edges (pending rows only, one row, one part of
exactly the part size, one mode only)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from sqlalchemy import update

from judge_api import repository
from judge_api.db import session_scope
from judge_api.models import Judgment
from judge_api.repository import frames as repository_frames
from judge_api.stats.report import build_report
from tests.api.conftest import ApiFactory, run_body
from tests.api.test_report_cache import NO_WINDOW, _figures, _judge, _judgment_ids, _report, _run
from tests.stats.test_report_parts import COST_RTOL, _differences


def _whole(run_id: str, **options: Any) -> dict[str, Any]:
    with session_scope() as session:
        frame = repository.judgments_frame(session, run_id)
    return build_report(frame, None, **options)


def _compare(whole: dict[str, Any], got: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """The differences beyond the promise: only the cost section's floats may move, by ``COST_RTOL``."""
    bad = []
    for path, a, b in _differences({k: whole[k] for k in got if k in whole}, {k: got[k] for k in got if k in whole}):
        cost_float = path.startswith(".cost.") and isinstance(a, float) and isinstance(b, float)
        if not (cost_float and math.isclose(a, b, rel_tol=COST_RTOL)):
            bad.append((path, a, b))
    return bad


def test_saved_batch_of_a_run_read_in_parts_is_the_whole_frames(
    api_factory: ApiFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FIXED (review r57a): the route's cost section was not within COST_RTOL of the whole frame's:
    ``saved_usd.batch`` is ``max(list - cost - cache_saved, 0)``; for rows billed at real-time prices with a cache
    discount (``list_cost_usd = cost_usd + cache_saved_usd``, the usual run) it was float noise around 0, and the
    parts' sums gave other noise than the whole frame's (0.0 from the whole frame, ~1e-17 from 7-row parts, or the
    other way round): an unbounded relative difference. Below a billionth of the list price it is now 0 on both
    paths. Reproduction: a 12-item run, every row priced so, parts of 7 rows."""
    monkeypatch.setattr(repository_frames, "REPORT_PART_ROWS", 7)
    api = api_factory(**NO_WINDOW)
    run_id = _run(api, n_items=12)
    rows = _judgment_ids(run_id)
    _judge(rows)
    rng = np.random.default_rng(2)
    with session_scope() as session:
        for jid, _ in rows:
            cost = float(np.round(rng.random() * 1e-3, 7))
            saved = float(np.round(rng.random() * 1e-3, 7))
            session.execute(
                update(Judgment)
                .where(Judgment.id == jid)
                .values(cost_usd=cost, cache_saved_usd=saved, list_cost_usd=cost + saved)
            )
    got = _figures(_report(api, run_id, n_boot=20))
    whole = _whole(run_id, n_boot=20)
    bad = _compare(whole, got)
    assert not bad, bad


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_edge_runs_read_in_parts_answer_the_whole_frames_report(
    api_factory: ApiFactory, monkeypatch: pytest.MonkeyPatch, backend: str, request: pytest.FixtureRequest
) -> None:
    """HELD (review r57a): no 500 and the whole frame's report for a run with only pending rows, a run read one row a
    part, a run of exactly one part of the part size, a run of single-mode rows only, a run with imported verdicts,
    on SQLite and PostgreSQL."""
    url = request.getfixturevalue("pg_url") if backend == "postgres" else None
    api = api_factory(database_url=url, DJ_REPORT_CACHE="false")
    pending = _run(api, n_items=2)  # nothing judged: every row pending
    n_pending = len(_judgment_ids(pending))
    single_only = str(api.submit(None, run_body(3))["id"])
    _judge(_judgment_ids(single_only))
    imported = str(api.submit(None, run_body(3))["id"])  # its own rows pending, the imported verdicts done
    verdicts: list[dict[str, Any]] = []
    for i in range(3):
        verdicts.append(
            {"item_id": f"item-{i}", "system": "a", "judge": "ext", "score": 3, "scale_min": 1, "scale_max": 5}
        )
        verdicts.append({"item_id": f"item-{i}", "system": "a", "system_b": "b", "judge": "ext", "verdict": "A"})
    response = api.client.post(f"/v1/runs/{imported}/verdicts", json={"verdicts": verdicts})
    assert response.status_code == 201, response.text
    mixed = _run(api, n_items=2)
    mixed_rows = _judgment_ids(mixed)
    _judge(mixed_rows[:-2])
    for run_id, part_rows in (
        (pending, 5),
        (pending, n_pending),
        (single_only, 1),
        (imported, 4),
        (mixed, len(mixed_rows)),
    ):
        monkeypatch.setattr(repository_frames, "REPORT_PART_ROWS", part_rows)
        got = _figures(_report(api, run_id, n_boot=20))
        assert _compare(_whole(run_id, n_boot=20), got) == [], (run_id, part_rows)
        if run_id == imported:
            assert list(got["counts"]["imported"]) == ["ext"]
    assert got["counts"]["n_rows"] == len(mixed_rows) and got["counts"]["by_status"]["pending"] == 2
