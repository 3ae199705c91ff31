"""Issue 39: GET /v1/runs/{id}/report is computed once per state of the run and query, kept in the database.

A cached report is never stale after a verdict write, a retry, a rating import or a deletion; it belongs to its
run's project; a run still judging may be answered from a report a few seconds old and says when it was computed;
out-of-range arguments get a 422 naming them."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from sqlalchemy import create_engine, delete, select, text

from judge_api.db import get_engine, session_scope
from judge_api.models import Judgment
from judge_api.repository import claims
from tests.api.conftest import Api, ApiFactory, run_body

NO_WINDOW = {"DJ_REPORT_FRESH_SECONDS": "0"}


def _judgment_ids(run_id: str) -> list[tuple[int, str | None]]:
    with session_scope() as session:
        rows = session.execute(
            select(Judgment.id, Judgment.system_b).where(Judgment.run_id == run_id).order_by(Judgment.id)
        ).all()
    return [(r.id, r.system_b) for r in rows]


def _judge(rows: list[tuple[int, str | None]], seed: int = 0, status: str = "done") -> None:
    """Claim and write a verdict for each judgment, as a worker does."""
    engine = get_engine()
    token, claimed = claims.claim_many(engine, [r[0] for r in rows], 600.0)
    rng = random.Random(seed)
    verdicts = []
    for jid, system_b in rows:
        if jid not in claimed:
            continue
        if status != "done":
            values: dict[str, Any] = {"status": status, "error": "provider said no"}
        elif system_b is None:
            values = {"status": "done", "score": float(rng.randint(1, 10))}
        else:
            p = rng.choice([-2, -1, 1, 2])
            values = {"status": "done", "preference": float(p), "outcome": {2: "win", -2: "loss"}.get(p, "tie")}
        verdicts.append((jid, token, values))
    assert all(claims.write_verdicts(engine, verdicts))


def _run(api: Api, n_items: int = 12, key: str | None = None) -> str:
    body = run_body(n_items, rubrics=["rsum-single", "rsum-pairwise"], mode=["single", "pairwise"])
    body["items"] = [{**it, "candidates": {"a": "A says Rex.", "b": "B says Max.", "c": "C?"}} for it in body["items"]]
    return str(api.submit(key, body)["id"])


def _report(api: Api, run_id: str, key: str | None = None, **params: Any) -> dict[str, Any]:
    response = api.client.get(f"/v1/runs/{run_id}/report", params=params or None, headers=api.as_key(key))
    assert response.status_code == 200, response.text
    return dict(response.json())


def _figures(report: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in report.items() if k not in ("run", "computed_at", "cached")}


def _cache_rows(api: Api) -> list[tuple[str, str]]:
    engine = create_engine(api.database_url)
    try:
        with engine.connect() as connection:
            return [(r[0], r[1]) for r in connection.execute(text("SELECT run_id, project_id FROM report_cache"))]
    finally:
        engine.dispose()


def test_a_second_call_is_served_from_the_cache_with_the_same_figures(api_factory: ApiFactory) -> None:
    api = api_factory(**NO_WINDOW)
    run_id = _run(api)
    rows = _judgment_ids(run_id)
    _judge(rows[: len(rows) // 2])
    first = _report(api, run_id, n_boot=50)
    again = _report(api, run_id, n_boot=50)
    assert first["cached"] is False and again["cached"] is True
    assert again["computed_at"] == first["computed_at"] and first["computed_at"].endswith("Z")
    assert _figures(again) == _figures(first)
    assert again["run"]["id"] == run_id
    # another query is another entry
    other = _report(api, run_id, n_boot=60)
    assert other["cached"] is False and other["meta"]["n_boot"] == 60
    assert _report(api, run_id, n_boot=60)["cached"] is True
    assert _report(api, run_id, n_boot=50)["cached"] is True


def test_a_verdict_written_after_the_report_is_in_the_next_one(api_factory: ApiFactory) -> None:
    api = api_factory(**NO_WINDOW)
    run_id = _run(api)
    rows = _judgment_ids(run_id)
    _judge(rows[:10])
    before = _report(api, run_id, n_boot=30)
    assert _report(api, run_id, n_boot=30)["cached"] is True
    _judge(rows[10:20], seed=1)
    after = _report(api, run_id, n_boot=30)
    assert after["cached"] is False
    assert after["counts"]["by_status"]["done"] == before["counts"]["by_status"]["done"] + 10


def test_a_retry_is_in_the_next_report(api_factory: ApiFactory) -> None:
    api = api_factory(**NO_WINDOW)
    run_id = _run(api, n_items=4)
    rows = _judgment_ids(run_id)
    _judge(rows[:-3])
    _judge(rows[-3:], status="failed")
    before = _report(api, run_id, n_boot=20)
    assert before["counts"]["by_status"]["failed"] == 3
    assert api.client.post(f"/v1/runs/{run_id}/retry").status_code == 200
    after = _report(api, run_id, n_boot=20)
    assert after["cached"] is False
    assert after["counts"]["by_status"]["failed"] == 0 and after["counts"]["by_status"]["pending"] == 3


def test_a_rating_import_and_a_changed_rating_are_in_the_next_report(api_factory: ApiFactory) -> None:
    api = api_factory(**NO_WINDOW)
    run_id = _run(api)
    _judge(_judgment_ids(run_id))
    assert _report(api, run_id, n_boot=20)["agreement"] is None
    ratings = [
        {
            "item_id": f"item-{i}",
            "system": "a",
            "aspect": "consistency",
            "rater": "h1",
            "value": i % 3,
            "scale_min": 0,
            "scale_max": 2,
        }
        for i in range(12)
    ]
    assert api.client.post(f"/v1/runs/{run_id}/human-ratings", json={"ratings": ratings}).status_code == 201
    rated = _report(api, run_id, n_boot=20)
    assert rated["cached"] is False and rated["agreement"] is not None
    assert _report(api, run_id, n_boot=20)["cached"] is True
    # the same ratings with one value changed in place: same count, same ids
    ratings[0] = {**ratings[0], "value": 2 if ratings[0]["value"] != 2 else 0}
    assert api.client.post(f"/v1/runs/{run_id}/human-ratings", json={"ratings": ratings}).status_code in (200, 201)
    changed = _report(api, run_id, n_boot=20)
    assert changed["cached"] is False


def test_deleting_the_run_deletes_its_kept_reports(api_factory: ApiFactory) -> None:
    api = api_factory(**NO_WINDOW)
    run_id = _run(api, n_items=3)
    keep = _run(api, n_items=3)
    _judge(_judgment_ids(run_id))
    _report(api, run_id, n_boot=10)
    _report(api, keep, n_boot=10)
    assert sorted(r[0] for r in _cache_rows(api)) == sorted([run_id, keep])
    deleted = api.client.delete(f"/v1/runs/{run_id}")
    assert deleted.status_code == 200, deleted.text
    assert api.client.get(f"/v1/runs/{run_id}/report").status_code == 404
    assert [r[0] for r in _cache_rows(api)] == [keep]


def test_deleted_judgments_are_not_in_the_next_report(api_factory: ApiFactory) -> None:
    """Judgments removed under the run (a monitor's retention does this) change the count the state holds."""
    api = api_factory(**NO_WINDOW)
    run_id = _run(api, n_items=4)
    rows = _judgment_ids(run_id)
    _judge(rows)
    before = _report(api, run_id, n_boot=10)
    with session_scope() as session:
        session.execute(delete(Judgment).where(Judgment.id.in_([r[0] for r in rows[:5]])))
    after = _report(api, run_id, n_boot=10)
    assert after["cached"] is False
    assert after["counts"]["n_rows"] == before["counts"]["n_rows"] - 5


def test_a_kept_report_never_crosses_projects(secured: Api) -> None:
    run_id = _run(secured, n_items=3, key="alpha")
    _judge(_judgment_ids(run_id))
    assert _report(secured, run_id, "alpha", n_boot=10)["cached"] is False
    assert _report(secured, run_id, "alpha-read", n_boot=10)["cached"] is True  # same project, another key
    denied = secured.client.get(f"/v1/runs/{run_id}/report", params={"n_boot": 10}, headers=secured.as_key("beta"))
    assert denied.status_code == 404 and "scores" not in denied.text
    assert {r[1] for r in _cache_rows(secured)} == {"alpha"}


def test_a_running_run_may_be_answered_from_a_report_a_few_seconds_old(api_factory: ApiFactory) -> None:
    api = api_factory(DJ_REPORT_FRESH_SECONDS="300")
    run_id = _run(api)
    rows = _judgment_ids(run_id)
    _judge(rows[:10])
    first = _report(api, run_id, n_boot=10)
    _judge(rows[10:20], seed=1)
    within = _report(api, run_id, n_boot=10)  # the run is still judging: the kept report, which says when it was
    assert within["cached"] is True and within["computed_at"] == first["computed_at"]
    assert within["counts"] == first["counts"]
    _judge(rows[20:])  # every judgment done: the run finishes, and a finished run is never answered stale
    assert _report(api, run_id)["run"]["finished_at"] is not None
    done = _report(api, run_id, n_boot=10)
    assert done["cached"] is False and done["counts"]["by_status"]["done"] == len(rows)


def test_the_cache_can_be_turned_off(api_factory: ApiFactory) -> None:
    api = api_factory(DJ_REPORT_CACHE="false")
    run_id = _run(api, n_items=3)
    _judge(_judgment_ids(run_id))
    assert _report(api, run_id, n_boot=10)["cached"] is False
    assert _report(api, run_id, n_boot=10)["cached"] is False
    assert _cache_rows(api) == []


def test_out_of_range_arguments_are_422_naming_them(api: Api) -> None:
    run_id = _run(api, n_items=2)
    for params, field in (
        ({"n_boot": -1}, "n_boot"),
        ({"n_boot": 20001}, "n_boot"),
        ({"ci": 1.5}, "ci"),
        ({"ci": 0.2}, "ci"),
        ({"seed": -3}, "seed"),
    ):
        response = api.client.get(f"/v1/runs/{run_id}/report", params=params)
        assert response.status_code == 422, (params, response.text)
        assert field in json.dumps(response.json()), (params, response.text)
    assert _cache_rows(api) == []


def test_a_report_kept_by_code_of_another_report_version_is_not_served(
    api_factory: ApiFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review r39e: the key holds the version of the report's figures (``stats.report.REPORT_VERSION``), so a report
    kept by code that computed a figure otherwise (another bootstrap draw) is computed again by code of another
    version, and reused by code of the same version."""
    from judge_api.routers import reports

    api = api_factory()
    run_id = _run(api, n_items=4)
    _judge(_judgment_ids(run_id))
    assert _report(api, run_id, n_boot=20)["cached"] is False
    assert _report(api, run_id, n_boot=20)["cached"] is True
    monkeypatch.setattr(reports, "REPORT_VERSION", reports.REPORT_VERSION + 1)
    assert _report(api, run_id, n_boot=20)["cached"] is False
    assert _report(api, run_id, n_boot=20)["cached"] is True
