"""Where ``build_report``'s time and memory go, section by section, on a pickled frame (issue 39).

Loads a judgments frame (and optionally a ratings frame) pickled with ``DataFrame.to_pickle`` into this fresh
process, gives the heap back (``malloc_trim``), then builds the report once with every section function that
``judge_api.stats.report`` calls wrapped: for each call it prints the wall time, the resident set before and after,
and the peak during it (the kernel's ``VmHWM``, reset before each call: Linux only). The largest peak is the
report's peak RSS, the frame included.

Usage::

    # a frame as the API reads it: the repository's frame and ratings of a seeded run, pickled once
    python bench/bench_report_sections.py --db /tmp/seed_1m.db --run <run id> --save /tmp/f1m
    python bench/bench_report_sections.py /tmp/f1m.judgments.pkl --ratings /tmp/f1m.ratings.pkl
    # bench_report.py's synthetic frame
    python bench/bench_report_sections.py --synthetic 1000000 --save /tmp/s1m
    python bench/bench_report_sections.py /tmp/s1m.judgments.pkl

Run it with ``PYTHONPATH=<another checkout>`` to measure that checkout's code on the same files.
"""

from __future__ import annotations

import argparse
import functools
import gc
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))

from bench_report import _release_freed, _reset_peak, _status_kb  # noqa: E402

SECTIONS = (
    "item_scores",
    "combine_orders",
    "panel_rows",
    "counts_section",
    "paper_items",
    "score_summary",
    "paired_comparisons",
    "paper_table",
    "paper_cell_counts",
    "preference_summary",
    "bradley_terry",
    "bias_report",
    "cost_section",
    "self_consistency_section",
    "panel_coverage",
    "inter_judge_agreement",
    "preference_agreement",
    "score_agreement",
    "score_alpha",
    "judges_vs_humans",
    "calibrated_section",
    "facts_section",
    "memory_audit_section",
)
"""Functions ``judge_api.stats.report`` calls by name (a name an older checkout lacks is skipped)."""


def _status_mb(field: str) -> int:
    return (_status_kb(field) or 0) // 1024


def _wrap(name: str, fn: Callable[..., Any], rows: list[tuple[str, float, int, int, int]]) -> Callable[..., Any]:
    depth = [0]

    @functools.wraps(fn)
    def timed(*args: Any, **kwargs: Any) -> Any:
        depth[0] += 1
        outer = depth[0] == 1
        if outer:
            _reset_peak()
            before, start = _status_mb("VmRSS"), time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            depth[0] -= 1
            if outer:
                rows.append((name, time.perf_counter() - start, before, _status_mb("VmRSS"), _status_mb("VmHWM")))

    return timed


def _save(args: argparse.Namespace) -> None:
    prefix = str(args.save)
    if args.synthetic:
        from judge_api.stats import frames as F
        from judge_api.stats.synthetic import synthetic_judgments

        F.encode_strings(F.validate_judgments(synthetic_judgments(args.synthetic, seed=0))).to_pickle(
            f"{prefix}.judgments.pkl"
        )
        print(f"wrote {prefix}.judgments.pkl")
        return
    from sqlalchemy.orm import Session

    from judge_api import repository
    from judge_api.db import make_engine

    with Session(make_engine(f"sqlite:///{args.db}")) as session:
        repository.judgments_frame(session, args.run).to_pickle(f"{prefix}.judgments.pkl")
        repository.ratings_frame(session, args.run).to_pickle(f"{prefix}.ratings.pkl")
    print(f"wrote {prefix}.judgments.pkl and {prefix}.ratings.pkl")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("frame", type=Path, nargs="?", help="a pickled judgments frame")
    parser.add_argument("--ratings", type=Path, help="a pickled ratings frame")
    parser.add_argument("--n-boot", type=int, default=1000)
    parser.add_argument("--save", type=Path, help="write <SAVE>.judgments.pkl (and .ratings.pkl) and stop")
    parser.add_argument("--db", type=Path, help="with --save: the SQLite file to read the run from")
    parser.add_argument("--run", help="with --save --db: the run's id")
    parser.add_argument("--synthetic", type=int, help="with --save: bench_report.py's synthetic frame of N rows")
    args = parser.parse_args(argv)
    if args.save is not None:
        if not args.synthetic and (args.db is None or args.run is None):
            parser.error("--save needs --synthetic N, or --db and --run")
        _save(args)
        return 0
    if args.frame is None:
        parser.error("give a pickled frame (or --save)")

    from judge_api.stats import report

    rows: list[tuple[str, float, int, int, int]] = []
    for name in SECTIONS:
        if hasattr(report, name):
            setattr(report, name, _wrap(name, getattr(report, name), rows))
    frame = pd.read_pickle(args.frame)
    ratings = pd.read_pickle(args.ratings) if args.ratings else None
    gc.collect()
    _release_freed()
    print(f"{len(frame):,} rows; RSS with the frame alone {_status_mb('VmRSS')} MB")
    start = time.perf_counter()
    report.build_report(frame, ratings if ratings is not None and len(ratings) else None, n_boot=args.n_boot)
    total = time.perf_counter() - start
    print(f"{'section':26s} {'time s':>7s} {'RSS before':>10s} {'after':>7s} {'peak':>7s}")
    for name, seconds, before, after, peak in rows:
        print(f"{name:26s} {seconds:7.2f} {before:10d} {after:7d} {peak:7d}")
    peak = max((row[4] for row in rows), default=0)
    print(f"build_report: {total:.2f} s, peak RSS {peak} MB (the largest of the sections' peaks)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
