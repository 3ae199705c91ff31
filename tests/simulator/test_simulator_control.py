"""Control endpoints, rate-limit emulation, latency, the CLI / SimulatorProcess lifecycle and
concurrent serving."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from judge_simulator import SimulatorError, SimulatorProcess

PROMPT = "Rate it as [[score]].\nResponse: ok <<q=61>>"


def _chat(client: httpx.Client, model: str = "gpt-4o") -> httpx.Response:
    return client.post("/v1/chat/completions", json={"model": model, "messages": [{"role": "user", "content": PROMPT}]})


def _message(client: httpx.Client, model: str = "claude-x") -> httpx.Response:
    body = {"model": model, "max_tokens": 64, "messages": [{"role": "user", "content": PROMPT}]}
    return client.post("/v1/messages", json=body)


@pytest.fixture
def http(sim: SimulatorProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=sim.root_url, timeout=10.0) as client:
        yield client


def test_stats_count_calls_by_model_status_endpoint_fault_and_rule(sim: SimulatorProcess, http: httpx.Client) -> None:
    sim.set_script({"faults": [{"kind": "server_error", "status": 503, "model": "^mini$", "first_n": 100}]})
    statuses = [
        _chat(http).status_code,
        _chat(http).status_code,
        _chat(http, "mini").status_code,
        _message(http).status_code,
    ]
    http.get("/v1/models")  # the readiness probe is not a model call
    assert statuses == [200, 200, 503, 200]
    stats = sim.stats()
    assert stats["total_calls"] == 4
    assert stats["by_model"] == {"gpt-4o": 2, "mini": 1, "claude-x": 1}
    assert stats["by_endpoint"] == {"/v1/chat/completions": 3, "/v1/messages": 1}
    assert stats["by_status"] == {"200": 3, "503": 1}
    assert stats["by_fault"] == {"server_error": 1}
    assert stats["by_rule"] == {"single-score": 3}
    assert stats["in_flight"] == 0 and stats["max_in_flight"] == 1


def test_reset_clears_stats_and_restarts_fault_schedules(sim: SimulatorProcess, http: httpx.Client) -> None:
    sim.set_script({"faults": [{"kind": "server_error", "first_n": 1}]})
    assert [_chat(http).status_code for _ in range(2)] == [500, 200]
    sim.reset()
    assert sim.stats()["total_calls"] == 0
    assert [_chat(http).status_code for _ in range(2)] == [500, 200]  # script kept, schedule restarted
    sim.reset(restore_script=True)
    assert sim.get_script()["faults"] == [] and _chat(http).status_code == 200


def test_set_script_round_trip_and_validation(sim: SimulatorProcess) -> None:
    normalized = sim.set_script({"seed": 9, "latency": "uniform(0.01, 0.02)"})
    assert normalized["latency"]["kind"] == "uniform" and normalized == sim.get_script()
    assert [r["name"] for r in normalized["rules"]] == [
        "fact-extract",
        "memory-audit",
        "fact-check",
        "pairwise-fastchat",
        "pairwise-graded",
        "single-json",
        "single-score",
    ]
    with pytest.raises(SimulatorError, match="422"):
        sim.set_script({"faults": [{"kind": "meltdown"}]})
    assert sim.get_script()["seed"] == 9  # a rejected script changes nothing
    response = httpx.put(sim.root_url + "/_sim/script", content=b'{"rules": [{"match": "("}]}')
    assert response.status_code == 422 and response.json()["error"]["type"] == "invalid_script"


def test_requests_log_keeps_what_the_client_sent(sim: SimulatorProcess) -> None:
    client = openai.OpenAI(base_url=sim.base_url, api_key="sk-test", max_retries=0)
    client.chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": PROMPT}], temperature=0, seed=17, max_tokens=99
    )
    [record] = sim.requests()
    assert record["body"]["seed"] == 17 and record["body"]["temperature"] == 0 and record["body"]["max_tokens"] == 99
    assert record["status"] == 200 and record["seq"] == 1 and record["fault"] is None


def test_rate_limit_rpm_per_model_with_retry_after(sim: SimulatorProcess, http: httpx.Client) -> None:
    sim.set_script({"rate_limit_rpm": 3})
    assert [_chat(http).status_code for _ in range(3)] == [200, 200, 200]
    limited = _chat(http)
    assert limited.status_code == 429 and limited.json()["error"]["code"] == "rate_limit_exceeded"
    assert 1 <= int(limited.headers["retry-after"]) <= 60
    assert 50_000 <= int(limited.headers["retry-after-ms"]) <= 60_000
    assert _chat(http, "gpt-4o-mini").status_code == 200  # the window is per model
    anthropic_limited = [_message(http).status_code for _ in range(4)]
    assert anthropic_limited == [200, 200, 200, 429]
    assert sim.stats()["by_fault"] == {"rate_limit_rpm": 2}


def test_rate_limit_rpm_window_slides(sim: SimulatorProcess, http: httpx.Client) -> None:
    sim.set_script({"rate_limit_rpm": 2, "rate_limit_window_seconds": 0.5})
    assert [_chat(http).status_code for _ in range(3)] == [200, 200, 429]
    time.sleep(0.6)
    assert _chat(http).status_code == 200


def test_rate_limit_rpm_through_the_sdk(sim: SimulatorProcess) -> None:
    sim.set_script({"rate_limit_rpm": 1})
    client = openai.OpenAI(base_url=sim.base_url, api_key="sk-test", max_retries=0)
    client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": PROMPT}])
    with pytest.raises(openai.RateLimitError) as caught:
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": PROMPT}])
    assert float(caught.value.response.headers["retry-after"]) > 0


def test_fixed_latency_delays_answers(sim: SimulatorProcess, http: httpx.Client) -> None:
    sim.set_script({"latency": "fixed(0.3)"})
    started = time.monotonic()
    assert _chat(http).status_code == 200
    assert 0.3 <= time.monotonic() - started < 2.0


def test_unknown_route_is_a_json_404(http: httpx.Client) -> None:
    response = http.get("/v1/nope")
    assert response.status_code == 404 and response.json()["error"]["type"] == "invalid_request_error"


def test_simulator_process_with_yaml_script(tmp_path: Path) -> None:
    script = tmp_path / "script.yaml"
    script.write_text("seed: 4\nrules:\n  - {name: fixed, kind: single, score: 12}\n", encoding="utf-8")
    with SimulatorProcess(script) as process:
        assert process.base_url == process.root_url + "/v1" and process.root_url.startswith("http://127.0.0.1:")
        assert process.get_script()["seed"] == 4
        reply = httpx.post(
            process.base_url + "/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "anything"}]},
        ).json()
        assert reply["choices"][0]["message"]["content"].endswith("[[12]]")
        process.reset(restore_script=True)
        assert process.get_script()["rules"][0]["name"] == "fixed"  # the startup script is the YAML one
        assert process.running
    assert not process.running and process.returncode is not None


def test_cli_rejects_a_bad_script(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"faults": [{"kind": "nope"}]}', encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "-m", "judge_simulator", "--port", "0", "--script", str(bad)],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert result.returncode == 2 and "cannot load script" in result.stderr and "SIMULATOR_URL" not in result.stdout
    with pytest.raises(SimulatorError, match="cannot load script"):
        SimulatorProcess(bad).start()


def test_two_hundred_concurrent_requests_with_half_second_latency(sim: SimulatorProcess) -> None:
    """A functional check that one uvicorn worker serves delayed calls concurrently (serially this
    would take 100 s). The load is spread over 10 ``httpx.AsyncClient`` pools of 20 connections:
    one pool opening 200 connections at once spends ~2 s in its own bookkeeping (httpcore), which
    would measure the client rather than the simulator."""
    sim.set_script({"latency": "fixed(0.5)"})
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": PROMPT}]}

    async def burst() -> list[int]:
        clients = [
            httpx.AsyncClient(base_url=sim.base_url, limits=httpx.Limits(max_connections=20), timeout=30.0)
            for _ in range(10)
        ]
        try:
            calls = (clients[i % 10].post("/chat/completions", json=body) for i in range(200))
            responses = await asyncio.gather(*calls)
        finally:
            await asyncio.gather(*(c.aclose() for c in clients))
        return [r.status_code for r in responses]

    started = time.monotonic()
    statuses = asyncio.run(burst())
    elapsed = time.monotonic() - started
    assert statuses == [200] * 200
    # the concurrency itself is max_in_flight below; the time bound only rules out serial service (100 s) and stays
    # far from it, so a loaded 2-core machine (seen: 3-7 s) does not fail a functional check
    assert elapsed < 30.0, f"200 calls with 0.5 s latency took {elapsed:.2f} s: not served concurrently"
    stats = sim.stats()
    assert stats["total_calls"] == 200 and stats["max_in_flight"] >= 150
