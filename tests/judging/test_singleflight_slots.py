"""A judgment that waits for another's identical request never waits on a call slot (the stop-31 CI hang of
``test_api_sigkill_mid_submit``): a batch takes its misses' single-flight locks before its judgments reach the call
slots, so a second batch of the same prompts, dispatched in between, could fill every slot with judgments waiting
for locks whose holders sat in the pool's queue behind them. The holders' keeper renewed those locks for ever: the
worker stayed alive with its judgments ``running`` and nothing done."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pytest
import redis

from judge_api.config import Settings
from judge_api.db import session_scope
from judge_api.models import Judgment
from judge_api.repository.claims import JudgmentTask
from workers.dispatch import dispatch
from workers.keywait import HeldKeyWaiter
from workers.singleflight import KeyHeld, LocalSingleFlight, RedisSingleFlight
from workers.stages import Loaded

from .harness import Harness, dialogue_item, run_threads


def _two_runs_of_the_same_prompts(harness: Harness) -> tuple[list[int], list[int]]:
    request: dict[str, Any] = {
        "items": [dialogue_item(f"it{i}", {"s": f"Rex is {i + 2}. <<q={50 + i}>>"}) for i in range(3)],
        "rubrics": ["rsum-single"],
        "judges": [harness.judge("openai-compatible")],
        "aspects": ["consistency"],
    }
    first, second = harness.create(**request), harness.create(**request)
    return harness.pending(first), harness.pending(second)


def test_a_batch_whose_locks_are_held_in_its_own_process_waits_off_the_call_slots(
    harness: Harness, redis_url: str
) -> None:
    redis.Redis.from_url(redis_url).flushdb()
    engine = harness.build(redis_url=redis_url, DJ_CALL_CONCURRENCY="2")
    assert isinstance(engine.flight, RedisSingleFlight)
    harness.sim.set_script({"latency": 0.1})
    holder_ids, waiter_ids = _two_runs_of_the_same_prompts(harness)
    holder_locked, waiter_on_slots = threading.Event(), threading.Event()
    real_take_locks, real_judge_claimed = engine._take_locks, engine._judge_claimed
    slots_entered: list[int] = []

    def take_locks(mine: Any) -> None:
        if mine[0].judgment.id in waiter_ids:
            assert holder_locked.wait(10)
            real_take_locks(mine)
            return
        real_take_locks(mine)  # the holder: its locks taken, its judgments not yet on a slot ...
        holder_locked.set()
        waiter_on_slots.wait(5)  # ... while the other batch reaches the slots first

    def judge_claimed(loaded: Any, token: str) -> Any:
        slots_entered.append(loaded.judgment.id)
        if len([i for i in slots_entered if i in waiter_ids]) >= 2:
            waiter_on_slots.set()
        return real_judge_claimed(loaded, token)

    engine._take_locks = take_locks  # type: ignore[method-assign]
    engine._judge_claimed = judge_claimed  # type: ignore[method-assign]
    outcome: list[Any] = []
    worker = threading.Thread(
        target=lambda: outcome.append(
            run_threads([lambda: engine.judge_many(holder_ids), lambda: engine.judge_many(waiter_ids)], threads=2)
        ),
        daemon=True,
    )
    worker.start()
    worker.join(30)
    if worker.is_alive():  # the old hang: unstick it (the locks gone, the waiters go on) so the session can end
        redis.Redis.from_url(redis_url).flushdb()
        worker.join(30)
        pytest.fail("the two batches did not finish within 30 s: waiters held every call slot")
    assert waiter_on_slots.is_set()  # the scenario happened: the waiting batch was on the slots first
    assert outcome == [[{"done": 3}, {"done": 3}]]
    assert harness.calls() == 3  # each prompt paid once; the waiters took the holder's replies
    with session_scope() as session:
        rows = [session.get(Judgment, judgment_id) for judgment_id in holder_ids + waiter_ids]
    assert [(row.provider_calls, row.cached) for row in rows if row] == [(1, False)] * 3 + [(0, True)] * 3


@pytest.mark.parametrize("flight_kind", ["local", "redis"])
def test_run_without_waiting_raises_key_held_and_reports_held_keys(
    flight_kind: str, request: pytest.FixtureRequest
) -> None:
    flight: LocalSingleFlight | RedisSingleFlight
    if flight_kind == "redis":
        client = redis.Redis.from_url(request.getfixturevalue("redis_url"))
        client.flushdb()
        flight = RedisSingleFlight(client)
    else:
        flight = LocalSingleFlight()
    lease = flight.acquire("k", lease_s=60)
    assert lease is not None
    computed: list[str] = []

    def compute() -> str:
        computed.append("paid")
        return "reply"

    with pytest.raises(KeyHeld) as held:
        flight.run("k", lambda: None, compute, lease_s=60, wait=False)
    assert held.value.key == "k" and computed == []
    assert flight.held(["k", "other"]) == [True, False]
    # a cache entry found first is returned, held or not
    assert flight.run("k", lambda: "cached", lambda: "paid", lease_s=60, wait=False) == ("cached", False)
    flight.release([lease], committed=False)
    assert flight.held(["k"]) == [False]
    assert flight.run("k", lambda: None, lambda: "paid", lease_s=60, wait=False) == ("paid", True)


def _parked_dispatch(
    flight: LocalSingleFlight,
) -> tuple[ThreadPoolExecutor, HeldKeyWaiter, Future[Any], list[str]]:
    """One judgment dispatched while its key is held: it gives its slot back and is parked."""
    pool, waiter = ThreadPoolExecutor(1), HeldKeyWaiter(flight, poll_s=0.01)
    task = JudgmentTask(
        1, "run", "running", "rsum-single", "v", "consistency", "j", {}, "a", None, None, 0, {}, None, "p"
    )
    attempts: list[str] = []

    def ask(loaded: Loaded, token: str) -> Any:
        assert loaded.park_when_held
        attempts.append(token)
        if flight.held(["k"])[0]:
            raise KeyHeld("k")
        return "asked"

    [(_, future)] = dispatch(pool, [Loaded(task)], "tok", ask, Settings(), waiter)
    deadline = time.monotonic() + 5
    while waiter.parked() == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert waiter.parked() == 1 and not future.done()
    return pool, waiter, future, attempts


def test_a_parked_judgment_goes_back_to_the_slots_once_the_key_is_let_go() -> None:
    flight = LocalSingleFlight()
    lease = flight.acquire("k", lease_s=60)
    assert lease is not None
    pool, waiter, future, attempts = _parked_dispatch(flight)
    time.sleep(0.1)
    assert not future.done() and attempts == ["tok"]  # parked, not spinning on the slot
    flight.release([lease], committed=True)
    assert future.result(timeout=5) == "asked"
    assert attempts == ["tok", "tok"] and waiter.parked() == 0
    pool.shutdown()


def test_a_parked_judgment_whose_call_pool_is_gone_fails_instead_of_hanging() -> None:
    flight = LocalSingleFlight()
    lease = flight.acquire("k", lease_s=60)
    assert lease is not None
    pool, _, future, _ = _parked_dispatch(flight)
    pool.shutdown(wait=True)  # the worker stopping
    flight.release([lease], committed=False)
    assert isinstance(future.exception(timeout=5), RuntimeError)
