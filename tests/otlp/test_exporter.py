"""The SDK's real ``OTLPSpanExporter`` (opentelemetry-exporter-otlp-proto-http) posting to the app served by uvicorn:
configured by the environment variables a team sets (endpoint, key header), gzip or not, its export succeeds, the
spans become the monitor's responses, and exporting the same spans again (a retry) judges nothing twice. A wrong
key is a failed export."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from dialogue_judge.stack import free_port


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """The app (auth on, SQLite) under uvicorn on a free port, and a submit key."""
    from judge_api.app import create_app
    from judge_api.auth import create_key
    from judge_api.config import reset_settings_cache
    from judge_api.db import reset_engines, session_scope
    from judge_api.migrate import upgrade

    home: Path = tmp_path_factory.mktemp("exporter")
    url = f"sqlite:///{home / 'api.db'}"
    with pytest.MonkeyPatch.context() as env:
        for name, value in {
            "DJ_HOME": str(home / "home"),
            "DATABASE_URL": url,
            "DJ_AUTH": "true",
            "DJ_JUDGE_URL_ALLOWLIST": "http://127.0.0.1:9/v1",
            "DJ_OTLP_PROCESS": "workers",  # no processor thread: the test takes the processing step (process)
        }.items():
            env.setenv(name, value)
        env.delenv("REDIS_URL", raising=False)
        reset_settings_cache()
        reset_engines()
        upgrade(url)
        with session_scope() as session:
            _, key = create_key(session, "team", "exporter", ["submit", "read"])
        port = free_port()
        server = uvicorn.Server(uvicorn.Config(create_app(), host="127.0.0.1", port=port, log_level="warning"))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        deadline = time.monotonic() + 30
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.05)
        try:
            yield f"http://127.0.0.1:{port}", key
        finally:
            server.should_exit = True
            thread.join(15)
    reset_settings_cache()
    reset_engines()


def process() -> int:
    """The processors' step (no Redis here, so no sweeper runs it)."""
    from judge_api.config import get_settings
    from judge_api.db import session_factory
    from judge_api.otlp.intake import process_received

    return process_received(session_factory(), get_settings())


def llm_spans(monitor: str, conversation: str) -> list[ReadableSpan]:
    """Two calls of one conversation recorded by the SDK with the current GenAI attributes."""
    memory = InMemorySpanExporter()
    resource = Resource.create({"service.name": "sdk-bot", "service.version": "v9", "dialogue_judge.monitor": monitor})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("test")
    history: list[dict[str, Any]] = []
    for user, bot in (("My cat is Tom.", "Hi Tom's human!"), ("What's my cat's name?", "Tom.")):
        history.append({"role": "user", "parts": [{"type": "text", "content": user}]})
        with tracer.start_as_current_span("chat gpt-4o-mini") as span:
            span.set_attribute("gen_ai.operation.name", "chat")
            span.set_attribute("gen_ai.conversation.id", conversation)
            span.set_attribute("gen_ai.input.messages", json.dumps(history))
            span.set_attribute(
                "gen_ai.output.messages",
                json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": bot}]}]),
            )
        history.append({"role": "assistant", "parts": [{"type": "text", "content": bot}]})
    provider.shutdown()
    return list(memory.get_finished_spans())


def monitor_items(api: str, key: str, monitor: dict[str, Any]) -> list[dict[str, Any]]:
    answer = httpx.get(
        f"{api}/v1/runs/{monitor['run_id']}/items", headers={"Authorization": f"Bearer {key}"}, timeout=30
    )
    return list(answer.json()["items"])


@pytest.mark.parametrize("compression", [Compression.Gzip, Compression.NoCompression])
def test_the_sdk_exporter_configured_by_environment_is_accepted(
    served: tuple[str, str], compression: Compression, monkeypatch: pytest.MonkeyPatch
) -> None:
    api, key = served
    headers = {"Authorization": f"Bearer {key}"}
    monitor = httpx.post(
        f"{api}/v1/monitors",
        json={
            "name": f"sdk-{compression.value}",
            "rubrics": ["rsum-single"],
            "judges": ["openai-compatible:m@http://127.0.0.1:9/v1"],
            "aspects": ["consistency"],
            "sample_rate": 1.0,
        },
        headers=headers,
        timeout=30,
    ).json()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"{api}/v1/otlp")  # the SDK appends /v1/traces
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", f"Authorization=Bearer%20{key}")
    exporter = OTLPSpanExporter(compression=compression)
    spans = llm_spans(monitor["id"], f"conv-{compression.value}")
    assert exporter.export(spans) == SpanExportResult.SUCCESS
    assert process() == 2
    items = monitor_items(api, key, monitor)
    assert len(items) == 2
    last = max(items, key=lambda i: len(i["dialogue"]))
    assert [(t["speaker"], t["text"]) for t in last["dialogue"]] == [
        ("user", "My cat is Tom."),
        ("bot", "Hi Tom's human!"),
        ("user", "What's my cat's name?"),
    ]
    assert last["candidates"] == {"sdk-bot": "Tom."} and last["meta"]["version"] == "v9"
    assert exporter.export(spans) == SpanExportResult.SUCCESS  # a retry: acknowledged, not judged again
    assert process() == 0
    assert len(monitor_items(api, key, monitor)) == 2
    info = httpx.get(f"{api}/v1/monitors/{monitor['id']}", headers=headers, timeout=30).json()
    assert info["status"]["otlp"]["duplicates"] == 2 and info["status"]["responses_today"] == 2
    exporter.shutdown()


def test_a_wrong_key_fails_the_export(served: tuple[str, str]) -> None:
    api, _ = served
    exporter = OTLPSpanExporter(endpoint=f"{api}/v1/otlp/v1/traces", headers={"Authorization": "Bearer djk_nope"})
    assert exporter.export(llm_spans("mon_x", "c")) == SpanExportResult.FAILURE
    exporter.shutdown()
