"""Retention through the real API over a database the real judge engine filled (simulator judge): deleting a run
leaves nothing of it (SQL counts) while another run's cache survives, a deletion is all or nothing, pruning by age,
and a run's exported bundle re-imports to an identical report; bad bundles are refused naming the line and field."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from judge_api.app import create_app
from judge_api.config import reset_settings_cache
from judge_api.db import get_engine
from judge_api.repository import retention

from .harness import Harness, dialogue_item

TABLES = ("runs", "items", "judgments", "human_ratings", "judge_cache", "rubric_snapshots")


def request(harness: Harness, item_ids: list[int]) -> dict[str, Any]:
    return {
        "items": [
            dialogue_item(f"i{k}", {"a": f"Rex is {k} years old. <<q={50 + k}>>", "b": f"Cat {k}. <<q={20 + k}>>"})
            for k in item_ids
        ],
        "rubrics": ["rsum-single"],
        "judges": [harness.judge("openai-compatible")],
        "aspects": ["consistency"],
    }


def scalar(sql: str, **params: Any) -> Any:
    with get_engine().connect() as connection:
        return connection.execute(text(sql), params).scalar()


def keys_of(run_id: str) -> set[str]:
    with get_engine().connect() as connection:
        rows = connection.execute(text("SELECT cache_key FROM judgments WHERE run_id = :r"), {"r": run_id}).all()
    return {r[0] for r in rows}


def cache_keys() -> set[str]:
    with get_engine().connect() as connection:
        return {r[0] for r in connection.execute(text("SELECT key FROM judge_cache")).all()}


def counts_of(run_id: str) -> dict[str, int]:
    return {
        table: int(scalar(f"SELECT COUNT(*) FROM {table} WHERE {'id' if table == 'runs' else 'run_id'} = :r", r=run_id))
        for table in ("runs", "items", "judgments", "human_ratings")
    }


def table_counts() -> dict[str, int]:
    return {table: int(scalar(f"SELECT COUNT(*) FROM {table}")) for table in TABLES}


@pytest.fixture
def api(harness: Harness) -> Iterator[TestClient]:
    harness.build()  # migrates the database the API then opens
    reset_settings_cache()
    with TestClient(create_app()) as client:
        yield client


@pytest.fixture
def two_runs(harness: Harness, api: TestClient) -> tuple[str, str]:
    """Run A judges items 0-2; run B items 0, 1 (cache hits on A's replies) and 3."""
    first = harness.run(**request(harness, [0, 1, 2]))
    calls_after_first = harness.calls()
    second = harness.run(**request(harness, [0, 1, 3]))
    assert harness.calls() - calls_after_first == 2  # items 0 and 1 came from the cache
    for run_id in (first, second):
        posted = api.post(
            f"/v1/runs/{run_id}/human-ratings",
            json={
                "ratings": [
                    {
                        "item_id": "i0",
                        "system": "a",
                        "aspect": "consistency",
                        "rater": "r1",
                        "value": 80,
                        "scale_min": 1,
                        "scale_max": 100,
                    }
                ]
            },
        )
        assert posted.status_code < 300, posted.text
    return first, second


def test_deleting_a_run_leaves_nothing_of_it_and_another_runs_cache_survives(
    harness: Harness, api: TestClient, two_runs: tuple[str, str]
) -> None:
    first, second = two_runs
    only_first = keys_of(first) - keys_of(second)
    shared = keys_of(first) & keys_of(second)
    assert len(only_first) == 2 and len(shared) == 4  # item 2 (two systems); items 0 and 1
    assert keys_of(first) | keys_of(second) <= cache_keys()
    before = counts_of(first)
    assert before == {"runs": 1, "items": 3, "judgments": 6, "human_ratings": 1}

    response = api.delete(f"/v1/runs/{first}")
    assert response.status_code == 200, response.text
    deleted = response.json()["deleted"]
    assert deleted == {
        "cache_entries": 2,
        "rubric_snapshots": 0,  # run B was planned with the same rubric version
        "judgments": 6,
        "human_ratings": 1,
        "generations": 0,  # a run without systems
        "items": 3,
        "idempotency_keys": 0,
        "label_queue_items": 0,
        "provider_batches": 0,
        "webhook_deliveries": 0,
        "runs": 1,
    }
    assert counts_of(first) == {"runs": 0, "items": 0, "judgments": 0, "human_ratings": 0}
    assert not only_first & cache_keys()
    assert keys_of(second) <= cache_keys()  # B's cache (the entries shared with A included) survives
    assert int(scalar("SELECT COUNT(*) FROM rubric_snapshots")) == 1
    assert api.get(f"/v1/runs/{first}").status_code == 404
    assert api.delete(f"/v1/runs/{first}").status_code == 404

    # the surviving run re-runs from its cache alone
    harness.sim.reset()
    again = harness.run(**request(harness, [0, 1, 3]))
    assert harness.calls() == 0 and {r.cached for r in harness.rows(again)} == {True}


def test_a_deletion_is_all_or_nothing(
    api: TestClient, two_runs: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    first, _ = two_runs
    before = table_counts()
    calls = {"n": 0}
    real = retention._rowcount

    def failing(result: Any) -> int:
        calls["n"] += 1
        if calls["n"] == 4:  # after the cache entries and the judgments are deleted
            raise RuntimeError("the database fell over mid-deletion")
        return real(result)

    monkeypatch.setattr(retention, "_rowcount", failing)
    with TestClient(api.app, raise_server_exceptions=False) as client:
        assert client.delete(f"/v1/runs/{first}").status_code == 500
    assert table_counts() == before


def test_export_then_import_gives_an_identical_report(api: TestClient, two_runs: tuple[str, str]) -> None:
    first, second = two_runs
    report = api.get(f"/v1/runs/{second}/report", params={"n_boot": 200}).json()
    assert report.pop("cached") is False and report.pop("computed_at")  # when it was computed (issue 39)
    judgments = api.get(f"/v1/runs/{second}/judgments", params={"limit": 100}).json()["items"]
    exported = api.get(f"/v1/runs/{second}/export")
    assert exported.status_code == 200
    assert exported.headers["content-type"].startswith("application/x-ndjson")
    lines = [json.loads(line) for line in exported.text.splitlines()]
    kinds = [line["record"] for line in lines]
    assert kinds[0] == "dialogue-judge-run" and lines[0]["run"]["id"] == second
    assert kinds.count("item") == 3 and kinds.count("judgment") == 6 and kinds.count("rating") == 1
    assert kinds.count("rubric_snapshot") == 1 and kinds.count("cache_entry") == 6

    assert api.delete(f"/v1/runs/{second}").status_code == 200
    assert cache_keys() == keys_of(first)  # B's own entries (item 3) went with it
    imported = api.post("/v1/runs/import", content=exported.content)
    assert imported.status_code == 201, imported.text
    answer = imported.json()
    restored = answer.pop("run_id")
    assert restored != second  # an import is a new run of the caller's project (issue 42, finding 11)
    assert answer == {
        "source_run_id": second,
        "items": 3,
        "judgments": 6,
        "generations": 0,  # a run without systems
        "human_ratings": 1,
        "label_queue_items": 0,
        "pending": 0,
        "cache_entries": 6,  # auth off: one cache for the deployment (tests/api/test_cache_isolation.py: with auth)
    }
    again_report = api.get(f"/v1/runs/{restored}/report", params={"n_boot": 200}).json()
    assert again_report.pop("cached") is False and again_report.pop("computed_at")  # a new run: computed anew
    assert again_report["run"]["id"] == restored and again_report["counts"]["runs"] == [restored]
    # the same report but for the run's id
    assert json.loads(json.dumps(again_report).replace(restored, second)) == report
    again = api.get(f"/v1/runs/{restored}/judgments", params={"limit": 100}).json()["items"]
    strip = ("id", "run_id")
    assert [{k: v for k, v in j.items() if k not in strip} for j in again] == [
        {k: v for k, v in j.items() if k not in strip} for j in judgments
    ]
    assert keys_of(restored) <= cache_keys()  # the cache came along

    # the same bundle again: another new run, nothing of the first import touched
    before = table_counts()
    twice = api.post("/v1/runs/import", content=exported.content)
    assert twice.status_code == 201, twice.text
    assert twice.json()["run_id"] not in (second, restored) and twice.json()["source_run_id"] == second
    assert table_counts()["judgments"] == before["judgments"] + 6


@pytest.mark.parametrize(
    ("mutate", "status", "loc", "words"),
    [
        (lambda lines: ["not json", *lines[1:]], 422, "line 1", "not valid JSON"),
        (lambda lines: lines[1:], 422, "line 1: record", "header"),
        (lambda lines: [lines[0].replace('"version":1', '"version":9'), *lines[1:]], 422, "line 1: version", "9"),
        (lambda lines: [*lines, '{"record":"spaceship"}'], 422, "line 19: record", "unknown record"),
        (
            lambda lines: [lines[0], lines[1], lines[2], lines[3], lines[4].replace('"status":"done"', '"status":5')],
            422,
            "line 5: judgment.status",
            "must be a string",
        ),
        (
            lambda lines: [lines[0], lines[1], lines[2], lines[3], lines[4].replace('"score":', '"bogus":')],
            422,
            "line 5: judgment.bogus",
            "not a field",
        ),
        (lambda lines: [lines[0], lines[4]], 422, "judgment.item_key", "does not carry"),
        (lambda lines: [], 422, "line 1", "empty"),
    ],
)
def test_a_bad_bundle_is_refused_naming_the_field_and_nothing_is_stored(
    api: TestClient, two_runs: tuple[str, str], mutate: Any, status: int, loc: str, words: str
) -> None:
    _, second = two_runs
    lines = api.get(f"/v1/runs/{second}/export").text.splitlines()
    assert json.loads(lines[4])["record"] == "judgment"
    assert api.delete(f"/v1/runs/{second}").status_code == 200
    before = table_counts()
    response = api.post("/v1/runs/import", content="\n".join(mutate(lines)).encode())
    assert response.status_code == status, response.text
    detail = response.json()["detail"][0]
    assert detail["loc"] == ["body", loc] and words in detail["msg"]
    assert table_counts() == before


def test_prune_deletes_only_runs_older_than_the_age(api: TestClient, two_runs: tuple[str, str]) -> None:
    first, second = two_runs
    with get_engine().begin() as connection:
        connection.execute(
            text("UPDATE runs SET created_at = :old WHERE id = :r"), {"old": "2020-01-01 00:00:00", "r": first}
        )
    dry = api.post("/v1/runs/prune", params={"older_than": "30d", "dry_run": True}).json()
    assert dry["matched"] == [first] and dry["deleted"] == []
    assert counts_of(first)["judgments"] == 6
    pruned = api.post("/v1/runs/prune", params={"older_than": "30d"}).json()
    assert pruned["deleted"] == [first]
    assert counts_of(first) == {"runs": 0, "items": 0, "judgments": 0, "human_ratings": 0}
    assert counts_of(second)["judgments"] == 6
    bad = api.post("/v1/runs/prune", params={"older_than": "a month"})
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["query", "older_than"]


def test_deleting_a_run_frees_its_idempotency_key(harness: Harness, api: TestClient) -> None:
    headers = {"Idempotency-Key": "nightly-2026-11-23"}
    first = api.post("/v1/runs", json=request(harness, [0]), headers=headers)
    assert first.status_code == 202, first.text
    run_id = first.json()["id"]
    assert api.post("/v1/runs", json=request(harness, [0]), headers=headers).json()["id"] == run_id
    deleted = api.delete(f"/v1/runs/{run_id}").json()["deleted"]
    assert deleted["idempotency_keys"] == 1 and deleted["runs"] == 1
    assert int(scalar("SELECT COUNT(*) FROM idempotency_keys")) == 0
    again = api.post("/v1/runs", json=request(harness, [0]), headers=headers)
    assert again.status_code == 202 and again.json()["id"] != run_id


def test_a_deleted_runs_id_imported_again_is_judged_and_the_old_claims_stay_gone(
    harness: Harness, api: TestClient
) -> None:
    """Issue 43: what stops a deleted run's work is its judgments' rows and claims, not its id: a worker that had
    claimed the old judgments starts no call for them, and the run imported again under the same id (its bundle
    exported before the delete) is judged in full, its cache entries stored."""
    from judge_api.repository import claims

    run_id = harness.create(**request(harness, [0, 1]))
    old_ids = harness.pending(run_id)
    token, claimed = claims.claim_many(get_engine(), old_ids, lease_s=600)
    assert claimed == set(old_ids)
    bundle = api.get(f"/v1/runs/{run_id}/export").content
    assert api.delete(f"/v1/runs/{run_id}").status_code == 200
    assert not any(claims.claim_holds(get_engine(), jid, token) for jid in old_ids)
    imported = api.post("/v1/runs/import", content=bundle)
    assert imported.status_code == 201, imported.text
    # imports re-issue ids (issue 42): the bundle's run comes back under a new id, naming the old one
    assert imported.json()["source_run_id"] == run_id and imported.json()["pending"] == 4
    new_id = imported.json()["run_id"]
    before = harness.calls()
    assert sorted(harness.judge_all(new_id)) == ["done"] * 4
    assert harness.calls() - before == 4
    assert keys_of(new_id) <= cache_keys() and len(keys_of(new_id)) == 4


def test_a_deleted_run_leaves_no_reask_cache_entry_and_another_runs_stay(harness: Harness, api: TestClient) -> None:
    """A re-ask's reply (an unparseable reply asked again) is cached under a key no judgment's ``cache_key`` names:
    deleting the run left it behind. Now each judgment records the re-ask keys it used, so the delete removes them,
    unless another run's judgment used them too (issue 43 review)."""
    harness.sim.set_script({"faults": [{"kind": "malformed", "first_n": 1, "text": "Hmm, hard to say."}]})
    body = {**request(harness, [0]), "options": {"reask": 1}}
    body["items"] = body["items"][:1]
    first = harness.run(**body)
    # item 0's two systems, one of them re-asked: three entries
    assert harness.calls() == 3 and len(cache_keys()) == 3
    second = harness.run(**body)  # the same prompts: every request answered from the cache
    assert harness.calls() == 3 and len(cache_keys()) == 3
    deleted = api.delete(f"/v1/runs/{first}").json()["deleted"]
    assert deleted["cache_entries"] == 0 and len(cache_keys()) == 3  # the second run's (re-ask included) stay
    deleted = api.delete(f"/v1/runs/{second}").json()["deleted"]
    assert deleted["cache_entries"] == 3 and cache_keys() == set(), deleted
