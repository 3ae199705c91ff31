"""The harness of the judging tests: the in-process judge engine (workers.runtime.build_engine) on a temporary SQLite
database, talking over HTTP through the official SDKs to the loopback judge simulator."""

from __future__ import annotations

import contextlib
import functools
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis
from sqlalchemy import select

from dialogue_judge.testing import TcpProxy
from judge_api import planning, repository
from judge_api.config import reset_settings_cache
from judge_api.db import session_scope
from judge_api.models import Judgment, Run
from judge_api.repository import claims
from judge_api.rubrics import get_registry
from judge_api.schemas import RunCreate, RunSummary
from judge_simulator.process import SimulatorProcess
from workers.execute import JudgeEngine
from workers.runtime import build_engine
from workers.stash import RedisReplyStash

ANTHROPIC_KEY = "sk-ant-test-anthropic-0000"
OPENAI_KEY = "sk-test-openai-0000"


def dialogue_item(item_id: str, candidates: dict[str, str], **extra: Any) -> dict[str, Any]:
    """A small multi-session item; candidates carry ``<<q=NN>>`` markers the simulator scores them by."""
    return {
        "id": item_id,
        "dialogue": [
            {"speaker": "user", "text": "I adopted a dog called Rex last spring.", "session": 1},
            {"speaker": "bot", "text": "How lovely! What breed is he?", "session": 1},
            {"speaker": "user", "text": "A beagle. Do you remember my dog's name?", "session": 2},
        ],
        "persona": {"user": ["I have a beagle called Rex."], "bot": ["I like animals."]},
        "candidates": candidates,
        **extra,
    }


@dataclass
class Harness:
    sim: SimulatorProcess
    monkeypatch: pytest.MonkeyPatch
    engines: list[JudgeEngine] = field(default_factory=list)

    # -- judges ----------------------------------------------------------------------------------------------
    def judge(self, provider: str, model: str | None = None) -> str:
        if provider == "openai-compatible":
            return f"openai-compatible:{model or 'sim-judge'}@{self.sim.base_url}"
        if provider == "anthropic":
            return f"anthropic:{model or 'claude-sonnet-4-5'}"
        if provider == "openai":
            return f"openai:{model or 'gpt-4o'}"
        raise ValueError(provider)

    # -- engine ----------------------------------------------------------------------------------------------
    def build(self, redis_url: str | None = None, **env: str) -> JudgeEngine:
        """A fresh engine after applying ``env`` (DJ_* settings); Redis-backed when ``redis_url`` is given."""
        for name, value in env.items():
            self.monkeypatch.setenv(name, value)
        if redis_url:
            self.monkeypatch.setenv("REDIS_URL", redis_url)
        else:
            self.monkeypatch.delenv("REDIS_URL", raising=False)
        reset_settings_cache()
        engine = build_engine(standalone=redis_url is None)
        self.engines.append(engine)
        return engine

    @property
    def engine(self) -> JudgeEngine:
        return self.engines[-1] if self.engines else self.build()

    # -- runs ------------------------------------------------------------------------------------------------
    def create(self, **request: Any) -> str:
        assert self.engine is not None  # building the first engine migrates the database
        req = RunCreate.model_validate(request)
        registry = get_registry()
        planned = planning.plan_run(req, registry, 1_000_000)
        with session_scope() as session:
            return repository.create_run(session, req, planned, rubrics=planning.run_rubrics(req, registry)).id

    def pending(self, run_id: str) -> list[int]:
        with session_scope() as session:
            return claims.pending_judgment_ids(session, run_id)

    def judge_all(self, run_id: str, threads: int = 1, engine: JudgeEngine | None = None) -> list[str]:
        engine = engine or self.engine
        ids = self.pending(run_id)
        if threads <= 1:
            return [engine.judge(i) for i in ids]
        return run_threads([functools.partial(engine.judge, i) for i in ids], threads)

    def run(self, threads: int = 1, **request: Any) -> str:
        run_id = self.create(**request)
        self.judge_all(run_id, threads)
        return run_id

    def rows(self, run_id: str) -> list[Judgment]:
        with session_scope() as session:
            return list(session.scalars(select(Judgment).where(Judgment.run_id == run_id).order_by(Judgment.id)))

    def summary(self, run_id: str) -> RunSummary:
        with session_scope() as session:
            run = session.get(Run, run_id)
            assert run is not None
            return repository.summarize_runs(session, [run])[0]

    def calls(self) -> int:
        return int(self.sim.stats()["total_calls"])


def run_threads(tasks: Sequence[Callable[[], Any]], threads: int) -> list[Any]:
    """Run the tasks on ``threads`` threads that start together; results in task order."""
    results: list[Any] = [None] * len(tasks)
    errors: list[BaseException] = []
    barrier = threading.Barrier(min(threads, len(tasks)))
    queue = list(enumerate(tasks))
    lock = threading.Lock()

    def worker() -> None:
        with contextlib.suppress(threading.BrokenBarrierError):
            barrier.wait(10)
        while True:
            with lock:
                if not queue:
                    return
                index, task = queue.pop(0)
            try:
                results[index] = task()
            except BaseException as exc:  # re-raised in the test thread
                errors.append(exc)

    pool = [threading.Thread(target=worker) for _ in range(min(threads, len(tasks)))]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join(120)
    if errors:
        raise errors[0]
    return results


class Timer:
    def __enter__(self) -> Timer:
        self.start = time.perf_counter()
        return self

    def __exit__(self, *_: object) -> None:
        self.elapsed = time.perf_counter() - self.start


def proxied_stash(proxy: TcpProxy) -> RedisReplyStash:
    """A Redis reply stash reached through ``proxy`` (a test cuts Redis off with ``proxy.stop()``)."""
    client = redis.Redis(host="127.0.0.1", port=proxy.port, socket_timeout=2, socket_connect_timeout=2)
    return RedisReplyStash(client)
