"""deploy/otel-collector.yaml: valid YAML whose pipelines fan the one OTLP receiver out to the existing backend and
to dialogue-judge's receiver, every component a pipeline names defined, and the service's exporter sending what the
receiver accepts (OTLP/HTTP protobuf, gzip, the API key as a Bearer header, the path it serves)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

CONFIG = Path(__file__).resolve().parents[2] / "deploy" / "otel-collector.yaml"


def load() -> dict[str, Any]:
    data = yaml.safe_load(CONFIG.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def test_every_component_a_pipeline_names_is_defined() -> None:
    config = load()
    pipelines = config["service"]["pipelines"]
    for name, pipeline in pipelines.items():
        assert name.split("/")[0] == "traces"
        for kind in ("receivers", "processors", "exporters"):
            for component in pipeline.get(kind, []):
                assert component in config[kind], f"{name}: {kind} {component} is not defined"


def test_one_receiver_fans_out_to_the_backend_and_the_service() -> None:
    pipelines = load()["service"]["pipelines"]
    exporters = {e for p in pipelines.values() for e in p["exporters"]}
    assert exporters == {"otlphttp/backend", "otlphttp/dialogue-judge"}
    assert all(p["receivers"] == ["otlp"] for p in pipelines.values())
    assert "filter/llm-only" in pipelines["traces/dialogue-judge"]["processors"]
    assert "filter/llm-only" not in pipelines["traces/backend"]["processors"]


def test_the_service_exporter_sends_what_the_receiver_accepts() -> None:
    exporter = load()["exporters"]["otlphttp/dialogue-judge"]
    assert exporter["encoding"] == "proto" and exporter["compression"] == "gzip"
    assert exporter["headers"]["Authorization"].startswith("Bearer ${env:")
    text = CONFIG.read_text(encoding="utf-8")
    assert "/v1/otlp" in text  # the endpoint the otlphttp exporter appends /v1/traces to
    from judge_api.app import create_app
    from tests.api.conftest import served_routes

    assert ("POST", "/v1/otlp/v1/traces") in served_routes(create_app())
