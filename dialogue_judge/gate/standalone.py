"""Judge runs inside this process: no Redis, no API, no worker processes; a SQLite file is the whole state.

This is what lets a CI runner gate a build with nothing but the package and a judge key. The judgments go through
the very same path as on the service (``workers.execute.JudgeEngine.judge``: claim, render, cache / single-flight,
rate-limited call with retries, parse, compare-and-set write), with the in-process rate limiter and single-flight
that ``workers.runtime.build_engine(standalone=True)`` uses, and a pool of threads instead of Celery workers.

The SQLite file doubles as the judge cache (``judge_cache`` table): judging an unchanged request again against the
same file makes no provider call. ``default_cache_db()`` is ``$XDG_CACHE_HOME/dialogue-judge/gate.db`` (or
``~/.cache/dialogue-judge/gate.db``).

``run_in_process`` judges a run in a seeded random item order, in batches, and calls ``on_look`` after each batch
so a sequential test can stop the run early; the judgments left pending are then marked ``cancelled`` with the
reason ``early stop``.
"""

from __future__ import annotations

import itertools
import os
import random
import tempfile
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from dialogue_judge.gate.progress import progress_bar
from judge_api import repository
from judge_api.config import Settings
from judge_api.db import make_engine, session_scope
from judge_api.models import Judgment, Run
from judge_api.planning import plan_run, run_rubrics
from judge_api.schemas import RunCreate, RunSummary

EARLY_STOP = "early stop"
TOO_MANY_FAILURES = "stopped: too many failed or unparseable judgments"
FAILED_STATUSES = ("failed", "unparseable")


def default_cache_db() -> Path:
    """Where the standalone gate keeps its database (and therefore its judge cache) by default."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "dialogue-judge" / "gate.db"


def seeded_order(item_ids: Sequence[str], seed: int) -> list[str]:
    """The items in a random order that depends only on the seed and the set of ids."""
    order = sorted(item_ids)
    random.Random(f"dialogue-judge-gate:{seed}").shuffle(order)
    return order


def _sqlite_url(database: str | Path) -> str:
    text = str(database)
    if "://" in text:
        return text
    path = Path(text).expanduser().resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{path}"


def _migrate(engine: Any, url: str) -> None:
    """Bring the database to the newest schema with this runner's own engine (see ``judge_api.migrate``)."""
    from alembic import command

    from judge_api.migrate import alembic_config

    with engine.begin() as connection:
        config = alembic_config(url)
        config.attributes["connection"] = connection
        command.upgrade(config, "head")


@dataclass
class BatchResult:
    """What one call of ``InProcessRunner.judge`` did."""

    statuses: Counter[str] = field(default_factory=Counter)
    aborted: bool = False

    @property
    def judged(self) -> int:
        return sum(n for status, n in self.statuses.items() if status not in ("skipped", "lost-claim"))


class InProcessRunner:
    """A database plus a judge engine and a thread pool: create runs, judge (some of) their items, read results.

    ``database`` is a SQLite file path or an SQLAlchemy URL; ``None`` uses a temporary directory deleted by
    ``close()``. The runner never touches the process-wide settings or engines (it is safe inside a test session
    that has its own ``DJ_HOME``).
    """

    def __init__(
        self, database: str | Path | None = None, *, workers: int = 8, settings: Settings | None = None
    ) -> None:
        if workers < 1:
            raise ValueError("workers must be at least 1")
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if database is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="dialogue-judge-gate-")
            database = Path(self._tmp.name) / "gate.db"
        self.url = _sqlite_url(database)
        home = Path(self._tmp.name) if self._tmp else Path(self.url.removeprefix("sqlite:///")).parent
        self.settings = settings or Settings(home=home, database_url=self.url, redis_url=None)  # type: ignore[call-arg]
        self.workers = workers
        self._engine = make_engine(self.url)
        _migrate(self._engine, self.url)
        self.sessions: sessionmaker[Session] = sessionmaker(bind=self._engine, expire_on_commit=False)
        self._judge_engine: Any = None

    # -- lifecycle ----------------------------------------------------------------------------------------------

    def close(self) -> None:
        self._engine.dispose()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> InProcessRunner:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def session(self) -> AbstractContextManager[Session]:
        return session_scope(self.sessions)

    @property
    def judge_engine(self) -> Any:
        """The same engine ``build_engine(standalone=True)`` builds, bound to this runner's database."""
        if self._judge_engine is None:
            from judge_api.rubrics import get_registry
            from workers.execute import JudgeEngine
            from workers.ratelimit import LocalRateLimiter
            from workers.singleflight import LocalSingleFlight

            self._judge_engine = JudgeEngine(
                self.settings, self.sessions, get_registry(), LocalRateLimiter(), LocalSingleFlight()
            )
        return self._judge_engine

    # -- runs -----------------------------------------------------------------------------------------------------

    def create_run(self, request: RunCreate) -> str:
        """Plan and store a run (all its judgments pending); raises ``judge_api.planning.PlanError``."""
        from judge_api.rubrics import get_registry

        registry = get_registry()
        planned = plan_run(request, registry, self.settings.max_judgments_per_run)
        with self.session() as session:
            run = repository.create_run(session, request, planned, rubrics=run_rubrics(request, registry))
            return run.id

    def pending_ids(self, run_id: str, item_ids: Sequence[str] | None = None) -> list[int]:
        """Pending judgments of the run (of these items, in the items' order)."""
        with self.session() as session:
            query = select(Judgment.id, Judgment.item_key).where(
                Judgment.run_id == run_id, Judgment.status == "pending"
            )
            if item_ids is not None:
                query = query.where(Judgment.item_key.in_(list(item_ids)))
            rows = session.execute(query.order_by(Judgment.id)).all()
        if item_ids is None:
            return [r[0] for r in rows]
        position = {item: index for index, item in enumerate(item_ids)}
        return [r[0] for r in sorted(rows, key=lambda r: (position[r[1]], r[0]))]

    def judge(
        self,
        run_id: str,
        item_ids: Sequence[str] | None = None,
        *,
        abort_after_failures: int | None = None,
        failures_before: int = 0,
        on_done: Callable[[str], None] | None = None,
    ) -> BatchResult:
        """Judge the pending judgments of these items (all items when None) with ``workers`` threads.

        ``abort_after_failures``: stop taking new judgments once more than this many (counting
        ``failures_before``) ended ``failed`` or ``unparseable``; the rest stay pending.
        """
        ids = self.pending_ids(run_id, item_ids)
        result = BatchResult()
        if not ids:
            return result
        engine = self.judge_engine
        lock = threading.Lock()
        stop = threading.Event()
        queue = iter(ids)
        errors: list[BaseException] = []

        def work() -> None:
            while not stop.is_set():
                with lock:
                    judgment_id = next(queue, None)
                if judgment_id is None:
                    return
                try:
                    status = engine.judge(judgment_id)
                except BaseException as exc:  # a database error: stop everything, re-raised below
                    with lock:
                        errors.append(exc)
                    stop.set()
                    return
                with lock:
                    result.statuses[status] += 1
                    failures = failures_before + sum(result.statuses[s] for s in FAILED_STATUSES)
                    if abort_after_failures is not None and failures > abort_after_failures:
                        result.aborted = True
                        stop.set()
                    if on_done is not None:
                        on_done(status)

        threads = [
            threading.Thread(target=work, name=f"dj-judge-{i}", daemon=True) for i in range(min(self.workers, len(ids)))
        ]
        for thread in threads:
            thread.start()
        try:
            for thread in threads:
                while thread.is_alive():
                    thread.join(0.2)
        except KeyboardInterrupt:
            stop.set()
            for thread in threads:
                thread.join()
            raise
        if errors:
            raise errors[0]
        return result

    def cancel_pending(self, run_id: str, reason: str = EARLY_STOP) -> int:
        with self.session() as session:
            return repository.cancel_pending(session, run_id, reason)

    def budget_exhausted(self, run_id: str) -> bool:
        with self.session() as session:
            run = session.get(Run, run_id)
            return run is not None and run.budget_exhausted_at is not None

    def judgments(self, run_id: str) -> list[dict[str, Any]]:
        """Every judgment of the run as the API's ``JudgmentOut`` dicts."""
        with self.session() as session:
            total = int(session.scalar(select(func.count(Judgment.id)).where(Judgment.run_id == run_id)) or 0)
            _, rows, _ = repository.list_judgments(session, run_id, 0, max(total, 1))
        return [row.model_dump(mode="json") for row in rows]

    def items(self, run_id: str) -> list[dict[str, Any]]:
        with self.session() as session:
            return repository.get_items(session, run_id)

    def summary(self, run_id: str) -> RunSummary | None:
        with self.session() as session:
            run = repository.get_run(session, run_id)
            return None if run is None else repository.summarize_runs(session, [run])[0]

    def failures(self, run_id: str) -> int:
        with self.session() as session:
            return int(
                session.scalar(
                    select(func.count(Judgment.id)).where(
                        Judgment.run_id == run_id, Judgment.status.in_(FAILED_STATUSES)
                    )
                )
                or 0
            )


@dataclass
class LookContext:
    """What ``on_look`` sees after each batch."""

    runner: InProcessRunner
    run_id: str
    look: int
    n_looks: int
    item_ids: list[str]
    """The items judged so far, in judging order."""
    final: bool
    """Nothing more will be judged after this look (last batch, budget reached or too many failures)."""
    budget_exhausted: bool = False
    aborted: bool = False
    """The batch stopped early because more than ``abort_after_failures`` judgments failed."""

    def judgments(self) -> list[dict[str, Any]]:
        return self.runner.judgments(self.run_id)


def run_in_process(
    request: RunCreate,
    *,
    runner: InProcessRunner | None = None,
    database: str | Path | None = None,
    workers: int = 8,
    order_seed: int = 0,
    looks: Sequence[int] | None = None,
    on_look: Callable[[LookContext], bool] | None = None,
    progress: bool | None = None,
    abort_after_failures: int | None = None,
) -> str:
    """Store ``request`` as a run and judge it in this process; returns the run id.

    Items are judged in ``seeded_order(ids, order_seed)``, in batches ending at the cumulative item counts in
    ``looks`` (default: one batch). After each batch ``on_look(context)`` may return True to stop; the pending
    judgments are then cancelled with the reason ``early stop``. ``runner`` (or ``database``, default
    ``default_cache_db()``) says where the run is stored; with a runner of its own the function closes it before
    returning, so read the results with ``InProcessRunner(database)``.
    """
    own = runner is None
    active = runner if runner is not None else InProcessRunner(database or default_cache_db(), workers=workers)
    try:
        run_id = active.create_run(request)
        order = seeded_order([item.id for item in request.items], order_seed)
        schedule = list(looks) if looks else [len(order)]
        if schedule[-1] != len(order) or any(b <= a for a, b in itertools.pairwise(schedule)):
            raise ValueError(f"looks must increase and end at the number of items ({len(order)})")
        total = len(active.pending_ids(run_id))
        failures = 0
        reason: str | None = None
        with progress_bar(progress) as bar:
            task = bar.add_task(f"judging {run_id}", total=total, detail="")
            counts: Counter[str] = Counter()

            def advance(status: str) -> None:
                counts[status] += 1
                bar.update(
                    task,
                    advance=1,
                    detail=f"look {look}/{len(schedule)} · done {counts['done']} · "
                    f"failed {counts['failed'] + counts['unparseable']}",
                )

            start = 0
            for look, end in enumerate(schedule, start=1):
                batch = active.judge(
                    run_id,
                    order[start:end],
                    abort_after_failures=abort_after_failures,
                    failures_before=failures,
                    on_done=advance,
                )
                failures += sum(batch.statuses[s] for s in FAILED_STATUSES)
                budget = active.budget_exhausted(run_id)
                final = look == len(schedule) or budget or batch.aborted
                context = LookContext(active, run_id, look, len(schedule), order[:end], final, budget, batch.aborted)
                start = end
                stop = bool(on_look(context)) if on_look is not None else False
                if batch.aborted:
                    reason = TOO_MANY_FAILURES
                elif stop and look < len(schedule):
                    reason = EARLY_STOP
                if final or stop:
                    break
            if reason is not None:
                cancelled = active.cancel_pending(run_id, reason)
                bar.update(task, total=total - cancelled)
        return run_id
    finally:
        if own:
            active.close()
