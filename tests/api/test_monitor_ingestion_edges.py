"""Monitor ingestion never answers 500 (issue 36, finding 7): a body nested too deeply, timestamps that leave the
calendar once moved to UTC, and more sampled responses than one request may plan (DJ_MAX_JUDGMENTS) are each a
4xx naming the field or the limit, and nothing is stored."""

from __future__ import annotations

from tests.api.conftest import Api, ApiFactory
from tests.api.test_monitors import create, response, table_counts


def test_a_body_nested_too_deeply_is_422_and_stores_nothing(api: Api) -> None:
    monitor = create(api, sample_rate=1.0)
    before = table_counts(api.database_url)
    for body in ("[" * 100_000, '{"id": "x"}\n' + "[" * 100_000, "[" + '{"meta": ' * 50_000 + "1" + "}" * 50_000 + "]"):
        answer = api.client.post(f"/v1/monitors/{monitor['id']}/responses", content=body)
        assert answer.status_code == 422, answer.text[:300]
        assert "nested too deeply" in answer.json()["detail"][0]["msg"]
    assert table_counts(api.database_url) == before


OUT_OF_RANGE = ("9999-12-31T23:30:00-05:00", "0001-01-01T01:00:00+05:00", "9999-12-31T23:30:00Z", "1900-01-01")


def test_a_timestamp_outside_the_calendar_in_utc_is_422_naming_it(api: Api) -> None:
    monitor = create(api, sample_rate=1.0)
    before = table_counts(api.database_url)
    for timestamp in OUT_OF_RANGE:
        answer = api.client.post(
            f"/v1/monitors/{monitor['id']}/responses", json=[response(0), response(1, timestamp=timestamp)]
        )
        assert answer.status_code == 422, (timestamp, answer.text)
        detail = answer.json()["detail"][0]
        assert detail["loc"][:3] == ["body", 1, "timestamp"] and "out of range" in detail["msg"], timestamp
    assert table_counts(api.database_url) == before
    for since in OUT_OF_RANGE[:2]:  # the series' ``since`` too
        answer = api.client.get(f"/v1/monitors/{monitor['id']}/series", params={"since": since})
        assert answer.status_code == 422 and answer.json()["detail"][0]["loc"] == ["query", "since"], since


def test_more_sampled_responses_than_one_request_may_plan_is_413_naming_the_limit(api_factory: ApiFactory) -> None:
    api = api_factory(DJ_MAX_JUDGMENTS="1000")
    monitor = create(api, sample_rate=1.0, aspects=None, daily_budget_usd=None)
    before = table_counts(api.database_url)
    answer = api.client.post(f"/v1/monitors/{monitor['id']}/responses", json=[response(i) for i in range(400)])
    assert answer.status_code == 413, answer.text[:500]
    message = answer.json()["detail"][0]["msg"]
    assert "400 sampled responses" in message and "DJ_MAX_JUDGMENTS=1000" in message
    assert table_counts(api.database_url) == before
    fits = api.client.post(f"/v1/monitors/{monitor['id']}/responses", json=[response(i) for i in range(100)])
    assert fits.status_code == 202 and fits.json()["sampled"] == 100
