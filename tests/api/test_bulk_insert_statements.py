"""Storing judgments in bulk on PostgreSQL is a few multi-row INSERTs, not a statement per row (session 51).

The ``data_version`` triggers (migration 0023) are statement triggers on PostgreSQL: each INSERT of judgments updates
the run's row. psycopg's executemany is one statement per row, and SQLAlchemy's ORM bulk INSERT split single and
pairwise rows (different None columns) into a statement per run of same-shaped rows: a transaction that updates one
row n times walks its n versions each time, so storing a run took O(n^2) (105 s for 20k judgments). The run's
``data_version`` counts those statements: it must stay a handful, whatever the number of rows."""

from __future__ import annotations

from sqlalchemy import create_engine, select

from judge_api.models import Judgment, Run
from tests.api.conftest import Api, ApiFactory, run_body
from tests.api.test_report_cache import _judge, _judgment_ids


def _run(api: Api, n_items: int) -> str:
    """A run of single and pairwise judgments, interleaved item by item."""
    body = run_body(n_items, rubrics=["rsum-single", "rsum-pairwise"], mode=["single", "pairwise"])
    del body["aspects"]  # each rubric's own
    return str(api.submit(body=body)["id"])


def _versions(url: str, run_id: str) -> tuple[int, int]:
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            version = connection.scalar(select(Run.data_version).where(Run.id == run_id))
            rows = connection.scalar(select(Judgment.id).where(Judgment.run_id == run_id).order_by(Judgment.id.desc()))
            n = len(connection.execute(select(Judgment.id).where(Judgment.run_id == run_id)).all())
            assert rows is not None
            return int(version or 0), n
    finally:
        engine.dispose()


def test_a_runs_judgments_are_stored_in_a_few_statements(api_factory: ApiFactory, pg_url: str) -> None:
    api = api_factory(database_url=pg_url)
    run_id = _run(api, n_items=60)  # single and pairwise rows interleaved, item by item
    version, n = _versions(pg_url, run_id)
    assert n >= 400
    assert version <= 3, f"{n} judgments stored in {version} INSERT statements"


def test_imported_verdicts_are_stored_in_a_few_statements(api_factory: ApiFactory, pg_url: str) -> None:
    api = api_factory(database_url=pg_url)
    run_id = api.submit(body=run_body(40))["id"]
    before, _ = _versions(pg_url, run_id)
    rows = []
    for i in range(40):
        rows.append({"item_id": f"item-{i}", "system": "a", "judge": "ext", "score": 3, "scale_min": 1, "scale_max": 5})
        rows.append({"item_id": f"item-{i}", "system": "a", "system_b": "b", "judge": "ext", "verdict": "A"})
    response = api.client.post(f"/v1/runs/{run_id}/verdicts", json={"verdicts": rows})
    assert response.status_code == 201, response.text
    after, _ = _versions(pg_url, run_id)
    assert after - before <= 2, f"80 verdicts stored in {after - before} INSERT statements"
    # and what was stored is what was sent: the pairwise rows carry their system_b, the single ones none
    listed = api.client.get(f"/v1/runs/{run_id}/judgments", params={"judge": "ext", "limit": 500}).json()["items"]
    assert sorted((j["mode"], j["system_b"]) for j in listed) == sorted(
        [("single", None)] * 40 + [("pairwise", "b")] * 40
    )


def test_the_stored_rows_are_the_planned_ones(api_factory: ApiFactory, pg_url: str) -> None:
    api = api_factory(database_url=pg_url)
    run_id = _run(api, n_items=5)
    rows = _judgment_ids(run_id)
    _judge(rows)
    polled = api.client.get(f"/v1/runs/{run_id}").json()
    assert polled["counts"]["done"] == len(rows) and polled["status"] == "done"
    listed = api.client.get(f"/v1/runs/{run_id}/judgments", params={"limit": 500}).json()["items"]
    single = [j for j in listed if j["mode"] == "single"]
    pairwise = [j for j in listed if j["mode"] == "pairwise"]
    assert single and pairwise
    assert all(j["system_b"] is None and j["order"] is None for j in single)
    assert all(j["system_b"] is not None and j["order"] in ("ab", "ba") for j in pairwise)
    assert all(j["sample_index"] == 0 and j["attempts"] == 0 for j in listed)
