"""OpenTelemetry tracing (the ``tracing`` extra), off unless ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set: spans for a
submission (``run.submit``), a worker's judgment (``judgment``), each provider call (``provider.call``) and each
group commit of verdicts (``verdict.write``), carrying ``dj.run_id`` / ``dj.judgment_id`` (and the judge, the
attempt) so one run's spans are found across the API and every worker. Never a prompt or a reply.

When tracing is off (or the packages are not installed) :func:`span` costs one global read."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

log = logging.getLogger(__name__)

_tracer: Any = None
_lock = threading.Lock()
_configured = False


def setup(service_name: str, provider: Any = None) -> bool:
    """Start tracing for this process: with ``provider`` (tests: an SDK TracerProvider with an in-memory exporter),
    or an OTLP/HTTP exporter when ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set. Returns whether tracing is on."""
    global _tracer, _configured
    with _lock:
        if provider is None:
            if _configured:
                return _tracer is not None
            _configured = True
            if not os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
                return False
            try:
                from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
                from opentelemetry.sdk.resources import Resource
                from opentelemetry.sdk.trace import TracerProvider
                from opentelemetry.sdk.trace.export import BatchSpanProcessor
            except ImportError:
                log.warning(
                    "OTEL_EXPORTER_OTLP_ENDPOINT is set but the tracing extra is not installed "
                    "(pip install 'dialogue-judge[tracing]'): no traces"
                )
                return False
            resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", service_name)})
            provider = TracerProvider(resource=resource)
            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        _tracer = provider.get_tracer("dialogue-judge")
        return True


def reset() -> None:
    global _tracer, _configured
    with _lock:
        _tracer, _configured = None, False


@contextmanager
def span(name: str, **attributes: Any) -> Iterator[Any]:
    """A span named ``name`` with ``dj.<key>`` attributes (None values left out); yields it (None when off)."""
    tracer = _tracer
    if tracer is None:
        yield None
        return
    with tracer.start_as_current_span(name) as current:
        for key, value in attributes.items():
            if value is not None:
                current.set_attribute(f"dj.{key}", value)
        yield current


def set_attribute(current: Any, key: str, value: Any) -> None:
    if current is not None and value is not None:
        current.set_attribute(f"dj.{key}", value)
