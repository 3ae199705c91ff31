"""Benchmark a monitor's series (``GET /v1/monitors/{id}/series``, issue 39): 90 days x 100 k responses a day.

Two monitors in one fresh database (migrated to head, so the hourly-sum triggers are on):

* **full scale**: ``--days`` (90) days of hourly sums as the triggers leave them for ``--per-day`` (100,000)
  responses a day, every one judged on ``--aspects`` (2) aspects: 2 systems x 3 versions x 3 segments x the aspects
  per hour, seeded in bulk with SQL (``monitor_hourly`` rows, not through the API);
* **fraction**: ``--raw-days`` (1) day of the same traffic as rows (responses, items, judgments ``done``), seeded in
  bulk with SQL, so today's code (every stored verdict read into pandas, ``legacy_series``: the router's
  ``series_frame`` before migration 0023, for a monitor retention has not touched) can be timed; its figure at full
  scale is that times ``days / raw-days`` (it reads every verdict: linear). The same fraction is read the new way,
  and by one SQL ``GROUP BY`` hour over the joined rows (the alternative the task named), for the choice.

Each figure is the min / median of ``--rounds`` (wall clock, one process, side by side in one window). Also timed:
the whole request through the app (``TestClient``: validation and JSON of every row included), and the cost the
triggers add to writing verdicts (an insert of done judgments into a plain run and into the monitor's run, and
one-UPDATE-per-verdict writes as the workers' writer does, with the triggers on and off).

Usage::

    python bench/bench_monitor_series.py --database sqlite --rounds 7
    python bench/bench_monitor_series.py --database postgresql+psycopg://postgres@127.0.0.1:5432/h39d_bench
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import pandas as pd  # noqa: E402
from sqlalchemy import Engine, insert, select, text  # noqa: E402
from sqlalchemy.orm import Session  # noqa: E402

SYSTEMS = ("bot-a", "bot-b")
VERSIONS = ("v1", "v2", "v3")
SEGMENTS = ("", "web", "app")
RUBRIC, JUDGE = "rsum-single", "openai:gpt-4o"
ASPECTS = ("consistency", "fluency", "engagingness")
START = datetime(2026, 6, 1)


def timed(fn: Callable[[], Any], rounds: int) -> tuple[list[float], Any]:
    out: Any = None
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return times, out


def fmt(times: Sequence[float]) -> str:
    return f"{min(times) * 1000:9.1f} / {statistics.median(times) * 1000:9.1f} ms"


def prepare(database: str) -> str:
    if database == "sqlite":
        return f"sqlite:///{tempfile.mkdtemp(prefix='bench_series_')}/bench.db"
    import psycopg

    name = database.rsplit("/", 1)[1]
    admin = database.rsplit("/", 1)[0].replace("postgresql+psycopg://", "postgresql://") + "/test"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    return database


def seed_hourly(session: Session, monitor_id: str, days: int, per_day: int, aspects: int, seed: int) -> int:
    """``monitor_hourly`` as the triggers leave it: per hour and key, n verdicts of scores ~ N(70, 15^2)."""
    from judge_api.models import MonitorHourly

    rng = random.Random(seed)
    keys = [(s, v, g, a) for s in SYSTEMS for v in VERSIONS for g in SEGMENTS for a in ASPECTS[:aspects]]
    per_key = per_day / 24 / (len(SYSTEMS) * len(VERSIONS) * len(SEGMENTS))
    rows = []
    for hour in range(days * 24):
        start = START + timedelta(hours=hour)
        for system, version, segment, aspect in keys:
            n = max(1, int(rng.gauss(per_key, per_key**0.5)))
            mean = rng.gauss(70, 2)
            rows.append(
                {
                    "monitor_id": monitor_id,
                    "hour_start": start,
                    "system": system,
                    "version": version,
                    "segment": segment,
                    "rubric_id": RUBRIC,
                    "aspect": aspect,
                    "judge": JUDGE,
                    "verdicts": n,
                    "n": n,
                    "total": mean * n,
                    "total_sq": (mean**2 + 15**2) * n,
                    "fact_n": 0,
                    "fact_total": 0.0,
                }
            )
    for start_row in range(0, len(rows), 10_000):
        session.execute(insert(MonitorHourly), rows[start_row : start_row + 10_000])
    return len(rows)


def seed_raw(session: Session, monitor: Any, days: int, per_day: int, aspects: int, seed: int) -> int:
    """``days`` of responses, items and done judgments (one per aspect) of the monitor, bulk inserts."""
    from judge_api.models import Judgment, MonitorResponse, RunItem

    rng = random.Random(seed)
    total = 0
    chunk = 5000
    for base in range(0, days * per_day, chunk):
        ids = range(base, min(base + chunk, days * per_day))
        responses, items = [], []
        for i in ids:
            ts = START + timedelta(seconds=i * 86400 / per_day)
            responses.append(
                {
                    "monitor_id": monitor.id,
                    "response_id": f"r{i}",
                    "system": SYSTEMS[i % 2],
                    "version": VERSIONS[i % 3],
                    "segment": SEGMENTS[(i // 6) % 3],
                    "ts": ts,
                    "received_at": ts,
                    "sampled": True,
                }
            )
            items.append({"run_id": monitor.run_id, "item_key": f"r{i}", "payload": {"id": f"r{i}"}})
        session.execute(insert(MonitorResponse), responses)
        pks = list(session.scalars(insert(RunItem).returning(RunItem.id), items))
        judgments = [
            {
                "dedup_key": uuid.uuid4().hex,
                "run_id": monitor.run_id,
                "item_pk": pk,
                "item_key": f"r{i}",
                "mode": "single",
                "system_a": SYSTEMS[i % 2],
                "rubric_id": RUBRIC,
                "rubric_version": "1",
                "aspect": aspect,
                "judge": JUDGE,
                "judge_params": {},
                "status": "done",
                "score": float(min(100, max(1, round(rng.gauss(70, 15))))),
            }
            for i, pk in zip(ids, pks, strict=True)
            for aspect in ASPECTS[:aspects]
        ]
        session.execute(insert(Judgment), judgments)
        total += len(judgments)
    return total


def legacy_series(
    session: Session, monitor: Any, bucket: str, by: list[str], filters: dict[str, str | None]
) -> pd.DataFrame:
    """Today's code (before migration 0023) for a monitor retention has not touched: every finished verdict still
    stored, read into pandas, summed per hour, filtered, then the series."""
    from judge_api.repository import monitors as store
    from judge_api.stats.series import hourly_sums, series

    sums = hourly_sums(store.verdicts_frame(session, monitor))
    for column, value in filters.items():
        if value is not None and not sums.empty:
            sums = sums[sums[column] == value]
    return series(sums, bucket, by)


def raw_group_by(session: Session, monitor: Any, dialect: str) -> int:
    """The alternative: one SQL GROUP BY hour and key over the joined verdict rows (sums only, no series)."""
    hour = "strftime('%Y-%m-%d %H', mr.ts)" if dialect == "sqlite" else "date_trunc('hour', mr.ts)"
    query = text(
        f"SELECT {hour} AS h, mr.version, j.rubric_id, j.aspect, j.judge, count(j.score), sum(j.score), "
        "sum(j.score * j.score) FROM judgments j JOIN monitor_responses mr ON mr.monitor_id = :m "
        "AND mr.response_id = j.item_key WHERE j.run_id = :r AND j.status = 'done' GROUP BY 1, 2, 3, 4, 5"
    )
    return len(session.execute(query, {"m": monitor.id, "r": monitor.run_id}).all())


def trigger_cost(engine: Engine, monitor: Any, n: int, rounds: int) -> list[str]:
    """Writing verdicts with the triggers on and off: n done judgments inserted in one statement into a plain run
    and into the monitor's run, and n pending -> done updates one statement each (the workers' writer)."""
    from judge_api.models import Judgment, Run, RunItem
    from judge_api.repository.monitors import store_responses  # noqa: F401  (the module the run belongs to)

    dialect = engine.dialect.name
    lines = []
    with Session(engine) as session:
        session.add(
            Run(id="run_plain", project_id=monitor.project_id, name="plain", config={}, n_items=0, n_judgments=0)
        )
        session.flush()
        plain_pk = session.scalars(
            insert(RunItem).returning(RunItem.id), [{"run_id": "run_plain", "item_key": "x", "payload": {}}]
        ).one()
        mon_pk, mon_key = session.execute(
            text("SELECT id, item_key FROM items WHERE run_id = :r LIMIT 1"), {"r": monitor.run_id}
        ).one()
        session.commit()
    saved: list[str] = []

    state = {"on": True}

    def switch(on: bool) -> None:
        if state["on"] == on:
            return
        state["on"] = on
        with engine.begin() as conn:
            if dialect == "postgresql":
                conn.execute(text(f"ALTER TABLE judgments {'ENABLE' if on else 'DISABLE'} TRIGGER USER"))
            elif on:
                for sql in saved:
                    conn.exec_driver_sql(sql)
            else:
                saved[:] = [r[0] for r in conn.exec_driver_sql("SELECT sql FROM sqlite_master WHERE type='trigger'")]
                for name in conn.exec_driver_sql("SELECT name FROM sqlite_master WHERE type='trigger'").scalars():
                    conn.exec_driver_sql(f"DROP TRIGGER {name}")

    def rows(run_id: str, pk: int, key: str, status: str) -> list[dict[str, Any]]:
        return [
            {
                "dedup_key": uuid.uuid4().hex,
                "run_id": run_id,
                "item_pk": pk,
                "item_key": key,
                "mode": "single",
                "system_a": "s",
                "rubric_id": RUBRIC,
                "rubric_version": "1",
                "aspect": "bench",
                "judge": JUDGE,
                "judge_params": {},
                "status": status,
                "score": 50.0 if status == "done" else None,
            }
            for _ in range(n)
        ]

    def insert_done(run_id: str, pk: int, key: str) -> Callable[[], None]:
        def go() -> None:
            with Session(engine) as session:
                session.execute(insert(Judgment), rows(run_id, pk, key, "done"))
                session.rollback()

        return go

    def updates(run_id: str, pk: int, key: str) -> Callable[[], None]:
        def go() -> None:
            with Session(engine) as session:
                ids = list(session.scalars(insert(Judgment).returning(Judgment.id), rows(run_id, pk, key, "pending")))
                session.flush()
                t0 = time.perf_counter()
                for jid in ids:
                    session.execute(
                        text("UPDATE judgments SET status = 'done', score = :s WHERE id = :i"), {"s": 60.0, "i": jid}
                    )
                go.elapsed = time.perf_counter() - t0  # type: ignore[attr-defined]
                session.rollback()

        return go

    for label, fn_of in (("insert", insert_done), ("update", updates)):
        for target, (run_id, pk, key) in (
            ("plain run", ("run_plain", plain_pk, "x")),
            ("monitor", (monitor.run_id, mon_pk, mon_key)),
        ):
            figures = []
            for on in (True, False):
                switch(on)
                fn = fn_of(run_id, pk, key)
                times = []
                for _ in range(rounds):
                    t0 = time.perf_counter()
                    fn()
                    times.append(getattr(fn, "elapsed", time.perf_counter() - t0))
                figures.append(times)
            switch(True)
            on_t, off_t = figures
            how = "1 statement" if label == "insert" else "1 UPDATE each"
            ratio = statistics.median(on_t) / statistics.median(off_t)
            per = (statistics.median(on_t) - statistics.median(off_t)) / n * 1e6
            lines.append(
                f"  {label} {n:,} done judgments, {target:9s} ({how}): triggers on {fmt(on_t)} | off {fmt(off_t)}"
                f" | {ratio:.2f}x | {per:+.1f} us a verdict"
            )
    return lines


def seed_and_compare(engine: Engine, args: argparse.Namespace) -> tuple[str, str]:
    """Seed both monitors, then time the series the new way and today's, side by side; the monitors' ids."""
    from judge_api.models import Monitor
    from judge_api.repository import monitors as store
    from judge_api.routers.monitors import series_frame

    dialect = engine.dialect.name
    t0 = time.perf_counter()
    with Session(engine) as session:
        full = store.create_monitor(session, "default", {"name": "full", "config": {}, "sample_rate": 1.0}, {})
        part = store.create_monitor(session, "default", {"name": "part", "config": {}, "sample_rate": 1.0}, {})
        n_hourly = seed_hourly(session, full.id, args.days, args.per_day, args.aspects, args.seed)
        session.commit()
        seeded_hourly = time.perf_counter() - t0
        t1 = time.perf_counter()
        n_raw = seed_raw(session, part, args.raw_days, args.per_day, args.aspects, args.seed)
        session.commit()
        seeded_raw = time.perf_counter() - t1
        full_id, part_id = full.id, part.id
    if dialect == "postgresql":
        with engine.begin() as conn:
            conn.exec_driver_sql("ANALYZE")
    print(f"# {dialect}, load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")
    print(
        f"# full scale: {args.days} days x {args.per_day:,} responses/day x {args.aspects} aspects = "
        f"{args.days * args.per_day * args.aspects:,} verdicts as {n_hourly:,} hourly rows "
        f"(seeded in {seeded_hourly:.1f} s)"
    )
    print(
        f"# fraction: {args.raw_days} day(s) as {n_raw:,} verdict rows "
        f"(seeded through the triggers in {seeded_raw:.1f} s)"
    )
    scale = args.days / args.raw_days
    views: list[tuple[str, str, list[str], dict[str, str | None]]] = [
        ("1h by version", "1h", ["version"], {}),
        ("1d by version", "1d", ["version"], {}),
        ("1h by version,system,segment", "1h", ["version", "system", "segment"], {}),
        ("1h by version, aspect+segment filter", "1h", ["version"], {"aspect": "consistency", "segment": "web"}),
    ]
    print(f"\n## series_frame (the query and the statistics), min / median of {args.rounds} rounds")
    print(
        f"{'view':40s} {'new, full scale':>26s} | {'new, fraction':>26s} | {'today, fraction':>26s} | "
        f"today x{scale:g} (est.) | rows"
    )
    with Session(engine) as session:
        monitor_full = session.get(Monitor, full_id)
        monitor_part = session.get(Monitor, part_id)
        assert monitor_full is not None and monitor_part is not None
        for name, bucket, by, filters in views:
            new_full, rows = timed(
                partial(series_frame, session, monitor_full, bucket, by, 0.95, filters, None, None), args.rounds
            )
            new_part, got = timed(
                partial(series_frame, session, monitor_part, bucket, by, 0.95, filters, None, None), args.rounds
            )
            old_part, want = timed(
                partial(legacy_series, session, monitor_part, bucket, by, filters), max(2, args.rounds // 2)
            )
            assert len(got) == len(want) and list(got["n"]) == list(want["n"]), "new and today's series differ"
            est = statistics.median(old_part) * scale
            print(
                f"{name:40s} {fmt(new_full):>26s} | {fmt(new_part):>26s} | {fmt(old_part):>26s} | {est:10.1f} s | "
                f"{len(rows):,}"
            )
        group_by, _ = timed(lambda: raw_group_by(session, monitor_part, dialect), max(2, args.rounds // 2))
        print(
            f"{'one SQL GROUP BY over the rows (alt.)':40s} {'':>26s} | {'':>26s} | {fmt(group_by):>26s} | "
            f"{statistics.median(group_by) * scale:10.1f} s |"
        )
    return full_id, part_id


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", default="sqlite", help="sqlite, or a PostgreSQL URL (the database is recreated)")
    parser.add_argument("--days", type=int, default=90)
    parser.add_argument("--per-day", type=int, default=100_000)
    parser.add_argument("--aspects", type=int, default=2, choices=(1, 2, 3))
    parser.add_argument("--raw-days", type=int, default=1, help="days of verdict rows today's code is timed on")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--trigger-n", type=int, default=2000, help="verdicts per round of the trigger cost (0: skip)")
    parser.add_argument("--seed", type=int, default=39)
    parser.add_argument("--reuse", help="the URL of a database a run seeded: time the requests only, seed nothing")
    args = parser.parse_args()

    url = args.reuse or prepare(args.database)
    os.environ["DATABASE_URL"] = url
    os.environ.pop("REDIS_URL", None)
    from fastapi.testclient import TestClient

    from judge_api.app import create_app
    from judge_api.db import engine_for
    from judge_api.migrate import upgrade
    from judge_api.models import Monitor

    upgrade(url)
    engine = engine_for(url)
    dialect = engine.dialect.name
    if args.reuse:
        with Session(engine) as session:
            full_id = session.scalars(select(Monitor.id).where(Monitor.name == "full")).one()
            part_id = session.scalars(select(Monitor.id).where(Monitor.name == "part")).one()
        print(f"# {dialect}, {url} as seeded before, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    else:
        full_id, part_id = seed_and_compare(engine, args)
    print(
        f"\n## GET /v1/monitors/{{id}}/series through the app (TestClient), full scale, min / median of {args.rounds}"
    )
    with TestClient(create_app()) as client:
        for name, query in (
            ("1h by version", {"bucket": "1h", "by": "version"}),
            ("1d by version", {"bucket": "1d", "by": "version"}),
            ("1h by version, csv", {"bucket": "1h", "by": "version", "format": "csv"}),
            (
                "1h by version, 7 days",
                {"bucket": "1h", "by": "version", "since": (START + timedelta(days=args.days - 7)).isoformat()},
            ),
        ):

            def get(query: dict[str, str] = query) -> int:
                answer = client.get(f"/v1/monitors/{full_id}/series", params=query)
                assert answer.status_code == 200, answer.text
                return len(answer.content)

            times, size = timed(get, args.rounds)
            print(f"{name:40s} {fmt(times):>26s} | {size / 1e6:.1f} MB")
    if args.trigger_n and not args.reuse:
        print(f"\n## what the triggers add to writing verdicts, min / median of {args.rounds} (rolled back)")
        with Session(engine) as session:
            monitor = session.get(Monitor, part_id)
        for line in trigger_cost(engine, monitor, args.trigger_n, args.rounds):
            print(line)
    print(f"# load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
