"""A run's judgments frame read with one reader and with several, side by side (issue 39, ``DJ_FRAME_READERS``).

Each read is ``repository.judgments_frame`` in a fresh process (as an API's first report reads it), the settings
taking turns round by round so the machine's load falls on each alike; prints each read's time, rows and the
process's peak RSS, then min / median per setting.

Usage::

    python bench/bench_frame_read.py --db sqlite:////tmp/seed_1m.db --run <run id> --readers 1 2 --rounds 4
    python bench/bench_frame_read.py --db postgresql+psycopg://postgres@127.0.0.1:5432/<db> --run <run id>

``frames.available_cpus`` caps the readers (and halves them on PostgreSQL), as in the API.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

READ = r"""
import resource, sys, time
from judge_api.db import session_scope
from judge_api.repository import frames
started = time.perf_counter()
with session_scope() as session:
    frame = frames.judgments_frame(session, sys.argv[1])
elapsed = time.perf_counter() - started
print(f"{elapsed:.3f} {len(frame)} {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024}")
"""


def read_once(database_url: str, run_id: str, readers: int) -> tuple[float, int, int]:
    """One read in a fresh process: seconds, rows, peak RSS in MB."""
    env = dict(os.environ, DATABASE_URL=database_url, DJ_FRAME_READERS=str(readers))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, "-c", READ, run_id], env=env, capture_output=True, text=True, check=True, cwd=ROOT
    )
    seconds, rows, peak = done.stdout.split()
    return float(seconds), int(rows), int(peak)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", required=True, help="the database URL (DATABASE_URL)")
    parser.add_argument("--run", required=True, help="the run's id")
    parser.add_argument("--readers", type=int, nargs="+", default=[1, 2], help="DJ_FRAME_READERS settings")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    if args.rounds < 1 or any(not 1 <= r <= 16 for r in args.readers):
        parser.error("--rounds must be >= 1 and each --readers between 1 and 16")
    print(f"{os.cpu_count()} CPUs; load {os.getloadavg()[0]:.2f}", flush=True)
    times: dict[int, list[float]] = {r: [] for r in args.readers}
    for round_ in range(args.rounds):
        for readers in args.readers:
            seconds, rows, peak = read_once(args.db, args.run, readers)
            times[readers].append(seconds)
            print(
                f"round {round_ + 1} readers {readers:2d}: {seconds:7.2f} s  {rows:,} rows  peak {peak} MB  "
                f"load {os.getloadavg()[0]:.2f}",
                flush=True,
            )
    for readers, values in times.items():
        print(f"readers {readers:2d}: min {min(values):.2f} s  median {statistics.median(values):.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
