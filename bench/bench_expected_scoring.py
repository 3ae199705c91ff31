"""Does probability-weighted (G-Eval) scoring separate ``gold`` from ``mismatched`` on the embedded SmolLM2 judge?

Starts the embedded llama.cpp server with SmolLM2-135M-Instruct (``workers.local_judge``; nothing is downloaded),
judges items in-process (``workers.runtime.build_engine(standalone=True)``, SQLite in a temporary folder, the same
engine a worker runs) and prints, per configuration, each system's mean score and the paired comparison
``gold - mismatched`` (mean difference, 95% paired bootstrap CI over items, Wilcoxon p, items where gold scores
higher / lower / the same):

* ``smoke-consistency``: the demo's rubric, 1-100, the parsed integer (the current local default);
* ``geval-consistency parsed``: the 1-5 G-Eval-style rubric, the integer the judge wrote (read from the same replies
  as the next line: ``details.parsed_score``);
* ``geval-consistency expected``: the same replies, the probability-weighted score.

Items: the demo's (``examples/msc-demo.jsonl``, 6 items x gold/generic/mismatched), and with ``--msc N`` another N
items built the way ``examples/make_msc_demo.py`` builds the demo's from ``../shared/data/msc`` (gold = the real next
turn, mismatched = the real turn of another conversation), for a figure less at the mercy of six items.

Usage::

    python bench/bench_expected_scoring.py                  # the demo's items
    python bench/bench_expected_scoring.py --msc 40         # and 40 more MSC items
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def msc_items(n: int) -> list[dict[str, Any]]:
    from dialogue_judge.datasets import msc_record_to_item, read_msc_lines

    source = ROOT.parent / "shared/data/msc/msc_dialogue_session_3_test.txt"
    records = list(read_msc_lines(source))[: n * 5 : 5]
    items = [msc_record_to_item(r, f"msc3-x{i}") for i, r in enumerate(records)]
    for i, item in enumerate(items):
        other = items[(i + 3) % len(items)]
        item["candidates"] = {"gold": item["reference"], "mismatched": other["reference"]}
        item["dialogue"] = item["dialogue"][-8:]
    return items


def judge_run(items: list[dict[str, Any]], rubric: str, options: dict[str, Any]) -> str:
    from judge_api import planning, repository
    from judge_api.db import session_scope
    from judge_api.repository import claims
    from judge_api.rubrics import get_registry
    from judge_api.schemas import RunCreate
    from workers.runtime import build_engine

    engine = build_engine(standalone=True)
    request = RunCreate.model_validate(
        {
            "items": items,
            "rubrics": [rubric],
            "judges": ["local:smollm2"],
            "aspects": ["consistency"],
            "metrics": [],
            "options": {"structured_output": True, "max_tokens": 96, **options},
        }
    )
    registry = get_registry()
    planned = planning.plan_run(request, registry, 100_000)
    with session_scope() as session:
        run_id = repository.create_run(session, request, planned, rubrics=planning.run_rubrics(request, registry)).id
    with session_scope() as session:
        ids = claims.pending_judgment_ids(session, run_id)
    engine.judge_many(ids)
    return run_id


def figures(run_id: str, score_of: str) -> dict[str, Any]:
    """Per-system means and the paired gold - mismatched comparison, the score read as ``score_of``."""
    import pandas as pd

    from judge_api.db import session_scope
    from judge_api.models import Judgment
    from judge_api.stats.scores import paired_comparison

    with session_scope() as session:
        rows = session.query(Judgment).filter(Judgment.run_id == run_id).all()
        records = []
        fallbacks: dict[str, int] = {}
        for r in rows:
            details = r.details or {}
            if details.get("scoring_fallback"):
                reason = details["scoring_fallback"].split(":")[0]
                fallbacks[reason] = fallbacks.get(reason, 0) + 1
            value = details.get("parsed_score", r.score) if score_of == "parsed" else r.score
            records.append(
                {
                    "item_id": r.item_key,
                    "mode": "single",
                    "system_a": r.system_a,
                    "aspect": r.aspect,
                    "judge": r.judge,
                    "status": r.status,
                    "score": value,
                }
            )
    frame = pd.DataFrame(records)
    done = frame[frame["status"] == "done"]
    means = done.groupby("system_a")["score"].mean().round(3).to_dict()
    paired = paired_comparison(frame, "gold", "mismatched", "consistency", "local:smollm2", n_boot=2000)
    return {
        "n_rows": len(frame),
        "n_done": len(done),
        "not_done": frame.loc[frame["status"] != "done", "status"].value_counts().to_dict(),
        "means": means,
        "gold_minus_mismatched": {
            k: (round(v, 4) if isinstance(v, float) else v)
            for k, v in paired.items()
            if k in ("n_pairs", "mean_diff", "ci_low", "ci_high", "p_value", "n_x_better", "n_y_better", "n_equal")
        },
        "fallbacks": fallbacks,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--msc", type=int, default=0, help="also judge this many MSC items built like the demo's")
    parser.add_argument("--json", type=Path, help="also write the figures as JSON")
    parser.add_argument("--url", help="an already running llama.cpp server's /v1 URL (default: start one)")
    parser.add_argument(
        "--no-smoke", action="store_true", help="skip the smoke-consistency baseline (half the judge calls)"
    )
    args = parser.parse_args()

    from workers.local_judge import server_command

    home = Path(tempfile.mkdtemp(prefix="dj-bench-expected-"))
    port = free_port()
    url = args.url or f"http://127.0.0.1:{port}/v1"
    os.environ.update(
        {
            "DJ_HOME": str(home),
            "DJ_LOCAL_JUDGE_URL": url,
            "DJ_CALL_CONCURRENCY": "1",
            "DJ_JUDGE_TIMEOUT": "300",
        }
    )
    os.environ.pop("DATABASE_URL", None)
    os.environ.pop("REDIS_URL", None)
    server = None
    if not args.url:
        server = subprocess.Popen(
            server_command("127.0.0.1", port), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
    try:
        for _ in range(120):
            try:
                if httpx.get(f"{url}/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.5)
        demo = [json.loads(line) for line in (ROOT / "examples/msc-demo.jsonl").read_text().splitlines() if line]
        sets = [("demo (6 items)", demo)] + ([(f"MSC ({args.msc} items)", msc_items(args.msc))] if args.msc else [])
        results: dict[str, Any] = {}
        for label, items in sets:
            started = time.perf_counter()
            geval = judge_run(items, "geval-consistency", {})
            results[label] = {
                "geval-consistency 1-5 parsed": figures(geval, "parsed"),
                "geval-consistency 1-5 expected": figures(geval, "score"),
            }
            if not args.no_smoke:
                smoke = judge_run(items, "smoke-consistency", {})
                results[label]["smoke-consistency 1-100 parsed"] = figures(smoke, "score")
            results[label]["seconds"] = round(time.perf_counter() - started, 1)
            print(f"== {label}  ({results[label]['seconds']} s)")
            for name, fig in results[label].items():
                if name == "seconds":
                    continue
                print(f"  {name}")
                print(f"    means: {fig['means']}   not done: {fig['not_done'] or '-'}")
                print(f"    gold - mismatched: {fig['gold_minus_mismatched']}")
                if fig["fallbacks"]:
                    print(f"    expected-scoring fallbacks: {fig['fallbacks']}")
        if args.json:
            args.json.write_text(json.dumps(results, indent=2))
    finally:
        if server is not None:
            server.terminate()
            server.wait(10)


if __name__ == "__main__":
    main()
