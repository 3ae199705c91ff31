"""Monitor ingestion (issue 25): responses per second accepted by one API process at 5 % sampling, and the latency
of ``POST /v1/monitors/{id}/responses`` with batches of 1 and of 100.

One API process (``dialogue-judge api``, uvicorn, one worker process) on the chosen database, with Redis (the
sampled judgments are published to it; no worker consumes them, so judging costs the API nothing here). Each
measurement posts new response ids (the realistic case: a stored id is a duplicate and costs less). Sequential
requests from one client (what ``client.monitor(id).log`` does: one batch in flight at a time), then the same with
``--clients`` concurrent clients for the throughput figure.

Usage::

    python bench/bench_ingest.py --database sqlite            # a SQLite file in a temp dir
    python bench/bench_ingest.py --database postgresql://localhost/test_bench --rounds 3
    python bench/bench_ingest.py --redis redis://127.0.0.1:6379/5
"""

from __future__ import annotations

import argparse
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

from dialogue_judge.testing import LiveService  # noqa: E402
from judge_api.migrate import upgrade  # noqa: E402

JUDGE = "openai-compatible:bench-judge@http://127.0.0.1:9/v1"  # never called: no worker runs


def response(n: int) -> dict[str, Any]:
    return {
        "id": f"r{n:09d}",
        "dialogue": [
            {"speaker": "user", "text": "I adopted a beagle called Rex last spring.", "session": 1},
            {"speaker": "bot", "text": "Lovely! How is he settling in?", "session": 1},
            {"speaker": "user", "text": "Do you remember my dog's name?", "session": 2},
        ],
        "persona": {"user": ["I have a beagle called Rex."], "bot": []},
        "response": "Of course, Rex the beagle!",
        "system": "bot",
        "version": f"v{n % 3}",
        "segment": "web" if n % 2 else "app",
    }


class Ids:
    def __init__(self) -> None:
        self.next = 0
        self.lock = threading.Lock()

    def take(self, k: int) -> list[dict[str, Any]]:
        with self.lock:
            start, self.next = self.next, self.next + k
        return [response(n) for n in range(start, start + k)]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))]


def latency(url: str, ids: Ids, batch: int, requests: int) -> tuple[list[float], int, list[bool]]:
    """Sequential posts of ``batch`` new responses; (latencies in ms, responses sampled, whether each request
    sampled any: those also store items and judgments, the rest one row per response)."""
    sampled = 0
    times: list[float] = []
    any_sampled: list[bool] = []
    with httpx.Client(timeout=30) as client:
        for _ in range(requests):
            body = ids.take(batch)
            started = time.perf_counter()
            answer = client.post(url, json=body)
            times.append((time.perf_counter() - started) * 1000)
            answer.raise_for_status()
            assert answer.json()["accepted"] == batch, answer.text
            sampled += int(answer.json()["sampled"])
            any_sampled.append(int(answer.json()["sampled"]) > 0)
    return times, sampled, any_sampled


def health_latency(api_url: str, requests: int) -> list[float]:
    """The same client and server doing nothing: what this machine's load alone costs a request."""
    times = []
    with httpx.Client(timeout=30) as client:
        for _ in range(requests):
            started = time.perf_counter()
            client.get(f"{api_url}/healthz").raise_for_status()
            times.append((time.perf_counter() - started) * 1000)
    return times


def throughput(url: str, ids: Ids, batch: int, clients: int, seconds: float) -> float:
    """Responses accepted per second with ``clients`` clients posting batches of ``batch`` for ``seconds``."""
    accepted = [0] * clients
    stop = time.monotonic() + seconds

    def run(k: int) -> None:
        with httpx.Client(timeout=30) as client:
            while time.monotonic() < stop:
                answer = client.post(url, json=ids.take(batch))
                answer.raise_for_status()
                accepted[k] += int(answer.json()["accepted"])

    started = time.monotonic()
    threads = [threading.Thread(target=run, args=(k,)) for k in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(accepted) / (time.monotonic() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--database", default="sqlite", help="'sqlite' (a temp file) or a database URL")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/7")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=300, help="sequential requests per batch size and round")
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--sample-rate", type=float, default=0.05)
    args = parser.parse_args()

    home = Path(tempfile.mkdtemp(prefix="bench-ingest-"))
    database = f"sqlite:///{home / 'bench.db'}" if args.database == "sqlite" else args.database
    upgrade(database)
    # the service's own defaults, not the test harness's fast recovery (a sweep every second competes for the GIL)
    defaults = {"DJ_SWEEP_INTERVAL": "10", "DJ_REQUEUE_AFTER": "60", "DJ_CLAIM_LEASE": "30"}
    service = LiveService(args.redis, database, home / "svc", env_overrides=defaults)
    service.start_api()  # no worker: the sampled judgments wait in Redis
    try:
        monitor = httpx.post(
            f"{service.api_url}/v1/monitors",
            json={
                "name": "bench",
                "rubrics": ["rsum-single"],
                "judges": [JUDGE],
                "aspects": ["consistency"],
                "sample_rate": args.sample_rate,
            },
            timeout=30,
        ).json()
        url = f"{service.api_url}/v1/monitors/{monitor['id']}/responses"
        ids = Ids()
        latency(url, ids, 1, 20)  # warm up
        print(f"database: {database.split('://')[0]}, sample rate {args.sample_rate}, one API process")
        figures: dict[str, list[float]] = {}
        for round_ in range(1, args.rounds + 1):
            floor = health_latency(service.api_url, args.requests)
            figures.setdefault("p50 GET /healthz (ms), the floor", []).append(percentile(floor, 50))
            figures.setdefault("p99 GET /healthz (ms), the floor", []).append(percentile(floor, 99))
            print(
                f"round {round_} GET /healthz: p50 {percentile(floor, 50):6.1f} ms  p99 {percentile(floor, 99):6.1f} ms"
            )
            for batch in (1, 100):
                times, sampled, any_sampled = latency(
                    url, ids, batch, args.requests if batch == 1 else args.requests // 3
                )
                p50, p99 = percentile(times, 50), percentile(times, 99)
                if batch == 1:  # 5 % of single posts sample: the p99 is theirs; show both kinds apart
                    apart = {k: [t for t, s in zip(times, any_sampled, strict=True) if s == k] for k in (False, True)}
                    for kind, values in (("unsampled", apart[False]), ("sampled", apart[True])):
                        if values:
                            figures.setdefault(f"p50 batch 1, {kind} requests (ms)", []).append(percentile(values, 50))
                            figures.setdefault(f"p99 batch 1, {kind} requests (ms)", []).append(percentile(values, 99))
                rate = batch * len(times) / (sum(times) / 1000)
                figures.setdefault(f"p50 batch {batch} (ms)", []).append(p50)
                figures.setdefault(f"p99 batch {batch} (ms)", []).append(p99)
                figures.setdefault(f"sequential responses/s, batch {batch}", []).append(rate)
                print(
                    f"round {round_} batch {batch:>3}: p50 {p50:6.1f} ms  p99 {p99:6.1f} ms  "
                    f"{rate:8.0f} responses/s sequential  ({sampled} of {batch * len(times)} sampled)"
                )
            rate = throughput(url, ids, 100, args.clients, args.seconds)
            figures.setdefault(f"responses/s, {args.clients} clients, batch 100", []).append(rate)
            print(f"round {round_} throughput: {rate:8.0f} responses/s ({args.clients} clients, batches of 100)")
        print("\nmin / median over rounds:")
        for name, values in figures.items():
            print(f"  {name:<40} {min(values):10.1f} / {statistics.median(values):10.1f}")
    finally:
        service.stop()


if __name__ == "__main__":
    main()
