"""What a run costs: the report's bill against the provider's, prompt caching by chance and by design (issue 24).

Real processes: a private redis-server, a fresh PostgreSQL database per mode, the API, one Celery worker with
``--concurrency`` calls in flight, and the judge simulator caching prompts as OpenAI does (automatic prefix
caching, 128-token steps, ``prompt_cache_key``) and keeping the bill it would charge at the same prices as
``workers/prices.yaml``. The judge is ``openai:<model>`` (gpt-4o: cached input at 50 %), the rubric MemoChat's
consistency judge (the history before the response), the items MSC episodes from ``../shared/data/msc``: each
item's history is its previous sessions and current dialogue, stitched with the next episodes' sessions until it
is at least ``--min-history`` tokens (o200k), with ``--systems`` candidate responses.

Modes (each on a fresh database, the simulator's cache and bill reset):

* ``list price``: what the same calls cost with no cache hit (the report's list price of the cache-aware run);
* ``today``: real-time, ``DJ_CACHE_AWARE_DISPATCH=false`` (every judgment of a batch sent at once: hits by chance);
* ``cache-aware``: real-time, cache-aware dispatch;
* ``batch`` and ``batch + cache-aware``: slots for batch execution (issue 24 item 1), printed as "n/a" until the
  run accepts ``execution: batch``.

Printed per mode: billed USD per 1,000 judgments (the simulator's bill), the report's cost and its difference to
the bill, the share of input tokens served from cache against the most possible (every candidate after an item's
first reading the item's shared prefix, to the 128-token step), judged/s, and whether the verdicts equal the first
mode's. The estimate (POST /v1/runs/estimate, before the run) is set against the cache-aware bill.

Usage::

    python bench/bench_cost.py                                   # 200 items x 4 systems, 32 in flight
    python bench/bench_cost.py --items 60 --rounds 3             # the issue's first measurement's size
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
from typing import Any

import httpx
from sqlalchemy import create_engine, text

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))
sys.path.insert(0, str(REPO_ROOT / "bench"))

from bench_throughput import (  # noqa: E402
    DEFAULT_RECOVERY_ENV,
    PRODUCTION_ENV,
    PrivateRedis,
    database,
    wait_workers_ready,
)

from dialogue_judge.testing import LiveService  # noqa: E402
from judge_api.judges import parse_judge  # noqa: E402
from judge_api.prefixes import shared_prefix  # noqa: E402
from judge_api.pricing import load_prices  # noqa: E402
from judge_api.prompting import render  # noqa: E402
from judge_api.rubrics import get_registry  # noqa: E402
from judge_api.tokens import count_text  # noqa: E402
from judge_simulator.process import SimulatorProcess  # noqa: E402

MSC = REPO_ROOT.parent / "shared" / "data" / "msc" / "msc_dialogue_session_3_test.txt"
if not MSC.exists():
    MSC = Path("/work/shared/data/msc/msc_dialogue_session_3_test.txt")
RUBRIC = "memochat-consistency"
SIM_CHARS_PER_BLOCK = 512  # the simulator's 128-token cache step at its 4 characters a token


def msc_items(n_items: int, n_systems: int, min_tokens: int, model: str) -> list[dict[str, Any]]:
    episodes = [json.loads(line) for line in MSC.read_text().splitlines() if line.strip()]
    spec = parse_judge(f"openai:{model}")
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


def possible_cached(items: list[dict[str, Any]]) -> tuple[int, int]:
    """(the most input tokens that can be read from the cache, all input tokens) in the simulator's count."""
    rubric = get_registry().get(RUBRIC)
    most = total = 0
    for it in items:
        prompts = [render(rubric, it, "consistency", c).messages for c in it["candidates"].values()]
        total += sum(len("\n\n".join(m["content"] for m in p)) // 4 + 1 for p in prompts)
        prefix = shared_prefix(prompts)
        if prefix is None:
            continue
        blocks = prefix.chars // SIM_CHARS_PER_BLOCK
        if blocks * 128 >= 1024:
            most += (len(prompts) - 1) * blocks * 128
    return most, total


def run_mode(
    name: str, args: argparse.Namespace, redis_url: str, workdir: Path, sim: SimulatorProcess, body: dict[str, Any]
) -> dict[str, Any]:
    with database(args.database, workdir) as database_url:
        env = {
            **PRODUCTION_ENV,
            **DEFAULT_RECOVERY_ENV,
            "DJ_CALL_CONCURRENCY": str(args.concurrency),
            "DJ_CACHE_AWARE_DISPATCH": "true" if name == "cache-aware" else "false",
            "OPENAI_BASE_URL": sim.base_url,
            "OPENAI_API_KEY": "sk-bench-0000000000",
        }
        service = LiveService(redis_url, database_url, workdir / f"svc-{name}", env, worker_concurrency=args.threads)
        try:
            service.start_api()
            service.start_worker()
            wait_workers_ready(service, 1)
            sim.set_script(args.script)  # a new prompt cache
            sim.reset()  # and a new bill
            estimate = httpx.post(f"{service.api_url}/v1/runs/estimate", json=body, timeout=600).json()
            started = time.perf_counter()
            created = httpx.post(f"{service.api_url}/v1/runs", json=body, timeout=600).json()
            run_id, n = created["id"], int(created["n_judgments"])
            engine = create_engine(database_url)
            query = text(
                "SELECT COUNT(*) FROM judgments WHERE run_id = :r AND status <> 'pending' AND status <> 'running'"
            )
            while True:
                with engine.connect() as connection:
                    if int(connection.execute(query, {"r": run_id}).scalar_one()) >= n:
                        break
                time.sleep(0.2)
            wall = time.perf_counter() - started
            with engine.connect() as connection:
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
    bill = sim.stats()["bill"]
    return {
        "name": name,
        "n": n,
        "wall_s": wall,
        "rate": n / wall,
        "bill_usd": bill["usd"],
        "bill_input": bill["input_tokens"],
        "bill_cached": bill["cached_tokens"],
        "bill_output": bill["output_tokens"],
        "calls": bill["calls"],
        "report": report["cost"],
        "estimate": estimate,
        "verdicts": verdicts,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=200)
    parser.add_argument("--systems", type=int, default=4)
    parser.add_argument("--min-history", type=int, default=1500, help="tokens of history per item (o200k)")
    parser.add_argument("--model", default="gpt-4o")
    parser.add_argument("--latency", type=float, default=0.3, help="seconds per simulated call")
    parser.add_argument("--concurrency", type=int, default=32, help="calls in flight (DJ_CALL_CONCURRENCY)")
    parser.add_argument("--threads", type=int, default=16, help="Celery worker threads (batches at once)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--database", default="postgres", choices=["postgres", "sqlite"])
    args = parser.parse_args(argv)

    price = load_prices().for_spec(parse_judge(f"openai:{args.model}"))
    args.script = {
        "latency": {"kind": "fixed", "seconds": args.latency},
        "prompt_cache": {
            "enabled": True,
            "prices": {args.model: {"input": price.input, "cached_input": price.cached_input, "output": price.output}},
        },
    }
    items = msc_items(args.items, args.systems, args.min_history, args.model)
    most, total = possible_cached(items)
    body = {"items": items, "rubrics": [RUBRIC], "judges": [f"openai:{args.model}"], "name": "bench-cost"}
    print(
        f"bench_cost ({os.cpu_count()} CPUs, load avg {', '.join(f'{x:.1f}' for x in os.getloadavg())}): "
        f"{args.items} MSC items x {args.systems} systems = {args.items * args.systems} judgments, {RUBRIC}, "
        f"openai:{args.model} ({price.input}/{price.cached_input}/{price.output} USD per M in/cached/out), "
        f"{args.concurrency} calls in flight, L = {args.latency} s, {args.rounds} round(s); "
        f"most possible cached share {most / total:.1%}"
    )
    workdir = Path(tempfile.mkdtemp(prefix="dj-bench-cost-"))
    redis_server = PrivateRedis(workdir)
    results: dict[str, list[dict[str, Any]]] = {"today": [], "cache-aware": []}
    try:
        with SimulatorProcess(args.script) as sim:
            for round_no in range(1, args.rounds + 1):
                for name in ("today", "cache-aware"):
                    result = run_mode(name, args, redis_server.url, workdir / f"r{round_no}", sim, body)
                    results[name].append(result)
                    print(
                        f"  round {round_no} {name:<12} {result['rate']:6.2f} judged/s  cached "
                        f"{result['bill_cached'] / result['bill_input']:.1%}  bill ${result['bill_usd']:.4f}  "
                        f"report ${result['report']['cost_usd']:.4f}"
                    )
    finally:
        redis_server.stop()

    first = results["today"][0]
    n = first["n"]
    aware = results["cache-aware"]
    listed = statistics.median(r["report"]["list_cost_usd"] for r in aware)
    print()
    print(f"{'mode':<22}{'USD / 1k judgments':>20}{'cached share':>14}{'of possible':>13}{'judged/s':>10}  verdicts")
    print(f"{'list price':<22}{listed / n * 1000:>20.4f}{0:>14.1%}{'':>13}{'':>10}")
    for name in ("today", "cache-aware"):
        rounds = results[name]
        usd = statistics.median(r["bill_usd"] for r in rounds) / n * 1000
        share = statistics.median(r["bill_cached"] / r["bill_input"] for r in rounds)
        rate = statistics.median(r["rate"] for r in rounds)
        same = all(r["verdicts"] == first["verdicts"] for r in rounds)
        print(f"{name:<22}{usd:>20.4f}{share:>14.1%}{share / (most / total):>13.1%}{rate:>10.2f}  {same}")
    for name in ("batch", "batch + cache-aware"):
        print(f"{name:<22}{'n/a (issue 24 item 1)':>20}")
    print(f"most possible cached share: {most / total:.1%}")
    rates_today = [r["rate"] for r in results["today"]]
    rates_aware = [r["rate"] for r in aware]
    ratios = [a / b for a, b in zip(rates_aware, rates_today, strict=True)]
    print(
        f"cache-aware / today judged/s: min {min(ratios):.3f} median {statistics.median(ratios):.3f} (target >= 0.95)"
    )
    for name in ("today", "cache-aware"):
        r = results[name][0]
        diff = r["report"]["cost_usd"] / r["bill_usd"] - 1
        print(
            f"{name}: report ${r['report']['cost_usd']:.4f} vs bill ${r['bill_usd']:.4f} ({diff:+.2%}; target 1 %)"
            f"; list price ${r['report']['list_cost_usd']:.4f} ({r['report']['list_cost_usd'] / r['bill_usd'] - 1:+.1%}"
            " over the bill: what the report said before issue 24)"
        )
    est = aware[0]["estimate"]
    bill = aware[0]["bill_usd"]
    print(
        f"estimate (before the run): {est['judgments']} judgments, {est['input_tokens']} input tokens "
        f"({est['cached_input_tokens']} cached), {est['output_tokens']} output tokens, "
        f"${est['cost_usd']['realtime']:.4f}"
        f" real-time vs the cache-aware bill ${bill:.4f} ({est['cost_usd']['realtime'] / bill - 1:+.1%}; target +-15 %)"
        f"; the simulator counted {aware[0]['bill_input']} input ({aware[0]['bill_cached']} cached) and "
        f"{aware[0]['bill_output']} output tokens"
    )
    # the output side is the rubric's stated reply length (a real judge's); the simulator's replies are shorter
    out_price = price.output / 1e6
    same_output = est["cost_usd"]["realtime"] - (est["output_tokens"] - aware[0]["bill_output"]) * out_price
    print(
        f"estimate with the simulator's reply length ({aware[0]['bill_output'] / n:.1f} tokens a reply instead of "
        f"{est['output_tokens'] / n:.0f}): ${same_output:.4f} ({same_output / bill - 1:+.1%}); input tokens "
        f"{est['input_tokens'] / aware[0]['bill_input'] - 1:+.1%} (o200k against the simulator's 4 characters a token)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
