"""Cache-aware real-time dispatch (``DJ_CACHE_AWARE_DISPATCH``): which claimed judgments share a cacheable prompt
prefix (``cache_plan``, grouping by judge_api.prefixes), and their submission to the call slots with each group's
leader first (``dispatch``)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from judge_api.config import Settings
from judge_api.prefixes import CACHING_PROVIDERS, dispatch_order, plan_groups
from judge_api.pricing import load_prices
from judge_api.tokens import count_text
from workers.keywait import HeldKeyWaiter
from workers.singleflight import KeyHeld
from workers.stages import Asked, Loaded


def dispatch(
    pool: ThreadPoolExecutor,
    mine: list[Loaded],
    token: str,
    ask: Callable[[Loaded, str], Asked],
    settings: Settings,
    waiter: HeldKeyWaiter,
) -> list[tuple[Loaded, Future[Asked]]]:
    """Submit the claimed judgments to the call slots (``ask`` on each), cache-aware when
    ``DJ_CACHE_AWARE_DISPATCH`` is on: a group sharing a cacheable prefix sends its leader first and the rest once
    the leader has answered, carrying the prefix's cache key / breakpoint; everything else goes at once and fills
    the slots meanwhile. A judgment whose key another request holds gives its slot back (``KeyHeld``) and is parked
    with ``waiter`` until the key is let go, then sent again."""
    results: list[Future[Asked]] = [Future() for _ in mine]
    now, followers = cache_plan(mine, settings) if settings.cache_aware_dispatch else (list(range(len(mine))), {})

    for loaded in mine:  # on a call slot: a key held elsewhere parks the judgment off the slot
        loaded.park_when_held = True

    def send(index: int) -> None:
        try:
            future = pool.submit(ask, mine[index], token)
        except BaseException as exc:  # the pool is shut down (the worker is stopping)
            settle(index, exc)
            return
        future.add_done_callback(functools.partial(answered, index))

    def answered(index: int, done: Future[Asked]) -> None:
        error = done.exception()
        if isinstance(error, KeyHeld):
            waiter.park(error.key, functools.partial(send, index))
            return
        settle(index, error, None if error is not None else done.result())

    def settle(index: int, error: BaseException | None, asked: Asked | None = None) -> None:
        if error is not None:
            results[index].set_exception(error)
        else:
            assert asked is not None
            results[index].set_result(asked)
        for follower in followers.get(index, ()):  # a leader answered (or failed): its group goes now
            send(follower)

    for index in now:
        send(index)
    return [(loaded, results[index]) for index, loaded in enumerate(mine)]


def cache_plan(mine: list[Loaded], settings: Settings) -> tuple[list[int], dict[int, list[int]]]:
    """Which claimed judgments to send now and which after their group's leader; the members of a group with a
    cacheable prefix get it on their request (``cache_prefix``)."""
    prompts: list[list[dict[str, str]]] = []
    keys: list[Any] = []
    for index, loaded in enumerate(mine):
        ready = loaded.ready
        task = loaded.judgment
        if ready is None or ready.spec.provider not in CACHING_PROVIDERS or loaded.settled is not None:
            keys.append(("alone", index))
            prompts.append([])
            continue
        keys.append((task.run_id, task.judge, task.rubric_id, task.rubric_version, str(task.item.get("id"))))
        prompts.append(ready.request.messages)
    if all(key[0] == "alone" for key in keys):
        return list(range(len(mine))), {}
    prices = load_prices(str(settings.prices_file) if settings.prices_file else None)

    def long_enough(index: int, prefix: str) -> bool:
        ready = mine[index].ready
        assert ready is not None
        minimum = prices.min_cache_tokens(ready.spec)
        if len(prefix) >= 8 * minimum:  # no tokenizer packs 8 characters a token: long enough, uncounted
            return True
        return count_text(ready.spec, prefix) >= minimum

    groups = plan_groups(keys, prompts, long_enough)
    for group in groups:
        for index in group.members if group.prefix is not None else ():
            ready = mine[index].ready
            assert ready is not None
            ready.request = replace(ready.request, cache_prefix=group.prefix)
    return dispatch_order(groups)
