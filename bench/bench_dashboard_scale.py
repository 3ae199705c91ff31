"""Each dashboard page on a 1M-judgment run, in real headless Chromium, until drawn (issue 39).

The run is ``bench/bench_report_api.py``'s ``seed_run`` (single scores: 3 aspects x 4 systems; pairwise verdicts
against a baseline in both orders; 2 % unparseable, 1 % failed), stored once in a SQLite file and kept
(``--db``; seeded when the file is missing: ~8 min for 1M on 2 shared cores). Human ratings are added once
(``--rated`` items: a score per system on one aspect, a preference vote per pair), so the judge-vs-human pages have
something to draw.

For each code tree (``--code name=path``, e.g. ``main=/work/main new=/work/wt/h39c``: side by side in one window),
each page and each round, the benchmark starts that tree's API (uvicorn) and dashboard (``streamlit run``) on the
file, so every page is opened with the dashboard's caches empty, warms the API's report cache (the report is issue
39's other work; its cold time is printed apart), draws the Monitors page once (the dashboard process imports its
modules, as a running dashboard has), opens ``/<page>?run=<id>`` in a fresh Chromium page and times
until the page's heading and its element (chart, table or empty-state) are visible and Streamlit's running
indicator is gone. The file is migrated to each tree's own head before its turn (down to an older tree's head with
the newest tree's migrations: an index an older tree does not know is dropped, so it is measured as it runs). It
prints min / median per page and tree, and the load average around each measurement.

Usage::

    python bench/bench_dashboard_scale.py --db /tmp/dash1m.db --judgments 1000000 \\
        --code main=/work/main --code new=$PWD --rounds 2
    python bench/bench_dashboard_scale.py --db /tmp/dash100k.db --judgments 100000 --pages agreement disagreements
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

CHROMIUM = "/usr/bin/chromium"
# url path -> (title, the element that tells the page is drawn)
PAGES: dict[str, tuple[str, str]] = {
    "runs": ("Runs", ".vega-embed"),
    "leaderboard": ("Leaderboard", ".vega-embed"),
    "wins": ("Win / tie / loss", ".vega-embed"),
    "agreement": ("Human agreement", ".vega-embed"),
    "calibrated": ("Calibrated", "[data-testid=stMain] [data-testid=stAlert], [data-testid=stMain] .vega-embed"),
    "bias": ("Bias", ".vega-embed"),
    "explorer": ("Item explorer", "[data-testid=stDataFrame]"),
    "disagreements": ("Disagreements", ".vega-embed"),
    "contradictions": ("Contradictions", "[data-testid=stMain] [data-testid=stAlert]"),
    "memory-audit": ("Memory audit", "[data-testid=stMain] [data-testid=stAlert]"),
    "annotate": ("Annotate", "[data-testid=stForm], [data-testid=stMain] [data-testid=stAlert]"),
    "compare": ("Compare runs", ".vega-embed"),
}
TIMEOUT_S = 240.0


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def free_port() -> int:
    from dialogue_judge.stack import free_port as pick

    return int(pick())


def ensure_run(db: Path, n_judgments: int, n_rated: int, n_compare: int = 0) -> str:
    """The seeded run's id (seeding the file when it is missing), with human ratings on ``n_rated`` items; with
    ``n_compare``, a second run of that many judgments on the same items is seeded first when the file holds one
    run (the page's run is then the newest run; the Compare page compares it with the other)."""
    url = f"sqlite:///{db}"
    from sqlalchemy import create_engine, text

    if not db.exists():
        from bench_report_api import seed_run

        t0 = time.perf_counter()
        run_id, stored = seed_run(url, n_judgments)
        print(f"seeded {stored:,} judgments in {time.perf_counter() - t0:.0f} s (load {load()})", flush=True)
    engine = create_engine(url)
    if n_compare:
        with engine.connect() as connection:
            n_runs = int(connection.execute(text("SELECT count(*) FROM runs")).scalar_one())
        if n_runs < 2:  # the Compare page's baseline: the same items judged again (other verdicts)
            from bench_report_api import seed_run

            t0 = time.perf_counter()
            _, stored = seed_run(url, n_compare, seed=1)
            print(f"seeded a second run of {stored:,} judgments in {time.perf_counter() - t0:.0f} s (load {load()})")
    with engine.begin() as connection:
        run_id = str(connection.execute(text("SELECT id FROM runs ORDER BY created_at DESC LIMIT 1")).scalar_one())
        rated = connection.execute(text("SELECT count(*) FROM human_ratings WHERE run_id = :r"), {"r": run_id})
        if not int(rated.scalar_one()) and n_rated:
            systems = ("memory", "rsum", "chatgpt", "baseline")
            rows = []
            for i in range(n_rated):
                item = f"item-{i * 7:06d}"
                for k, system in enumerate(systems):
                    rows.append((item, system, "", "consistency", "bench", "score", float(40 + (i * 13 + k * 17) % 60)))
                for k, system in enumerate(systems[:3]):
                    rows.append((item, system, "baseline", "overall", "bench", "preference", float((i + k) % 3 - 1)))
            connection.execute(
                text(
                    "INSERT INTO human_ratings (run_id, item_key, system, system_b, aspect, rater, kind, value, "
                    "scale_min, scale_max, meta, created_at) VALUES (:run, :item, :system, :b, :aspect, :rater, "
                    ":kind, :value, :lo, :hi, '{}', CURRENT_TIMESTAMP)"
                ),
                [
                    {"run": run_id, "item": r[0], "system": r[1], "b": r[2], "aspect": r[3], "rater": r[4],
                     "kind": r[5], "value": r[6], "lo": 1.0 if r[5] == "score" else -1.0, "hi": 100.0 if r[5] ==
                     "score" else 1.0}
                    for r in rows
                ],
            )  # fmt: skip
            print(f"rated {n_rated:,} items ({len(rows):,} ratings)", flush=True)
    engine.dispose()
    return run_id


def _wait(url: str, process: subprocess.Popen[bytes], what: str, ok: str | None = None) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"{what} exited")
        try:
            response = httpx.get(url, timeout=2)
            if response.status_code == 200 and (ok is None or response.text == ok):
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"{what} did not start")


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(5)


def tree_head(tree: Path) -> str:
    """The newest migration of a code tree (its files are numbered: ``0023_...py``)."""
    versions = sorted(p.name.split("_", 1)[0] for p in (tree / "judge_api/migrations/versions").glob("[0-9]*_*.py"))
    return versions[-1]


def migrate_to(db: Path, revision: str, newest: Path) -> None:
    """Bring the file to ``revision`` with the newest tree's migrations (down to an older tree's head: the indexes
    that tree does not know are dropped, so it is measured as it would run; back up for a newer tree)."""
    code = """
import sys
from alembic import command
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine
from judge_api.migrate import alembic_config

url, want = sys.argv[1], sys.argv[2]
with create_engine(url).connect() as connection:
    current = MigrationContext.configure(connection).get_current_revision() or ""
if current > want:
    command.downgrade(alembic_config(url), want)
elif current < want:
    command.upgrade(alembic_config(url), want)
"""
    t0 = time.perf_counter()
    subprocess.run(
        [sys.executable, "-c", code, f"sqlite:///{db}", revision],
        env=dict(os.environ, PYTHONPATH=str(newest)),
        check=True,
    )
    print(f"  database at migration {revision} ({time.perf_counter() - t0:.0f} s)", flush=True)


@contextmanager
def stack(tree: Path, db: Path, home: Path) -> Iterator[tuple[str, str]]:
    """That tree's API and dashboard on the file: (api url, dashboard url). The dashboard runs with this checkout's
    options (``DASHBOARD_OPTIONS``) whatever the tree."""
    from dialogue_judge.stack import DASHBOARD_OPTIONS

    home.mkdir(parents=True, exist_ok=True)
    env = dict(
        os.environ,
        DATABASE_URL=f"sqlite:///{db}",
        REDIS_URL="redis://127.0.0.1:6379/15",
        DJ_AUTH="false",
        DJ_HOME=str(home),
        PYTHONPATH=str(tree),
        PYTHONUNBUFFERED="1",
    )
    api_port, dash_port = free_port(), free_port()
    api = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "judge_api.app:app", "--host", "127.0.0.1", "--port", str(api_port),
         "--log-level", "warning"],
        env=env, cwd=tree, stdout=(home / "api.log").open("ab"), stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    processes = [api]
    try:
        api_url = f"http://127.0.0.1:{api_port}"
        _wait(f"{api_url}/healthz", api, "the API")
        dash = subprocess.Popen(
            [sys.executable, "-m", "streamlit", "run", str(tree / "dashboard" / "app.py"), "--server.port",
             str(dash_port), "--server.address", "127.0.0.1", *DASHBOARD_OPTIONS],
            env=dict(env, DJ_API_URL=api_url), cwd=home, stdout=(home / "streamlit.log").open("ab"),
            stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        processes.append(dash)
        dash_url = f"http://127.0.0.1:{dash_port}"
        _wait(f"{dash_url}/_stcore/health", dash, "streamlit", ok="ok")
        yield api_url, dash_url
    finally:
        for process in reversed(processes):
            _stop(process)


def open_page(browser: Any, url: str, title: str, selector: str) -> float:
    """Seconds from navigation until the heading, the element and no running indicator; inf on a timeout or an
    error drawn on the page."""
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    try:
        t0 = time.perf_counter()
        page.goto(url, wait_until="domcontentloaded")
        ms = TIMEOUT_S * 1000
        page.get_by_role("heading", name=title, level=1).wait_for(timeout=ms)
        page.locator(selector).first.wait_for(state="visible", timeout=ms)
        page.wait_for_function("() => !document.querySelector('[data-testid=stStatusWidget]')", timeout=ms)
        elapsed = time.perf_counter() - t0
        errors = page.locator("[data-testid=stException], [data-testid=stAlertContentError]").all_inner_texts()
        if errors:
            print(f"  {url}: error on the page: {errors[0][:300]}", flush=True)
            return float("inf")
        return elapsed
    except Exception as exc:  # a timeout: the page was not drawn within TIMEOUT_S
        print(f"  {url}: not drawn ({type(exc).__name__}: {str(exc)[:200]})", flush=True)
        return float("inf")
    finally:
        page.close()


def warm_up(browser: Any, dash: str) -> None:
    """Open the Monitors page once (no monitor: its empty state) so the dashboard process has imported its modules
    and drawn a page, as a running dashboard has; then wait out the 2 s caches of the run list and the run. The
    timed page starts with the run's data caches empty."""
    open_page(browser, f"{dash}/monitors", "Monitors", "[data-testid=stMain] [data-testid=stAlert]")
    time.sleep(2.5)


def warm_report(api_url: str, run_ids: list[str], n_boot: int | None = None) -> float:
    """Each run's report computed once by the API (kept in its database); the seconds it took."""
    t0 = time.perf_counter()
    for run_id in run_ids:
        params = {} if n_boot is None else {"n_boot": n_boot}
        response = httpx.get(f"{api_url}/v1/runs/{run_id}/report", params=params, timeout=900)
        response.raise_for_status()
    return time.perf_counter() - t0


def warm_compare(api_url: str, run_id: str, baseline: str) -> float:
    """The API's comparison of the two runs computed once (kept in the API process: the page then reads it as a
    page opened again would); the seconds it took, nan for a tree without the routes (the page computes it)."""
    t0 = time.perf_counter()
    for route, params in (("score-deltas", {"n_boot": 1000}), ("worse-items", {"limit": 500})):
        response = httpx.get(
            f"{api_url}/v1/runs/{run_id}/{route}", params={"baseline": baseline, **params}, timeout=900
        )
        if response.status_code == 404:
            return float("nan")
        response.raise_for_status()
    return time.perf_counter() - t0


def run_ids(db: Path) -> list[str]:
    """The file's runs, newest first."""
    from sqlalchemy import create_engine, text

    engine = create_engine(f"sqlite:///{db}")
    with engine.connect() as connection:
        ids = [str(r[0]) for r in connection.execute(text("SELECT id FROM runs ORDER BY created_at DESC"))]
    engine.dispose()
    return ids


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", type=Path, required=True, help="the SQLite file (seeded when missing, then kept)")
    parser.add_argument("--judgments", type=int, default=1_000_000, help="judgments to seed when the file is missing")
    parser.add_argument("--rated", type=int, default=2000, help="items given human ratings (once)")
    parser.add_argument("--code", action="append", default=[], help="name=path of a code tree (repeatable)")
    parser.add_argument("--pages", nargs="*", default=list(PAGES), choices=list(PAGES))
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--warm-compare",
        action="store_true",
        help="have the API compute the Compare page's comparison before the page is opened (its time is printed "
        "apart, as the report's is); without it the page is timed with the API's comparison cold",
    )
    parser.add_argument(
        "--compare-judgments",
        type=int,
        default=None,
        help="judgments of the Compare page's second run, seeded once when the file holds one run (default: "
        "--judgments; only when the compare page is measured)",
    )
    args = parser.parse_args(argv)
    trees = [(c.split("=", 1)[0], Path(c.split("=", 1)[1]).resolve()) for c in args.code] or [("this", ROOT)]
    n_compare = (args.compare_judgments or args.judgments) if "compare" in args.pages else 0
    run_id = ensure_run(args.db.resolve(), args.judgments, args.rated, n_compare)
    runs = run_ids(args.db.resolve())
    newest = max(trees, key=lambda t: tree_head(t[1]))[1]
    from playwright.sync_api import sync_playwright

    print(f"run {run_id} in {args.db}; {os.cpu_count()} cores; load {load()}", flush=True)
    times: dict[tuple[str, str], list[float]] = {}
    loads: dict[tuple[str, str], list[str]] = {}
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        for round_ in range(args.rounds):
            for name, tree in trees:  # side by side: the trees take turns, round by round
                migrate_to(args.db.resolve(), tree_head(tree), newest)
                for page in args.pages:
                    with stack(tree, args.db.resolve(), Path(tmp) / f"{name}-{page}-{round_}") as (api_url, dash):
                        report_s = warm_report(api_url, [run_id])
                        if page == "compare":  # the page reads both runs' reports without a bootstrap
                            report_s += warm_report(api_url, runs[:2], n_boot=0)
                            if args.warm_compare:
                                compare_s = warm_compare(api_url, runs[0], runs[1])
                                print(f"  {name}: the API compared the runs in {compare_s:.2f} s", flush=True)
                        warm_up(browser, dash)
                        before = load()
                        title, selector = PAGES[page]
                        path = "" if page == "runs" else page
                        elapsed = open_page(browser, f"{dash}/{path}?run={run_id}", title, selector)
                    times.setdefault((name, page), []).append(elapsed)
                    loads.setdefault((name, page), []).append(before)
                    print(
                        f"round {round_ + 1} {page:15s} {name:6s} {elapsed:8.2f} s  (report {report_s:.2f} s; "
                        f"load {before} -> {load()})",
                        flush=True,
                    )
        browser.close()
    print("\npage            " + "".join(f"{name:>22s}" for name, _ in trees) + "   (min / median s)")
    for page in args.pages:
        cells = []
        for name, _ in trees:
            values = times[(name, page)]
            cells.append(f"{min(values):9.2f} / {statistics.median(values):8.2f}")
        print(f"{page:15s} " + "".join(f"{c:>22s}" for c in cells))
    print(f"load at the end: {load()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
