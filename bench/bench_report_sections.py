"""Where ``build_report``'s peak goes, section by section (issue 39): each of the report's calls is wrapped, the
resident set read before it, the kernel's peak mark reset (``/proc/self/clear_refs``), the peak read after it.

A child generates the encoded synthetic frame (``judge_api.stats.synthetic``) and pickles it; a fresh child
unpickles it and builds one report (the first of that process, n_boot 1,000), printing per call: the peak above the
resident set before it, what it left allocated, and its time; then the frame's resident set and the total peak.
Linux only (the peak mark). The figures of docs/scaling.md ("Session 56").

Usage::

    python bench/bench_report_sections.py --rows 1000000
    python bench/bench_report_sections.py --rows 3000000 --sections _with_panel,score_summary
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

SECTIONS = (
    "_with_panel,counts_section,score_summary,paired_comparisons,paper_items,paper_table,paper_cell_counts,"
    "preference_summary,bradley_terry,bias_report,cost_section,self_consistency_section,panel_coverage,"
    "inter_judge_agreement"
)


def _status_mb(field: str) -> float:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"/proc/self/status has no {field}")


def _reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as handle:
        handle.write("5")


def generate(rows: int, seed: int, path: Path) -> None:
    from judge_api.stats import frames as F
    from judge_api.stats.synthetic import synthetic_judgments

    F.encode_strings(F.validate_judgments(synthetic_judgments(rows, seed=seed))).to_pickle(path)


def measure(path: Path, sections: list[str], n_boot: int) -> None:
    import pandas as pd

    from judge_api.stats import report

    frame = pd.read_pickle(path)
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    print(f"frame held: {_status_mb('VmRSS'):.0f} MB resident", flush=True)
    for name in sections:
        wrapped = getattr(report, name)

        def timed(*args: Any, _fn: Any = wrapped, _name: str = name, **kwargs: Any) -> Any:
            before = _status_mb("VmRSS")
            _reset_peak()
            started = time.perf_counter()
            out = _fn(*args, **kwargs)
            elapsed = time.perf_counter() - started
            peak, left = _status_mb("VmHWM") - before, _status_mb("VmRSS") - before
            print(f"{_name:26s} peak +{peak:6.0f} MB   left +{left:6.0f} MB   {elapsed:6.2f} s", flush=True)
            return out

        setattr(report, name, timed)
    base = _status_mb("VmRSS")
    _reset_peak()
    started = time.perf_counter()
    report.build_report(frame, n_boot=n_boot)
    elapsed = time.perf_counter() - started
    print(f"build_report: peak {_status_mb('VmHWM'):.0f} MB (frame held {base:.0f} MB), {elapsed:.1f} s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--n-boot", type=int, default=1000)
    parser.add_argument("--sections", default=SECTIONS, help="the report module's functions to wrap, comma-separated")
    parser.add_argument("--generate", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--measure", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.rows < 1 or args.n_boot < 0:
        parser.error("--rows must be at least 1 and --n-boot at least 0")
    if args.generate:
        generate(args.rows, args.seed, args.generate)
        return 0
    if args.measure:
        measure(args.measure, [s for s in args.sections.split(",") if s], args.n_boot)
        return 0
    if not Path("/proc/self/clear_refs").exists():
        parser.error("this benchmark reads the kernel's peak mark: Linux only")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "frame.pkl"
        me = [sys.executable, str(Path(__file__).resolve())]
        subprocess.run([*me, "--rows", str(args.rows), "--seed", str(args.seed), "--generate", str(path)], check=True)
        print(f"{args.rows:,} rows, n_boot {args.n_boot}")
        subprocess.run(
            [*me, "--n-boot", str(args.n_boot), "--sections", args.sections, "--measure", str(path)], check=True
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
