"""Benchmark the streaming exports, ``GET /v1/runs/{id}/judgments?format=jsonl|csv|parquet``, through the real API
process: throughput and the API's memory, for runs of growing size (issue 39, item D).

For each size (default 100k and 1M judgments) the benchmark

1. seeds a fresh database with one finished run with ``bench_report_api.seed_run`` (planned and stored as
   ``POST /v1/runs`` stores it, every verdict written as the workers write them);
2. starts the API (uvicorn, as ``dialogue-judge up`` does), reads its resident set after ``/healthz`` (``VmRSS``),
   then ``--rounds`` times per format downloads the whole export (the body read and dropped block by block, as
   ``dialogue-judge runs export`` writes it) and reads the API's peak resident set (``VmHWM``) after it;
3. prints per format: rows/s and MB/s (min / median of the rounds' times), the body's size, and how far the API's
   peak rose above its resident set at start. Flat memory: that rise is the same at 100k and at 1M.

With ``--json-pages N`` it also reads the run through the JSON pages (``format=json``, 1,000 rows a page, by
cursor), what a client did before the exports, as the baseline the throughput is compared against.

Usage::

    python bench/bench_export.py                          # 100k and 1M, SQLite, 2 rounds
    python bench/bench_export.py --sizes 100000 --db postgres --rounds 3 --json-pages 200000
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for entry in (ROOT, ROOT / "bench"):
    if str(entry) not in sys.path:
        sys.path.insert(0, str(entry))

import httpx  # noqa: E402
from bench_report_api import _peak_rss_mb, _vacuum, database, seed_run  # noqa: E402

FORMATS = ("jsonl", "csv", "parquet")


def _rss_mb(pid: int) -> float:
    """The resident set (VmRSS) of the process and its children, summed."""
    total = 0.0
    pids = [pid]
    with contextlib.suppress(OSError):
        pids += [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    for each in pids:
        try:
            for line in Path(f"/proc/{each}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) / 1024
        except OSError:
            continue
    return total


def _reset_peak(pid: int) -> None:
    """Reset the peak resident set (VmHWM) of the process and its children to their present size (Linux:
    ``clear_refs`` 5), so the peak read later is what came after, not the start-up's imports and migrations."""
    pids = [pid]
    with contextlib.suppress(OSError):
        pids += [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    for each in pids:
        with contextlib.suppress(OSError):
            Path(f"/proc/{each}/clear_refs").write_text("5")


def download(url: str, params: dict[str, Any]) -> tuple[float, int, int]:
    """Seconds, bytes and lines of one streamed download (the body is never held whole)."""
    size = lines = 0
    t0 = time.perf_counter()
    with httpx.stream("GET", url, params=params, timeout=3600) as response:
        if response.status_code != 200:
            response.read()
            raise SystemExit(f"GET {url} {params}: HTTP {response.status_code}: {response.text[:500]}")
        for block in response.iter_bytes(1 << 20):
            size += len(block)
            lines += block.count(b"\n")
    return time.perf_counter() - t0, size, lines


def json_pages(url: str) -> tuple[float, int, int]:
    """Every judgment through the JSON pages by cursor (1,000 a page): seconds, bytes, rows."""
    size = rows = 0
    cursor: int | None = None
    t0 = time.perf_counter()
    with httpx.Client(timeout=600) as client:
        while True:
            params: dict[str, Any] = {"limit": 1000} if cursor is None else {"limit": 1000, "cursor": cursor}
            response = client.get(url, params=params)
            response.raise_for_status()
            size += len(response.content)
            page = response.json()
            rows += len(page["items"])
            cursor = page["next_cursor"]
            if cursor is None:
                return time.perf_counter() - t0, size, rows


def measure(database_url: str, run_id: str, rounds: int, home: Path, with_pages: bool) -> dict[str, Any]:
    from dialogue_judge.testing import LiveService

    service = LiveService("", database_url, home, env_overrides={"DJ_RUNS_PER_MINUTE": "0"})
    service.start_api()
    out: dict[str, Any] = {}
    try:
        assert service.api is not None
        pid = service.api.pid
        url = f"{service.api_url}/v1/runs/{run_id}/judgments"
        httpx.get(url, params={"limit": 1}, timeout=60).raise_for_status()  # the route's imports, once
        out["api_rss_start_mb"] = _rss_mb(pid)
        _reset_peak(pid)
        for fmt in FORMATS:
            times: list[float] = []
            size = lines = 0
            for _ in range(rounds):
                elapsed, size, lines = download(url, {"format": fmt})
                times.append(elapsed)
            out[fmt] = {"s": times, "bytes": size, "lines": lines, "api_peak_mb": _peak_rss_mb(pid)}
        if with_pages:
            _reset_peak(pid)
            elapsed, size, rows = json_pages(url)
            out["json-pages"] = {"s": [elapsed], "bytes": size, "lines": rows, "api_peak_mb": _peak_rss_mb(pid)}
    finally:
        service.stop()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000], help="judgments per run")
    parser.add_argument("--db", choices=("postgres", "sqlite"), default="sqlite")
    parser.add_argument("--rounds", type=int, default=2, help="downloads per format")
    parser.add_argument(
        "--json-pages",
        type=int,
        default=0,
        metavar="N",
        help="also read runs of at most N judgments by JSON pages (the baseline; 0: never)",
    )
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)
    print(
        f"export benchmark: python {platform.python_version()}, {os.cpu_count()} CPU(s), db={args.db}, "
        f"{args.rounds} download(s) per format, load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}",
        flush=True,
    )
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="dj-bench-export-") as tmp:
        workdir = Path(tmp)
        for size in args.sizes:
            with database(args.db, workdir) as url:
                t0 = time.perf_counter()
                run_id, stored = seed_run(url, size)
                seed_s = time.perf_counter() - t0
                if args.db == "postgres":
                    _vacuum(url)
                pages = stored <= args.json_pages
                figures = measure(url, run_id, args.rounds, workdir / f"api-{size}", pages)
            results.append({"judgments": stored, "db": args.db, "seed_s": seed_s, **figures})
            start = figures["api_rss_start_mb"]
            print(
                f"\n{stored:>8} judgments (seeded in {seed_s:.0f} s); API resident at start {start:.0f} MB", flush=True
            )
            for fmt in (*FORMATS, "json-pages"):
                if fmt not in figures:
                    continue
                f = figures[fmt]
                best, median = min(f["s"]), statistics.median(f["s"])
                peak = f["api_peak_mb"]
                rise = "-" if peak is None else f"{peak - start:+.0f} MB"
                print(
                    f"  {fmt:<10} min {best:6.2f} s  median {median:6.2f} s  {stored / best:>9,.0f} rows/s  "
                    f"{f['bytes'] / 1e6 / best:6.1f} MB/s  body {f['bytes'] / 1e6:7.1f} MB  "
                    f"API peak {peak or 0:.0f} MB ({rise} over start)",
                    flush=True,
                )
    print("\nAPI peak = VmHWM of the API process after that format's downloads, the peak reset once the API had")
    print("answered its first request (each line: the highest so far; json-pages: reset before it); the rise over")
    print("start is what the downloads added to the API's resident memory.")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
