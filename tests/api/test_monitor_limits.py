"""Monitors and alert rules per project have limits that the API states, and ``/metrics`` stays bounded however many
monitors tenants create and whatever they name them (issue 42, finding 9)."""

from __future__ import annotations

from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from judge_api import metrics

from .conftest import JUDGE, Api, ApiFactory

LONG = "x" * 150


def rule(i: int) -> dict[str, Any]:
    return {"name": f"r{i}-{'y' * 50}", "floor": {"below": 60, "min_n": 200}, "aspect": "consistency"}


def monitor(name: str, n_rules: int = 1) -> dict[str, Any]:
    return {
        "name": name,
        "rubrics": ["rsum-single"],
        "judges": [JUDGE],
        "aspects": ["consistency"],
        "sample_rate": 0.5,
        "alerts": [rule(i) for i in range(n_rules)],
    }


def limited(api_factory: ApiFactory) -> Api:
    built = api_factory(auth=True, DJ_MAX_MONITORS="3", DJ_MAX_RULES_PER_MONITOR="4")
    built.create_key("alpha", ["submit", "read"], "alpha")
    built.create_key("beta", ["submit", "read"], "beta")
    return built


def test_monitors_over_the_project_limit_are_refused_naming_it(api_factory: ApiFactory) -> None:
    api = limited(api_factory)
    for i in range(3):
        created = api.client.post("/v1/monitors", json=monitor(f"m{i}"), headers=api.as_key("alpha"))
        assert created.status_code == 201, created.text
    before = api.row_counts()
    refused = api.client.post("/v1/monitors", json=monitor("m3"), headers=api.as_key("alpha"))
    assert refused.status_code == 409, refused.text
    assert "DJ_MAX_MONITORS" in refused.text and "3 monitors" in refused.text
    assert api.row_counts() == before  # nothing stored
    other = api.client.post("/v1/monitors", json=monitor("b0"), headers=api.as_key("beta"))
    assert other.status_code == 201, other.text  # the limit is per project


def test_rules_over_the_monitor_limit_are_refused_on_create_and_patch(api_factory: ApiFactory) -> None:
    api = limited(api_factory)
    refused = api.client.post("/v1/monitors", json=monitor("m", n_rules=5), headers=api.as_key("alpha"))
    assert refused.status_code == 422, refused.text
    (error,) = refused.json()["detail"]
    assert (
        error["loc"] == ["body", "alerts"]
        and "limit of 4" in error["msg"]
        and "DJ_MAX_RULES_PER_MONITOR" in error["msg"]
    )
    created = api.client.post("/v1/monitors", json=monitor("m", n_rules=4), headers=api.as_key("alpha"))
    assert created.status_code == 201, created.text
    monitor_id = created.json()["id"]
    patched = api.client.patch(
        f"/v1/monitors/{monitor_id}", json={"alerts": [rule(i) for i in range(5)]}, headers=api.as_key("alpha")
    )
    assert patched.status_code == 422 and "DJ_MAX_RULES_PER_MONITOR" in patched.text
    kept = api.client.get(f"/v1/monitors/{monitor_id}", headers=api.as_key("alpha")).json()
    assert len(kept["alerts"]) == 4


def test_the_api_states_its_limits(api_factory: ApiFactory) -> None:
    api = limited(api_factory)
    limits = api.client.get("/v1/limits", headers=api.as_key("alpha"))
    assert limits.status_code == 200, limits.text
    assert limits.json()["max_monitors_per_project"] == 3 and limits.json()["max_rules_per_monitor"] == 4
    assert api.client.get("/v1/limits").status_code == 401  # like every other route with auth on


def alert_series(api: Api) -> list[dict[str, str]]:
    text = api.client.get("/metrics").text
    return [
        sample.labels
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "dialogue_judge_monitor_alert"
    ]


def test_metrics_stay_bounded_and_carry_no_tenant_names(api_factory: ApiFactory) -> None:
    api = limited(api_factory)
    for i in range(30):  # tenants try far more than the limit, with long names
        api.client.post("/v1/monitors", json=monitor(f"{LONG}-{i}", n_rules=4), headers=api.as_key("alpha"))
    series = alert_series(api)
    assert 0 < len(series) <= 3 * 4  # DJ_MAX_MONITORS x DJ_MAX_RULES_PER_MONITOR
    text = api.client.get("/metrics").text
    assert LONG not in text and "yyyy" not in text  # neither monitor nor rule names are labels
    assert all(set(labels) == {"monitor", "rule_index"} for labels in series)


def test_judge_labels_are_capped_per_process() -> None:
    for i in range(metrics.MAX_JUDGE_LABELS + 150):
        metrics.judgment_finished(f"openai:tenant-model-{i}-{'z' * 300}", {"status": "done"})
    judges = {
        sample.labels["judge"]
        for family in text_string_to_metric_families(metrics.exposition()[0].decode())
        for sample in family.samples
        if sample.name == "dj_judgments_total"
    }
    assert len(judges) <= metrics.MAX_JUDGE_LABELS + 1 and metrics.OTHER_JUDGE in judges
    assert all(len(judge) <= metrics.MAX_JUDGE_LABEL_CHARS for judge in judges)
