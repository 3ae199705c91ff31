"""Fault benchmark: what a run loses, pays twice and how long it stalls when a part of the service fails mid-run.

Real processes, the recovery timers as shipped (``judge_api.config``'s defaults, nothing shortened): a private
redis-server, a fresh PostgreSQL database behind a loopback TCP proxy of the project's own
(``dialogue_judge.testing.TcpProxy``, which the database outage stops and starts), the judge simulator with a fixed
latency, the API and N Celery workers x M threads. Each scenario submits one run of ``--judgments`` single
judgments (every one a distinct prompt: exactly one paid reply each), injects its fault when ``--at`` of the run is
done, and waits for the run:

* ``none``: no fault (the reference wall time)
* ``kill``: ``kill -9`` of one worker, a new one started ``--restart-after`` s later
* ``redis``: Redis killed (no persistence: the queue is gone) and restarted ``--restart-after`` s later
* ``db``: the database unreachable for ``--outage`` s (the proxy stopped, open connections cut, then started)
* ``storm``: the provider answers a share of calls with 429 (Retry-After 1 s) and 503 (``--storm`` each)

For each it prints planned / done / lost (not finished) / duplicated (replies the provider delivered beyond one per
judgment) / provider calls seen by the simulator vs recorded in the database (sum of ``provider_calls``) / delay
(wall time minus the reference's) and the longest stall between two stored verdicts.

Usage::

    python bench/bench_faults.py                                    # all scenarios, 1,950 judgments, 2 x 16
    python bench/bench_faults.py --scenarios kill db --judgments 600

Figures are printed, not asserted.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import create_engine, text

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_throughput import bench_items, database, wait_workers_ready  # noqa: E402

from dialogue_judge.testing import LiveService, OwnRedis, TcpProxy  # noqa: E402
from judge_api.config import Settings  # noqa: E402
from judge_simulator.process import SimulatorProcess  # noqa: E402

SCENARIOS = ("none", "kill", "redis", "db", "storm")
TERMINAL = "('done', 'failed', 'unparseable', 'cancelled')"


def default_env() -> dict[str, str]:
    """Every timer LiveService shortens for the fault tests, back to the shipped default."""
    fields = Settings.model_fields
    names = {
        "DJ_CLAIM_LEASE": "claim_lease_s",
        "DJ_REQUEUE_AFTER": "requeue_after_s",
        "DJ_SWEEP_INTERVAL": "sweep_interval_s",
        "DJ_VISIBILITY_TIMEOUT": "visibility_timeout_s",
        "DJ_BACKOFF_BASE": "backoff_base_s",
        "DJ_BACKOFF_MAX": "backoff_max_s",
        "DJ_JUDGE_TIMEOUT": "judge_timeout_s",
    }
    env = {var: str(fields[name].default) for var, name in names.items()}
    env.update(DJ_AUTH="false", DJ_RUNS_PER_MINUTE="0")
    return env


def run_scenario(name: str, args: argparse.Namespace) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix=f"dj-faults-{name}-"))
    own_redis = OwnRedis(workdir / "redis")
    own_redis.start()
    script: dict[str, Any] = {"latency": {"kind": "fixed", "seconds": args.latency}}
    if name == "storm":
        script["faults"] = [
            {"kind": "rate_limit", "probability": args.storm, "retry_after": 1.0},
            {"kind": "server_error", "probability": args.storm, "status": 503},
        ]
    try:
        with (
            database("postgres", workdir) as direct_url,
            SimulatorProcess(script) as sim,
            TcpProxy.for_url(direct_url) as proxy,
        ):
            service = LiveService(
                own_redis.url,
                proxy.proxied_url(direct_url),
                workdir / "svc",
                env_overrides=default_env(),
                worker_concurrency=args.threads,
            )
            try:
                service.start_api()
                workers = [service.start_worker() for _ in range(args.workers)]
                wait_workers_ready(service, args.workers)
                return drive(name, args, service, workers, sim, proxy, own_redis, direct_url)
            finally:
                service.stop()
    finally:
        own_redis.kill()


def drive(
    name: str,
    args: argparse.Namespace,
    service: LiveService,
    workers: list[Any],
    sim: SimulatorProcess,
    proxy: TcpProxy,
    own_redis: OwnRedis,
    direct_url: str,
) -> dict[str, Any]:
    n_items = math.ceil(args.judgments / 2)
    body = {
        "items": bench_items(n_items, ["alpha", "beta"], f"faults-{name}"),
        "rubrics": ["rsum-single"],
        "judges": [f"openai-compatible:sim-judge@{sim.base_url}"],
        "mode": ["single"],
        "aspects": ["consistency"],
        "name": f"faults-{name}",
    }
    engine = create_engine(direct_url)
    started = time.monotonic()
    response = httpx.post(f"{service.api_url}/v1/runs", json=body, timeout=600)
    response.raise_for_status()
    run_id, planned = response.json()["id"], int(response.json()["n_judgments"])
    finished_q = text(f"SELECT COUNT(*) FROM judgments WHERE run_id = :r AND status IN {TERMINAL}")
    fault_at: float | None = None
    fault_end: float | None = None
    injector: threading.Thread | None = None
    finished = 0
    last_count, last_change, longest_stall = 0, started, 0.0

    def inject() -> None:
        nonlocal fault_end
        if name == "kill":
            service.kill_worker(workers[0])
            time.sleep(args.restart_after)
            service.start_worker()
        elif name == "redis":
            own_redis.kill()
            time.sleep(args.restart_after)
            own_redis.start()
        elif name == "db":
            proxy.stop()
            time.sleep(args.outage)
            proxy.start()
        fault_end = time.monotonic()

    while time.monotonic() - started < args.timeout:
        with engine.connect() as connection:
            finished = int(connection.execute(finished_q, {"r": run_id}).scalar_one())
        now = time.monotonic()
        if finished != last_count:
            longest_stall = max(longest_stall, now - last_change)
            last_count, last_change = finished, now
        if fault_at is None and finished >= args.at * planned:
            fault_at = now
            if name not in ("none", "storm"):
                injector = threading.Thread(target=inject, daemon=True)
                injector.start()
        if finished >= planned:
            break
        time.sleep(0.2)
    wall = time.monotonic() - started
    if injector is not None:
        injector.join(60)
    time.sleep(2.0)  # late bookkeeping (calls of lost claims) lands
    with engine.connect() as connection:
        row = connection.execute(
            text(
                f"SELECT COUNT(*) FILTER (WHERE status IN {TERMINAL}), "
                "COALESCE(SUM(provider_calls), 0), COUNT(*) FILTER (WHERE status = 'done') "
                "FROM judgments WHERE run_id = :r"
            ),
            {"r": run_id},
        ).one()
    engine.dispose()
    stats = sim.stats()
    delivered = int(stats["by_status"].get("200", 0))
    return {
        "scenario": name,
        "planned": planned,
        "done": int(row[0]),
        "lost": planned - int(row[0]),
        "duplicated": max(0, delivered - planned),
        "calls_seen": int(stats["total_calls"]),
        "calls_recorded": int(row[1]),
        "wall_s": wall,
        "fault_after_s": (fault_at - started) if fault_at else None,
        "recovered_after_fault_s": (started + wall - fault_end) if fault_end else None,
        "longest_stall_s": longest_stall,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenarios", nargs="+", choices=SCENARIOS, default=list(SCENARIOS))
    parser.add_argument("--judgments", type=int, default=1950)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=16, help="Celery threads per worker (default 16)")
    parser.add_argument("--latency", type=float, default=0.5, help="simulator latency per call, s (default 0.5)")
    parser.add_argument("--at", type=float, default=0.3, help="inject the fault when this share is done")
    parser.add_argument("--restart-after", type=float, default=3.0)
    parser.add_argument("--outage", type=float, default=15.0, help="database outage, s (default 15)")
    parser.add_argument("--storm", type=float, default=0.1, help="share of calls answered 429, and 503 (each)")
    parser.add_argument("--timeout", type=float, default=1200.0)
    args = parser.parse_args(argv)
    scenarios = list(args.scenarios)
    if "none" not in scenarios:
        scenarios.insert(0, "none")
    defaults = default_env()
    print(
        f"fault benchmark ({os.cpu_count()} CPUs, load avg {', '.join(f'{x:.1f}' for x in os.getloadavg())}): "
        f"{args.judgments} judgments, {args.workers} workers x {args.threads} threads, L = {args.latency} s, "
        f"PostgreSQL behind a TCP proxy; default timers: lease {defaults['DJ_CLAIM_LEASE']} s, sweep "
        f"{defaults['DJ_SWEEP_INTERVAL']} s, requeue {defaults['DJ_REQUEUE_AFTER']} s, visibility "
        f"{defaults['DJ_VISIBILITY_TIMEOUT']} s"
    )
    results = []
    reference: float | None = None
    header = (
        f"  {'scenario':<8} {'planned':>7} {'done':>6} {'lost':>5} {'dup':>5} {'seen':>6} {'recorded':>8} "
        f"{'wall s':>7} {'delay s':>8} {'stall s':>8} {'fault->done s':>13}"
    )
    print(header)
    for name in scenarios:
        result = run_scenario(name, args)
        if name == "none":
            reference = result["wall_s"]
        delay = result["wall_s"] - reference if reference is not None else math.nan
        results.append(result)
        after = result["recovered_after_fault_s"]
        print(
            f"  {name:<8} {result['planned']:>7} {result['done']:>6} {result['lost']:>5} {result['duplicated']:>5} "
            f"{result['calls_seen']:>6} {result['calls_recorded']:>8} {result['wall_s']:>7.1f} {delay:>8.1f} "
            f"{result['longest_stall_s']:>8.1f} {after if after is not None else math.nan:>13.1f}",
            flush=True,
        )
    print(
        "  lost: not finished; dup: replies delivered beyond one per judgment; seen/recorded: provider calls the "
        "simulator received / the database records; delay: wall time minus the no-fault run's; stall: the longest "
        "time without a new verdict; fault->done: from the end of the fault to the run's end"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
