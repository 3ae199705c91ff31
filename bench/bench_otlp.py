"""OTLP traces into monitors (issue 38): spans per second accepted by one API process and the latency of a batch, and
whether conversations exported out of order are rebuilt right.

1. Throughput: ``POST /v1/otlp/v1/traces`` with protobuf batches of 512 spans (what the SDK's BatchSpanProcessor
   sends), each span an LLM call of the current GenAI conventions carrying its conversation's history (128
   conversations x 4 turns a batch, new ids every batch), at 5 % sampling; one client at a time (p50 / p99 of a
   batch, spans/s), then ``--clients`` concurrent clients. The baseline, run side by side: the same responses posted
   as JSON to ``POST /v1/monitors/{id}/responses`` (the monitors' own path), the ratio printed.
   Targets: >= 2,000 spans/s, p99 <= 100 ms a batch. The request stores the spans; the API process's own processor
   (its sweeper's ``OtlpProcessor`` thread) rebuilds and ingests them meanwhile, in the same process: after each
   round the bench prints how long the last spans took to be processed after their export was answered ("drained").
2. Rebuilt right, out of order: 1,000 conversations x 5 sessions (2 exchanges a session, sessions a day apart) as
   spans, shuffled and exported in batches of 512, at sample rate 1 (every response becomes an item); then each
   item's dialogue (turns and session numbers) is compared with the original conversation. Two application shapes:
   ``whole`` (each call sends the whole history, as the OpenAI instrumentations record it) and ``session`` (each call
   sends the current session's history only, earlier sessions kept as memory by the app), the latter also on a
   second service with ``DJ_OTLP_HOLD=always`` (every response waits ``DJ_OTLP_WAIT``, 30 s there). Target: 100 %.

One API process (``dialogue-judge api``, uvicorn) on the chosen database, with Redis (no worker: the sampled
judgments wait there, judging costs the API nothing here).

Usage::

    python bench/bench_otlp.py                                   # SQLite in a temp dir, 3 rounds
    python bench/bench_otlp.py --database postgresql://localhost/test_bench --rounds 3
    python bench/bench_otlp.py --conversations 200               # a quicker rebuild check
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (  # noqa: E402
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue  # noqa: E402
from opentelemetry.proto.resource.v1.resource_pb2 import Resource  # noqa: E402
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span  # noqa: E402

from dialogue_judge.testing import LiveService  # noqa: E402
from judge_api.migrate import upgrade  # noqa: E402

JUDGE = "openai-compatible:bench-judge@http://127.0.0.1:9/v1"  # a closed port: never called without a worker
BATCH = 512
BASE_NS = 1_764_000_000_000_000_000
SYSTEM = "You are Max, a friendly barista bot."


def kv(key: str, value: str) -> KeyValue:
    return KeyValue(key=key, value=AnyValue(string_value=value))


def llm_span(
    trace: int, span: int, start_ns: int, messages: list[tuple[str, str]], output: str, conversation: str
) -> Span:
    inputs = [{"role": r, "parts": [{"type": "text", "content": t}]} for r, t in messages if r != "system"]
    system = [{"type": "text", "content": t} for r, t in messages if r == "system"]
    outputs = [{"role": "assistant", "parts": [{"type": "text", "content": output}], "finish_reason": "stop"}]
    return Span(
        trace_id=trace.to_bytes(16, "big"),
        span_id=span.to_bytes(8, "big"),
        name="chat gpt-4o-mini",
        kind=Span.SPAN_KIND_CLIENT,
        start_time_unix_nano=start_ns,
        end_time_unix_nano=start_ns + 900_000_000,
        attributes=[
            kv("gen_ai.operation.name", "chat"),
            kv("gen_ai.provider.name", "openai"),
            kv("gen_ai.request.model", "gpt-4o-mini"),
            kv("gen_ai.conversation.id", conversation),
            kv("gen_ai.system_instructions", json.dumps(system)),
            kv("gen_ai.input.messages", json.dumps(inputs)),
            kv("gen_ai.output.messages", json.dumps(outputs)),
        ],
    )


def export(spans: list[Span], monitor: str) -> bytes:
    request = ExportTraceServiceRequest(
        resource_spans=[
            ResourceSpans(
                resource=Resource(
                    attributes=[
                        kv("service.name", "barista-bot"),
                        kv("service.version", "v2.4"),
                        kv("dialogue_judge.monitor", monitor),
                    ]
                ),
                scope_spans=[ScopeSpans(scope=InstrumentationScope(name="bench"), spans=spans)],
            )
        ]
    )
    return request.SerializeToString()


# -- conversations -----------------------------------------------------------------------------------------------


def script(conv: int, sessions: int, per_session: int) -> list[tuple[int, str, str]]:
    """(session, user, bot) of one conversation."""
    return [
        (s, f"c{conv} s{s} e{e}: my dog Rex {conv % 97} did thing {e}.", f"c{conv} s{s} e{e}: noted, Rex {conv % 97}.")
        for s in range(1, sessions + 1)
        for e in range(per_session)
    ]


def conversation_spans(conv: int, turns: list[tuple[int, str, str]], shape: str, trace_base: int) -> list[Span]:
    spans = []
    for index, (session, user, bot) in enumerate(turns):
        messages: list[tuple[str, str]] = [("system", SYSTEM)]
        for s, u, b in turns[:index]:
            if shape == "whole" or s == session:
                messages += [("user", u), ("assistant", b)]
        messages.append(("user", user))
        start = BASE_NS + (session * 86_400 + index * 60) * 1_000_000_000 + conv * 1_000_000
        spans.append(llm_span(trace_base + conv, index + 1, start, messages, bot, f"conv-{trace_base}-{conv}"))
    return spans


def expected_dialogue(turns: list[tuple[int, str, str]], index: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for session, user, bot in turns[:index]:
        out += [
            {"speaker": "user", "text": user, "session": session},
            {"speaker": "bot", "text": bot, "session": session},
        ]
    out.append({"speaker": "user", "text": turns[index][1], "session": turns[index][0]})
    return out


# -- measuring ---------------------------------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))]


class Batches:
    """New throughput batches: 128 conversations x 4 turns (whole history), new trace ids each time."""

    def __init__(self, monitor: str) -> None:
        self.monitor = monitor
        self.next = 1
        self.lock = threading.Lock()

    def take(self) -> tuple[bytes, list[dict[str, Any]]]:
        with self.lock:
            base, self.next = self.next, self.next + 1
        spans: list[Span] = []
        native: list[dict[str, Any]] = []
        for conv in range(BATCH // 4):
            turns = script(conv, 2, 2)
            spans += conversation_spans(conv, turns, "whole", base * 1_000_000)
            for index, (_, _, bot) in enumerate(turns):
                native.append(
                    {
                        "id": f"n{base}-{conv}-{index}",
                        "dialogue": expected_dialogue(turns, index),
                        "memory": SYSTEM,
                        "response": bot,
                        "system": "barista-bot",
                        "version": "v2.4",
                    }
                )
        return export(spans, self.monitor), native


def post_otlp(client: httpx.Client, url: str, body: bytes) -> None:
    answer = client.post(url, content=body, headers={"Content-Type": "application/x-protobuf"})
    answer.raise_for_status()
    parsed = ExportTraceServiceResponse.FromString(answer.content)
    assert parsed.partial_success.rejected_spans == 0, parsed


def sequential(api: str, monitor: str, batches: Batches, requests: int) -> tuple[list[float], list[float]]:
    """Latencies (ms) of OTLP batches and, side by side, of the same responses posted as JSON to the monitor."""
    otlp, native = [], []
    with httpx.Client(timeout=60) as client:
        for _ in range(requests):
            body, responses = batches.take()
            started = time.perf_counter()
            post_otlp(client, f"{api}/v1/otlp/v1/traces", body)
            otlp.append((time.perf_counter() - started) * 1000)
            started = time.perf_counter()
            answer = client.post(f"{api}/v1/monitors/{monitor}/responses", json=responses)
            native.append((time.perf_counter() - started) * 1000)
            answer.raise_for_status()
    return otlp, native


def drain(api: str, monitor: str, limit_s: float = 120.0) -> float:
    """Seconds until no span of the monitor waits to be processed (status.otlp.received == 0)."""
    started = time.monotonic()
    with httpx.Client(timeout=60) as client:
        while time.monotonic() - started < limit_s:
            otlp = client.get(f"{api}/v1/monitors/{monitor}").json()["status"]["otlp"] or {}
            if not otlp.get("received"):
                break
            time.sleep(0.05)
    return time.monotonic() - started


def concurrent(api: str, batches: Batches, clients: int, seconds: float) -> float:
    accepted = [0] * clients
    stop = time.monotonic() + seconds

    def run(k: int) -> None:
        with httpx.Client(timeout=60) as client:
            while time.monotonic() < stop:
                body, _ = batches.take()
                post_otlp(client, f"{api}/v1/otlp/v1/traces", body)
                accepted[k] += BATCH

    started = time.monotonic()
    threads = [threading.Thread(target=run, args=(k,)) for k in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(accepted) / (time.monotonic() - started)


def rebuilt_share(api: str, conversations: int, shape: str, seed: int) -> dict[str, float]:
    """Export ``conversations`` x 5 sessions shuffled in batches of 512; the share of responses and of
    conversations whose rebuilt dialogue equals the original."""
    monitor = create_monitor(api, f"rebuild-{shape}-{seed}", 1.0)
    trace_base = 10_000_000 * (seed + 1) + (0 if shape == "whole" else 5_000_000)
    scripts = {conv: script(conv, 5, 2) for conv in range(conversations)}
    spans = [s for conv, turns in scripts.items() for s in conversation_spans(conv, turns, shape, trace_base)]
    random.Random(seed).shuffle(spans)
    started = time.perf_counter()
    with httpx.Client(timeout=120) as client:
        for start in range(0, len(spans), BATCH):
            post_otlp(client, f"{api}/v1/otlp/v1/traces", export(spans[start : start + BATCH], monitor))
        elapsed = time.perf_counter() - started
        deadline = time.monotonic() + 180
        while True:  # processed; DJ_OTLP_HOLD=always: every response waits DJ_OTLP_WAIT, then the sweeper releases it
            info = client.get(f"{api}/v1/monitors/{monitor}").json()
            otlp = info["status"]["otlp"]
            if (not otlp["waiting"] and not otlp.get("received")) or time.monotonic() > deadline:
                break
            time.sleep(1.0)
        run_id, otlp = info["run_id"], info["status"]["otlp"]
        items: dict[str, dict[str, Any]] = {}
        offset = 0
        while True:
            page = client.get(f"{api}/v1/runs/{run_id}/items", params={"offset": offset, "limit": 1000}).json()
            items.update({i["id"]: i for i in page["items"]})
            offset += 1000
            if offset >= page["total"]:
                break
    right = 0
    conversations_right = 0
    for conv, turns in scripts.items():
        all_right = True
        for index in range(len(turns)):
            key = f"otlp-{(trace_base + conv).to_bytes(16, 'big').hex()}-{(index + 1).to_bytes(8, 'big').hex()}"
            item = items.get(key)
            ok = item is not None and item["dialogue"] == expected_dialogue(turns, index)
            right += ok
            all_right &= ok
        conversations_right += all_right
    total = sum(len(t) for t in scripts.values())
    return {
        "responses": right / total,
        "conversations": conversations_right / conversations,
        "spans": float(len(spans)),
        "judged": float(len(items)),
        "waiting": float(otlp["waiting"]),
        "spans/s": len(spans) / elapsed,
    }


def create_monitor(api: str, name: str, rate: float) -> str:
    answer = httpx.post(
        f"{api}/v1/monitors",
        json={
            "name": name,
            "rubrics": ["rsum-single"],
            "judges": [JUDGE],
            "aspects": ["consistency"],
            "sample_rate": rate,
        },
        timeout=30,
    )
    answer.raise_for_status()
    return str(answer.json()["id"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--database", default="sqlite", help="'sqlite' (a temp file) or a database URL")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/8")
    parser.add_argument("--redis-hold", default="redis://127.0.0.1:6379/9", help="the second service's (DJ_OTLP_HOLD)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=40, help="sequential batches per round")
    parser.add_argument("--clients", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--conversations", type=int, default=1000)
    parser.add_argument("--sample-rate", type=float, default=0.05)
    parser.add_argument(
        "--worker",
        action="store_true",
        help="process the spans in a worker process (DJ_OTLP_PROCESS=workers), not in the API process",
    )
    args = parser.parse_args()

    home = Path(tempfile.mkdtemp(prefix="bench-otlp-"))
    database = f"sqlite:///{home / 'bench.db'}" if args.database == "sqlite" else args.database
    upgrade(database)
    defaults = {"DJ_SWEEP_INTERVAL": "10", "DJ_REQUEUE_AFTER": "60", "DJ_CLAIM_LEASE": "30", "DJ_MAX_ITEMS": "20000"}
    env = {**defaults, "DJ_OTLP_PROCESS": "workers"} if args.worker else defaults
    service = LiveService(args.redis, database, home / "svc", env_overrides=env)
    service.start_api()
    if args.worker:
        service.start_worker(concurrency=1)
    try:
        api = service.api_url
        monitor = create_monitor(api, "bench", args.sample_rate)
        batches = Batches(monitor)
        sequential(api, monitor, batches, 3)  # warm up
        body, _ = batches.take()
        print(
            f"database: {database.split('://')[0]}, sample rate {args.sample_rate}, one API process, spans processed "
            f"in {'a worker process' if args.worker else 'the API process'}; a batch: "
            f"{BATCH} spans, {len(body) / 1e6:.2f} MB protobuf ({len(gzip.compress(body)) / 1e6:.2f} MB gzip)"
        )
        figures: dict[str, list[float]] = {}
        for round_ in range(1, args.rounds + 1):
            otlp, native = sequential(api, monitor, batches, args.requests)
            rate = BATCH * len(otlp) / (sum(otlp) / 1000)
            base = BATCH * len(native) / (sum(native) / 1000)
            rows = {
                "OTLP p50 a batch of 512 (ms)": percentile(otlp, 50),
                "OTLP p99 a batch of 512 (ms)": percentile(otlp, 99),
                "OTLP spans/s, one client": rate,
                "baseline JSON responses/s, one client": base,
                "OTLP / baseline speed": rate / base,
            }
            through = concurrent(api, batches, args.clients, args.seconds)
            rows[f"OTLP spans/s, {args.clients} clients"] = through
            rows["drained after the last export (s)"] = drain(api, monitor)
            for name, value in rows.items():
                figures.setdefault(name, []).append(value)
            print(
                f"round {round_}: p50 {rows['OTLP p50 a batch of 512 (ms)']:6.1f} ms  "
                f"p99 {rows['OTLP p99 a batch of 512 (ms)']:6.1f} ms  {rate:7.0f} spans/s "
                f"(baseline {base:7.0f} responses/s, ratio {rate / base:4.2f}); {through:7.0f} spans/s "
                f"with {args.clients} clients, drained {rows['drained after the last export (s)']:.1f} s later"
            )
        print("\nmin / median over rounds:")
        for name, values in figures.items():
            print(f"  {name:<42} {min(values):10.2f} / {statistics.median(values):10.2f}")
        print(f"\nrebuilt right, out of order: {args.conversations} conversations x 5 sessions x 2 exchanges, shuffled")
        for shape in ("whole", "session"):
            report(shape, "DJ_OTLP_HOLD=missing", rebuilt_share(api, args.conversations, shape, seed=1))
    finally:
        service.stop()
    # the same session-only history with every response held DJ_OTLP_WAIT (30 s here: longer than the export takes)
    hold_env = {**defaults, "DJ_OTLP_HOLD": "always", "DJ_OTLP_WAIT": "30", "DJ_SWEEP_INTERVAL": "2"}
    hold_db = f"sqlite:///{home / 'hold.db'}" if args.database == "sqlite" else database
    if args.database == "sqlite":
        upgrade(hold_db)
    held = LiveService(args.redis_hold, hold_db, home / "svc-hold", env_overrides=hold_env)
    held.start_api()
    try:
        report("session", "DJ_OTLP_HOLD=always", rebuilt_share(held.api_url, args.conversations, "session", seed=2))
    finally:
        held.stop()


def report(shape: str, hold: str, result: dict[str, float]) -> None:
    print(
        f"  {shape:<8} history, {hold:<20}: {result['responses']:7.2%} of {int(result['spans'])} responses, "
        f"{result['conversations']:7.2%} of conversations equal the original "
        f"({int(result['judged'])} judged, {int(result['waiting'])} still waiting, {result['spans/s']:.0f} spans/s)"
    )


if __name__ == "__main__":
    main()
