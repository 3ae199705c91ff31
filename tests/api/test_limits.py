"""Limits: body size (declared and streamed), items per run, characters per turn, turns per item, and runs per key
per minute (429 + Retry-After; shared through Redis between API processes). A rejected request stores nothing."""

from __future__ import annotations

import json
from typing import Any

import pytest

from dialogue_judge.testing import OwnRedis

from .conftest import Api, ApiFactory, item, run_body


def test_body_size_limit_by_content_length(api_factory: ApiFactory) -> None:
    api = api_factory(DJ_MAX_BODY_BYTES="4000")
    before = api.row_counts()
    body = run_body(n_items=30)
    response = api.client.post("/v1/runs", json=body)
    assert response.status_code == 413
    assert "exceeds the limit of 4000 bytes (DJ_MAX_BODY_BYTES)" in response.json()["detail"]
    assert api.row_counts() == before
    assert api.client.post("/v1/runs", json=run_body(n_items=1)).status_code == 202


def test_body_size_limit_applies_to_chunked_bodies_without_content_length(api_factory: ApiFactory) -> None:
    api = api_factory(DJ_MAX_BODY_BYTES="4000")
    before = api.row_counts()
    payload = json.dumps(run_body(n_items=30)).encode()

    def chunks():  # a generator body is sent with Transfer-Encoding: chunked, no Content-Length
        for start in range(0, len(payload), 1000):
            yield payload[start : start + 1000]

    response = api.client.post("/v1/runs", content=chunks(), headers={"content-type": "application/json"})
    assert response.status_code == 413, response.text
    assert "DJ_MAX_BODY_BYTES" in response.json()["detail"]
    lines = "\n".join(json.dumps(item(i)) for i in range(30)).encode()
    jsonl = api.client.post(
        "/v1/runs/jsonl",
        params={"rubric": "rsum-single", "judge": run_body()["judges"][0]},
        content=iter([lines[:3000], lines[3000:]]),
    )
    assert jsonl.status_code == 413
    assert api.row_counts() == before


def test_bad_content_length_is_400(api_factory: ApiFactory) -> None:
    api = api_factory()
    response = api.client.post(
        "/v1/runs", content=b"{}", headers={"content-length": "abc", "content-type": "application/json"}
    )
    assert response.status_code == 400


def test_items_per_run(api_factory: ApiFactory) -> None:
    api = api_factory(DJ_MAX_ITEMS="3")
    before = api.row_counts()
    response = api.client.post("/v1/runs", json=run_body(n_items=4))
    assert response.status_code == 422
    detail = response.json()["detail"][0]
    assert detail["loc"] == ["body", "items"] and "4 items exceed the limit of 3" in detail["msg"]
    assert "DJ_MAX_ITEMS" in detail["msg"]
    assert api.row_counts() == before
    assert api.client.post("/v1/runs", json=run_body(n_items=3)).status_code == 202


@pytest.mark.parametrize("where", ["turn", "candidate", "persona"])
def test_characters_per_turn(api_factory: ApiFactory, where: str) -> None:
    api = api_factory(DJ_MAX_CHARS_PER_TURN="100")
    body = run_body(n_items=2)
    long = "x" * 101
    if where == "turn":
        body["items"][1]["dialogue"][2]["text"] = long
        loc = ["body", "items", 1, "dialogue", 2, "text"]
    elif where == "candidate":
        body["items"][1]["candidates"]["b"] = long
        loc = ["body", "items", 1, "candidates", "b"]
    else:
        body["items"][1]["persona"]["bot"] = ["ok", long]
        loc = ["body", "items", 1, "persona", "bot", 1]
    before = api.row_counts()
    response = api.client.post("/v1/runs", json=body)
    assert response.status_code == 422
    detail = response.json()["detail"][0]
    assert detail["loc"] == loc
    assert "101 characters exceeds the limit of 100" in detail["msg"]
    assert api.row_counts() == before
    body["items"][1] = item(1)
    body["items"][1]["dialogue"][0]["text"] = "y" * 100  # exactly at the limit is fine
    assert api.client.post("/v1/runs", json=body).status_code == 202


def test_turns_per_item(api_factory: ApiFactory) -> None:
    api = api_factory(DJ_MAX_TURNS="2")
    before = api.row_counts()
    response = api.client.post("/v1/runs", json=run_body())
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "items", 0, "dialogue"]
    assert api.row_counts() == before


def test_runs_per_key_per_minute(api_factory: ApiFactory) -> None:
    api = api_factory(auth=True, DJ_RUNS_PER_MINUTE="3")
    api.create_key("alpha", ["submit", "read"], "k1")
    api.create_key("alpha", ["submit", "read"], "k2")
    for _ in range(3):
        api.submit("k1")
    before = api.row_counts()
    limited = api.client.post("/v1/runs", json=run_body(), headers=api.as_key("k1"))
    assert limited.status_code == 429
    retry_after = int(limited.headers["retry-after"])
    assert 1 <= retry_after <= 61
    assert "more than 3 runs per minute" in limited.json()["detail"]
    assert api.row_counts() == before
    # per key: another key of the same project still submits
    assert api.client.post("/v1/runs", json=run_body(), headers=api.as_key("k2")).status_code == 202


def test_rejected_submissions_do_not_use_up_the_rate(api_factory: ApiFactory) -> None:
    api = api_factory(DJ_RUNS_PER_MINUTE="2")
    for _ in range(5):
        bad = api.client.post("/v1/runs", json=run_body(rubrics=["no-such-rubric"]))
        assert bad.status_code == 422
    assert api.client.post("/v1/runs", json=run_body()).status_code == 202
    assert api.client.post("/v1/runs", json=run_body()).status_code == 202
    assert api.client.post("/v1/runs", json=run_body()).status_code == 429


def test_rate_limit_is_shared_by_api_processes_through_redis(api_factory: ApiFactory, own_redis: OwnRedis) -> None:
    """Two app instances (as compose's `--workers 2`) on one Redis share one window per key."""
    from fastapi.testclient import TestClient

    from judge_api.app import create_app

    first = api_factory(auth=True, DJ_RUNS_PER_MINUTE="4", REDIS_URL=own_redis.url, DJ_SWEEP_INTERVAL="3600")
    first.create_key("alpha", ["submit"], "k")
    with TestClient(create_app(), raise_server_exceptions=False) as second:
        headers = first.as_key("k")
        codes = []
        for index in range(6):
            client = first.client if index % 2 == 0 else second
            codes.append(client.post("/v1/runs", json=run_body(), headers=headers).status_code)
    assert codes == [202, 202, 202, 202, 429, 429]


def _enqueued_stamps(database_url: str, run_id: str) -> list[object]:
    from sqlalchemy import create_engine, text

    engine = create_engine(database_url)
    with engine.connect() as connection:
        stamps = [
            r[0] for r in connection.execute(text("SELECT enqueued_at FROM judgments WHERE run_id = :r"), {"r": run_id})
        ]
    engine.dispose()
    return stamps


def test_a_submitted_run_is_enqueued_once(
    api_factory: ApiFactory, own_redis: OwnRedis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run is stamped enqueued in its own transaction, so a sweep that lands while the API is still publishing
    re-sends nothing (it used to duplicate every message of the run: 10,000 extra tasks in the benchmark)."""
    import redis

    from judge_api import queue
    from judge_api.config import get_settings
    from judge_api.sweeper import requeue_stale

    real_enqueue = queue.enqueue
    swept: list[int] = []

    def enqueue_with_a_sweep_midway(settings: Any, ids: list[int]) -> int:
        sent = real_enqueue(settings, ids[:5])
        monkeypatch.setattr(queue, "enqueue", real_enqueue)  # the sweeper publishes for real
        swept.append(requeue_stale(get_settings()))  # a worker's sweeper runs right now
        return sent + real_enqueue(settings, ids[5:])

    monkeypatch.setattr(queue, "enqueue", enqueue_with_a_sweep_midway)
    api = api_factory(REDIS_URL=own_redis.url, DJ_SWEEP_INTERVAL="3600", DJ_TASK_BATCH="1")  # a message each
    created = api.submit(body=run_body(n_items=10))
    assert swept == [0]
    assert None not in _enqueued_stamps(api.database_url, created["id"])
    assert redis.Redis.from_url(own_redis.url).llen("judgments") == created["n_judgments"] == 20


def test_a_run_that_could_not_be_published_is_left_to_the_sweeper(api: Api) -> None:
    created = api.submit()  # no REDIS_URL: publishing fails
    assert set(_enqueued_stamps(api.database_url, created["id"])) == {None}  # stale: the next sweep sends it
