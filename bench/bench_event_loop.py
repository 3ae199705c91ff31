"""Fairness of the API's event loop (issue 42, finding 7): how long another project's ``GET /v1/runs/{id}`` waits
while one large submission is parsed, planned and stored.

One API process (uvicorn, as ``dialogue-judge up`` starts it) on a throw-away PostgreSQL database, auth on, two
projects. The victim's poll is timed first with the API idle (the baseline), then, each round, while the other
project submits ``--judgments`` judgments through ``POST /v1/runs/jsonl`` (and, with ``--json-route``, the same run
through ``POST /v1/runs``). Printed per route: the submission's time, the victim's slowest and median poll during it
(min / median over the rounds), and the slowest poll as a multiple of the idle median.

Usage::

    python bench/bench_event_loop.py                          # 450,000 judgments, 3 rounds (the issue's figure)
    python bench/bench_event_loop.py --judgments 45000 --rounds 5 --json-route

PostgreSQL: ``DJ_TEST_PG`` (default ``postgresql://postgres@127.0.0.1:5432/test``) is the admin connection used to
create and drop the throw-away database.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

PG_ADMIN = os.environ.get("DJ_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
JUDGE = "openai-compatible:bench-judge@http://127.0.0.1:9/v1"  # never called: no worker runs
RUBRIC = "rsum-single"


@contextmanager
def database() -> Iterator[str]:
    import psycopg

    name = f"dj_bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield PG_ADMIN.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://") + f"/{name}"
    finally:
        from judge_api.db import reset_engines

        reset_engines()
        with psycopg.connect(PG_ADMIN, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def item(i: int) -> dict[str, Any]:
    return {
        "id": f"item-{i:07d}",
        "dialogue": [
            {"speaker": "user", "text": f"I adopted a dog called Rex {i} years ago.", "session": 1},
            {"speaker": "bot", "text": "How lovely!", "session": 1},
            {"speaker": "user", "text": "Do you remember my dog's name?", "session": 2},
        ],
        "persona": {"user": ["I have a dog called Rex."], "bot": ["I like animals."]},
        "candidates": {"a": "Of course, Rex!", "b": "Your cat?"},
    }


def judgments_per_item() -> int:
    from judge_api.rubrics import get_registry

    return 2 * len(get_registry().get(RUBRIC).aspects)


def mint_keys(database_url: str) -> tuple[str, str]:
    os.environ["DATABASE_URL"] = database_url
    from judge_api.auth import create_key
    from judge_api.config import reset_settings_cache
    from judge_api.db import reset_engines, session_scope
    from judge_api.migrate import upgrade

    reset_settings_cache()
    reset_engines()
    upgrade(database_url)
    with session_scope() as session:
        _, submitter = create_key(session, "bulk", "submitter", ["submit", "read"])
        _, victim = create_key(session, "victim", "victim", ["submit", "read"])
    return submitter, victim


def poll_during(client: httpx.Client, poll: str, headers: dict[str, str], busy: threading.Thread) -> list[float]:
    delays: list[float] = []
    while busy.is_alive():
        sent = time.perf_counter()
        answer = client.get(poll, headers=headers)
        delays.append(time.perf_counter() - sent)
        if answer.status_code != 200:
            raise SystemExit(f"victim poll: HTTP {answer.status_code}: {answer.text[:300]}")
        time.sleep(0.02)
    return delays


def one_round(url: str, route: str, items: list[dict[str, Any]], keys: tuple[str, str], poll: str) -> dict[str, Any]:
    submitter, victim = keys
    result: dict[str, Any] = {}

    def submit() -> None:
        with httpx.Client(base_url=url, timeout=900) as own:
            started = time.perf_counter()
            headers = {"Authorization": f"Bearer {submitter}"}
            if route == "jsonl":
                body = "\n".join(json.dumps(i) for i in items).encode()
                answer = own.post(
                    "/v1/runs/jsonl",
                    params={"rubric": RUBRIC, "judge": JUDGE},
                    content=body,
                    headers={**headers, "Content-Type": "application/x-ndjson"},
                )
            else:
                answer = own.post(
                    "/v1/runs", json={"items": items, "rubrics": [RUBRIC], "judges": [JUDGE]}, headers=headers
                )
            result["took_s"] = time.perf_counter() - started
            result["status"] = answer.status_code
            result["n_judgments"] = answer.json().get("n_judgments") if answer.status_code == 202 else answer.text[:300]

    busy = threading.Thread(target=submit)
    with httpx.Client(base_url=url, timeout=900) as client:
        busy.start()
        delays = poll_during(client, poll, {"Authorization": f"Bearer {victim}"}, busy)
    busy.join()
    if result.get("status") != 202:
        raise SystemExit(f"{route} submission: HTTP {result.get('status')}: {result.get('n_judgments')}")
    result["max_delay_s"] = max(delays)
    result["median_delay_s"] = statistics.median(delays)
    result["p99_delay_s"] = sorted(delays)[int(0.99 * (len(delays) - 1))]
    result["over_budget"] = sum(1 for d in delays if d > 0.2)
    result["polls"] = len(delays)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--judgments", type=int, default=450_000, help="judgments of the large submission")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json-route", action="store_true", help="also submit through POST /v1/runs")
    args = parser.parse_args(argv)

    from dialogue_judge.testing import LiveService

    per_item = judgments_per_item()
    n_items = max(1, args.judgments // per_item)
    items = [item(i) for i in range(n_items)]
    routes = ["jsonl", "json"] if args.json_route else ["jsonl"]
    with tempfile.TemporaryDirectory() as tmp, database() as database_url:
        keys = mint_keys(database_url)
        env = {
            "DJ_AUTH": "true",
            "DJ_JUDGE_URL_ALLOWLIST": "http://127.0.0.1:9/v1",
            "DJ_MAX_ITEMS": str(n_items + 1),
            "DJ_MAX_JUDGMENTS": str(n_items * per_item + 1),
            "DJ_MAX_BODY_BYTES": str(500_000_000),
            "DJ_RUNS_PER_MINUTE": "100000",
        }
        service = LiveService("", database_url, Path(tmp) / "api", env_overrides=env)
        service.start_api()
        try:
            with httpx.Client(base_url=service.api_url, timeout=60) as client:
                victim_headers = {"Authorization": f"Bearer {keys[1]}"}
                created = client.post(
                    "/v1/runs",
                    json={"items": [item(0)], "rubrics": [RUBRIC], "judges": [JUDGE]},
                    headers=victim_headers,
                )
                if created.status_code != 202:
                    raise SystemExit(f"victim run: HTTP {created.status_code}: {created.text[:300]}")
                poll = f"/v1/runs/{created.json()['id']}"
                idle = []
                for _ in range(30):
                    sent = time.perf_counter()
                    client.get(poll, headers=victim_headers)
                    idle.append(time.perf_counter() - sent)
            idle_median = statistics.median(idle[5:])
            total = n_items * per_item
            print(f"{n_items:,} items x {per_item} = {total:,} judgments per submission; rounds: {args.rounds}")
            print(f"victim poll, API idle: median {idle_median * 1000:.1f} ms, max {max(idle[5:]) * 1000:.1f} ms")
            for route in routes:
                rounds = [one_round(service.api_url, route, items, keys, poll) for _ in range(args.rounds)]
                took = [r["took_s"] for r in rounds]
                worst = [r["max_delay_s"] for r in rounds]
                typical = [r["median_delay_s"] for r in rounds]
                print(
                    f"POST /v1/runs{'/jsonl' if route == 'jsonl' else ''}: submission min {min(took):.2f} s, "
                    f"median {statistics.median(took):.2f} s | victim's slowest poll min {min(worst):.3f} s, "
                    f"median {statistics.median(worst):.3f} s ({statistics.median(worst) / idle_median:.0f}x idle) | "
                    f"victim's median poll {statistics.median(typical) * 1000:.1f} ms, p99 "
                    f"{statistics.median(r['p99_delay_s'] for r in rounds) * 1000:.0f} ms, over 0.2 s: "
                    f"{sum(r['over_budget'] for r in rounds)} | "
                    f"polls per round {min(r['polls'] for r in rounds)}-{max(r['polls'] for r in rounds)}"
                )
        finally:
            service.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
