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
  (``--redis-restarts`` times, 5 s apart)
* ``db``: the database unreachable for ``--outage`` s (the proxy stopped, open connections cut, then started)
* ``storm``: the provider answers a share of calls with 429 (Retry-After 1 s) and 503 (``--storm`` each)

Every scenario runs ``--rounds`` times (default 3), each round next to a no-fault run of its own; per scenario the
benchmark prints the min / median / max of the delay (wall time minus the same round's no-fault wall time), and per
round planned / done / lost (not finished) / provider calls seen by the simulator vs recorded in the database (sum
of ``provider_calls``), how the simulator ended the calls it saw (``cut``: the client hung up mid-call, e.g. a
killed worker; ``unsaved``: replies delivered beyond one per judgment, i.e. paid for and never stored), the longest
stall between two stored verdicts, and the time from the end of the fault to the first and to the last verdict
after it. The machine's load average is printed per run: on a shared machine the no-fault runs themselves vary, so
the delay is also given over the median no-fault run.
For a kill it splits ``unsaved`` by when the simulator finished the first reply: before the kill (the reply was on
its way to, or in, the worker, which died before stashing it: issue 26.6) or after it (answered to a worker
already dead).

Usage::

    python bench/bench_faults.py                                    # none, kill, redis, db; 3 rounds each
    python bench/bench_faults.py --scenarios kill db --judgments 600 --rounds 1

Figures are printed, not asserted.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
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
    script: dict[str, Any] = {"latency": args.latency}
    if name == "storm":
        script["faults"] = [
            {"kind": "rate_limit", "probability": args.storm, "retry_after": 1.0},
            {"kind": "server_error", "probability": args.storm, "status": 503},
        ]
    try:
        with (
            database("postgres", workdir) as direct_url,
            SimulatorProcess(script, extra_args=("--log-size", str(3 * args.judgments))) as sim,
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
    resumed_at: float | None = None  # the first new verdict after the fault ended
    count_at_end: int | None = None

    killed_at: float | None = None  # wall clock, as the simulator's call log

    def inject() -> None:
        nonlocal fault_end, killed_at
        if name == "kill":
            killed_at = time.time()
            service.kill_worker(workers[0])
            time.sleep(args.restart_after)
            service.start_worker()
        elif name == "redis":
            for restart in range(args.redis_restarts):
                if restart:
                    time.sleep(5.0)
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
        if fault_end is not None and count_at_end is None:
            count_at_end = finished
        elif count_at_end is not None and resumed_at is None and finished > count_at_end:
            resumed_at = now
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
    cut = int(stats["by_status"].get("499", 0))
    return {
        "scenario": name,
        "planned": planned,
        "done": int(row[0]),
        "lost": planned - int(row[0]),
        "duplicated": max(0, delivered - planned),
        "cut": cut,
        "calls_seen": int(stats["total_calls"]),
        "calls_recorded": int(row[1]),
        "wall_s": wall,
        "fault_after_s": (fault_at - started) if fault_at else None,
        "recovered_after_fault_s": (started + wall - fault_end) if fault_end else None,
        "resumed_after_fault_s": (resumed_at - fault_end) if resumed_at is not None and fault_end else None,
        "longest_stall_s": longest_stall,
        "unsaved_before_kill": unsaved_before(sim, killed_at, 3 * args.judgments) if killed_at else None,
    }


def unsaved_before(sim: SimulatorProcess, killed_at: float, limit: int) -> int:
    """Prompts answered (200) more than once whose first answer the simulator finished before the kill."""
    first: dict[str, float] = {}
    again: set[str] = set()
    for call in sim.requests(limit):
        if call["status"] == 200:
            prompt = json.dumps(call["body"].get("messages"), sort_keys=True)
            finished = call["started"] + call["duration_s"]
            again.update([prompt] if prompt in first else [])
            first[prompt] = min(first.get(prompt, finished), finished)
    return sum(1 for prompt in again if first[prompt] < killed_at)


def spread(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{min(values):.1f} / {statistics.median(values):.1f} / {max(values):.1f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenarios", nargs="+", choices=SCENARIOS, default=["kill", "redis", "db"])
    parser.add_argument("--rounds", type=int, default=3, help="rounds per scenario, each with its own no-fault run")
    parser.add_argument("--judgments", type=int, default=1950)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=16, help="Celery threads per worker (default 16)")
    parser.add_argument(
        "--latency", default="uniform(0.1, 0.3)", help="simulator latency per call (default uniform(0.1, 0.3) s)"
    )
    parser.add_argument("--at", type=float, default=0.3, help="inject the fault when this share is done")
    parser.add_argument("--restart-after", type=float, default=3.0)
    parser.add_argument("--redis-restarts", type=int, default=1, help="Redis kill-and-restarts per redis run")
    parser.add_argument("--outage", type=float, default=15.0, help="database outage, s (default 15)")
    parser.add_argument("--storm", type=float, default=0.1, help="share of calls answered 429, and 503 (each)")
    parser.add_argument("--timeout", type=float, default=1200.0)
    args = parser.parse_args(argv)
    faults = [s for s in args.scenarios if s != "none"]
    defaults = default_env()
    print(
        f"fault benchmark ({os.cpu_count()} CPUs, load avg {', '.join(f'{x:.1f}' for x in os.getloadavg())}): "
        f"{args.judgments} judgments, {args.workers} workers x {args.threads} threads, latency {args.latency}, "
        f"PostgreSQL behind a TCP proxy, {args.rounds} rounds; default timers: lease {defaults['DJ_CLAIM_LEASE']} s, "
        f"sweep {defaults['DJ_SWEEP_INTERVAL']} s, requeue {defaults['DJ_REQUEUE_AFTER']} s, visibility "
        f"{defaults['DJ_VISIBILITY_TIMEOUT']} s"
    )
    header = (
        f"  {'round':>5} {'scenario':<8} {'planned':>7} {'done':>6} {'lost':>5} {'seen':>6} {'recorded':>8} "
        f"{'cut':>4} {'unsaved':>7} {'wall s':>7} {'delay s':>8} {'stall s':>8} {'resume s':>8} {'fault->done s':>13} "
        f"{'load':>5}"
    )
    print(header, flush=True)
    delays: dict[str, list[float]] = {name: [] for name in faults}
    exact: dict[str, list[bool]] = {name: [] for name in faults}
    walls: dict[str, list[float]] = {name: [] for name in ["none", *faults]}
    for round_no in range(1, args.rounds + 1):
        reference: float | None = None
        for name in ["none", *faults]:
            result = run_scenario(name, args)
            if name == "none":
                reference = result["wall_s"]
            delay = result["wall_s"] - reference if reference is not None else math.nan
            if name != "none":
                delays[name].append(delay)
                exact[name].append(result["calls_seen"] == result["calls_recorded"])
            after = result["recovered_after_fault_s"]
            resumed = result["resumed_after_fault_s"]
            walls[name].append(result["wall_s"])
            print(
                f"  {round_no:>5} {name:<8} {result['planned']:>7} {result['done']:>6} {result['lost']:>5} "
                f"{result['calls_seen']:>6} {result['calls_recorded']:>8} {result['cut']:>4} "
                f"{result['duplicated']:>7} {result['wall_s']:>7.1f} {delay:>8.1f} {result['longest_stall_s']:>8.1f} "
                f"{resumed if resumed is not None else math.nan:>8.1f} "
                f"{after if after is not None else math.nan:>13.1f} {os.getloadavg()[0]:>5.1f}",
                flush=True,
            )
            if result["unsaved_before_kill"] is not None:
                print(
                    f"        unsaved {result['duplicated']}: {result['unsaved_before_kill']} finished by the provider "
                    f"before the kill (never stashed), {result['duplicated'] - result['unsaved_before_kill']} after it",
                    flush=True,
                )
    print(
        "  lost: not finished; seen/recorded: provider calls the simulator received / the database records; cut: "
        "calls the client hung up on mid-call; unsaved: replies delivered beyond one per judgment (paid for, never "
        "stored); delay: wall time minus the same round's no-fault run; stall: the longest time without a new "
        "verdict; resume: from the end of the fault to the first verdict after it; fault->done: from the end of "
        "the fault to the run's end"
    )
    reference = statistics.median(walls["none"])
    print(
        "  delay over the same round's no-fault run, and over the median no-fault run "
        f"({reference:.1f} s), min / median / max (s); calls recorded = seen in how many rounds"
    )
    for name in faults:
        over_median = [wall - reference for wall in walls[name]]
        print(
            f"  {name:<8} {spread(delays[name]):>22}   {spread(over_median):>22}   "
            f"{sum(exact[name])}/{len(exact[name])}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
