"""Review r39g: the Compare routes (`/score-deltas`, `/worse-items`) refuse what they do not know, never hold a pooled
connection while waiting, compute one comparison at a time, and bound the bootstrap's memory."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from judge_api.routers import comparisons
from tests.api.conftest import Api
from tests.api.test_comparisons import _judge, _submit


@pytest.fixture
def pair(api: Api) -> tuple[str, str]:
    base, cand = _submit(api, range(0, 4)), _submit(api, range(0, 4))
    _judge(base, 1)
    _judge(cand, 2)
    return base, cand


@pytest.mark.parametrize("route", ["score-deltas", "worse-items"])
@pytest.mark.parametrize("typo", ["n_boots", "confidence", "limt", "baseline_id"])
def test_an_unknown_query_parameter_is_a_422_naming_it(api: Api, pair: tuple[str, str], route: str, typo: str) -> None:
    """Unknown query params -> 422 naming the field (as /item-scores and /order-outcomes do): a typo such as
    ``n_boots=5000`` was answered with the defaults."""
    base, cand = pair
    response = api.client.get(f"/v1/runs/{cand}/{route}", params={"baseline": base, typo: "1"})
    assert response.status_code == 422, (typo, response.status_code)
    assert response.json()["detail"][0]["loc"] == ["query", typo]


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "0.5", "1"])
def test_ci_out_of_range_or_not_a_number_is_a_422(api: Api, pair: tuple[str, str], value: str) -> None:
    base, cand = pair
    response = api.client.get(f"/v1/runs/{cand}/score-deltas", params={"baseline": base, "ci": value})
    assert response.status_code == 422, (value, response.text)
    assert response.json()["detail"][0]["loc"] == ["query", "ci"]


def test_another_projects_baseline_answers_exactly_as_a_missing_one(secured: Api) -> None:
    """Promise: never leak existence: the body for another project's run is the body for an id nobody has."""
    mine = _submit(secured, range(0, 2), key="alpha")
    theirs = _submit(secured, range(0, 2), key="beta")
    ghost = theirs[:-1] + ("0" if theirs[-1] != "0" else "1")
    read = secured.as_key("alpha-read")
    for route in ("score-deltas", "worse-items"):
        a = secured.client.get(f"/v1/runs/{mine}/{route}", params={"baseline": theirs}, headers=read)
        b = secured.client.get(f"/v1/runs/{mine}/{route}", params={"baseline": ghost}, headers=read)
        assert a.status_code == b.status_code == 404
        assert a.json()["detail"].replace(theirs, "X") == b.json()["detail"].replace(ghost, "X")
        secured.create_key("alpha", ["submit"], "alpha-submit")
        no_read = secured.client.get(
            f"/v1/runs/{mine}/{route}", params={"baseline": mine}, headers=secured.as_key("alpha-submit")
        )
        assert no_read.status_code == 403, no_read.text


def test_a_failed_computation_leaves_one_computation_at_a_time() -> None:
    """The in-flight gate neither deadlocks nor leaks after an exception in compute, and a key is computed once at a
    time: A fails while B waits on the key's gate; B computes again, and C and D, arriving meanwhile, wait on that
    same gate (it was dropped by A before: C computed beside B)."""
    key = ("r39g", time.monotonic())
    running = 0
    peak = 0
    lock = threading.Lock()
    release = {name: threading.Event() for name in "ABCD"}

    def compute(name: str) -> str:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        try:
            release[name].wait(5)
            if name == "A":
                raise RuntimeError("compute failed")
            return name
        finally:
            with lock:
                running -= 1

    out: dict[str, Any] = {}

    def call(name: str) -> None:
        try:
            out[name] = comparisons._cached(key, lambda: compute(name))
        except RuntimeError as exc:
            out[name] = exc

    threads = {name: threading.Thread(target=call, args=(name,)) for name in "ABCD"}
    threads["A"].start()
    time.sleep(0.1)
    threads["B"].start()  # waits on A's gate
    time.sleep(0.1)
    release["A"].set()  # A fails; B takes the gate and computes
    time.sleep(0.1)
    threads["C"].start()  # no value, no gate in _COMPUTING: C computes beside B
    time.sleep(0.1)
    release["B"].set()  # B's finally pops C's gate
    time.sleep(0.1)
    threads["D"].start()
    time.sleep(0.1)
    release["C"].set()
    release["D"].set()
    for thread in threads.values():
        thread.join(5)
    assert not any(t.is_alive() for t in threads.values())  # no deadlock
    assert isinstance(out["A"], RuntimeError) and key not in comparisons._COMPUTING  # no leak
    assert peak == 1, f"{peak} computations of one key at once"


def test_requests_waiting_for_a_comparison_hold_no_database_connection(
    api: Api, pair: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The in-flight gate cannot starve the process: a request waiting on it holds no pooled connection (each kept
    its session's connection for the whole compute, 25-30 s cold at 1M: a page re-drawn ~30 times, PostgreSQL's pool
    of 10+20, left every other route of the process waiting pool_timeout, then a 500)."""
    from judge_api.db import get_engine
    from judge_api.stats import compare

    base, cand = pair
    comparisons.clear_cache()
    started, release = threading.Event(), threading.Event()
    real = compare.score_deltas

    def slow(*args: Any, **kwargs: Any) -> Any:
        started.set()
        release.wait(10)
        return real(*args, **kwargs)

    monkeypatch.setattr(compare, "score_deltas", slow)
    codes: list[int] = []

    def get() -> None:
        r = api.client.get(f"/v1/runs/{cand}/score-deltas", params={"baseline": base, "n_boot": 10, "seed": 99})
        codes.append(r.status_code)

    threads = [threading.Thread(target=get) for _ in range(6)]
    threads[0].start()
    assert started.wait(10)
    for thread in threads[1:]:
        thread.start()
    time.sleep(1.0)  # the five others are parked on the gate
    held = get_engine().pool.checkedout()  # type: ignore[attr-defined]
    release.set()
    for thread in threads:
        thread.join(20)
    assert codes == [200] * 6
    assert held <= 1, f"{held} pooled connections held while one comparison computes"


def test_the_bootstrap_never_holds_the_whole_index_matrix() -> None:
    """The memory of a comparison is bounded by ``_GATHER_CELLS``, not ``n_boot * n``: ``rng.integers(size=(n_boot,
    n))`` was allocated whole per (system, aspect) (n_boot=5000, allowed to any read key, on 200k shared items: 8 GB).
    Drawing the rows block by block gives the same draws, so the figures do not change (test_comparisons)."""
    import tracemalloc

    import numpy as np
    import pandas as pd

    from judge_api.stats import compare

    n = 4000
    rng = np.random.default_rng(0)
    items = [f"i{k:06d}" for k in range(n)]
    base = pd.DataFrame({"item_id": items, "system": "a", "aspect": "x", "score": rng.random(n)})
    cand = base.assign(score=rng.random(n))
    tracemalloc.start()
    try:
        compare.score_deltas(base, cand, n_boot=5000, seed=0)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    bound = 3 * compare._GATHER_CELLS * 8 + 50 * n * 8  # a block of indices and of gathered scores, and the columns
    assert peak < bound, f"peak {peak / 1e6:.0f} MB for n={n}, n_boot=5000 (bound {bound / 1e6:.0f} MB)"


def test_a_run_without_verdicts_compares_to_nothing(api: Api, pair: tuple[str, str]) -> None:
    """Held: a run with no done score yet (every judgment pending) is no 500, just no rows, on either side."""
    base, _ = pair
    empty = _submit(api, range(0, 4))
    for cand, baseline in ((empty, base), (base, empty)):
        deltas = api.client.get(f"/v1/runs/{cand}/score-deltas", params={"baseline": baseline})
        worse = api.client.get(f"/v1/runs/{cand}/worse-items", params={"baseline": baseline, "offset": 10**9})
        assert deltas.status_code == 200 and deltas.json()["items"] == []
        assert worse.status_code == 200 and worse.json()["total"] == 0 and worse.json()["items"] == []
