"""Prometheus metrics: the definitions and the small hooks the judge path calls (``workers.execute``, the verdict
writer, the sweeper), so instrumenting needs one line where something happens.

Every process keeps its own counters (API: ``GET /metrics``; a worker: its ``--metrics-port``). A worker with the
``prefork`` pool runs its tasks in child processes: ``dialogue-judge worker`` then points
``PROMETHEUS_MULTIPROC_DIR`` at a fresh folder before anything imports ``prometheus_client``, each child writes its
samples there, and the worker's exporter sums them (:func:`exposition`). With the ``threads`` pool (the default)
everything happens in one process and the ordinary registry is exact.

Labels are bounded: the judge (a model string a run names: the first MAX_JUDGE_LABELS distinct ones a process sees
keep their own series, the rest share ``judge="other"``), a status, an error kind, an outcome; the monitor alert
gauge's server-issued monitor id and the rule's position (never a name a tenant chose), at most MAX_ALERT_SERIES
series. Never a run or judgment id.
"""

from __future__ import annotations

import functools
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

NAMESPACE = "dj"
LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0)
TOKEN_BUCKETS = (16, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)
WRITE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)

MAX_JUDGE_LABELS = 50  # distinct judge labels per process; judges are named by tenants' runs
MAX_JUDGE_LABEL_CHARS = 120
OTHER_JUDGE = "other"
MAX_ALERT_SERIES = 2000  # monitor alert gauge samples per scrape (DJ_MAX_MONITORS x DJ_MAX_RULES_PER_MONITOR each)

_judge_labels: set[str] = set()
_judge_labels_lock = threading.Lock()


def judge_label(judge: str) -> str:
    """The judge's label value: itself (cut to MAX_JUDGE_LABEL_CHARS) while fewer than MAX_JUDGE_LABELS distinct
    judges were seen by this process, else ``other``: tenants name judges, and each label value is series."""
    label = judge[:MAX_JUDGE_LABEL_CHARS]
    if label in _judge_labels:
        return label
    with _judge_labels_lock:
        if label in _judge_labels:
            return label
        if len(_judge_labels) >= MAX_JUDGE_LABELS:
            return OTHER_JUDGE
        _judge_labels.add(label)
        return label


JUDGMENTS = Counter(
    "judgments", "Judgments finished, by final status and judge", ["judge", "status"], namespace=NAMESPACE
)
PROVIDER_CALLS = Counter(
    "provider_calls",
    "Judge provider calls made, by judge and outcome (ok or error)",
    ["judge", "outcome"],
    namespace=NAMESPACE,
)
RATE_LIMITED = Counter("provider_rate_limited", "Provider 429 answers, by judge", ["judge"], namespace=NAMESPACE)
RETRIES = Counter(
    "provider_retries",
    "Provider calls retried after an error, by judge and kind",
    ["judge", "kind"],
    namespace=NAMESPACE,
)
ERRORS = Counter("provider_errors", "Provider call errors, by judge and kind", ["judge", "kind"], namespace=NAMESPACE)
LATENCY = Histogram(
    "judge_call_duration_seconds",
    "Wall time of one provider call, by judge",
    ["judge"],
    namespace=NAMESPACE,
    buckets=LATENCY_BUCKETS,
)
TOKENS = Histogram(
    "judge_call_tokens",
    "Tokens of one provider call, by judge and direction (input or output)",
    ["judge", "direction"],
    namespace=NAMESPACE,
    buckets=TOKEN_BUCKETS,
)
COST = Counter("judge_cost_usd", "Money paid to providers (US dollars), by judge", ["judge"], namespace=NAMESPACE)
CACHE_HITS = Counter(
    "cache_hits",
    "Judgments answered from the judge cache without a provider call, by judge",
    ["judge"],
    namespace=NAMESPACE,
)
IN_FLIGHT = Gauge(
    "provider_calls_in_flight",
    "Provider calls under way in this process",
    ["judge"],
    namespace=NAMESPACE,
    multiprocess_mode="livesum",
)
WRITE_LATENCY = Histogram(
    "verdict_write_duration_seconds",
    "Wall time of one group commit of verdicts",
    namespace=NAMESPACE,
    buckets=WRITE_BUCKETS,
)
VERDICTS_WRITTEN = Counter("verdict_writes", "Verdicts written (group commits count each verdict)", namespace=NAMESPACE)
SWEEPER_RESENT = Counter("sweeper_resent", "Judgments the sweeper sent to the queue again", namespace=NAMESPACE)


def judgment_finished(judge: str, values: dict[str, Any]) -> None:
    """A judgment's verdict is stored (``values``: the columns written)."""
    status = str(values.get("status", "unknown"))
    judge = judge_label(judge)
    JUDGMENTS.labels(judge=judge, status=status).inc()
    cost = float(values.get("cost_usd") or 0.0)
    if cost:
        COST.labels(judge=judge).inc(cost)
    if values.get("cached"):
        CACHE_HITS.labels(judge=judge).inc()


@dataclass(frozen=True, slots=True)
class _CallSeries:
    """A judge's per-call series (``labels`` takes a lock and builds a key on every lookup; a call does six)."""

    in_flight: Any
    ok: Any
    error: Any
    latency: Any
    input_tokens: Any
    output_tokens: Any


def _call_series(judge: str) -> _CallSeries:
    return _call_series_of_label(judge_label(judge))


@functools.lru_cache(maxsize=MAX_JUDGE_LABELS + 1)
def _call_series_of_label(judge: str) -> _CallSeries:
    return _CallSeries(
        IN_FLIGHT.labels(judge=judge),
        PROVIDER_CALLS.labels(judge=judge, outcome="ok"),
        PROVIDER_CALLS.labels(judge=judge, outcome="error"),
        LATENCY.labels(judge=judge),
        TOKENS.labels(judge=judge, direction="input"),
        TOKENS.labels(judge=judge, direction="output"),
    )


@contextmanager
def provider_call(judge: str) -> Iterator[None]:
    """Around one provider call: in flight while it runs, its wall time, ok or error."""
    series = _call_series(judge)
    series.in_flight.inc()
    started = time.perf_counter()
    try:
        yield
    except Exception:
        series.error.inc()
        raise
    else:
        series.ok.inc()
    finally:
        series.latency.observe(time.perf_counter() - started)
        series.in_flight.dec()


def call_tokens(judge: str, input_tokens: int, output_tokens: int) -> None:
    series = _call_series(judge)
    series.input_tokens.observe(input_tokens)
    series.output_tokens.observe(output_tokens)


def call_failed(judge: str, kind: str, will_retry: bool) -> None:
    judge = judge_label(judge)
    ERRORS.labels(judge=judge, kind=kind).inc()
    if kind == "rate_limited":
        RATE_LIMITED.labels(judge=judge).inc()
    if will_retry:
        RETRIES.labels(judge=judge, kind=kind).inc()


@contextmanager
def verdict_write(count: int) -> Iterator[None]:
    started = time.perf_counter()
    yield
    WRITE_LATENCY.observe(time.perf_counter() - started)
    VERDICTS_WRITTEN.inc(count)


def resent(count: int) -> None:
    SWEEPER_RESENT.inc(count)


class QueueCollector(Collector):
    """Queue depth and the oldest pending judgment's age, read when scraped (the API's ``/metrics``)."""

    def __init__(self, read: Callable[[], dict[str, float | None]]) -> None:
        self.read = read

    def collect(self) -> Iterator[GaugeMetricFamily]:
        try:
            state = self.read()
        except Exception:  # the database or Redis is down: say nothing rather than fail the scrape
            return
        depth = state.get("queue_depth")
        if depth is not None:
            yield GaugeMetricFamily(f"{NAMESPACE}_queue_depth", "Messages waiting in the judgments queue", value=depth)
        yield GaugeMetricFamily(
            f"{NAMESPACE}_pending_judgments",
            "Judgments not finished yet (pending or running)",
            value=state.get("pending") or 0,
        )
        yield GaugeMetricFamily(
            f"{NAMESPACE}_oldest_pending_age_seconds",
            "Age of the oldest unfinished judgment (0 when none)",
            value=state.get("oldest_pending_age_s") or 0.0,
        )
        yield GaugeMetricFamily(
            f"{NAMESPACE}_otlp_received_spans",
            "OTLP spans stored and not processed yet (a growing figure: the OTLP processors stall or fail)",
            value=state.get("otlp_received") or 0,
        )
        yield GaugeMetricFamily(
            f"{NAMESPACE}_otlp_oldest_received_age_seconds",
            "Age of the oldest OTLP span not processed yet (0 when none)",
            value=state.get("oldest_otlp_received_age_s") or 0.0,
        )
        alive = state.get("workers_alive")
        if alive is not None:
            yield GaugeMetricFamily(f"{NAMESPACE}_workers_alive", "Workers with a fresh heartbeat", value=alive)


class AlertCollector(Collector):
    """``dialogue_judge_monitor_alert{monitor,rule_index}``: 1 while the rule has an open alert, else 0; one sample
    per rule of every monitor, read from the database when scraped (the API's ``/metrics``). The labels are the
    monitor's id (issued by the server) and the rule's position in its ``alerts``: names are the tenants' choice and
    ``GET /v1/monitors/{id}`` tells them. At most MAX_ALERT_SERIES samples, open alerts first;
    ``dialogue_judge_monitor_alert_series_omitted`` counts the rest."""

    def __init__(self, read: Callable[[], list[tuple[str, int, bool]]]) -> None:
        self.read = read

    def collect(self) -> Iterator[GaugeMetricFamily]:
        try:
            rows = self.read()
        except Exception:  # the database is down: say nothing rather than fail the scrape
            return
        family = GaugeMetricFamily(
            "dialogue_judge_monitor_alert",
            "1 while a monitor's alert rule has an open alert (docs/monitoring.md#alerts), else 0",
            labels=["monitor", "rule_index"],
        )
        kept = sorted(rows, key=lambda row: (not row[2], row[0], row[1]))[:MAX_ALERT_SERIES]
        for monitor_id, rule_index, is_open in kept:
            family.add_metric([monitor_id, str(rule_index)], 1.0 if is_open else 0.0)
        yield family
        yield GaugeMetricFamily(
            "dialogue_judge_monitor_alert_series_omitted",
            f"Monitor alert rules left out of dialogue_judge_monitor_alert (over {MAX_ALERT_SERIES} series)",
            value=len(rows) - len(kept),
        )


class Collectors(Collector):
    """Several collectors as the one ``exposition`` takes."""

    def __init__(self, *collectors: Collector) -> None:
        self.collectors = collectors

    def collect(self) -> Iterator[Any]:
        for collector in self.collectors:
            yield from collector.collect()


def multiprocess_dir() -> str | None:
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR") or None


def exposition(extra: Collector | None = None) -> tuple[bytes, str]:
    """The text exposition of this process (or, in multiprocess mode, of every process sharing the folder)."""
    if multiprocess_dir():
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
    else:
        registry = REGISTRY
    if extra is None:
        return generate_latest(registry), CONTENT_TYPE_LATEST
    combined = CollectorRegistry()
    combined.register(_Merged(registry))
    combined.register(extra)
    return generate_latest(combined), CONTENT_TYPE_LATEST


class _Merged(Collector):
    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry

    def collect(self) -> Iterator[Any]:
        yield from self.registry.collect()


def process_died(pid: int) -> None:
    """A prefork child ended: drop its live gauges (its counters stay counted)."""
    if multiprocess_dir():
        multiprocess.mark_process_dead(pid)


def start_http_server(port: int, addr: str = "0.0.0.0") -> Any:
    """Serve ``/metrics`` of this worker on ``port`` (a daemon thread)."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from threading import Thread

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?")[0] not in ("/metrics", "/"):
                self.send_error(404)
                return
            body, content_type = exposition()
            self.send_response(200)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # scrapes are not worth a log line each
            return

    server = ThreadingHTTPServer((addr, port), Handler)
    Thread(target=server.serve_forever, name="dj-metrics", daemon=True).start()
    return server
