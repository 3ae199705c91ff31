"""Benchmark storing a run: ``repository.create_run`` (what ``POST /v1/runs`` does after planning) of N judgments.

For each size and each code tree (``--code``, repeatable: this checkout by default; another checkout for a side by
side), a fresh child process makes a fresh database (a throw-away PostgreSQL database by default, or a SQLite file),
plans the run ``bench_report_api`` seeds (3 aspects x 4 systems single, 3 pairs x 2 orders pairwise, 18 judgments
per item), times ``create_run`` alone, and reads the run's ``data_version`` afterwards: on PostgreSQL it counts the
INSERT statements that stored the judgments (a statement trigger bumps it per statement, migration 0023; a statement
per row made storing a run O(n^2), session 51).

Usage::

    python bench/bench_store_run.py                                   # 8k, 16k and 32k judgments, PostgreSQL
    python bench/bench_store_run.py --sizes 16000 32000 --code main=. --code old=/tmp/old-checkout
    python bench/bench_store_run.py --db sqlite --sizes 100000

PostgreSQL: ``DJ_TEST_PG`` (default ``postgresql://postgres@127.0.0.1:5432/test``) is the admin connection.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _child(db: str, size: int) -> dict[str, Any]:
    """In the child (``sys.path[0]`` is the code tree): one fresh database, one run stored and timed."""
    from sqlalchemy import create_engine, text

    import bench.bench_report_api as seeding
    import judge_api.repository as repository
    from judge_api.config import reset_settings_cache
    from judge_api.repository import claims

    class Stored(Exception):
        pass

    took: list[float] = []
    create_run = repository.create_run

    def timed(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        out = create_run(*args, **kwargs)
        took.append(time.perf_counter() - t0)
        return out

    def stop(*_args: Any, **_kwargs: Any) -> Any:
        raise Stored  # the run is committed; the verdicts the seeding writes next are not this benchmark's

    with tempfile.TemporaryDirectory() as tmp, seeding.database(db, Path(tmp)) as url:
        os.environ["DATABASE_URL"] = url
        reset_settings_cache()
        repository.create_run = timed
        claims.claim_many = stop
        with contextlib.suppress(Stored):
            seeding.seed_run(url, size)
        engine = create_engine(url)
        try:
            with engine.connect() as connection:
                version, n = connection.execute(text("SELECT data_version, n_judgments FROM runs")).one()
        finally:
            engine.dispose()
    return {"judgments": int(n), "create_run_s": took[0], "data_version": int(version)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[8_000, 16_000, 32_000], help="judgments per run")
    parser.add_argument("--db", choices=("postgres", "sqlite"), default="postgres")
    parser.add_argument("--code", action="append", default=[], help="name=path of a code tree (repeatable)")
    parser.add_argument("--child", nargs=2, metavar=("DB", "SIZE"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(_child(args.child[0], int(args.child[1]))))
        return 0
    trees = [tuple(c.split("=", 1)) for c in args.code] or [("this", str(ROOT))]
    print(
        f"create_run benchmark: python {platform.python_version()}, {os.cpu_count()} CPU(s), db={args.db}, "
        f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}",
        flush=True,
    )
    print(f"{'code':>10} {'judgments':>10} {'create_run s':>13} {'ms/judgment':>12} {'data_version':>13}")
    for size in args.sizes:
        for name, path in trees:
            tree = Path(path).resolve()
            script = ROOT / "bench" / "bench_store_run.py"
            env = {**os.environ, "PYTHONPATH": str(tree)}
            out = subprocess.run(
                [sys.executable, str(script), "--child", args.db, str(size)],
                cwd=tree,
                env=env,
                capture_output=True,
                text=True,
                check=False,
            )
            if out.returncode != 0:
                print(out.stderr[-2000:], file=sys.stderr)
                return 1
            res = json.loads(out.stdout.strip().splitlines()[-1])
            per = 1000 * res["create_run_s"] / max(res["judgments"], 1)
            figures = f"{res['judgments']:>10} {res['create_run_s']:>13.2f} {per:>12.3f} {res['data_version']:>13}"
            print(f"{name:>10} {figures}")
    print("data_version = the INSERT statements that stored the judgments (PostgreSQL; SQLite bumps it per row).")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
