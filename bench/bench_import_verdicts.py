"""Benchmark ``POST /v1/runs/{id}/verdicts``: a CSV of N single scores imported into a run, then the same file again.

The app runs in process (FastAPI's TestClient) on a fresh SQLite file, auth off. The run has N/5 items with five
systems each (no judgment of its own: it is stored as ``import-mtbench`` stores its run), the CSV one 1-100 score per
(item, system). Prints, per size, min / median of ``--rounds`` first imports (each into a fresh run) and of the
repeated import (every row found already imported, nothing stored), and the report that follows the first import.

Usage::

    python bench/bench_import_verdicts.py                      # 5k and 50k rows, 3 rounds
    python bench/bench_import_verdicts.py --sizes 2000 --rounds 1
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import statistics
import tempfile
import time
from pathlib import Path

SYSTEMS = ("s1", "s2", "s3", "s4", "s5")


def csv_of(n_items: int) -> bytes:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["item_id", "system", "aspect", "judge", "score", "scale_min", "scale_max"])
    for i in range(n_items):
        for k, system in enumerate(SYSTEMS):
            writer.writerow([f"item-{i}", system, "overall", "my-judge", 1 + (i * 7 + k * 13) % 100, 1, 100])
    return out.getvalue().encode()


def new_run(n_items: int) -> str:
    from judge_api import repository
    from judge_api.db import session_scope
    from judge_api.schemas import RunCreate

    items = [
        {
            "id": f"item-{i}",
            "dialogue": [{"speaker": "user", "text": f"q{i}"}],
            "candidates": {s: f"{s} {i}" for s in SYSTEMS},
        }
        for i in range(n_items)
    ]
    request = RunCreate.model_validate({"items": items, "rubrics": ["rsum-single"], "judges": ["openai:gpt-4o"]})
    with session_scope() as session:
        run = repository.create_run(session, request, [])
        return run.id


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[5000, 50000], help="verdict rows")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="bench-verdicts-"))
    os.environ.update(DJ_HOME=str(home), DATABASE_URL=f"sqlite:///{home / 'bench.db'}", DJ_AUTH="false")
    os.environ.pop("REDIS_URL", None)
    os.environ["DJ_MAX_BODY_BYTES"] = str(200 * 1024 * 1024)
    from fastapi.testclient import TestClient

    from judge_api.app import create_app
    from judge_api.migrate import upgrade

    upgrade(os.environ["DATABASE_URL"])
    with TestClient(create_app()) as client:
        for size in args.sizes:
            n_items = size // len(SYSTEMS)
            content = csv_of(n_items)
            first, again, report = [], [], []
            for _ in range(args.rounds):
                run_id = new_run(n_items)
                path = f"/v1/runs/{run_id}/verdicts"
                params = {"format": "csv", "name": "bench.csv"}
                started = time.perf_counter()
                response = client.post(path, content=content, params=params)
                first.append(time.perf_counter() - started)
                assert response.status_code == 201 and response.json()["created"] == size, response.text
                started = time.perf_counter()
                response = client.post(path, content=content, params=params)
                again.append(time.perf_counter() - started)
                assert response.json()["unchanged"] == size, response.text
                started = time.perf_counter()
                assert client.get(f"/v1/runs/{run_id}/report", params={"n_boot": 200}).status_code == 200
                report.append(time.perf_counter() - started)
            print(
                f"{size:>7} rows ({len(content) / 1e6:.1f} MB CSV): import min {min(first):.2f} s / median "
                f"{statistics.median(first):.2f} s ({size / statistics.median(first):,.0f} rows/s); again (nothing "
                f"stored) median {statistics.median(again):.2f} s; report (n_boot 200) median "
                f"{statistics.median(report):.2f} s"
            )


if __name__ == "__main__":
    main()
