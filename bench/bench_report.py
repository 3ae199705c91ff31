"""Benchmark ``judge_api.stats.build_report`` on synthetic judgments frames.

For each size (default 10k, 100k and 1M rows; half single-mode, half pairwise, see
``judge_api.stats.synthetic``) a fresh child process builds the frame and then

1. times ``build_report(frame, n_boot=N)`` ``--repeat`` times (wall clock, no tracing; the best run is
   the headline figure because other processes on the machine only ever add time),
2. reads the process's resident set with the frame alone (``frame MB``: after generating it, the generator's
   garbage collected and given back, ``malloc_trim``), then resets the kernel's peak mark
   (``/proc/self/clear_refs``) so that ``peak RSS`` is the peak *during* ``build_report``, the frame given to it
   included (the figure the issue's targets are about; ``gen peak`` is the generator's own peak, which is not the
   report's), and how much the RSS grew during the report,
3. runs ``build_report`` once more under ``tracemalloc`` for the peak of Python / numpy allocations
   (Arrow string buffers are not traced; the RSS figures include them).

and the parent prints one line per size plus the time ratio per 10x rows. (``bench_report_api.py`` times the
whole ``GET /v1/runs/{id}/report`` through the API: storage, the frame, the report, first call and warm.)

Usage::

    python bench/bench_report.py                       # 10k, 100k, 1M rows, n_boot=1000
    python bench/bench_report.py --sizes 10000 100000 --n-boot 200
    python bench/bench_report.py --json bench.json     # also write the figures as JSON
    python bench/bench_report.py --sizes 100000 1000000 --baseline /tmp/main   # side by side with main's code
    python bench/bench_report.py --sizes 10000000 --repeat 1 --no-trace --max-rss-gb 12   # 10M rows
    python bench/bench_report.py --sizes 1000000 --encoded   # the frame as the repository gives it (categoricals)
    python bench/bench_report.py --sizes 1000000 --encoded --from-file   # the frame loaded into a fresh process
    python bench/bench_report.py --sizes 10000000 --repeat 1 --no-trace --parts 10   # read in 10 parts (stats.parts)

``--from-file``: one child generates the frame and pickles it to a temporary file, a second, fresh child loads it and
measures. The generator's peak and the heap it fragments are then not in the measuring process (``malloc_trim`` gives
back only part of them), as the API's frame arrives whole from the database: ``frame MB`` is the interpreter, its
modules and the frame, nothing else.

``--parts N`` (implies ``--encoded --from-file``): the writing child pickles the frame as N parts in the run's order,
and the measuring child reads them one at a time into ``stats.parts.RunParts`` and makes the report of them, as a run
read from the database in parts: it never holds every column of every row (issue 39). ``time`` is the parts' work
(validating and summing each part, joining the kept columns) plus the report, not the unpickling; ``frame MB`` is
the process before the first part; ``peak RSS`` the peak from then on, a part being read included. A ``--baseline``
checkout is measured in parts too when its script knows ``--parts`` (66fb8de on), else on the whole frame
(``--from-file``), as it reads a run.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import json
import math
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from judge_api.stats import frames as F  # noqa: E402
from judge_api.stats.parts import RunParts  # noqa: E402
from judge_api.stats.report import build_report  # noqa: E402
from judge_api.stats.synthetic import synthetic_judgments  # noqa: E402

MB = 1024 * 1024


def _rss_bytes() -> int:
    """Current resident set size (Linux /proc; falls back to the peak elsewhere)."""
    try:
        with open("/proc/self/statm") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return _peak_rss_bytes()


def _peak_rss_bytes() -> int:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


def _status_kb(field: str) -> int | None:
    """A ``VmHWM`` / ``VmRSS`` figure of /proc/self/status in kB (None off Linux)."""
    try:
        with open("/proc/self/status") as handle:
            for line in handle:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def _release_freed() -> None:
    """Give the heap the generator freed back to the system (glibc ``malloc_trim``), so that ``frame MB`` is the
    frame, not the generator's leftovers, and the report's own pages show in ``peak RSS``."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def _reset_peak() -> bool:
    """Reset the kernel's peak resident set mark (``VmHWM``) to the current RSS; False where that is unsupported."""
    try:
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
    except OSError:
        return False
    return _status_kb("VmHWM") is not None


def make_frame(n_rows: int, seed: int, encoded: bool) -> pd.DataFrame:
    """The synthetic frame; ``encoded``: its string columns as sorted categoricals, as ``repository.judgments_frame``
    gives it to the report."""
    frame = synthetic_judgments(n_rows, seed=seed)
    return F.encode_strings(F.validate_judgments(frame)) if encoded else frame


def write_frame(n_rows: int, seed: int, encoded: bool, path: Path) -> dict[str, Any]:
    """Generate the frame and pickle it to ``path`` (the first child of ``--from-file``)."""
    t0 = time.perf_counter()
    frame = make_frame(n_rows, seed, encoded)
    gen_s = time.perf_counter() - t0
    frame.to_pickle(path)
    return {"generate_s": gen_s, "generate_peak_rss_mb": _peak_rss_bytes() / MB}


def write_parts(n_rows: int, seed: int, n_parts: int, folder: Path) -> dict[str, Any]:
    """Generate the encoded frame and pickle it as ``n_parts`` parts of consecutive rows (``--parts``)."""
    t0 = time.perf_counter()
    frame = make_frame(n_rows, seed, encoded=True)
    gen_s = time.perf_counter() - t0
    for k in range(n_parts):
        frame.iloc[k * n_rows // n_parts : (k + 1) * n_rows // n_parts].to_pickle(folder / f"part{k}.pkl")
    return {"generate_s": gen_s, "generate_peak_rss_mb": _peak_rss_bytes() / MB}


def measure_parts(n_rows: int, n_boot: int, seed: int, repeat: int, folder: Path, n_parts: int) -> dict[str, Any]:
    """Read the parts one at a time into ``RunParts`` and make the report of them, ``repeat`` times (the child of
    ``--parts``); the peak is the process's from the first part on."""
    gc.collect()
    _release_freed()
    rss_before = _rss_bytes()
    reset = _reset_peak()
    times, rss_after, counts = [], rss_before, (0, 0)
    for _ in range(max(1, repeat)):
        run, spent = RunParts(), 0.0
        single = pairwise = 0
        for k in range(n_parts):
            part = pd.read_pickle(folder / f"part{k}.pkl")
            single += int((part["mode"] == "single").sum())
            pairwise += int((part["mode"] == "pairwise").sum())
            t0 = time.perf_counter()
            run.add(part)
            spent += time.perf_counter() - t0
            del part
        t0 = time.perf_counter()
        held, sums = [run.frame()], run.sums
        del run
        report = build_report(held, n_boot=n_boot, seed=seed, sums=sums)
        times.append(spent + time.perf_counter() - t0)
        if len(times) == 1:
            rss_after, counts = _rss_bytes(), (single, pairwise)
            json_bytes = len(json.dumps(report, allow_nan=False))
        del report, held, sums
        gc.collect()
    hwm = _status_kb("VmHWM") if reset else None
    report_s = min(times)
    return {
        "rows": n_rows,
        "single_rows": counts[0],
        "pairwise_rows": counts[1],
        "n_boot": n_boot,
        "encoded": True,
        "from_file": True,
        "parts": n_parts,
        "report_s": report_s,
        "report_s_all": times,
        "rows_per_s": n_rows / report_s if report_s > 0 else None,
        "rss_before_mb": rss_before / MB,
        "peak_is_report_only": reset,
        "rss_growth_mb": max(rss_after - rss_before, 0) / MB,
        "peak_rss_mb": (hwm * 1024 if hwm is not None else _peak_rss_bytes()) / MB,
        "traced_peak_mb": None,
        "report_json_kb": json_bytes / 1024,
    }


def measure(
    n_rows: int,
    n_boot: int,
    seed: int,
    trace: bool,
    repeat: int = 1,
    encoded: bool = False,
    frame_file: Path | None = None,
) -> dict[str, Any]:
    """Build one synthetic frame (or load it from ``frame_file``) and measure ``build_report`` on it (runs in the
    child process)."""
    t0 = time.perf_counter()
    frame = make_frame(n_rows, seed, encoded) if frame_file is None else pd.read_pickle(frame_file)
    gen_s = time.perf_counter() - t0
    gen_peak = _peak_rss_bytes()
    gc.collect()
    _release_freed()
    rss_before = _rss_bytes()
    reset = _reset_peak()
    times = []
    for _ in range(max(1, repeat)):
        t0 = time.perf_counter()
        report = build_report(frame, n_boot=n_boot, seed=seed)
        times.append(time.perf_counter() - t0)
        if len(times) == 1:
            rss_after = _rss_bytes()
    report_s = min(times)
    hwm = _status_kb("VmHWM") if reset else None
    peak_rss = hwm * 1024 if hwm is not None else _peak_rss_bytes()
    json_bytes = len(json.dumps(report, allow_nan=False))
    traced_peak = None
    if trace:
        tracemalloc.start()
        build_report(frame, n_boot=n_boot, seed=seed)
        traced_peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return {
        "rows": n_rows,
        "single_rows": int((frame["mode"] == "single").sum()),
        "pairwise_rows": int((frame["mode"] == "pairwise").sum()),
        "n_boot": n_boot,
        "encoded": encoded,
        "from_file": frame_file is not None,
        "generate_s": gen_s,
        "report_s": report_s,
        "report_s_all": times,
        "rows_per_s": n_rows / report_s if report_s > 0 else None,
        "frame_mb": frame.memory_usage(deep=True).sum() / MB,
        "rss_before_mb": rss_before / MB,
        "generate_peak_rss_mb": gen_peak / MB,
        "peak_is_report_only": reset,
        "rss_growth_mb": max(rss_after - rss_before, 0) / MB,
        "peak_rss_mb": peak_rss / MB,
        "traced_peak_mb": None if traced_peak is None else traced_peak / MB,
        "report_json_kb": json_bytes / 1024,
    }


def _child(args: argparse.Namespace) -> None:
    if args.write_parts is not None:
        print(json.dumps(write_parts(args.child, args.seed, args.parts, args.write_parts)))
        return
    if args.read_parts is not None:
        print(json.dumps(measure_parts(args.child, args.n_boot, args.seed, args.repeat, args.read_parts, args.parts)))
        return
    if args.write_frame is not None:
        print(json.dumps(write_frame(args.child, args.seed, args.encoded, args.write_frame)))
        return
    result = measure(args.child, args.n_boot, args.seed, not args.no_trace, args.repeat, args.encoded, args.read_frame)
    print(json.dumps(result))


def _run_child(n_rows: int, args: argparse.Namespace, root: Path = ROOT) -> dict[str, Any]:
    """One size in a fresh process, with the code of ``root`` (this checkout, or ``--baseline``'s); with
    ``--from-file`` a first child writes the frame and the measuring child loads it."""
    if args.parts and (root == ROOT or _reads_parts(root)):
        with tempfile.TemporaryDirectory(prefix="bench_report_parts_") as tmp:
            flags = ["--parts", str(args.parts)]
            written = _spawn(n_rows, args, root, [*flags, "--write-parts", tmp])
            if "over_limit_gb" in written:
                return written
            result = _spawn(n_rows, args, root, [*flags, "--read-parts", tmp])
        return {**result, "generate_s": written["generate_s"], "generate_peak_rss_mb": written["generate_peak_rss_mb"]}
    if not args.from_file:
        return _spawn(n_rows, args, root, [])
    with tempfile.TemporaryDirectory(prefix="bench_report_") as tmp:
        path = Path(tmp) / "frame.pkl"
        written = _spawn(n_rows, args, root, ["--write-frame", str(path)])
        if "over_limit_gb" in written:
            return written
        result = _spawn(n_rows, args, root, ["--read-frame", str(path)])
    return {**result, "generate_s": written["generate_s"], "generate_peak_rss_mb": written["generate_peak_rss_mb"]}


def _reads_parts(root: Path) -> bool:
    """Whether the checkout at ``root`` reads a run in parts (``stats.parts``, 66fb8de on): then so it is measured."""
    return "--read-parts" in (root / "bench" / "bench_report.py").read_text()


def _spawn(n_rows: int, args: argparse.Namespace, root: Path, extra: list[str]) -> dict[str, Any]:
    script = root / "bench" / "bench_report.py"
    cmd = [sys.executable, str(script), "--child", str(n_rows), "--n-boot", str(args.n_boot)]
    cmd += ["--seed", str(args.seed), "--repeat", str(args.repeat)] + (["--no-trace"] if args.no_trace else [])
    cmd += (["--encoded"] if args.encoded else []) + extra
    env = {**os.environ, "PYTHONPATH": str(root)}
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=root, env=env) as child:
        over = _watch(child, args.max_rss_gb)
        stdout, stderr = child.communicate()
    if over is not None:
        return {"rows": n_rows, "over_limit_gb": over}
    if child.returncode != 0:
        raise SystemExit(f"benchmark child for {n_rows} rows failed:\n{stderr}")
    return dict(json.loads(stdout.strip().splitlines()[-1]))


def _watch(child: subprocess.Popen[str], limit_gb: float | None) -> float | None:
    """Wait for the child; with ``limit_gb``, stop it once its resident set passes that (a shared machine must not
    run out of memory: main's code needs ~2 GB per million rows) and return the RSS it had, else None."""
    if limit_gb is None:
        child.wait()
        return None
    while child.poll() is None:
        try:
            with open(f"/proc/{child.pid}/status") as handle:
                rss_kb = next((int(line.split()[1]) for line in handle if line.startswith("VmRSS:")), 0)
        except (OSError, ValueError):
            rss_kb = 0
        if rss_kb > limit_gb * 1024 * 1024:
            child.kill()
            child.wait()
            return rss_kb / 1024 / 1024
        time.sleep(0.2)
    return None


def _fmt(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--n-boot", type=int, default=1000, help="bootstrap resamples (default 1000)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per size; the best is reported")
    parser.add_argument("--no-trace", action="store_true", help="skip the tracemalloc pass")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument(
        "--baseline",
        type=Path,
        help="another checkout (e.g. `git worktree add /tmp/main main`): each size runs there too, right before this "
        "code, and a line gives both and the ratio",
    )
    parser.add_argument(
        "--max-rss-gb",
        type=float,
        help="stop a child whose resident set passes this many GB and print that it did (10M rows on a shared machine)",
    )
    parser.add_argument(
        "--encoded",
        action="store_true",
        help="give build_report the frame with its string columns as sorted categoricals, as the repository reads it "
        "for GET /report (the baseline's script must know the flag: copy this script there)",
    )
    parser.add_argument(
        "--from-file",
        action="store_true",
        help="generate the frame in one child and measure in a fresh one that loads it (no generator leftovers in "
        "the measured process; the baseline's script must know the flag: copy this script there)",
    )
    parser.add_argument(
        "--parts",
        type=int,
        default=0,
        help="read the frame in this many parts into stats.parts.RunParts, as a run read from the database in parts "
        "(implies --encoded --from-file; a --baseline is measured in parts too when its code reads parts, "
        "else on the whole frame)",
    )
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--write-parts", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--read-parts", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--write-frame", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--read-frame", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.parts < 0:
        parser.error("--parts must be at least 1 (or 0: the whole frame)")
    if args.parts:
        args.encoded = args.from_file = True
    if args.child is not None:
        _child(args)
        return 0

    print(
        f"build_report benchmark: python {platform.python_version()}, {os.cpu_count()} CPU(s), "
        f"n_boot={args.n_boot}, seed={args.seed}, best of {args.repeat} run(s), "
        f"frame {'encoded (as the repository reads it)' if args.encoded else 'of Arrow strings'}"
        f"{', loaded into a fresh process' if args.from_file else ''}"
        f"{f', read in {args.parts} parts (stats.parts)' if args.parts else ''}, "
        f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}"
    )
    header = (
        f"{'rows':>9} {'single':>8} {'pairwise':>8} {'n_boot':>6} {'time s':>8} {'rows/s':>9} "
        f"{'x per 10x':>9} {'all runs s':>18} {'traced MB':>9} {'frame MB':>8} {'RSS+ MB':>8} {'peak RSS MB':>11} "
        f"{'gen peak':>8}"
    )
    print(header)
    print("-" * len(header))
    results: list[dict[str, Any]] = []
    for n_rows in args.sizes:
        base = _run_child(n_rows, args, args.baseline.resolve()) if args.baseline else None
        if base is not None and "over_limit_gb" in base:
            print(f"{'baseline':>9} stopped at {base['over_limit_gb']:.1f} GB resident (--max-rss-gb)", flush=True)
            base = None
        res = _run_child(n_rows, args)
        if "over_limit_gb" in res:
            print(f"{n_rows:>9} stopped at {res['over_limit_gb']:.1f} GB resident (--max-rss-gb)", flush=True)
            continue
        if base is not None:
            res["baseline"] = base
        if results:
            prev = results[-1]
            decades = math.log10(res["rows"] / prev["rows"])
            ratio = res["report_s"] / prev["report_s"]
            res["time_ratio_per_10x"] = ratio ** (1.0 / decades) if decades > 0 else None
        else:
            res["time_ratio_per_10x"] = None
        results.append(res)
        print(
            f"{res['rows']:>9} {res['single_rows']:>8} {res['pairwise_rows']:>8} {res['n_boot']:>6} "
            f"{res['report_s']:>8.2f} {_fmt(res['rows_per_s'], ',.0f'):>9} "
            f"{_fmt(res['time_ratio_per_10x'], '.2f'):>9} "
            f"{'/'.join(f'{t:.2f}' for t in res['report_s_all']):>18} {_fmt(res['traced_peak_mb'], '.0f'):>9} "
            f"{res['rss_before_mb']:>8.0f} {res['rss_growth_mb']:>8.0f} {res['peak_rss_mb']:>11.0f} "
            f"{res.get('generate_peak_rss_mb', 0):>8.0f}",
            flush=True,
        )
        if base is not None:
            print(
                f"{'baseline':>9} {'':>8} {'':>8} {'':>6} {base['report_s']:>8.2f} "
                f"{_fmt(base['rows_per_s'], ',.0f'):>9} "
                f"{'':>9} {'/'.join(f'{t:.2f}' for t in base['report_s_all']):>18} "
                f"{_fmt(base['traced_peak_mb'], '.0f'):>9} {base['rss_before_mb']:>8.0f} {base['rss_growth_mb']:>8.0f} "
                f"{base['peak_rss_mb']:>11.0f} {base.get('generate_peak_rss_mb', 0):>8.0f}"
                f"   -> this code {base['report_s'] / res['report_s']:.1f}x faster (best), "
                f"{statistics.median(base['report_s_all']) / statistics.median(res['report_s_all']):.1f}x (median), "
                f"peak RSS {res['peak_rss_mb'] / base['peak_rss_mb']:.2f}x",
                flush=True,
            )
    print(
        "time = best wall clock of build_report (frame generation excluded); x per 10x = time ratio per 10x rows;\n"
        "traced MB = tracemalloc peak during build_report; frame MB = the child's RSS with the frame alone;\n"
        "RSS+ = RSS growth during the first run; peak RSS = peak during build_report, the frame included "
        "(whole child where /proc/self/clear_refs is missing); gen peak = peak while generating the frame (with "
        "--from-file: in the writing child).\n"
        "The baseline runs this script's copy in its checkout: copy bench/bench_report.py there for the same columns."
    )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
