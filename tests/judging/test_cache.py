"""The content-addressed judge cache: identical re-runs make zero provider calls, a changed rubric or judge misses,
concurrent identical requests make one call (in-process and across engines through Redis), and the cache lives in
the database, so it survives a Redis flush."""

from __future__ import annotations

import functools
import shutil
from pathlib import Path
from typing import Any

import pytest
import redis

from judge_api.rubrics import get_registry
from workers.clients import JudgeRequest
from workers.judgecache import cache_key
from workers.singleflight import LocalSingleFlight, RedisSingleFlight

from .harness import Harness, Timer, dialogue_item, run_threads

REPO = Path(__file__).resolve().parents[2]
# the key of test_cache_key_of_the_default_project_is_the_unscoped_key_of_old, computed before the cache was scoped
PINNED_KEY = "d1ba9c22bb28ccde84bc0f152178b4821d23368f978357a0c51d864f2bc44649"


def items(n: int = 3) -> list[dict]:
    return [
        dialogue_item(f"i{k}", {"a": f"Rex is {k} years old. <<q={50 + k}>>", "b": f"Cat {k}. <<q={20 + k}>>"})
        for k in range(n)
    ]


def test_identical_rerun_makes_zero_calls_and_is_fast(harness: Harness) -> None:
    harness.sim.set_script({"latency": 0.1})
    request: dict[str, Any] = {
        "items": items(),
        "rubrics": ["rsum-single"],
        "judges": [harness.judge("openai-compatible")],
        "aspects": ["consistency", "coherence"],
    }
    with Timer() as first_timer:
        first = harness.run(**request)
    assert harness.calls() == 12
    harness.sim.reset()
    with Timer() as second_timer:
        second = harness.run(**request)
    assert harness.calls() == 0
    rows = harness.rows(second)
    assert all(r.cached and r.provider_calls == 0 and r.status == "done" and r.cost_usd == 0 for r in rows)
    assert [r.score for r in rows] == [r.score for r in harness.rows(first)]
    assert [r.raw_output for r in rows] == [r.raw_output for r in harness.rows(first)]
    assert second_timer.elapsed < first_timer.elapsed / 2 and second_timer.elapsed < 1.5
    summary = harness.summary(second)
    assert summary.cached == 12 and summary.provider_calls == 0


def test_a_changed_rubric_or_judge_misses(harness: Harness, tmp_path: Path) -> None:
    user_rubrics = tmp_path / "rubrics"
    user_rubrics.mkdir()
    harness.build(DJ_RUBRICS_PATH=str(user_rubrics))
    request: dict[str, Any] = {
        "items": items(1),
        "rubrics": ["rsum-single"],
        "judges": [harness.judge("openai-compatible")],
        "aspects": ["consistency"],
    }
    first = harness.run(**request)
    assert harness.calls() == 2

    # another judge model: a miss
    harness.run(**{**request, "judges": [harness.judge("openai-compatible", "sim-judge-2")]})
    assert harness.calls() == 4
    # another judge parameter: a miss
    harness.run(**{**request, "options": {"max_tokens": 300}})
    assert harness.calls() == 6

    # the same rubric edited (a copy in DJ_RUBRICS_PATH overrides the shipped one): a new version, a miss
    shutil.copytree(REPO / "rubrics" / "rsum-single", user_rubrics / "rsum-single")
    prompt = user_rubrics / "rsum-single" / "prompt.j2"
    prompt.write_text(prompt.read_text().replace("You are an impartial judge.", "You are a fair, impartial judge."))
    edited = harness.run(**request)
    assert harness.calls() == 8
    old_version, new_version = harness.rows(first)[0].rubric_version, harness.rows(edited)[0].rubric_version
    assert old_version != new_version == get_registry().get("rsum-single").version
    assert all(r.status == "done" and not r.cached for r in harness.rows(edited))
    assert "fair, impartial" in harness.sim.requests(1)[0]["body"]["messages"][0]["content"]

    # and the edited rubric's re-run hits its own entries
    harness.run(**request)
    assert harness.calls() == 8


def test_cache_key_covers_version_prompt_judge_parameters_and_sample() -> None:
    from judge_api.judges import parse_judge

    rubric = get_registry(refresh=True).get("rsum-single")
    judge = parse_judge("openai:gpt-4o")
    request = JudgeRequest([{"role": "user", "content": "p"}], 0.0, 512, 0)
    base = cache_key(rubric, judge, request, 0, 0)
    assert cache_key(rubric, judge, JudgeRequest([{"role": "user", "content": "p"}], 0.0, 512, 0), 0, 0) == base
    variants = [
        cache_key(rubric.model_copy(update={"version": "other"}), judge, request, 0, 0),
        cache_key(rubric, judge, JudgeRequest([{"role": "user", "content": "q"}], 0.0, 512, 0), 0, 0),
        cache_key(rubric, parse_judge("openai:gpt-4o-mini"), request, 0, 0),
        cache_key(rubric, judge, JudgeRequest(request.messages, 0.5, 512, 0), 0, 0),
        cache_key(rubric, judge, JudgeRequest(request.messages, 0.0, 256, 0), 0, 0),
        cache_key(rubric, judge, JudgeRequest(request.messages, 0.0, 512, 1), 0, 0),
        cache_key(rubric, judge, JudgeRequest(request.messages, 0.0, 512, 0, {"type": "object"}), 0, 0),
        cache_key(rubric, judge, request, 1, 0),
        cache_key(rubric, judge, request, 0, 1),
    ]
    assert len({base, *variants}) == len(variants) + 1


def test_cache_key_of_the_default_project_is_the_unscoped_key_of_old() -> None:
    """Scoping the cache by project (issue 14) kept the default project's (and the shared cache's) keys: the key of a
    fixed request is pinned, so an existing cache stays valid; another project's key differs."""
    from judge_api.judges import parse_judge

    rubric = get_registry(refresh=True).get("rsum-single").model_copy(update={"version": "pinned"})
    judge = parse_judge("openai:gpt-4o")
    request = JudgeRequest([{"role": "user", "content": "p"}], 0.0, 512, 0)
    unscoped = cache_key(rubric, judge, request, 0, 0)
    assert unscoped == PINNED_KEY
    assert cache_key(rubric, judge, request, 0, 0, None) == unscoped
    scoped = {cache_key(rubric, judge, request, 0, 0, project) for project in ("team-a", "team-b")}
    assert len(scoped) == 2 and unscoped not in scoped


@pytest.mark.parametrize(
    ("project", "auth", "shared", "scope"),
    [
        ("default", "false", None, None),  # the embedded default: one project, the keys of old
        ("team-a", "false", None, None),  # auth off: single-tenant, shared unless the operator says otherwise
        ("team-a", "false", "false", "team-a"),
        ("team-a", "true", None, "team-a"),  # auth on: per project by default
        ("team-a", "true", "false", "team-a"),
        ("team-a", "true", "true", None),  # the operator's opt-in: one cache for every project
        ("default", "true", None, None),  # the default project keeps its keys
    ],
)
def test_cache_scope(
    monkeypatch: pytest.MonkeyPatch, project: str, auth: str, shared: str | None, scope: str | None
) -> None:
    from judge_api.config import Settings
    from judge_api.repository.claims import JudgmentTask
    from workers.judgecache import cache_scope

    monkeypatch.setenv("DJ_AUTH", auth)
    if shared is None:
        monkeypatch.delenv("DJ_SHARED_CACHE", raising=False)
    else:
        monkeypatch.setenv("DJ_SHARED_CACHE", shared)
    task = JudgmentTask(
        1, "run", "pending", "rsum-single", "v", "consistency", "j", {}, "a", None, None, 0, {}, None, project
    )
    assert cache_scope(task, Settings()) == scope


def _identical_runs(harness: Harness, n: int) -> list[int]:
    """n runs holding the same item: n judgments with identical prompts (different rows, different runs)."""
    ids = []
    for _ in range(n):
        run_id = harness.create(
            items=[dialogue_item("same", {"s": "Rex is three. <<q=64>>"})],
            rubrics=["rsum-single"],
            judges=[harness.judge("openai-compatible")],
            aspects=["consistency"],
        )
        ids += harness.pending(run_id)
    return ids


@pytest.mark.parametrize("flight", ["local", "redis"])
def test_concurrent_identical_judgments_make_one_call(
    harness: Harness, flight: str, request: pytest.FixtureRequest
) -> None:
    if flight == "redis":
        redis_url = request.getfixturevalue("redis_url")
        engines = [harness.build(redis_url=redis_url) for _ in range(4)]  # four "workers" sharing only Redis
        assert all(isinstance(e.flight, RedisSingleFlight) for e in engines)
    else:
        engines = [harness.build()]
        assert isinstance(engines[0].flight, LocalSingleFlight)
    harness.sim.set_script({"latency": 0.5})
    ids = _identical_runs(harness, 8)
    tasks = [functools.partial(engines[k % len(engines)].judge, i) for k, i in enumerate(ids)]
    with Timer() as timer:
        assert run_threads(tasks, 8) == ["done"] * 8
    assert harness.calls() == 1
    assert harness.sim.stats()["max_in_flight"] == 1
    from judge_api.db import session_scope
    from judge_api.models import Judgment

    with session_scope() as session:
        rows = [session.get(Judgment, i) for i in ids]
    assert sorted(r.provider_calls for r in rows if r) == [0] * 7 + [1]
    assert sum(1 for r in rows if r and r.cached) == 7 and {r.score for r in rows if r} == {64.0}
    assert timer.elapsed < 3.0  # the seven waited for the one call, not for seven calls of their own


def test_cache_survives_a_redis_flush(harness: Harness, redis_url: str) -> None:
    harness.build(redis_url=redis_url)
    request: dict[str, Any] = {
        "items": items(2),
        "rubrics": ["rsum-single"],
        "judges": [harness.judge("anthropic")],
        "aspects": ["consistency"],
    }
    harness.run(**request)
    assert harness.calls() == 4
    redis.Redis.from_url(redis_url).flushdb()
    rerun = harness.run(**request)
    assert harness.calls() == 4
    assert all(r.cached for r in harness.rows(rerun))


@pytest.mark.parametrize("flight_kind", ["local", "redis"])
def test_acquire_release_hold_the_key_and_a_committed_fill_keeps_late_requests_off_the_provider(
    flight_kind: str, request: pytest.FixtureRequest
) -> None:
    flight: LocalSingleFlight | RedisSingleFlight
    if flight_kind == "redis":
        client = redis.Redis.from_url(request.getfixturevalue("redis_url"))
        client.flushdb()
        flight = RedisSingleFlight(client)
    else:
        flight = LocalSingleFlight()
    first = flight.acquire("key-a", lease_s=60)
    assert first is not None and flight.acquire("key-a", lease_s=60) is None  # held
    first.filled = True
    flight.release([first], committed=True)
    assert flight.acquire("key-a", lease_s=60) is None  # filled a moment ago: look the cache up instead
    # a call that failed (nothing filled) or a write that did not commit leaves no marker: the next may try
    failed = flight.acquire("key-b", lease_s=60)
    assert failed is not None
    flight.release([failed], committed=True)
    uncommitted = flight.acquire("key-b", lease_s=60)
    assert uncommitted is not None
    uncommitted.filled = True
    flight.release([uncommitted], committed=False)
    assert flight.acquire("key-b", lease_s=60) is not None


def test_acquire_without_redis_falls_back_to_this_process() -> None:
    flight = RedisSingleFlight(redis.Redis(port=1, socket_connect_timeout=0.2))
    lease = flight.acquire("k", lease_s=60)
    assert lease is not None and lease.local
    assert flight.acquire("k", lease_s=60) is None
    flight.release([lease], committed=False)
    assert flight.acquire("k", lease_s=60) is not None


def test_a_batch_takes_the_locks_of_its_misses_in_one_round_trip(
    harness: Harness, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 26 (service CPU): the single-flight locks of a batch's fresh misses are taken with one script call for
    the batch, not one per judgment on its call slot; a lock another worker holds still sends its judgment the slow
    way (it waits for that worker's cache entry and makes no call of its own)."""
    engine = harness.build(redis_url=redis_url)
    other = harness.build(redis_url=redis_url)  # a second "worker" sharing Redis
    assert isinstance(engine.flight, RedisSingleFlight)
    harness.sim.set_script({"latency": 0.2})
    batches: list[int] = []
    singles: list[str] = []
    real_many, real_one = engine.flight.acquire_many, engine.flight.acquire

    def acquire_many(keys: Any, lease_s: float) -> Any:
        batches.append(len(keys))
        return real_many(keys, lease_s)

    def acquire(key: str, lease_s: float) -> Any:
        singles.append(key)
        return real_one(key, lease_s)

    monkeypatch.setattr(engine.flight, "acquire_many", acquire_many)
    monkeypatch.setattr(engine.flight, "acquire", acquire)
    run_id = harness.create(
        items=items(3), rubrics=["rsum-single"], judges=[harness.judge("openai-compatible")], aspects=["consistency"]
    )
    ids = harness.pending(run_id)
    assert engine.judge_many(ids) == {"done": 6}
    assert batches == [6] and singles == []
    assert harness.calls() == 6
    # an identical request whose lock the other worker holds: no call of this worker's own, the other's reply
    harness.sim.reset()
    again = _identical_runs(harness, 2)
    held_by_other = functools.partial(other.judge, again[0])
    waiting = functools.partial(engine.judge_many, [again[1]])
    assert run_threads([held_by_other, waiting], 2) == ["done", {"done": 1}]
    assert harness.calls() == 1
