"""Benchmark ``GET /v1/runs/{id}/report`` through the real API process, first call and warm.

For each size (default 10k and 100k judgments) the benchmark

1. makes a fresh database (a throw-away PostgreSQL database by default, or a SQLite file with ``--db sqlite``) and
   stores one run of N judgments through the storage code the service uses: the run is planned and stored as
   ``POST /v1/runs`` stores it (``plan_run`` + ``repository.create_run``), then every judgment is claimed and its
   verdict written as the workers write them (``claim_many`` + ``write_verdicts``). The run mixes single scores
   (``rsum-single``, 3 aspects x 4 systems) and pairwise verdicts (``rsum-pairwise`` against a baseline, both
   orders): 18 judgments per item, 2 % unparseable and 1 % failed;
2. ``--rounds`` times: starts the API (uvicorn, as ``dialogue-judge up`` does), waits for ``/healthz``, times the
   first ``GET /report`` (the first request after the start), then ``--warm`` more, then the runs list
   (``GET /v1/runs``: its first call, which counts the run's judgments, then later ones) and the status poll
   (``GET /v1/runs/{id}``) of the finished run, and stops the API;
3. measures in this process where the server's time goes, stage by stage, with the same functions the route uses
   (``--no-stages`` skips it);

and prints, per size, min / median of the first calls and of the warm calls, and the stages.

Usage::

    python bench/bench_report_api.py                              # 10k and 100k, PostgreSQL, 3 rounds
    python bench/bench_report_api.py --sizes 10000 --db sqlite --rounds 5
    python bench/bench_report_api.py --json report-api.json       # also write the figures as JSON
    # seed a million once and keep the database (a SQLite file, or a PostgreSQL database by name), then reuse it
    python bench/bench_report_api.py --db sqlite --sizes 1000000 --keep-db /tmp/seed_1m.db --seed-only
    python bench/bench_report_api.py --db sqlite --sizes 1000000 --keep-db /tmp/seed_1m.db --stage-repeat 1

PostgreSQL: ``DJ_TEST_PG`` (default ``postgresql://postgres@127.0.0.1:5432/test``) is the admin connection used to
create and drop the throw-away database.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

PG_ADMIN = os.environ.get("DJ_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
SYSTEMS = ("memory", "rsum", "chatgpt", "baseline")
QUALITY = {"memory": 72.0, "rsum": 68.0, "chatgpt": 60.0, "baseline": 55.0}
JUDGMENTS_PER_ITEM = 3 * len(SYSTEMS) + 2 * (len(SYSTEMS) - 1)  # single: 3 aspects x 4; pairwise: 3 pairs x 2
JUDGE = "openai:gpt-4o"
PAIRWISE_VERDICTS = {
    2: "Response 1 is better",
    1: "Response 1 is slightly better",
    -1: "Response 2 is slightly better",
    -2: "Response 2 is better",
}
OUTCOMES = {2: "win", 1: "tie", 0: "tie", -1: "tie", -2: "loss"}


def _pg_url(name: str) -> str:
    return PG_ADMIN.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://") + f"/{name}"


@contextmanager
def kept_database(kind: str, name: str) -> Iterator[tuple[str, bool]]:
    """A database kept across benchmark runs (``--keep-db``): a SQLite file at ``name`` or a PostgreSQL database
    called ``name``, created when missing; yields (URL, whether it existed already)."""
    if kind == "sqlite":
        path = Path(name).resolve()
        yield f"sqlite:///{path}", path.exists() and path.stat().st_size > 0
        return
    import psycopg

    with psycopg.connect(PG_ADMIN, autocommit=True) as admin:
        existed = admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is not None
        if not existed:
            admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield _pg_url(name), existed
    finally:
        from judge_api.db import reset_engines

        reset_engines()


def stored_run(database_url: str, n_judgments: int) -> tuple[str, int] | None:
    """The finished benchmark run of ``n_judgments`` already stored in a kept database, if any."""
    from sqlalchemy import create_engine, inspect, text

    engine = create_engine(database_url)
    try:
        if not inspect(engine).has_table("runs"):
            return None
        with engine.connect() as connection:
            row = connection.execute(
                text("SELECT id FROM runs WHERE name = :name AND finished_at IS NOT NULL ORDER BY created_at DESC"),
                {"name": f"bench-report-{n_judgments}"},
            ).first()
            if row is None:
                return None
            count = connection.execute(text("SELECT count(*) FROM judgments WHERE run_id = :r"), {"r": row[0]})
            return str(row[0]), int(count.scalar_one())
    finally:
        engine.dispose()


@contextmanager
def database(kind: str, workdir: Path) -> Iterator[str]:
    """A fresh database URL, dropped (PostgreSQL) or left in ``workdir`` (SQLite) afterwards."""
    if kind == "sqlite":
        yield f"sqlite:///{workdir / f'bench-{uuid.uuid4().hex[:8]}.db'}"
        return
    import psycopg

    name = f"dj_bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield _pg_url(name)
    finally:
        from judge_api.db import reset_engines

        reset_engines()
        with psycopg.connect(PG_ADMIN, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def make_items(n_items: int) -> list[dict[str, Any]]:
    return [
        {
            "id": f"item-{i:06d}",
            "dialogue": [
                {"speaker": "user", "text": f"I adopted a dog called Rex {i % 17} years ago.", "session": 1},
                {"speaker": "bot", "text": "How lovely! What breed is he?", "session": 1},
                {"speaker": "user", "text": "Do you remember my dog's name?", "session": 2},
            ],
            "persona": {"user": ["I have a dog called Rex."], "bot": []},
            "candidates": {s: f"{s} says: your dog is called Rex. ({i})" + " More words." * (i % 7) for s in SYSTEMS},
        }
        for i in range(n_items)
    ]


def verdict(row: Any, rng: random.Random) -> dict[str, Any]:
    """Column values a worker would write for this judgment: mostly done, some unparseable or failed."""
    common = {
        "attempts": 1,
        "provider_calls": 1,
        "input_tokens": rng.randint(300, 900),
        "output_tokens": rng.randint(20, 120),
        "latency_ms": rng.uniform(200.0, 1500.0),
        "cost_usd": rng.uniform(0.001, 0.004),
        "cached": False,
        "prompt_hash": uuid.UUID(int=rng.getrandbits(128)).hex,
        "injection_flags": [],
    }
    roll = rng.random()
    if roll < 0.01:
        return {**common, "status": "failed", "error": "HTTP 500 from the provider after 5 attempts"}
    if roll < 0.03:
        return {**common, "status": "unparseable", "error": "no [[score]] in the reply", "raw_output": "I think so."}
    if row.system_b is None:
        score = min(100, max(1, round(rng.gauss(QUALITY[row.system_a], 12))))
        explanation = f"The response is fluent and mostly consistent with the persona. Rating: [[{score}]]"
        return {
            **common,
            "status": "done",
            "score": float(score),
            "raw_output": explanation,
            "explanation": explanation,
        }
    edge = (QUALITY[row.system_a] - QUALITY[row.system_b]) / 20.0
    raw = max(-2, min(2, round(rng.gauss(edge, 1.2))))
    raw = raw or rng.choice((1, -1))
    shown_first = raw if row.order != "ba" else -raw  # the judge's wording is about the presented order
    text = PAIRWISE_VERDICTS[shown_first]
    return {
        **common,
        "status": "done",
        "verdict": text,
        "preference": float(raw),
        "outcome": OUTCOMES[raw],
        "raw_output": text,
        "explanation": text,
    }


def seed_run(database_url: str, n_judgments: int, seed: int = 0) -> tuple[str, int]:
    """Store one finished run of about ``n_judgments`` judgments; returns (run id, judgments stored)."""
    os.environ["DATABASE_URL"] = database_url
    from sqlalchemy import select

    from judge_api import repository
    from judge_api.config import reset_settings_cache
    from judge_api.db import get_engine, reset_engines, session_scope
    from judge_api.migrate import upgrade
    from judge_api.models import Judgment, Run
    from judge_api.planning import plan_run
    from judge_api.repository import claims
    from judge_api.rubrics import get_registry
    from judge_api.schemas import RunCreate

    reset_settings_cache()
    reset_engines()
    upgrade(database_url)
    registry = get_registry(refresh=True)
    n_items = max(1, round(n_judgments / JUDGMENTS_PER_ITEM))
    request = RunCreate(
        name=f"bench-report-{n_judgments}",
        items=make_items(n_items),  # type: ignore[arg-type]
        rubrics=["rsum-single", "rsum-pairwise"],
        judges=[JUDGE],
        mode=["single", "pairwise"],
        pairing="baseline",
        baseline="baseline",
    )
    planned = plan_run(request, registry, 10_000_000)
    with session_scope() as session:
        run = repository.create_run(
            session, request, planned, "default", [registry.get(r) for r in sorted(set(request.rubrics))]
        )
        run_id = run.id
    engine = get_engine()
    rng = random.Random(seed)
    with session_scope() as session:
        rows = session.execute(
            select(Judgment.id, Judgment.system_a, Judgment.system_b, Judgment.order, Judgment.status)
            .where(Judgment.run_id == run_id)
            .order_by(Judgment.id)
        ).all()
    pending = [r for r in rows if r.status == "pending"]
    for start in range(0, len(pending), 2000):
        chunk = pending[start : start + 2000]
        token, claimed = claims.claim_many(engine, [r.id for r in chunk], 600.0)
        written = claims.write_verdicts(engine, [(r.id, token, verdict(r, rng)) for r in chunk if r.id in claimed])
        assert all(written) and len(written) == len(chunk), "seeding: a verdict was not written"
    with session_scope() as session:
        stored_run = session.get(Run, run_id)
        assert stored_run is not None
        repository.summarize_runs(session, [stored_run])  # stamps finished_at
    return run_id, len(rows)


def _get(url: str, client: httpx.Client | None = None) -> tuple[float, int, int]:
    t0 = time.perf_counter()
    response = (client or httpx).get(url, timeout=600)
    elapsed = time.perf_counter() - t0
    if response.status_code != 200:
        raise SystemExit(f"GET {url}: HTTP {response.status_code}: {response.text[:1000]}")
    return elapsed, len(response.content), int(response.json()["counts"]["n_rows"])


def _summary_get(url: str, client: httpx.Client) -> float:
    """One ``GET /v1/runs`` or ``GET /v1/runs/{id}`` (the runs list, the status poll), timed."""
    t0 = time.perf_counter()
    response = client.get(url, timeout=600)
    elapsed = time.perf_counter() - t0
    if response.status_code != 200:
        raise SystemExit(f"GET {url}: HTTP {response.status_code}: {response.text[:1000]}")
    return elapsed


def time_api(
    database_url: str, run_id: str, rounds: int, warm: int, n_boot: int, home: Path, keep_alive: bool = False
) -> dict[str, Any]:
    """First and warm report times over ``rounds`` API starts; then the runs list and the status poll of the run,
    each ``max(warm, 3)`` times after two calls that may count its judgments (a finished run's counts are kept from
    the second poll on)."""
    from dialogue_judge.testing import LiveService

    first: list[float] = []
    warm_times: list[float] = []
    list_times: list[float] = []
    poll_times: list[float] = []
    list_first: list[float] = []
    peaks: list[float | None] = []
    size = n_rows = 0
    for index in range(rounds):
        _clear_report_cache(database_url)  # a first call computes the report (the cache outlives the API process)
        service = LiveService("", database_url, home / f"api-{index}", env_overrides={"DJ_RUNS_PER_MINUTE": "0"})
        service.start_api()
        try:
            url = f"{service.api_url}/v1/runs/{run_id}/report?n_boot={n_boot}"
            elapsed, size, n_rows = _get(url)
            first.append(elapsed)
            with httpx.Client() as client:  # one connection for the warm calls (--keep-alive), as a browser keeps
                for _ in range(warm):
                    warm_times.append(_get(url, client if keep_alive else None)[0])
                runs_url, poll_url = f"{service.api_url}/v1/runs?limit=50", f"{service.api_url}/v1/runs/{run_id}"
                _clear_report_cache(database_url)  # the report's summary kept the counts: the list counts them first
                list_first.append(_summary_get(runs_url, client))
                for _ in range(2):
                    _summary_get(poll_url, client)
                for _ in range(max(warm, 3)):
                    list_times.append(_summary_get(runs_url, client))
                    poll_times.append(_summary_get(poll_url, client))
            if service.api is not None:
                peaks.append(_peak_rss_mb(service.api.pid))
        finally:
            service.stop()
    return {
        "first_s": first,
        "warm_s": warm_times,
        "list_first_s": list_first,
        "list_s": list_times,
        "poll_s": poll_times,
        "report_bytes": size,
        "report_rows": n_rows,
        "api_peak_rss_mb": max((p for p in peaks if p is not None), default=None),
    }


def _vacuum(database_url: str) -> None:
    """VACUUM ANALYZE the judgments, as autovacuum would after the bulk load (the state of a steady table)."""
    import psycopg

    with psycopg.connect(database_url.replace("postgresql+psycopg://", "postgresql://"), autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE judgments")


def _clear_report_cache(database_url: str) -> None:
    """Empty the report cache (issue 39) when the database has one (code from before it has not)."""
    from sqlalchemy import create_engine, inspect, text

    engine = create_engine(database_url)
    try:
        if inspect(engine).has_table("report_cache"):
            with engine.begin() as connection:
                connection.execute(text("DELETE FROM report_cache"))
    finally:
        engine.dispose()


def _peak_rss_mb(pid: int) -> float | None:
    """The peak resident set (VmHWM) of the process and of its children (uvicorn may run the app in one)."""
    best: float | None = None
    pids = [pid]
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        pids += [int(c) for c in children]
    except OSError:
        pass
    for each in pids:
        try:
            for line in Path(f"/proc/{each}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    value = int(line.split()[1]) / 1024
                    best = value if best is None else max(best, value)
        except OSError:
            continue
    return best


def _timed(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    best, result = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t0)
    return best, result


def time_stages(database_url: str, run_id: str, n_boot: int, repeat: int) -> dict[str, float]:
    """Where the route's time goes, measured in this process with the functions the route calls (best of
    ``repeat``); ``import`` is a fresh interpreter importing the statistics library."""
    import subprocess

    from fastapi.encoders import jsonable_encoder

    from judge_api import repository
    from judge_api.db import session_scope
    from judge_api.stats.report import build_report

    code = "import time; t = time.perf_counter(); import judge_api.stats.report; print(time.perf_counter() - t)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    stages: dict[str, float] = {"import stats (fresh process)": float(done.stdout.strip())}
    with session_scope() as session:
        stages["judgments_frame"], frame = _timed(lambda: repository.judgments_frame(session, run_id), repeat)
        stages["ratings_frame"], ratings = _timed(lambda: repository.ratings_frame(session, run_id), repeat)
        stages["build_report"], result = _timed(
            lambda: build_report(frame, ratings if len(ratings) else None, n_boot=n_boot, seed=0), repeat
        )
        run = repository.get_run(session, run_id)
        assert run is not None
        stages["summarize_runs"], _ = _timed(lambda: repository.summarize_runs(session, [run]), repeat)
    stages["jsonable_encoder"], encoded = _timed(lambda: jsonable_encoder(result), repeat)
    stages["json.dumps"], _ = _timed(lambda: json.dumps(encoded, allow_nan=False), repeat)
    return stages


def _fmt_mb(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f} MB"


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000], help="judgments per run")
    parser.add_argument("--db", choices=("postgres", "sqlite"), default="postgres")
    parser.add_argument("--rounds", type=int, default=3, help="API starts per size (one first call each)")
    parser.add_argument("--warm", type=int, default=3, help="warm calls after each first call")
    parser.add_argument("--n-boot", type=int, default=1000, help="the report's n_boot (the route's default: 1000)")
    parser.add_argument(
        "--no-vacuum",
        action="store_true",
        help="PostgreSQL: skip VACUUM ANALYZE after seeding (autovacuum does it within a minute of a bulk load; "
        "without it counting a run's judgments reads the heap instead of the index)",
    )
    parser.add_argument(
        "--keep-db",
        metavar="NAME",
        help="seed once and reuse: a SQLite file path or a PostgreSQL database name (suffixed with the size when "
        "several sizes are given); a finished benchmark run of the size already in it is reused, else one is seeded "
        "and the database is kept",
    )
    parser.add_argument("--seed-only", action="store_true", help="with --keep-db: seed (or find) the run and stop")
    parser.add_argument("--stage-repeat", type=int, help="runs of each in-process stage (default: --warm)")
    parser.add_argument(
        "--keep-alive", action="store_true", help="warm calls over one kept-alive connection (default: one each)"
    )
    parser.add_argument("--no-stages", action="store_true", help="skip the in-process stage breakdown")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)

    print(
        f"GET /report benchmark: python {platform.python_version()}, {os.cpu_count()} CPU(s), db={args.db}, "
        f"n_boot={args.n_boot}, {args.rounds} API start(s) x (1 first + {args.warm} warm) per size, "
        f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}",
        flush=True,
    )
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="dj-bench-report-") as tmp:
        workdir = Path(tmp)
        for size in args.sizes:
            with ExitStack() as stack:
                found: tuple[str, int] | None = None
                if args.keep_db:
                    name = args.keep_db if len(args.sizes) == 1 else f"{args.keep_db}-{size}"
                    url, existed = stack.enter_context(kept_database(args.db, name))
                    found = stored_run(url, size) if existed else None
                else:
                    url = stack.enter_context(database(args.db, workdir))
                t0 = time.perf_counter()
                if found is not None:
                    run_id, stored = found
                    os.environ["DATABASE_URL"] = url
                    from judge_api.config import reset_settings_cache

                    reset_settings_cache()
                    print(f"reusing run {run_id} ({stored} judgments) in {url}", flush=True)
                else:
                    run_id, stored = seed_run(url, size)
                    if args.db == "postgres" and not args.no_vacuum:
                        _vacuum(url)
                seed_s = time.perf_counter() - t0
                if args.seed_only:
                    print(f"{stored} judgments in {url} (run {run_id}), seeded in {seed_s:.0f} s", flush=True)
                    continue
                timing = time_api(
                    url, run_id, args.rounds, args.warm, args.n_boot, workdir / str(size), keep_alive=args.keep_alive
                )
                repeat = args.stage_repeat or max(1, args.warm)
                stages = {} if args.no_stages else time_stages(url, run_id, args.n_boot, repeat=repeat)
            res = {"judgments": stored, "seed_s": seed_s, "db": args.db, "n_boot": args.n_boot, **timing}
            res["stages_s"] = stages
            results.append(res)
            first, warm = res["first_s"], res["warm_s"]
            print(
                f"\n{stored:>7} judgments (seeded in {seed_s:.0f} s), report {res['report_bytes'] / 1024:.0f} kB\n"
                f"  first GET /report after API start: min {min(first):.2f} s  median {_median(first):.2f} s  "
                f"[{' '.join(f'{t:.2f}' for t in first)}]\n"
                f"  warm GET /report                 : min {min(warm, default=float('nan')):.2f} s  "
                f"median {_median(warm):.2f} s  [{' '.join(f'{t * 1000:.0f}ms' for t in warm)}]\n"
                f"  GET /v1/runs, its first call     : min {min(res['list_first_s']):.3f} s  "
                f"median {_median(res['list_first_s']):.3f} s\n"
                f"  GET /v1/runs, later              : min {min(res['list_s']):.3f} s  "
                f"median {_median(res['list_s']):.3f} s\n"
                f"  GET /v1/runs/{{id}} (the poll)     : min {min(res['poll_s']):.3f} s  "
                f"median {_median(res['poll_s']):.3f} s\n"
                f"  API peak RSS (VmHWM)             : {_fmt_mb(res['api_peak_rss_mb'])}",
                flush=True,
            )
            if stages:
                print("  in-process stages (best of runs): " + "  ".join(f"{k} {v:.3f} s" for k, v in stages.items()))
    print(
        "\nfirst = the first request after the API answered /healthz (includes any import or warm-up the route "
        "does);\nwarm = later requests to the same process; times are wall clock at the client."
    )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
