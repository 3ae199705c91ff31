"""Memory soak (issue 39): the service judging at the provider-bound rate for ``--minutes`` (default 20), real
processes (a private redis-server, a fresh PostgreSQL database or SQLite, the judge simulator, the API and
``--workers`` Celery workers), while a reader does what the dashboard does (the runs' reports, summaries, a page of
judgments, an export) every ``--read-every`` seconds.

The provider is the bottleneck, as in production: the simulator answers in L seconds and the judges are limited to R
calls per minute (``DJ_RATE_LIMITS``); new runs are submitted whenever fewer than two minutes of work are queued,
so the provider is kept busy and the queue does not grow without bound. Every ``--sample-every`` seconds the resident
set (RSS) of the API and of each worker is sampled. After ``--warmup`` minutes the RSS at the end of the warm-up
(the median of its last minute) is the reference; the figures printed are each process's reference, the median of
the last minute of the soak, the highest sample after warm-up, and their growth over the reference. Target: growth
<= 5 % after warm-up (the issue's soak row).

Usage::

    python bench/bench_soak.py                                   # 20 minutes, PostgreSQL, 2 workers
    python bench/bench_soak.py --minutes 5 --warmup 2 --database sqlite
    python bench/bench_soak.py --json soak.json

Figures are printed, not asserted: they depend on the machine and on what else runs on it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
from sqlalchemy import create_engine, text

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from bench_throughput import bench_items, provider_bound_service, service_processes  # noqa: E402

from dialogue_judge.testing import LiveService  # noqa: E402

MB = 1024 * 1024


def rss_mb(service: LiveService) -> dict[str, float]:
    return {name: proc.memory_info().rss / MB for name, proc in service_processes(service).items()}


def queued(database_url: str) -> int:
    engine = create_engine(database_url)
    try:
        with engine.connect() as connection:
            query = text("SELECT COUNT(*) FROM judgments WHERE status IN ('pending', 'claimed')")
            return int(connection.execute(query).scalar_one())
    finally:
        engine.dispose()


def read_like_the_dashboard(client: httpx.Client, run_ids: list[str]) -> int:
    """What a reviewer's dashboard asks of the newest and the oldest run; the requests made."""
    made = 0
    for run_id in {run_ids[0], run_ids[-1]}:
        for path, params in (
            (f"/v1/runs/{run_id}", {}),
            (f"/v1/runs/{run_id}/report", {"n_boot": 200}),
            (f"/v1/runs/{run_id}/judgments", {"limit": 200}),
            (f"/v1/runs/{run_id}/judgments", {"format": "jsonl"}),
        ):
            answer = client.get(path, params=params)
            answer.raise_for_status()
            made += 1
    return made


def summarise(samples: list[tuple[float, dict[str, float]]], warmup_s: float) -> dict[str, dict[str, float]]:
    """Per process: the reference (median of the warm-up's last minute), the end (median of the last minute), the
    highest sample after warm-up, and the growth of both over the reference."""
    end_t = samples[-1][0]
    out: dict[str, dict[str, float]] = {}
    for name in samples[0][1]:
        reference = [s[name] for t, s in samples if warmup_s - 60 <= t <= warmup_s and name in s]
        after = [s[name] for t, s in samples if t > warmup_s and name in s]
        last = [s[name] for t, s in samples if t >= end_t - 60 and name in s]
        if not reference or not after:
            continue
        ref = statistics.median(reference)
        out[name] = {
            "reference_mb": round(ref, 1),
            "end_mb": round(statistics.median(last), 1),
            "peak_after_warmup_mb": round(max(after), 1),
            "growth_end_pct": round(100 * (statistics.median(last) - ref) / ref, 2),
            "growth_peak_pct": round(100 * (max(after) - ref) / ref, 2),
        }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=20.0)
    parser.add_argument("--warmup", type=float, default=3.0, help="minutes before the reference is taken")
    parser.add_argument("--latency", type=float, default=0.5, help="simulator latency L per call, s")
    parser.add_argument("--rpm", type=int, default=600, help="provider limit R, calls/min (the bound)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=8, help="threads per worker")
    parser.add_argument("--run-items", type=int, default=100, help="items per submitted run (x 2 systems)")
    parser.add_argument("--read-every", type=float, default=15.0)
    parser.add_argument("--sample-every", type=float, default=5.0)
    parser.add_argument("--database", default="postgresql", choices=["postgresql", "sqlite"])
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    if args.warmup >= args.minutes:
        parser.error("--warmup must be shorter than --minutes")
    workdir = Path(tempfile.mkdtemp(prefix="dj-soak-"))
    print(
        f"soak: {args.minutes:g} min ({args.warmup:g} warm-up), L = {args.latency} s, R = {args.rpm}/min, "
        f"{args.workers} workers x {args.concurrency} threads, {args.database}; {os.cpu_count()} CPUs, load "
        + ", ".join(f"{x:.1f}" for x in os.getloadavg())
    )
    samples: list[tuple[float, dict[str, float]]] = []
    submitted = reads = 0
    with provider_bound_service(workdir, args.database, args.latency, args.rpm, args.workers, args.concurrency) as (
        service,
        sim,
        database_url,
    ):
        judge = f"openai-compatible:sim-judge@{sim.base_url}"
        client = httpx.Client(base_url=service.api_url, timeout=120)
        run_ids: list[str] = []
        backlog = 2 * args.rpm  # two minutes of the provider's work
        started = time.monotonic()
        next_read = next_sample = 0.0
        while (elapsed := time.monotonic() - started) < args.minutes * 60:
            if queued(database_url) < backlog:
                body = {
                    "items": bench_items(args.run_items, ["alpha", "beta"], f"soak{submitted}"),
                    "rubrics": ["rsum-single"],
                    "judges": [judge],
                    "mode": ["single"],
                    "aspects": ["consistency"],
                    "name": f"soak-{submitted}",
                }
                answer = client.post("/v1/runs", json=body)
                answer.raise_for_status()
                run_ids.append(str(answer.json()["id"]))
                submitted += 1
            if elapsed >= next_read and run_ids:
                reads += read_like_the_dashboard(client, run_ids)
                next_read = elapsed + args.read_every
            if elapsed >= next_sample:
                samples.append((elapsed, rss_mb(service)))
                next_sample = elapsed + args.sample_every
            time.sleep(1.0)
        samples.append((time.monotonic() - started, rss_mb(service)))
        calls = int(sim.stats()["total_calls"])
        client.close()
    figures = summarise(samples, args.warmup * 60)
    rate = calls / (args.minutes * 60)
    print(
        f"{submitted} runs submitted, {calls} provider calls ({rate:.2f}/s; the bound R/60 = {args.rpm / 60:.2f}/s), "
        f"{reads} dashboard reads"
    )
    print(f"{'process':<10} {'reference':>10} {'end':>9} {'peak':>9} {'growth end':>11} {'growth peak':>12}")
    for name, row in figures.items():
        print(
            f"{name:<10} {row['reference_mb']:>8.1f}MB {row['end_mb']:>7.1f}MB {row['peak_after_warmup_mb']:>7.1f}MB "
            f"{row['growth_end_pct']:>10.2f}% {row['growth_peak_pct']:>11.2f}%"
        )
    print(f"load average at the end: {', '.join(f'{x:.1f}' for x in os.getloadavg())}; logs in {workdir}")
    if args.json:
        args.json.write_text(json.dumps({"args": vars(args) | {"json": str(args.json)}, "rss": figures}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
