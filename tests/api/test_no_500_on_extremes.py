"""Extreme input is a clear 4xx naming the problem, never a 500, and stores nothing (issue 42, finding 10): an age
beyond any date for ``POST /v1/runs/prune``, and JSON nested thousands of levels deep on every route that reads a
JSON body."""

from __future__ import annotations

import json

import pytest

from .conftest import Api, item, run_body

DEEP = "[" * 100_000
MIDDLE = "[" * 500 + "]" * 500  # parses, but deeper than any request needs


@pytest.mark.parametrize(
    "older_than",
    ["999999999d", "1000000000d", "99999999999999999999999999999w", "1" + "0" * 5000 + "s", "36501d", "5x", "-1d", "d"],
)
def test_prune_with_an_impossible_age_is_422_naming_older_than(api: Api, older_than: str) -> None:
    api.submit()
    before = api.row_counts()
    answer = api.client.post("/v1/runs/prune", params={"older_than": older_than})
    assert answer.status_code == 422, answer.text
    (error,) = answer.json()["detail"]
    assert error["loc"] == ["query", "older_than"], error
    assert api.row_counts() == before


def test_prune_at_the_limit_still_works(api: Api) -> None:
    api.submit()
    answer = api.client.post("/v1/runs/prune", params={"older_than": "36500d"})
    assert answer.status_code == 200, answer.text
    assert answer.json()["deleted"] == []


def run_id(api: Api) -> str:
    return str(api.submit()["id"])


ROUTES = [
    ("/v1/runs/jsonl", {"rubric": "rsum-single", "judge": "openai:gpt-4o-mini"}, "application/x-ndjson"),
    ("/v1/runs/import", {}, "application/x-ndjson"),
    ("/v1/runs", {}, "application/json"),
    ("/v1/runs/estimate", {}, "application/json"),
    ("/v1/monitors", {}, "application/json"),
    ("/v1/runs/{run}/human-ratings", {}, "application/json"),
    ("/v1/runs/{run}/verdicts", {}, "application/json"),
    ("/v1/runs/{run}/verdicts", {"format": "jsonl"}, "application/x-ndjson"),
    ("/v1/runs/{run}/verdicts", {"format": "alpacaeval"}, "application/json"),
    ("/v1/monitors/{monitor}/responses", {}, "application/json"),
    ("/v1/monitors/{monitor}/responses", {}, "application/x-ndjson"),
    ("/v1/otlp/v1/traces", {}, "application/json"),
]


@pytest.mark.parametrize("body", [DEEP, MIDDLE], ids=["100000-levels", "500-levels"])
def test_deeply_nested_json_is_a_4xx_on_every_json_route_and_stores_nothing(api: Api, body: str) -> None:
    monitor = api.client.post(
        "/v1/monitors",
        json={"name": "m", "rubrics": ["rsum-single"], "judges": ["openai:gpt-4o-mini"], "sample_rate": 1.0},
    )
    assert monitor.status_code == 201, monitor.text
    target_run = run_id(api)
    before = api.row_counts()
    for path, params, content_type in ROUTES:
        url = path.format(run=target_run, monitor=monitor.json()["id"])
        answer = api.client.post(url, params=params, content=body.encode(), headers={"Content-Type": content_type})
        assert 400 <= answer.status_code < 500, (path, params, answer.status_code, answer.text[:500])
        if body is DEEP:  # past the parser's own limit: the answer says what is wrong
            assert "nested too deeply" in answer.text, (path, params, answer.text[:500])
    assert api.row_counts() == before


def test_the_jsonl_route_names_the_line_nested_too_deeply(api: Api) -> None:
    body = json.dumps(item(0)) + "\n" + DEEP
    answer = api.client.post(
        "/v1/runs/jsonl", params={"rubric": "rsum-single", "judge": "openai:gpt-4o-mini"}, content=body.encode()
    )
    assert answer.status_code == 422, answer.text
    (error,) = answer.json()["detail"]
    assert error["loc"] == ["body", "items", "line 2"] and "nested too deeply" in error["msg"]
    ok = api.client.post("/v1/runs", json=run_body())
    assert ok.status_code == 202  # the API goes on
