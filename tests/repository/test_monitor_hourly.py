"""A monitor's series from the hourly sums the database keeps as verdicts are written (issue 39, migration 0024),
against the series computed as before from every finished verdict still stored (``verdicts_frame`` ->
``hourly_sums`` -> filters -> ``series``): every path that writes a verdict (an insert as imports and cache hits do,
an update as the workers' writer does, a retry, a changed score), retention, and random verdict sets (hypothesis)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs
from sqlalchemy import insert, select, text, update
from sqlalchemy.orm import Session

from judge_api.config import reset_settings_cache
from judge_api.db import reset_engines, session_factory, session_scope
from judge_api.migrate import upgrade
from judge_api.models import Judgment, Monitor, MonitorHourly, MonitorResponse, Run, RunItem
from judge_api.repository import monitors as store
from judge_api.stats.series import hourly_sums, series

T0 = datetime(2026, 11, 20, 0, 0)
FILTERS = ("system", "version", "segment", "rubric_id", "aspect", "judge")


@pytest.fixture
def hourly_db(settings_env: pytest.MonkeyPatch, db_url: str) -> Iterator[str]:
    settings_env.setenv("DATABASE_URL", db_url)
    reset_settings_cache()
    reset_engines()
    upgrade(db_url)
    yield db_url
    reset_engines()


def new_monitor(session: Session) -> Monitor:
    return store.create_monitor(session, "p1", {"name": "m", "config": {}, "sample_rate": 1.0}, {})


def add_response(
    session: Session,
    monitor: Monitor,
    rid: str,
    ts: datetime,
    system: str = "bot",
    version: str = "v1",
    segment: str = "",
) -> int:
    """A sampled response and its item (as ingestion stores them); the item's primary key."""
    session.execute(
        insert(MonitorResponse).values(
            monitor_id=monitor.id,
            response_id=rid,
            system=system,
            version=version,
            segment=segment,
            ts=ts,
            received_at=ts,
            sampled=True,
        )
    )
    return int(session.scalars(insert(RunItem).returning(RunItem.id), [_item(monitor.run_id, rid)]).one())


def _item(run_id: str, rid: str) -> dict[str, Any]:
    return {"run_id": run_id, "item_key": rid, "payload": {"id": rid, "candidates": {"bot": "x"}}}


def judgment(
    run_id: str,
    item_pk: int,
    rid: str,
    status: str = "done",
    score: float | None = 5.0,
    details: dict[str, Any] | None = None,
    aspect: str = "consistency",
    rubric: str = "rsum-single",
    judge: str = "openai:gpt-4o",
) -> dict[str, Any]:
    return {
        "dedup_key": uuid.uuid4().hex,
        "run_id": run_id,
        "item_pk": item_pk,
        "item_key": rid,
        "mode": "single",
        "system_a": "bot",
        "rubric_id": rubric,
        "rubric_version": "1",
        "aspect": aspect,
        "judge": judge,
        "judge_params": {},
        "status": status,
        "score": score,
        "details": details,
    }


def add_judgments(session: Session, rows: list[dict[str, Any]]) -> list[int]:
    """Inserted in one statement, as imports and the planner's cache hits store them."""
    return [int(i) for i in session.scalars(insert(Judgment).returning(Judgment.id), rows)]


def old_series(
    session: Session,
    monitor: Monitor,
    bucket: str,
    by: list[str],
    filters: dict[str, str | None],
    since: datetime | None = None,
    until: datetime | None = None,
) -> pd.DataFrame:
    """The series as it was computed before migration 0024 (nothing retained: every verdict is stored)."""
    sums = hourly_sums(store.verdicts_frame(session, monitor, since, until))
    for column, value in filters.items():
        if value is not None and not sums.empty:
            sums = sums[sums[column] == value]
    return series(sums, bucket, by)


def new_series(
    session: Session,
    monitor: Monitor,
    bucket: str,
    by: list[str],
    filters: dict[str, str | None],
    since: datetime | None = None,
    until: datetime | None = None,
) -> pd.DataFrame:
    return series(store.series_sums(session, monitor, bucket, by, filters, since, until), bucket, by)


def assert_same(got: pd.DataFrame, want: pd.DataFrame) -> None:
    assert len(got) == len(want), (got, want)
    exact = ["bucket_start", "system", "version", "segment", "rubric_id", "aspect", "judge", "n", "contradiction_n"]
    close = ["mean", "ci_low", "ci_high", "contradiction_rate"]
    for g, w in zip(got.to_dict("records"), want.to_dict("records"), strict=True):
        assert {k: g[k] for k in exact} == {k: w[k] for k in exact}
        for k in close:
            assert (g[k] is None) == (w[k] is None), (k, g, w)
            if w[k] is not None:
                assert g[k] == pytest.approx(w[k], rel=1e-9, abs=1e-9), (k, g, w)


def all_views(session: Session, monitor: Monitor) -> Iterator[tuple[str, list[str], dict[str, str | None]]]:
    for bucket in ("1h", "1d"):
        for by in (["version"], ["system"], ["segment"], ["version", "system", "segment"]):
            yield bucket, by, {}
        yield bucket, ["version"], {"aspect": "consistency"}
        yield bucket, ["system"], {"version": "v2", "segment": "web"}
        yield bucket, ["version"], {"segment": ""}


FACTS = {"facts": [{"id": "f1", "label": "contradicted"}], "contradiction_rate": 0.5}


def test_every_path_that_writes_a_verdict_keeps_the_sums_and_the_series_is_todays(hourly_db: str) -> None:
    sessions = session_factory()
    with session_scope(sessions) as session:
        monitor = new_monitor(session)
        run = monitor.run_id
        pks = {
            f"r{i}": add_response(
                session,
                monitor,
                f"r{i}",
                T0 + timedelta(hours=7 * i % 30, minutes=i),
                system="a" if i % 2 else "b",
                version=f"v{1 + i % 3}",
                segment="web" if i % 4 == 0 else "",
            )
            for i in range(24)
        }
        # inserted done (imports, cache hits), with fact-check details, without a score, not finished
        rows = [judgment(run, pks[f"r{i}"], f"r{i}", score=float(1 + i % 9)) for i in range(12)]
        rows += [judgment(run, pks["r1"], "r1", aspect="fluency", score=3.0)]
        rows += [
            judgment(run, pks["r2"], "r2", rubric="facts", score=None, details={"facts": [], "contradiction_rate": 0})
        ]
        rows += [judgment(run, pks["r3"], "r3", rubric="facts", score=7.0, details=FACTS)]
        rows += [judgment(run, pks[f"r{i}"], f"r{i}", status="pending", score=None) for i in range(12, 24)]
        rows += [judgment(run, pks["r4"], "r4", status="failed", score=None, aspect="fluency")]
        ids = add_judgments(session, rows)
        pending = ids[15:27]
    with session_scope(sessions) as session:
        # the workers' writer: one UPDATE per verdict, pending -> done; one unparseable
        for n, jid in enumerate(pending[:-1]):
            session.execute(update(Judgment).where(Judgment.id == jid).values(status="done", score=float(n % 5 + 1)))
        session.execute(update(Judgment).where(Judgment.id == pending[-1]).values(status="unparseable"))
    with session_scope(sessions) as session:
        # a retry takes verdicts back (done -> pending), one is written again with another score; a score changes
        session.execute(update(Judgment).where(Judgment.id.in_(ids[:3])).values(status="pending", score=None))
        session.execute(update(Judgment).where(Judgment.id == ids[0]).values(status="done", score=9.5))
        session.execute(update(Judgment).where(Judgment.id == ids[5]).values(score=1.0, explanation="again"))
        session.execute(text("UPDATE judgments SET details = NULL WHERE id = :i"), {"i": ids[14]})  # facts gone
        # a run that is not a monitor's, with an item named like a response: no sums
        other = Run(id="run_other", project_id="p1", name="x", config={}, n_items=1, n_judgments=1)
        session.add(other)
        session.flush()
        item_pk = int(session.scalars(insert(RunItem).returning(RunItem.id), [_item("run_other", "r5")]).one())
        add_judgments(session, [judgment("run_other", item_pk, "r5", score=1.0)])
    with session_scope(sessions) as session:
        found = session.get(Monitor, monitor.id)
        assert found is not None
        monitor = found
        stored = store.verdicts_frame(session, monitor)
        assert len(stored) == 15 - 3 + 1 + 11  # 15 inserted done, 3 retried (1 written again), 11 written
        kept = session.execute(select(MonitorHourly).where(MonitorHourly.monitor_id == monitor.id)).scalars().all()
        assert sum(h.verdicts for h in kept) == len(stored)
        assert sum(h.n for h in kept) == stored["score"].notna().sum()
        assert sum(h.fact_n for h in kept) == 1  # r2's (no fact addressed, rate 0); r3's details were cleared
        for bucket, by, filters in all_views(session, monitor):
            assert_same(
                new_series(session, monitor, bucket, by, filters), old_series(session, monitor, bucket, by, filters)
            )
        since, until = T0 + timedelta(hours=5), T0 + timedelta(hours=20)  # whole hours: the same as before
        assert_same(
            new_series(session, monitor, "1h", ["version"], {}, since, until),
            old_series(session, monitor, "1h", ["version"], {}, since, until),
        )
        before = new_series(session, monitor, "1h", ["version", "system", "segment"], {})
        assert not before.empty

        # the retried ones are cancelled (no verdict either way), then retention deletes every judgment: their
        # verdicts stay counted once (nothing folded, nothing added)
        session.execute(update(Judgment).where(Judgment.status == "pending").values(status="cancelled"))
        assert_same(new_series(session, monitor, "1h", ["version", "system", "segment"], {}), before)
        monitor.retention_days = 1
        assert store.apply_retention(session, monitor, now=T0 + timedelta(days=400)) > 0
        assert store.verdicts_frame(session, monitor).empty
        assert session.scalar(select(Judgment.id).where(Judgment.run_id == monitor.run_id)) is None
        after = new_series(session, monitor, "1h", ["version", "system", "segment"], {})
        pd.testing.assert_frame_equal(after, before)


def test_a_group_whose_verdicts_are_all_retried_away_is_no_series_row(hourly_db: str) -> None:
    with session_scope() as session:
        monitor = new_monitor(session)
        pk = add_response(session, monitor, "r1", T0, version="gone")
        pk2 = add_response(session, monitor, "r2", T0, version="kept")
        ids = add_judgments(
            session,
            [judgment(monitor.run_id, pk, "r1", score=None), judgment(monitor.run_id, pk2, "r2", score=4.0)],
        )
        view = new_series(session, monitor, "1h", ["version"], {})
        assert list(view["version"]) == ["gone", "kept"]
        assert list(view["n"]) == [0, 1]  # a verdict without a score is a row of n 0, as before
        session.execute(update(Judgment).where(Judgment.id == ids[0]).values(status="pending"))
        view = new_series(session, monitor, "1h", ["version"], {})
        assert list(view["version"]) == ["kept"]
        assert_same(view, old_series(session, monitor, "1h", ["version"], {}))


@pytest.fixture
def sqlite_hourly(settings_env: pytest.MonkeyPatch, sqlite_url: str) -> Iterator[str]:
    settings_env.setenv("DATABASE_URL", sqlite_url)
    reset_settings_cache()
    reset_engines()
    upgrade(sqlite_url)
    yield sqlite_url
    reset_engines()


verdict = hs.fixed_dictionaries(
    {
        "hour": hs.integers(0, 60),
        "minute": hs.integers(0, 59),
        "system": hs.sampled_from(["a", "b"]),
        "version": hs.sampled_from(["v1", "v2"]),
        "segment": hs.sampled_from(["", "web"]),
        "aspect": hs.sampled_from(["consistency", "fluency"]),
        "status": hs.sampled_from(["done", "done", "done", "pending", "failed", "unparseable"]),
        "score": hs.one_of(hs.none(), hs.floats(1, 100, allow_nan=False)),
        "rate": hs.one_of(hs.none(), hs.floats(0, 1)),
        "later": hs.one_of(hs.none(), hs.tuples(hs.sampled_from(["done", "pending"]), hs.floats(1, 100))),
    }
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    verdicts=hs.lists(verdict, max_size=25),
    bucket=hs.sampled_from(["1h", "1d"]),
    by=hs.lists(hs.sampled_from(["version", "system", "segment"]), min_size=1, max_size=3, unique=True),
    filter_on=hs.sampled_from([None, *FILTERS]),
)
def test_random_verdict_sets_give_todays_series(
    sqlite_hourly: str, verdicts: list[dict[str, Any]], bucket: str, by: list[str], filter_on: str | None
) -> None:
    with session_scope() as session:
        monitor = new_monitor(session)
        rows = []
        for i, v in enumerate(verdicts):
            rid = f"r{i}"
            ts = T0 + timedelta(hours=v["hour"], minutes=v["minute"])
            pk = add_response(session, monitor, rid, ts, v["system"], v["version"], v["segment"])
            details = None if v["rate"] is None else {"facts": [], "contradiction_rate": v["rate"]}
            score = v["score"] if v["status"] == "done" else None
            rows.append(judgment(monitor.run_id, pk, rid, v["status"], score, details, aspect=v["aspect"]))
        ids = add_judgments(session, rows) if rows else []
        for jid, v in zip(ids, verdicts, strict=True):
            if v["later"] is not None:  # a retry, or a verdict written (again) by a worker
                status, score = v["later"]
                session.execute(update(Judgment).where(Judgment.id == jid).values(status=status, score=score))
        session.flush()
        filters: dict[str, str | None] = {}
        if filter_on is not None and verdicts:
            key = {"rubric_id": "rubric_id", "judge": "judge"}.get(filter_on)
            filters[filter_on] = (
                "rsum-single" if key == "rubric_id" else "openai:gpt-4o" if key else verdicts[0][filter_on]
            )
        assert_same(
            new_series(session, monitor, bucket, by, filters), old_series(session, monitor, bucket, by, filters)
        )


def test_the_migration_adds_the_stored_verdicts_to_the_sums_retention_kept(
    settings_env: pytest.MonkeyPatch, db_url: str
) -> None:
    """A database at 0023 with verdicts stored and an hour retention folded: after 0024 the series is the same."""
    from alembic import command

    from judge_api.db import engine_for
    from judge_api.migrate import alembic_config

    settings_env.setenv("DATABASE_URL", db_url)
    reset_settings_cache()
    reset_engines()
    engine = engine_for(db_url)
    with engine.begin() as connection:
        config = alembic_config(db_url)
        config.attributes["connection"] = connection
        command.upgrade(config, "0023")
    with session_scope() as session:
        monitor = new_monitor(session)
        pks = [
            add_response(session, monitor, f"r{i}", T0 + timedelta(minutes=20 * i), version=f"v{i % 2}")
            for i in range(6)
        ]
        details = {"facts": [], "contradiction_rate": 0.25}
        add_judgments(
            session,
            [judgment(monitor.run_id, pk, f"r{i}", score=float(i), details=details) for i, pk in enumerate(pks)],
        )
        session.execute(  # what retention had folded of the first hour (its judgments gone)
            text(
                "INSERT INTO monitor_hourly (monitor_id, hour_start, system, version, segment, rubric_id, aspect, "
                "judge, n, total, total_sq, fact_n, fact_total) VALUES (:m, :h, 'bot', 'v0', '', 'rsum-single', "
                "'consistency', 'openai:gpt-4o', 2, 10.0, 58.0, 0, 0.0)"
            ),
            {"m": monitor.id, "h": T0},
        )
        live = hourly_sums(store.verdicts_frame(session, monitor))
        kept = pd.DataFrame(
            [
                {
                    "hour_start": T0,
                    "system": "bot",
                    "version": "v0",
                    "segment": "",
                    "rubric_id": "rsum-single",
                    "aspect": "consistency",
                    "judge": "openai:gpt-4o",
                    "n": 2,
                    "total": 10.0,
                    "total_sq": 58.0,
                    "fact_n": 0,
                    "fact_total": 0.0,
                }
            ]
        )
        before = series(pd.concat([kept, live], ignore_index=True), "1h", ["version"])
        monitor_id = monitor.id
    reset_engines()
    upgrade(db_url)
    with session_scope() as session:
        found = session.get(Monitor, monitor_id)
        assert found is not None
        monitor = found
        assert_same(new_series(session, monitor, "1h", ["version"], {}), before)
        assert new_series(session, monitor, "1h", ["version"], {})["n"].sum() == 8

    # and back: the downgrade takes the stored verdicts out of the sums again (the old code adds them)
    reset_engines()
    with engine_for(db_url).begin() as connection:
        config = alembic_config(db_url)
        config.attributes["connection"] = connection
        command.downgrade(config, "0023")
    with session_scope() as session:
        found = session.get(Monitor, monitor_id)
        assert found is not None
        columns = (
            "hour_start, system, version, segment, rubric_id, aspect, judge, n, total, total_sq, fact_n, fact_total"
        )
        kept_rows = session.execute(text(f"SELECT {columns} FROM monitor_hourly")).all()
        assert len(kept_rows) == 1 and kept_rows[0].n == 2
        again = series(
            pd.concat([kept, hourly_sums(store.verdicts_frame(session, found))], ignore_index=True), "1h", ["version"]
        )
        assert_same(again, before)


def test_the_rows_built_from_columns_are_the_series_models_json() -> None:
    """The endpoint writes the rows from the statistics' columns (no per-row validation): the same JSON as the
    ``SeriesRow`` model gave, nulls, blank segments and intervals of one verdict included."""
    import json

    from judge_api.routers.monitors import series_rows
    from judge_api.schemas.monitors import SeriesRow

    sums = pd.DataFrame(
        [
            {
                "hour_start": T0 + timedelta(hours=h),
                "system": "a",
                "version": v,
                "segment": g,
                "rubric_id": "r",
                "aspect": "x",
                "judge": "j",
                "n": n,
                "total": 7.0 * n + h,
                "total_sq": 50.0 * n + h,
                "fact_n": f,
                "fact_total": 0.3 * f,
            }
            for h in range(30)
            for v, g, n, f in (("v1", "", h % 3, 0), ("v2", "web", 2, h % 2))
        ]
    )
    seen: list[dict[str, Any]] = []
    for bucket, by in (("1h", ["version"]), ("1d", ["version", "segment"]), ("1h", ["system"])):
        frame = series(sums, bucket, by)
        want = []
        for record in frame.to_dict("records"):  # the endpoint's rows before
            record["bucket_start"] = pd.Timestamp(record["bucket_start"]).to_pydatetime()
            record["segment"] = None if record["segment"] == "" else record["segment"]
            want.append(SeriesRow.model_validate(record).model_dump(mode="json"))
        got = json.loads(json.dumps(series_rows(frame), allow_nan=False))
        assert got == want
        seen += got
    assert any(r["ci_low"] is None for r in seen) and any(r["mean"] is None for r in seen)
    assert any(r["segment"] is None for r in seen) and any(r["contradiction_rate"] is not None for r in seen)
