"""Monitor alerts through the real stack (API process, Celery worker process, Redis, SQLite and PostgreSQL, the
simulator judge with scripted scores, a loopback webhook receiver): a planted regression of version v2 against v1
opens exactly one alert with its evidence, its signed ``alert.opened`` webhook reaches the receiver and verifies, the
Prometheus gauge says so; a monitor whose versions score alike opens none; once v2 scores as v1 again the alert
resolves (``alert.resolved``)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from dialogue_judge.testing import LiveService
from judge_api import webhooks
from judge_simulator.process import SimulatorProcess

from .receiver import WebhookReceiver

pytestmark = [pytest.mark.e2e]

SECRET = "monitor-secret-0123456789"


def response(i: int, version: str, score: int, tag: str) -> dict[str, Any]:
    return {
        "id": f"{tag}-{version}-{i}",
        "dialogue": [
            {"speaker": "user", "text": f"My dog is called Rex {i} ({tag}).", "session": 1},
            {"speaker": "user", "text": "What's my dog's name?", "session": 2},
        ],
        "persona": {"user": ["I have a dog called Rex."], "bot": []},
        "response": f"Your dog is Rex {i}. <<q={score}>>",
        "system": "bot",
        "version": version,
    }


def monitor_body(name: str, judge: str, callback: str) -> dict[str, Any]:
    return {
        "name": name,
        "rubrics": ["rsum-single"],
        "judges": [judge],
        "aspects": ["consistency"],
        "sample_rate": 1.0,
        "alerts": [
            {
                "name": "v-regression",
                "compare": {"by": "version", "baseline": "v1", "candidate": "v2"},
                "aspect": "consistency",
                "confidence": 0.95,
            }
        ],
        "callback_url": callback,
        "callback_secret": SECRET,
    }


def post(api: str, monitor_id: str, responses: list[dict[str, Any]]) -> None:
    answer = httpx.post(f"{api}/v1/monitors/{monitor_id}/responses", json=responses, timeout=60)
    assert answer.status_code == 202, answer.text
    assert answer.json()["sampled"] == len(responses)


def alerts(api: str, monitor_id: str) -> list[dict[str, Any]]:
    answer = httpx.get(f"{api}/v1/monitors/{monitor_id}/alerts", timeout=30)
    assert answer.status_code == 200, answer.text
    return list(answer.json()["items"])


def gauge(api: str) -> dict[tuple[str, str], float]:
    text = httpx.get(f"{api}/metrics", timeout=30).text
    return {
        (s.labels["monitor"], s.labels["rule_index"]): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "dialogue_judge_monitor_alert"
    }


def judged(api: str, run_id: str) -> int:
    return int(httpx.get(f"{api}/v1/runs/{run_id}", timeout=30).json()["counts"]["done"])


def wait(predicate: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.5)
    raise TimeoutError(what)


def test_planted_regression_fires_one_signed_alert_no_change_fires_none_and_it_resolves(
    db_url: str, redis_url: str, tmp_path: Path, judge_simulator: SimulatorProcess
) -> None:
    judge_simulator.reset(restore_script=True)
    judge = f"openai-compatible:sim-judge@{judge_simulator.base_url}"
    # deterministic "noise": scores cycle around the version's level
    wobble = [-9, 4, -3, 8, 0, -6, 7, -1, 3, -4]
    with WebhookReceiver([200]) as receiver:
        service = LiveService(redis_url, db_url, tmp_path / "svc", env_overrides={"DJ_WEBHOOK_BACKOFF": "0.5"})
        with service:
            api = service.api_url
            planted = httpx.post(f"{api}/v1/monitors", json=monitor_body("planted", judge, receiver.url + "/a"))
            steady = httpx.post(f"{api}/v1/monitors", json=monitor_body("steady", judge, receiver.url + "/b"))
            assert planted.status_code == 201 and steady.status_code == 201, (planted.text, steady.text)
            planted_id, steady_id = planted.json()["id"], steady.json()["id"]
            n = 60
            interleaved = [
                r
                for i in range(n)
                for r in (
                    response(i, "v1", 80 + wobble[i % 10], "p"),
                    response(i, "v2", 55 + wobble[(i + 3) % 10], "p"),
                )
            ]
            alike = [
                r
                for i in range(n)
                for r in (
                    response(i, "v1", 80 + wobble[i % 10], "s"),
                    response(i, "v2", 80 + wobble[(i + 5) % 10], "s"),
                )
            ]
            post(api, planted_id, interleaved)
            post(api, steady_id, alike)
            planted_run, steady_run = planted.json()["run_id"], steady.json()["run_id"]
            wait(lambda: judged(api, planted_run) == 2 * n and judged(api, steady_run) == 2 * n, 120, "verdicts")
            wait(lambda: len(alerts(api, planted_id)) >= 1, 30, "the alert")
            receiver.wait_for(lambda got: len(got) >= 1, 30, "the alert webhook")
            time.sleep(4)  # more sweeps: still exactly one alert, one webhook
            opened = alerts(api, planted_id)
            assert len(opened) == 1 and opened[0]["status"] == "open" and opened[0]["rule"] == "v-regression"
            evidence = opened[0]["evidence"]
            assert evidence["decision"] == "regression" and evidence["confidence"] == 0.95
            assert 15 < evidence["difference"] < 35 and evidence["ci_low"] > 0 and evidence["n"] <= n
            assert 1 <= evidence["decided_at"] <= evidence["n"]
            assert evidence["slices"] == {"by": "version", "baseline": "v1", "candidate": "v2"}
            assert len(evidence["worst"]) == 5
            assert all(w["version"] == "v2" and w["score"] <= 50 for w in evidence["worst"])
            assert evidence["worst"][0]["response"].startswith("Your dog is Rex")
            assert alerts(api, steady_id) == []

            got = list(receiver.requests)
            assert len(got) == 1 and got[0].path == "/a"
            payload = webhooks.verify(got[0].body, got[0].headers, SECRET)
            assert payload["event"] == "alert.opened" and payload["monitor"]["id"] == planted_id
            assert payload["rule"]["name"] == "v-regression" and payload["alert"]["id"] == opened[0]["id"]
            assert payload["alert"]["evidence"]["difference"] == evidence["difference"]

            values = gauge(api)
            assert values[(planted_id, "0")] == 1.0 and values[(steady_id, "0")] == 0.0  # rule "v-regression"
            deliveries = httpx.get(f"{api}/v1/monitors/{planted_id}/deliveries", timeout=30).json()
            assert deliveries["total"] == 1 and deliveries["items"][0]["status"] == "delivered"
            assert SECRET not in str(deliveries)

            # v2 recovers: as many new pairs as the alert needed, scored as v1, resolve it
            needed = int(evidence["n"])
            recovered = [response(1000 + i, "v2", 80 + wobble[(i + 7) % 10], "p") for i in range(needed + 5)]
            post(api, planted_id, recovered)
            wait(lambda: judged(api, planted_run) == 2 * n + len(recovered), 120, "the recovery's verdicts")
            wait(lambda: alerts(api, planted_id)[0]["status"] == "resolved", 30, "the resolution")
            receiver.wait_for(lambda got: len(got) >= 2, 30, "the resolution webhook")
            final = alerts(api, planted_id)
            assert len(final) == 1 and final[0]["resolution"]["decision"] == "undecided"
            assert "show no regression" in final[0]["resolution"]["reason"]
            resolved = webhooks.verify(receiver.requests[1].body, receiver.requests[1].headers, SECRET)
            assert resolved["event"] == "alert.resolved" and resolved["alert"]["status"] == "resolved"
            assert gauge(api)[(planted_id, "0")] == 0.0
            assert alerts(api, steady_id) == [] and len(receiver.requests) == 2
