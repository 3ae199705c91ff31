"""OpenTelemetry spans (SDK in-memory exporter): submit -> judgment -> provider call (each attempt) -> verdict write,
correlated by run and judgment id; none when tracing is off; no prompt in any attribute."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from judge_api import tracing
from judge_api.app import create_app
from judge_api.config import reset_settings_cache

from .harness import Harness, dialogue_item

sdk_trace = pytest.importorskip("opentelemetry.sdk.trace")
in_memory = pytest.importorskip("opentelemetry.sdk.trace.export.in_memory_span_exporter")
export = pytest.importorskip("opentelemetry.sdk.trace.export")


@pytest.fixture
def spans() -> Iterator[Any]:
    exporter = in_memory.InMemorySpanExporter()
    provider = sdk_trace.TracerProvider()
    provider.add_span_processor(export.SimpleSpanProcessor(exporter))
    tracing.setup("test", provider=provider)
    yield exporter
    tracing.reset()


def test_a_run_is_traced_from_submit_to_write(harness: Harness, spans: Any) -> None:
    harness.build()
    reset_settings_cache()
    harness.sim.set_script({"faults": [{"kind": "rate_limit", "first_n": 1, "retry_after": 1}]})
    judge = harness.judge("openai-compatible")
    with TestClient(create_app()) as client:
        created = client.post(
            "/v1/runs",
            json={
                "items": [dialogue_item("t0", {"a": "Secret words about Rex <<q=70>>"})],
                "rubrics": ["rsum-single"],
                "judges": [judge],
                "aspects": ["consistency"],
            },
        ).json()
    run_id = created["id"]
    harness.judge_all(run_id)
    (row,) = harness.rows(run_id)
    assert row.status == "done"
    finished = spans.get_finished_spans()
    by_name: dict[str, list] = {}
    for span in finished:
        by_name.setdefault(span.name, []).append(span)
    (submit,) = by_name["run.submit"]
    assert submit.attributes["dj.run_id"] == run_id
    (judgment,) = by_name["judgment"]
    assert judgment.attributes["dj.run_id"] == run_id and judgment.attributes["dj.judgment_id"] == row.id
    calls = by_name["provider.call"]
    assert [c.attributes["dj.attempt"] for c in calls] == [1, 2]  # the 429, then the answer
    assert all(c.parent is not None and c.parent.span_id == judgment.context.span_id for c in calls)
    assert calls[0].status.status_code.name == "ERROR" and calls[1].status.status_code.name == "UNSET"
    writes = by_name["verdict.write"]
    assert any(row.id in w.attributes["dj.judgment_ids"] for w in writes)
    for span in finished:
        assert not any("Secret words" in str(value) for value in span.attributes.values())


def test_no_spans_when_tracing_is_off(harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    tracing.reset()
    assert tracing.setup("test") is False
    with tracing.span("anything", run_id="run_x") as current:
        assert current is None
    tracing.reset()
