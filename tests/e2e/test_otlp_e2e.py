"""Issue 38 end to end, as a team would run it: a chatbot on the ``openai`` SDK (against the simulator) instrumented
with each of ``opentelemetry-instrumentation-openai-v2``, OpenLLMetry's ``opentelemetry-instrumentation-openai`` and
``openinference-instrumentation-openai``, exporting with the SDK's ``OTLPSpanExporter`` configured by environment
variables only (endpoint, key header, resource attributes), to the API process; a worker judges what the monitor
samples. The monitor holds each response with its history and session boundaries, and judges them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from dialogue_judge.testing import LiveService
from judge_simulator.process import SimulatorProcess

from .test_webhooks_e2e import mint_key

pytestmark = [pytest.mark.e2e, pytest.mark.soak]  # about 45 s: ./scripts/test.sh -m soak runs it

REPO = Path(__file__).resolve().parents[2]
INSTRUMENTATIONS = {
    "openai-v2": {
        "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "SPAN_ONLY",
        "OTEL_SEMCONV_STABILITY_OPT_IN": "gen_ai_latest_experimental",
    },
    "openllmetry": {"TRACELOOP_TRACE_CONTENT": "true"},
    "openinference": {},
}
GAP_S = 2.0  # DJ_OTLP_SESSION_GAP for the test; the chatbot pauses longer between its sessions
PAUSE_S = 3.5


def run_chatbot(name: str, api: str, key: str, monitor: str, conversation: str, base_url: str) -> list[dict[str, Any]]:
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"{api}/v1/otlp/v1/traces",
        "OTEL_EXPORTER_OTLP_TRACES_HEADERS": f"Authorization=Bearer%20{key}",
        "OTEL_RESOURCE_ATTRIBUTES": f"service.name=pet-bot,service.version=v3.1,dialogue_judge.monitor={monitor}",
        **INSTRUMENTATIONS[name],
    }
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.otlp.chatbot",
            name,
            "--base-url",
            base_url,
            "--conversation",
            conversation,
            "--pause",
            str(PAUSE_S),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    held: list[dict[str, Any]] = json.loads(done.stdout.strip().splitlines()[-1])
    return held


def test_three_instrumentations_end_to_end(
    pg_url: str, redis_url: str, tmp_path: Path, judge_simulator: SimulatorProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    judge_simulator.reset(restore_script=True)
    judge = f"openai-compatible:sim-judge@{judge_simulator.base_url}"
    db_url = pg_url  # PostgreSQL (the API tests run the receiver on SQLite); one database keeps this under a minute
    key = mint_key(db_url, monkeypatch)
    headers = {"Authorization": f"Bearer {key}"}
    env = {"DJ_AUTH": "true", "DJ_JUDGE_URL_ALLOWLIST": judge_simulator.base_url, "DJ_OTLP_SESSION_GAP": str(GAP_S)}
    with LiveService(redis_url, db_url, tmp_path / "svc", env_overrides=env) as service:
        api = service.api_url
        created = httpx.post(
            f"{api}/v1/monitors",
            json={
                "name": "pet-bot",
                "rubrics": ["rsum-single"],
                "judges": [judge],
                "aspects": ["consistency"],
                "sample_rate": 1.0,
            },
            headers=headers,
            timeout=30,
        )
        assert created.status_code == 201, created.text
        monitor = created.json()
        held = {
            name: run_chatbot(name, api, key, monitor["id"], f"conv-{name}", judge_simulator.base_url)
            for name in INSTRUMENTATIONS
        }
        deadline = time.monotonic() + 120
        while True:
            info = httpx.get(f"{api}/v1/monitors/{monitor['id']}", headers=headers, timeout=30).json()
            status = info["status"]
            if status["otlp"] and status["otlp"]["responses"] >= 18 and status["pending_judgments"] == 0:
                break
            assert time.monotonic() < deadline, status
            time.sleep(0.5)
        assert status["otlp"]["no_content"] == 0 and status["otlp"]["waiting"] == 0, status
        items = httpx.get(
            f"{api}/v1/runs/{monitor['run_id']}/items", params={"limit": 100}, headers=headers, timeout=30
        ).json()["items"]
        assert len(items) == 18  # 3 instrumentations x 6 calls
        for name, conversation in held.items():
            mine = sorted(
                (i for i in items if i["meta"]["otlp"]["conversation_id"] == f"conv-{name}"),
                key=lambda i: len(i["dialogue"]),
            )
            assert len(mine) == 6, (name, [i["meta"]["otlp"] for i in items])
            for index, item in enumerate(mine):
                expected = []
                for turn in conversation[:index]:
                    expected += [("user", turn["user"], turn["session"]), ("bot", turn["bot"], turn["session"])]
                expected.append(("user", conversation[index]["user"], conversation[index]["session"]))
                got = [(t["speaker"], t["text"], t["session"]) for t in item["dialogue"]]
                assert got == expected, (name, index, got)
                assert item["candidates"] == {"pet-bot": conversation[index]["bot"]}
                assert item["memory"] and "Max" in item["memory"], (name, item["memory"])
                assert item["meta"]["version"] == "v3.1"
        judgments = httpx.get(
            f"{api}/v1/runs/{monitor['run_id']}/judgments", params={"limit": 100}, headers=headers, timeout=30
        ).json()["items"]
        assert len(judgments) == 18 and {j["status"] for j in judgments} == {"done"}
        series = httpx.get(f"{api}/v1/monitors/{monitor['id']}/series", headers=headers, timeout=30).json()
        assert sum(r["n"] for r in series["rows"]) == 18 and {r["version"] for r in series["rows"]} == {"v3.1"}
