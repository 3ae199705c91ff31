"""What a run costs: the report's bill against the provider's, prompt caching by chance and by design (issue 24).

Real processes: a private redis-server, a fresh PostgreSQL database per mode, the API, one Celery worker with
``--concurrency`` calls in flight, and the judge simulator caching prompts as the provider does and keeping the bill
it would charge at the same prices as ``workers/prices.yaml``. ``--provider openai`` (the default): the judge is
``openai:<model>`` (gpt-4o: cached input at 50 %), cached as OpenAI does (automatic prefix caching, 128-token steps,
``prompt_cache_key``), batches through the Files + Batch API. ``--provider anthropic``: ``anthropic:<model>``
(claude-sonnet-4-6 by default), cached only up to a ``cache_control`` breakpoint (written at 1.25x, read at 0.1x of
the input price), batches through Message Batches. The rubric is MemoChat's consistency judge (the history before
the response), the items MSC episodes from ``../shared/data/msc``: each item's history is its previous sessions and
current dialogue, stitched with the next episodes' sessions until it is at least ``--min-history`` tokens (o200k),
with ``--systems`` candidate responses.

Modes (each on a fresh database, the simulator's cache and bill reset):

* ``list price``: what the same calls cost with no cache hit (the report's list price of the cache-aware run);
* ``today``: real-time, ``DJ_CACHE_AWARE_DISPATCH=false`` (every judgment of a batch sent at once: hits by chance);
* ``cache-aware``: real-time, cache-aware dispatch;
* ``batch``: ``execution: batch`` (the provider's batch API at the batch price), ``DJ_CACHE_AWARE_DISPATCH=false``;
* ``batch + cache-aware``: the same with cache-aware grouping (each prefix group's requests together, carrying its
  ``prompt_cache_key`` / ``cache_control`` breakpoint). The simulator ends a batch ``--batch-seconds`` after it is
  created and runs its requests in file order through the same prompt cache; judged/s of the batch modes is that
  turnaround, not a throughput.

Printed per mode: billed USD per 1,000 judgments (the simulator's bill), the report's cost and its difference to the
bill, the share of input tokens served from cache against the most possible (computed exactly in the simulator's
terms. OpenAI: the prompts sent in the best order, each reading its longest shared prefix in 128-token steps; also
printed within items, which is what a prompt_cache_key per item allows. Anthropic: one breakpoint a prompt, so per
item every candidate but the first reads the prefix all of the item's prompts share), judged/s, the calls in flight
(the simulator's count, sampled every 0.1 s), the service's CPU per judgment, and whether the verdicts equal the
first mode's. The estimate (POST /v1/runs/estimate, before the run) is set against the cache-aware bills twice:
as a first-ever estimate (an empty database: the rubric's stated reply length, the stated characters a token) and
calibrated from the project's own history: before each mode's measured run, an earlier real-time run of
``--history-items`` other items (the next MSC items, x ``--systems``) is judged in the same project by the same judge
and rubric, and the measured run is estimated again (judge_api.estimate: the mean recorded reply, and for a judge
with no offline tokenizer the characters a token observed on those prompts). The simulator's cache and bill are
reset after that run, so it is in neither the bill nor the measured figures.

Usage::

    python bench/bench_cost.py                                   # 200 items x 4 systems, 32 in flight
    python bench/bench_cost.py --items 60 --rounds 3             # the issue's first measurement's size
    python bench/bench_cost.py --provider anthropic              # claude-sonnet-4-6 over Message Batches
"""

from __future__ import annotations

import argparse
import calendar
import contextlib
import itertools
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import redis
from sqlalchemy import create_engine, text

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))
sys.path.insert(0, str(REPO_ROOT / "bench"))

from bench_throughput import (  # noqa: E402
    DEFAULT_RECOVERY_ENV,
    PRODUCTION_ENV,
    PrivateRedis,
    cpu_seconds,
    database,
    service_processes,
    start_profilers,
    stop_profilers,
    wait_workers_ready,
)

from dialogue_judge.testing import LiveService  # noqa: E402
from judge_api.judges import parse_judge  # noqa: E402
from judge_api.pricing import load_prices  # noqa: E402
from judge_api.prompting import render  # noqa: E402
from judge_api.rubrics import get_registry  # noqa: E402
from judge_api.tokens import count_text  # noqa: E402
from judge_simulator.process import SimulatorProcess  # noqa: E402

MSC = REPO_ROOT.parent / "shared" / "data" / "msc" / "msc_dialogue_session_3_test.txt"
if not MSC.exists():
    MSC = Path("/work/shared/data/msc/msc_dialogue_session_3_test.txt")
RUBRIC = "memochat-consistency"
MODES = ("today", "cache-aware", "batch", "batch + cache-aware")
SIM_CHARS_PER_BLOCK = 512  # the simulator's 128-token cache step at its 4 characters a token
SIM_CHARS_PER_TOKEN = 4
DEFAULT_MODEL = {"openai": "gpt-4o", "anthropic": "claude-sonnet-4-6"}
SIZING = parse_judge("openai:gpt-4o")  # items are sized in o200k tokens whatever the judge: the same items for both


def msc_items(n_items: int, n_systems: int, min_tokens: int) -> list[dict[str, Any]]:
    episodes = [json.loads(line) for line in MSC.read_text().splitlines() if line.strip()]
    spec = SIZING
    items = []
    for i in range(n_items):
        turns: list[dict[str, Any]] = []
        k = i
        while True:
            ep = episodes[k % len(episodes)]
            sessions = [p["dialog"] for p in ep.get("previous_dialogs") or []] + [ep["dialog"]]
            stitched = []
            for s, dialog in enumerate(sessions):
                for t, turn in enumerate(dialog):
                    speaker = "user" if t % 2 == 0 else "bot"
                    stitched.append({"speaker": speaker, "text": turn["text"], "session": s + 1})
            turns = stitched + turns if turns else stitched
            history = "\n".join(t["text"] for t in turns)
            if count_text(spec, history) >= min_tokens:
                break
            k += len(episodes) // 7 + 1
        if turns[-1]["speaker"] != "user":
            turns = turns[:-1]
        last_bot = next((t["text"] for t in reversed(turns) if t["speaker"] == "bot"), "I remember.")
        candidates = {f"sys{j}": f"{last_bot} (variant {j} of item {i})" if j else last_bot for j in range(n_systems)}
        items.append({"id": f"msc-{i:04d}", "dialogue": turns, "candidates": candidates})
    return items


def _lcp(a: str, b: str) -> int:
    low, high = 0, min(len(a), len(b))
    while low < high:  # binary search on slice equality (compared in C)
        mid = (low + high + 1) // 2
        if a[:mid] == b[:mid]:
            low = mid
        else:
            high = mid - 1
    return low


def _most_cached(prompts: list[str]) -> int:
    """The most tokens the simulator's cache can serve to ``prompts`` in any order: sent in sorted order, each
    prompt reads its longest 128-token-step prefix shared with the one before (at least the 1,024-token minimum),
    and that sum over sorted neighbours is what a prefix trie allows (each shared prefix paid once)."""
    ordered = sorted(prompts)
    most = 0
    for before, prompt in itertools.pairwise(ordered):
        blocks = _lcp(before, prompt) // SIM_CHARS_PER_BLOCK
        if blocks * 128 >= 1024:
            most += blocks * 128
    return most


def _most_read_at_one_breakpoint(prompts: list[str], min_tokens: int) -> int:
    """Anthropic: a prompt reads the cache only up to its breakpoint, one per prompt at most usefully the prefix
    all of the item's prompts share; the first prompt writes it, every other one reads it."""
    if len(prompts) < 2:
        return 0
    tokens = _lcp(min(prompts), max(prompts)) // SIM_CHARS_PER_TOKEN  # all share what the extremes share
    return tokens * (len(prompts) - 1) if tokens >= min_tokens else 0


def possible_cached(items: list[dict[str, Any]], provider: str, min_tokens: int) -> tuple[int, int, int]:
    """(the most input tokens the cache can serve with one key (OpenAI: prompt_cache_key; Anthropic: breakpoint) per
    item, the most with no key at all (OpenAI: items stitched from the same episodes share history too; Anthropic:
    the same as per item, a breakpoint is per prompt), all input tokens), counted as the simulator counts them:
    its prompt is the messages joined by blank lines, 4 characters a token."""
    rubric = get_registry().get(RUBRIC)
    per_item = across = total = 0
    texts = []
    for it in items:
        prompts = [render(rubric, it, "consistency", c).messages for c in it["candidates"].values()]
        joined = ["\n\n".join(m["content"] for m in p if m["content"]) for p in prompts]
        total += sum(len(text) // SIM_CHARS_PER_TOKEN + 1 for text in joined)
        if provider == "anthropic":
            per_item += _most_read_at_one_breakpoint(joined, min_tokens)
        else:
            per_item += _most_cached(joined)
        texts += joined
    across = per_item if provider == "anthropic" else _most_cached(texts)
    return per_item, across, total


def run_to_end(api_url: str, engine: Any, body: dict[str, Any]) -> tuple[str, int]:
    """Submit ``body`` and wait until every judgment has settled: (run id, judgments)."""
    created = httpx.post(f"{api_url}/v1/runs", json=body, timeout=600).json()
    run_id, n = created["id"], int(created["n_judgments"])
    query = text("SELECT COUNT(*) FROM judgments WHERE run_id = :r AND status <> 'pending' AND status <> 'running'")
    while True:
        with engine.connect() as connection:
            if int(connection.execute(query, {"r": run_id}).scalar_one()) >= n:
                return run_id, n
        time.sleep(0.2)


def batch_timeline(batches: list[dict[str, Any]], started_at: float, last_write: Any) -> dict[str, Any]:
    """Where a batch run's time goes: from the run's creation to its first provider batch (the submit side), the
    provider's part (to its last batch's end) and the turnaround, from that end to the run's last verdict."""
    if not batches or any(b["ended_at"] is None for b in batches):
        return {}
    done = calendar.timegm(last_write.timetuple()) + last_write.microsecond / 1e6  # a naive UTC timestamp
    first = min(b["created_at"] for b in batches)
    ended = max(b["ended_at"] for b in batches)
    return {
        "batches": len(batches),
        "submit_s": first - started_at,
        "provider_s": ended - first,
        "tail_s": done - ended,
    }


def run_mode(
    name: str,
    args: argparse.Namespace,
    redis_url: str,
    workdir: Path,
    sim: SimulatorProcess,
    body: dict[str, Any],
    history: list[dict[str, Any]],
) -> dict[str, Any]:
    # a fresh service per mode: the previous mode's single-flight "just filled" markers (same prompts, same keys,
    # alive a claim lease) would send this mode's judgments down the slow path of a key another worker has just
    # filled (a cache lookup and a cache write per judgment) against a database that never saw those entries
    redis.Redis.from_url(redis_url).flushall()
    with database(args.database, workdir) as database_url:
        env = {
            **PRODUCTION_ENV,
            **DEFAULT_RECOVERY_ENV,
            "DJ_CALL_CONCURRENCY": str(args.concurrency),
            "DJ_CACHE_AWARE_DISPATCH": "true" if name in ("cache-aware", "batch + cache-aware") else "false",
            "OPENAI_BASE_URL": sim.base_url,
            "OPENAI_API_KEY": "sk-bench-0000000000",
            "ANTHROPIC_BASE_URL": sim.root_url,
            "ANTHROPIC_API_KEY": "sk-ant-bench-0000000000",
        }
        if name.startswith("batch"):  # polled every half second (the sweeper asks, a worker polls)
            env.update(DJ_BATCH_POLL="0.5", DJ_SWEEP_INTERVAL="0.5")
            body = {**body, "execution": "batch"}
        svc = workdir / f"svc-{name.replace(' + ', '-')}"
        service = LiveService(redis_url, database_url, svc, env, worker_concurrency=args.threads)
        try:
            service.start_api()
            service.start_worker()
            wait_workers_ready(service, 1)
            engine = create_engine(database_url)
            sim.set_script(args.script)  # a new prompt cache
            sim.reset()  # and a new bill
            estimate = httpx.post(f"{service.api_url}/v1/runs/estimate", json=body, timeout=600).json()
            calibrated = None
            if history:  # the project's earlier run (real-time, other items), then the estimate again
                earlier = {k: v for k, v in body.items() if k != "execution"}
                run_to_end(service.api_url, engine, {**earlier, "items": history, "name": "bench-cost-history"})
                calibrated = httpx.post(f"{service.api_url}/v1/runs/estimate", json=body, timeout=600).json()
                sim.set_script(args.script)
                sim.reset()
            procs = service_processes(service)
            cpu_before = sum(cpu_seconds(proc) for proc in procs.values())
            in_flight: list[int] = []
            sampling = threading.Event()

            def sample() -> None:
                while not sampling.wait(0.1):
                    with contextlib.suppress(Exception):
                        in_flight.append(int(sim.stats()["in_flight"]))

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            profilers: list[Any] = []
            if args.profile:
                (args.profile / f"{svc.name}-{workdir.name}").mkdir(parents=True, exist_ok=True)
                profilers = start_profilers(service, args.profile / f"{svc.name}-{workdir.name}")
            started, started_at = time.perf_counter(), time.time()
            run_id, n = run_to_end(service.api_url, engine, body)
            wall = time.perf_counter() - started
            sampling.set()
            sampler.join()
            stop_profilers(profilers)
            cpu = sum(cpu_seconds(proc) for proc in procs.values()) - cpu_before
            with engine.connect() as connection:
                last_write = connection.execute(
                    text("SELECT MAX(updated_at) FROM judgments WHERE run_id = :r"), {"r": run_id}
                ).scalar_one()
                verdicts = {
                    (r.item_key, r.system_a): r.score
                    for r in connection.execute(
                        text("SELECT item_key, system_a, score FROM judgments WHERE run_id = :r"), {"r": run_id}
                    )
                }
            engine.dispose()
            report = httpx.get(f"{service.api_url}/v1/runs/{run_id}/report", timeout=600).json()
        finally:
            service.stop()
    stats = sim.stats()
    bill = stats["bill"]
    return {
        **batch_timeline(stats.get("batches") or [], started_at, last_write),
        "name": name,
        "n": n,
        "wall_s": wall,
        "rate": n / wall,
        "in_flight": statistics.mean(in_flight) if in_flight else 0.0,
        "cpu_ms": 1000 * cpu / n,
        "bill_usd": bill["usd"],
        "bill_input": bill["input_tokens"],
        "bill_cached": bill["cached_tokens"],
        "bill_written": bill["cache_write_tokens"],
        "batch_calls": sum(v for k, v in sim.stats()["by_endpoint"].items() if str(k).startswith("batch:")),
        "bill_output": bill["output_tokens"],
        "calls": bill["calls"],
        "report": report["cost"],
        "estimate": estimate,
        "calibrated": calibrated,
        "verdicts": verdicts,
    }


def print_estimates(results: dict[str, list[dict[str, Any]]]) -> None:
    """The estimates of the cache-aware modes (what the estimate expects: cache-aware dispatch is the default)
    against their bills: first-ever (empty history) and calibrated (after the project's earlier run)."""
    for name, kind in (("cache-aware", "realtime"), ("batch + cache-aware", "batch")):
        for round_no, r in enumerate(results[name], start=1):
            bill = r["bill_usd"]
            for label, est in (("first-ever", r["estimate"]), ("calibrated", r["calibrated"])):
                if est is None:
                    continue
                usd = est["cost_usd"][kind]
                (judge,) = est["per_judge"]
                lengths = ", ".join(
                    f"{x['tokens']:.1f} tokens a reply ({x['source']}, {x['earlier_judgments']} earlier judgments)"
                    for x in judge["reply_tokens"]
                )
                print(
                    f"estimate of {name} round {round_no}, {label:<10}: cost_usd.{kind} ${usd:.4f} vs the bill "
                    f"${bill:.4f} ({usd / bill - 1:+.1%}; target +-15 %); input {est['input_tokens']} vs the "
                    f"simulator's {r['bill_input']} ({est['input_tokens'] / r['bill_input'] - 1:+.1%}, "
                    f"{judge['tokenizer']}), output {est['output_tokens']} vs {r['bill_output']} "
                    f"({est['output_tokens'] / r['bill_output'] - 1:+.1%}: {lengths}); {est['cached_judgments']} "
                    f"judge-cache hits; {r['batch_calls']} batch requests, {r['calls'] - r['batch_calls']} real-time"
                )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=200)
    parser.add_argument("--systems", type=int, default=4)
    parser.add_argument("--min-history", type=int, default=1500, help="tokens of history per item (o200k)")
    parser.add_argument("--provider", default="openai", choices=sorted(DEFAULT_MODEL), help="the judge's provider")
    parser.add_argument("--model", help="the judge's model (default: gpt-4o / claude-sonnet-4-6)")
    parser.add_argument("--latency", type=float, default=0.3, help="seconds per simulated call")
    parser.add_argument("--concurrency", type=int, default=32, help="calls in flight (DJ_CALL_CONCURRENCY)")
    parser.add_argument("--threads", type=int, default=16, help="Celery worker threads (batches at once)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--database", default="postgres", choices=["postgres", "sqlite"])
    parser.add_argument("--batch-seconds", type=float, default=2.0, help="the simulator's batch turnaround")
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES, help="modes to run (default all)")
    parser.add_argument("--profile", type=Path, help="py-spy record the API and worker of each run into this folder")
    parser.add_argument(
        "--history-items",
        type=int,
        default=50,
        help="items of the earlier run each mode's calibrated estimate learns from (0: no calibrated estimate)",
    )
    args = parser.parse_args(argv)

    args.model = args.model or DEFAULT_MODEL[args.provider]
    judge = f"{args.provider}:{args.model}"
    prices = load_prices()
    if not prices.is_priced(parse_judge(judge)):
        parser.error(f"--model: {judge} is not in workers/prices.yaml: the bill and the report would be $0")
    price = prices.for_spec(parse_judge(judge))
    sim_price = {"input": price.input, "cached_input": price.cached_input, "output": price.output}
    if args.provider == "anthropic":  # the table's cache write and minimum cacheable prefix of the model
        sim_price.update(cache_write=price.cache_write, min_cache_tokens=price.min_cache_tokens)
    args.script = {
        "latency": {"kind": "fixed", "seconds": args.latency},
        "batch": {"completion_seconds": args.batch_seconds},
        "prompt_cache": {"enabled": True, "prices": {args.model: sim_price}},
    }
    items = msc_items(args.items + args.history_items, args.systems, args.min_history)
    items, history = items[: args.items], items[args.items :]
    most_keyed, most, total = possible_cached(items, args.provider, price.min_cache_tokens)
    body = {"items": items, "rubrics": [RUBRIC], "judges": [judge], "name": "bench-cost"}
    write = f"/{price.cache_write:g}" if args.provider == "anthropic" else ""
    print(
        f"bench_cost ({os.cpu_count()} CPUs, load avg {', '.join(f'{x:.1f}' for x in os.getloadavg())}): "
        f"{args.items} MSC items x {args.systems} systems = {args.items * args.systems} judgments, {RUBRIC}, "
        f"{judge} ({price.input:g}/{price.cached_input:g}{write}/{price.output:g} USD per M in/cached"
        f"{'/written' if write else ''}/out), "
        f"{args.concurrency} calls in flight, L = {args.latency} s, {args.rounds} round(s); "
        f"most possible cached share {most / total:.1%} ({most_keyed / total:.1%} within items)"
    )
    workdir = Path(tempfile.mkdtemp(prefix="dj-bench-cost-"))
    redis_server = PrivateRedis(workdir)
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in MODES}
    try:
        with SimulatorProcess(args.script) as sim:
            for round_no in range(1, args.rounds + 1):
                for name in args.modes:
                    result = run_mode(name, args, redis_server.url, workdir / f"r{round_no}", sim, body, history)
                    results[name].append(result)
                    print(
                        f"  round {round_no} {name:<19} {result['rate']:6.2f} judged/s  "
                        f"{result['in_flight']:5.1f} calls in flight on average  "
                        f"service CPU {result['cpu_ms']:.2f} ms/judgment  cached "
                        f"{result['bill_cached'] / result['bill_input']:.1%}"
                        + (
                            f" written {result['bill_written'] / result['bill_input']:.1%}"
                            if args.provider == "anthropic"
                            else ""
                        )
                        + f"  bill ${result['bill_usd']:.4f}  report ${result['report']['cost_usd']:.4f}  "
                        f"{result['batch_calls']} batch requests, {result['calls'] - result['batch_calls']} real-time"
                    )
                    if "tail_s" in result:
                        print(
                            f"    {result['batches']} provider batch(es): first submitted {result['submit_s']:.1f} s "
                            f"after the run's creation, ended {result['provider_s']:.1f} s later; turnaround (the "
                            f"provider's end to the run's last verdict) {result['tail_s']:.1f} s; load average "
                            f"{os.getloadavg()[0]:.1f}"
                        )
    finally:
        redis_server.stop()

    if {"today", "cache-aware"} <= set(args.modes):
        ratios = [a["rate"] / b["rate"] for a, b in zip(results["cache-aware"], results["today"], strict=True)]
        print(
            f"cache-aware / today judged/s by round: {', '.join(f'{r:.3f}' for r in ratios)}; min {min(ratios):.3f} "
            f"median {statistics.median(ratios):.3f} (target >= 0.95)"
        )
    print_estimates(results)
    if set(args.modes) != set(MODES):
        return 0  # the comparisons below need every mode
    first = results["today"][0]
    n = first["n"]
    aware = results["cache-aware"]
    listed = statistics.median(r["report"]["list_cost_usd"] for r in aware)
    print()
    print(
        f"{'mode':<22}{'USD / 1k judgments':>20}{'x list':>8}{'cached share':>14}{'of possible':>13}{'judged/s':>10}"
        "  verdicts"
    )
    print(f"{'list price':<22}{listed / n * 1000:>20.4f}{1:>8.3f}{0:>14.1%}{'':>13}{'':>10}")
    for name in MODES:
        rounds = results[name]
        usd = statistics.median(r["bill_usd"] for r in rounds) / n * 1000
        times = statistics.median(r["bill_usd"] / r["report"]["list_cost_usd"] for r in rounds)
        share = statistics.median(r["bill_cached"] / r["bill_input"] for r in rounds)
        rate = statistics.median(r["rate"] for r in rounds)
        same = all(r["verdicts"] == first["verdicts"] for r in rounds)
        print(f"{name:<22}{usd:>20.4f}{times:>8.3f}{share:>14.1%}{share / (most / total):>13.1%}{rate:>10.2f}  {same}")
    discount = 1 - price.cached_input / price.input
    for name, target in (("batch", 0.5), ("batch + cache-aware", 0.35)):
        times = [r["bill_usd"] / r["report"]["list_cost_usd"] for r in results[name]]
        print(
            f"{name}: billed {min(times):.3f}x / {statistics.median(times):.3f}x list price (min / median; target "
            f"<= {target}x{' on a model with a 90 % cache discount' if target < 0.5 else ''}; {args.model}'s cached "
            f"input is {discount:.0%} off)"
        )
    if args.provider == "anthropic":
        print(
            f"most possible cached share: {most / total:.1%} (one breakpoint a prompt: per item every candidate but "
            "the first reads the prefix the item's prompts share, the first writes it)"
        )
    else:
        print(
            f"most possible cached share: {most / total:.1%} in any order with no cache key ({most_keyed / total:.1%} "
            "with a prompt_cache_key per item, as cache-aware dispatch sends them); 'of possible' is against the first"
        )
    for name in MODES:
        r = results[name][0]
        diff = r["report"]["cost_usd"] / r["bill_usd"] - 1
        print(
            f"{name}: report ${r['report']['cost_usd']:.4f} vs bill ${r['bill_usd']:.4f} ({diff:+.2%}; target 1 %)"
            f"; list price ${r['report']['list_cost_usd']:.4f} ({r['report']['list_cost_usd'] / r['bill_usd'] - 1:+.1%}"
            " over the bill: what the report said before issue 24)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
