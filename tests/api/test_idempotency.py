"""Idempotency-Key on POST /v1/runs and /v1/runs/jsonl, in process on SQLite and PostgreSQL: a repeated request
returns the run the first one created (and stores nothing more); another body, another endpoint or another
project's key is told apart; a rejected request stores no key; a key is forgotten after DJ_IDEMPOTENCY_TTL; a
repeat does not count against the submission rate limit."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from judge_api.models import utcnow

from .conftest import JUDGE, Api, ApiFactory, item, run_body

HEADER = "Idempotency-Key"


@pytest.fixture(params=["sqlite", "postgres"])
def backend_url(request: pytest.FixtureRequest) -> Iterator[str | None]:
    yield request.getfixturevalue("pg_url") if request.param == "postgres" else None


def key_rows(api: Api) -> list[dict[str, Any]]:
    engine = create_engine(api.database_url)
    try:
        with engine.connect() as connection:
            rows = connection.execute(
                text("SELECT project_id, key, endpoint, run_id, created_at FROM idempotency_keys ORDER BY key")
            )
            return [dict(r._mapping) for r in rows]
    finally:
        engine.dispose()


def post(api: Api, body: dict[str, Any], key: str | None, auth: str | None = None) -> Any:
    headers = {**api.as_key(auth), **({HEADER: key} if key is not None else {})}
    return api.client.post("/v1/runs", json=body, headers=headers)


def post_jsonl(api: Api, items: list[dict[str, Any]], key: str | None, **params: str) -> Any:
    content = "\n".join(json.dumps(i) for i in items).encode()
    query = {"rubric": "rsum-single", "judge": JUDGE, **params}
    headers = {HEADER: key} if key is not None else {}
    return api.client.post("/v1/runs/jsonl", content=content, params=query, headers=headers)


def test_same_key_same_body_returns_the_same_run(api_factory: ApiFactory, backend_url: str | None) -> None:
    api = api_factory(database_url=backend_url)
    body = run_body(n_items=3)
    first = post(api, body, "key-1")
    assert first.status_code == 202, first.text
    assert "idempotent-replayed" not in first.headers
    counts = api.row_counts()
    for _ in range(3):
        again = post(api, body, "key-1")
        assert again.status_code == 202, again.text
        assert again.json() == first.json()
        assert again.headers["idempotent-replayed"] == "true"
    assert api.row_counts() == counts  # nothing more stored: no run, item, judgment or key
    assert counts["runs"] == 1 and counts["idempotency_keys"] == 1
    # the same key in its IETF structured-field form (a quoted string) is the same key
    assert post(api, body, '"key-1"').json()["id"] == first.json()["id"]
    # without a key, or with another key, the same body is a new run
    assert post(api, body, None).json()["id"] != first.json()["id"]
    assert post(api, body, "key-2").json()["id"] != first.json()["id"]
    assert api.row_counts()["runs"] == 3


def test_same_key_different_body_is_409_and_stores_nothing(api_factory: ApiFactory, backend_url: str | None) -> None:
    api = api_factory(database_url=backend_url)
    run_id = post(api, run_body(n_items=2), "key-1").json()["id"]
    before = api.row_counts()
    for changed in (run_body(n_items=3), run_body(n_items=2, name="another name"), run_body(n_items=2, aspects=None)):
        conflict = post(api, changed, "key-1")
        assert conflict.status_code == 409, conflict.text
        detail = conflict.json()["detail"]
        assert "Idempotency-Key 'key-1'" in detail and "different body" in detail and run_id in detail
    # the order of an item's candidates decides the pairs' presentation: a different order is a different body
    swapped = run_body(n_items=2)
    swapped["items"][0]["candidates"] = dict(reversed(list(swapped["items"][0]["candidates"].items())))
    assert post(api, swapped, "key-1").status_code == 409
    assert api.row_counts() == before


def test_a_key_belongs_to_one_endpoint(api_factory: ApiFactory) -> None:
    api = api_factory()
    items = [item(i) for i in range(2)]
    created = post_jsonl(api, items, "key-j", mode="single")
    assert created.status_code == 202, created.text
    replay = post_jsonl(api, items, "key-j", mode="single")
    assert replay.status_code == 202 and replay.json() == created.json()
    assert replay.headers["idempotent-replayed"] == "true"
    assert post_jsonl(api, items[:1], "key-j", mode="single").status_code == 409  # another body
    assert post_jsonl(api, items, "key-j", mode="single", name="renamed").status_code == 409  # another setting
    body = {"items": items, "rubrics": ["rsum-single"], "judges": [JUDGE], "mode": ["single"]}
    other = post(api, body, "key-j")
    assert other.status_code == 409
    assert "for POST /v1/runs/jsonl" in other.json()["detail"]
    assert api.row_counts()["runs"] == 1


def test_keys_are_per_project(secured: Api) -> None:
    body = run_body()
    alpha = post(secured, body, "shared-key", auth="alpha")
    beta = post(secured, body, "shared-key", auth="beta")
    assert alpha.status_code == beta.status_code == 202
    assert alpha.json()["id"] != beta.json()["id"]
    # each project gets its own run back, and cannot read the other's
    assert post(secured, body, "shared-key", auth="beta").json()["id"] == beta.json()["id"]
    assert post(secured, body, "shared-key", auth="alpha").json()["id"] == alpha.json()["id"]
    assert secured.client.get(f"/v1/runs/{alpha.json()['id']}", headers=secured.as_key("beta")).status_code == 404
    # a different body under another project's key is no conflict there
    assert post(secured, run_body(n_items=4), "beta-only", auth="beta").status_code == 202
    assert post(secured, run_body(n_items=1), "beta-only", auth="alpha").status_code == 202
    assert {(r["project_id"], r["key"]) for r in key_rows(secured)} == {
        ("alpha", "shared-key"),
        ("beta", "shared-key"),
        ("alpha", "beta-only"),
        ("beta", "beta-only"),
    }


@pytest.mark.parametrize(
    ("key", "reason"),
    [
        ("x" * 256, "is 256 characters long; at most 255"),
        ("has space", "not allowed (' ')"),
        ("semi;colon", "not allowed (';')"),
        ("", "must not be empty"),
        ('""', "must not be empty"),
    ],
)
def test_a_bad_key_is_422_naming_the_header(api: Api, key: str, reason: str) -> None:
    before = api.row_counts()
    for response in (post(api, run_body(), key), post_jsonl(api, [item(0)], key)):
        assert response.status_code == 422, response.text
        (error,) = response.json()["detail"]
        assert error["loc"] == ["header", HEADER] and reason in error["msg"], error
    assert api.row_counts() == before


def test_the_longest_key_and_every_allowed_character_work(api: Api) -> None:
    for key in ("k" * 255, "AZaz09-_.:~+/=", "3f2a0b1c-8d9e-4f00-9a1b-2c3d4e5f6a7b"):
        first = post(api, run_body(), key)
        assert first.status_code == 202, first.text
        assert post(api, run_body(), key).json()["id"] == first.json()["id"]


def test_a_rejected_request_stores_no_key(api: Api) -> None:
    """Validation failed, nothing ran: the same key may then be used with the corrected body (Stripe's rule)."""
    bad = run_body()
    bad["rubrics"] = ["no-such-rubric"]
    before = api.row_counts()
    assert post(api, bad, "key-fix").status_code == 422
    assert api.row_counts() == before
    fixed = post(api, run_body(), "key-fix")
    assert fixed.status_code == 202 and "idempotent-replayed" not in fixed.headers


def test_a_key_is_forgotten_after_the_ttl(api: Api) -> None:
    first = post(api, run_body(), "old-key").json()["id"]
    engine = create_engine(api.database_url)
    try:
        with engine.begin() as connection:  # 24 h and a minute ago: past the default DJ_IDEMPOTENCY_TTL
            connection.execute(
                text("UPDATE idempotency_keys SET created_at = :t"), {"t": utcnow() - timedelta(hours=24, minutes=1)}
            )
    finally:
        engine.dispose()
    again = post(api, run_body(n_items=5), "old-key")  # even another body: the old record is gone
    assert again.status_code == 202 and again.json()["id"] != first
    rows = key_rows(api)
    assert [(r["key"], r["run_id"]) for r in rows] == [("old-key", again.json()["id"])]
    # kept for a day: one just under 24 h old still answers
    engine = create_engine(api.database_url)
    try:
        with engine.begin() as connection:
            connection.execute(
                text("UPDATE idempotency_keys SET created_at = :t"), {"t": utcnow() - timedelta(hours=23, minutes=59)}
            )
    finally:
        engine.dispose()
    assert post(api, run_body(n_items=5), "old-key").json()["id"] == again.json()["id"]


def test_the_ttl_cannot_be_set_below_a_day() -> None:
    from pydantic import ValidationError

    from judge_api.config import Settings

    with pytest.raises(ValidationError, match="DJ_IDEMPOTENCY_TTL"):
        Settings(DJ_IDEMPOTENCY_TTL=3600)
    assert Settings(DJ_IDEMPOTENCY_TTL=172800).idempotency_ttl_s == 172800


def test_a_repeat_does_not_count_against_the_rate_limit(api_factory: ApiFactory) -> None:
    api = api_factory(DJ_RUNS_PER_MINUTE="1")
    first = post(api, run_body(), "key-r")
    assert first.status_code == 202
    for _ in range(3):
        assert post(api, run_body(), "key-r").json()["id"] == first.json()["id"]
    assert post(api, run_body(), "key-other").status_code == 429  # a new submission is still limited


def test_expired_keys_are_pruned_after_a_keyed_submission(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    from judge_api.routers import runs

    for key in ("stale-1", "stale-2", "fresh"):
        assert post(api, run_body(), key).status_code == 202
    engine = create_engine(api.database_url)
    try:
        with engine.begin() as connection:
            connection.execute(
                text("UPDATE idempotency_keys SET created_at = :t WHERE key LIKE 'stale-%'"),
                {"t": utcnow() - timedelta(days=2)},
            )
    finally:
        engine.dispose()
    monkeypatch.setattr(runs, "_last_prune", -runs.PRUNE_EVERY_S)  # the once-per-10-minutes throttle
    assert post(api, run_body(), "new").status_code == 202  # the prune runs after the response
    assert sorted(r["key"] for r in key_rows(api)) == ["fresh", "new"]
    assert api.row_counts()["runs"] == 4  # the runs stay; only their keys are forgotten


def test_a_field_added_with_a_default_does_not_change_the_fingerprint() -> None:
    """Issue 28.6: the fingerprint once took every field, defaulted ones included, so a client's retry of the same
    body across a deploy that added a defaulted field got 409."""
    from judge_api.idempotency import request_hash
    from judge_api.schemas import RunCreate

    class Deployed(RunCreate):
        new_option: int = 7

    body = run_body(n_items=2)
    before = request_hash(RunCreate.model_validate(body))
    assert request_hash(Deployed.model_validate(body)) == before
    assert request_hash(Deployed.model_validate({**body, "new_option": 7})) == before  # sent at its default
    assert request_hash(Deployed.model_validate({**body, "new_option": 8})) != before  # another request
    assert request_hash(RunCreate.model_validate({**body, "name": "other"})) != before


def test_a_key_stored_with_the_earlier_fingerprint_still_replays(api: Api) -> None:
    from judge_api.idempotency import legacy_request_hash
    from judge_api.schemas import RunCreate

    body = run_body(n_items=2)
    first = post(api, body, "key-old")
    assert first.status_code == 202, first.text
    engine = create_engine(api.database_url)
    try:
        with engine.begin() as connection:  # as a key stored before this version computed it
            connection.execute(
                text("UPDATE idempotency_keys SET request_hash = :h WHERE key = 'key-old'"),
                {"h": legacy_request_hash(RunCreate.model_validate(body))},
            )
    finally:
        engine.dispose()
    again = post(api, body, "key-old")
    assert again.status_code == 202, again.text
    assert again.json()["id"] == first.json()["id"] and again.headers["idempotent-replayed"] == "true"
    assert post(api, {**body, "name": "other"}, "key-old").status_code == 409
