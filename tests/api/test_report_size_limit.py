"""``DJ_MAX_REPORT_JUDGMENTS``: the routes that read a run's whole frame into the API's memory (the report, the
agreement, the calibrated estimate, the label queue) refuse a run with more judgments with a 409 naming the setting
and the run's count, storing nothing; a monitor's run grows without bound and used to be read whole (~0.8-0.9 GB of
API memory a million judgments, more with every day). What pages, streams or aggregates still answers."""

from __future__ import annotations

import pytest

from judge_api.config import DEFAULT_REPORT_JUDGMENTS, Settings

from .conftest import Api, ApiFactory, run_body

FRAME_ROUTES = [
    ("GET", "/v1/runs/{id}/report"),
    ("GET", "/v1/runs/{id}/agreement"),
    ("GET", "/v1/runs/{id}/calibrated"),
    ("POST", "/v1/runs/{id}/label-queue"),
    ("GET", "/v1/runs/{id}/label-queue"),
    # every group or fact label read, then paged in Python (review r56b)
    ("GET", "/v1/runs/{id}/item-scores"),
    ("GET", "/v1/runs/{id}/facts"),
]


def _rate(api: Api, run_id: str) -> None:
    ratings = [
        {"item_id": f"item-{i}", "system": s, "aspect": "consistency", "rater": "ann", "kind": "score", "value": 5.0,
         "scale_min": 1.0, "scale_max": 10.0}
        for i in range(2) for s in ("a", "b")
    ]  # fmt: skip
    response = api.client.post(f"/v1/runs/{run_id}/human-ratings", json={"ratings": ratings})
    assert response.status_code == 201, response.text


@pytest.mark.parametrize(("method", "path"), FRAME_ROUTES)
def test_a_run_over_the_limit_is_refused_with_the_setting_and_its_count(
    api_factory: ApiFactory, method: str, path: str
) -> None:
    api = api_factory(DJ_MAX_REPORT_JUDGMENTS="3")
    run_id = api.submit(body=run_body(2))["id"]
    assert api.client.get(f"/v1/runs/{run_id}").json()["n_judgments"] == 4
    _rate(api, run_id)
    before = api.row_counts()
    response = api.client.request(method, path.format(id=run_id), json={"n": 1} if method == "POST" else None)
    assert response.status_code == 409, response.text
    detail = response.json()["detail"]
    assert "DJ_MAX_REPORT_JUDGMENTS" in detail and "holds 4 judgments" in detail and "the 3 " in detail, detail
    assert api.row_counts() == before  # no report kept, no label queue drawn


@pytest.mark.parametrize(("method", "path"), FRAME_ROUTES)
def test_a_run_within_the_limit_is_read(api_factory: ApiFactory, method: str, path: str) -> None:
    api = api_factory(DJ_MAX_REPORT_JUDGMENTS="4")
    run_id = api.submit(body=run_body(2))["id"]
    _rate(api, run_id)
    response = api.client.request(method, path.format(id=run_id), json={"n": 1} if method == "POST" else None)
    # the judgments are still pending: the label queue has nothing to draw from (its own 409), the rest answer
    if "label-queue" in path:
        assert response.status_code in (404, 409) and "DJ_MAX_REPORT_JUDGMENTS" not in response.text, response.text
    else:
        assert response.status_code == 200, response.text


def test_what_pages_or_streams_a_run_over_the_limit_still_answers(api_factory: ApiFactory) -> None:
    api = api_factory(DJ_MAX_REPORT_JUDGMENTS="3")
    run_id = api.submit(body=run_body(2))["id"]
    for path in ("", "/judgments", "/judgments?format=jsonl", "/judgments?format=csv", "/order-outcomes"):
        response = api.client.get(f"/v1/runs/{run_id}{path}")
        assert response.status_code == 200, (path, response.text)
    assert api.client.get("/v1/limits").json()["max_judgments_per_report"] == 3


@pytest.mark.parametrize(
    ("env", "limit"),
    [
        ({}, DEFAULT_REPORT_JUDGMENTS),
        ({"DJ_MAX_JUDGMENTS": "3000000"}, 3_000_000),  # every run accepted in one piece is read back
        ({"DJ_MAX_JUDGMENTS": "3000000", "DJ_MAX_REPORT_JUDGMENTS": "10"}, 10),  # an operator's choice stands
    ],
)
def test_the_default_limit_reads_back_every_run_a_deployment_accepts(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], limit: int
) -> None:
    monkeypatch.delenv("DJ_MAX_REPORT_JUDGMENTS", raising=False)
    monkeypatch.delenv("DJ_MAX_JUDGMENTS", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert Settings().report_judgments_limit == limit


@pytest.mark.parametrize("value", ["0", "-1", "many"])
def test_a_bad_limit_is_a_settings_error_naming_it(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    from pydantic import ValidationError

    monkeypatch.setenv("DJ_MAX_REPORT_JUDGMENTS", value)
    with pytest.raises(ValidationError, match="DJ_MAX_REPORT_JUDGMENTS"):
        Settings()
