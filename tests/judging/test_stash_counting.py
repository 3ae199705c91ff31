"""A stashed reply's calls are counted once (issue 28.6), also when the claim that paid for it loses its judgment
while Redis cannot be reached, and when it gives its stash up only after the new taker's verdict is committed.

Worker A pays for a judgment's reply and stashes it; A's claim lapses and claim B takes the judgment over. B either
takes A's stashed reply over (B records the calls with its verdict) or paid for its own call (A's calls are A's to
record). A's write is then refused, and A asks the stash whether the calls are still its own to count. Redis sits
behind a loopback TCP proxy, so the test can make it unreachable without losing its data."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from sqlalchemy import select, update

from dialogue_judge.testing import OwnRedis, TcpProxy
from judge_api.db import get_engine, session_scope
from judge_api.models import Judgment, utcnow
from judge_api.repository import claims
from workers.clients import JudgeReply
from workers.singleflight import LocalSingleFlight
from workers.stash import LocalReplyStash, RedisReplyStash, ReplyStash
from workers.writer import VerdictWrite, VerdictWriter

from .harness import Harness, dialogue_item, proxied_stash

REPLY = JudgeReply("Rating: [[70]]", "stop", 10, 5, 300.0, None, None)


@pytest.fixture
def db_harness(harness: Harness, db_url: str) -> Iterator[Harness]:
    harness.monkeypatch.setenv("DATABASE_URL", db_url)
    harness.build()
    yield harness


def one_judgment(harness: Harness) -> int:
    run_id = harness.create(
        items=[dialogue_item("s0", {"a": "Rex <<q=70>>"})],
        rubrics=["rsum-single"],
        judges=[harness.judge("openai-compatible")],
        aspects=["consistency"],
    )
    ids = harness.pending(run_id)
    assert len(ids) == 1
    return ids[0]


def take_over(judgment_id: int) -> tuple[str, str]:
    """Claim A, let its lease lapse, claim B: (token A, token B)."""
    token_a, _ = claims.claim_many(get_engine(), [judgment_id], lease_s=600)
    with session_scope() as session:
        session.execute(
            update(Judgment).where(Judgment.id == judgment_id).values(claimed_at=utcnow().replace(year=2000))
        )
    token_b, taken = claims.claim_many(get_engine(), [judgment_id], lease_s=600)
    assert taken == {judgment_id}
    return token_a, token_b


def verdict(score: float, calls: int) -> dict[str, Any]:
    return {"status": "done", "score": score, "provider_calls": calls, "attempts": calls, "cost_usd": 0.25 * calls}


def recorded_calls(judgment_id: int) -> int:
    with session_scope() as session:
        row = session.execute(select(Judgment).where(Judgment.id == judgment_id)).scalar_one()
    return int(row.provider_calls or 0)


def test_release_lost_cannot_answer_while_redis_is_unreachable(redis_proxy: TcpProxy) -> None:
    """A Redis error is neither "mine" (the old answer, which counted the calls a second time when another claim had
    taken the reply over) nor "not mine": it is unknown, and the answer once Redis is back is the true one."""
    stash = proxied_stash(redis_proxy)
    stash.put("k", REPLY, 1, 0.25, "a", 1)
    assert stash.take("k", "b", 1) is not None  # claim B of the same judgment takes the reply over
    redis_proxy.stop()
    assert stash.release_lost(["k"], "a") is None
    redis_proxy.start()
    assert stash.release_lost(["k"], "a") is False  # B counts the calls


@pytest.mark.parametrize("kind", ["redis", "local"])
def test_a_payer_giving_up_after_the_new_takers_commit_does_not_count_again(kind: str, own_redis: OwnRedis) -> None:
    """B took A's reply over, wrote its verdict and settled the stash; A only then gives the stash up. Settling used
    to delete the stash, so A found nothing, took the calls for its own and counted them a second time."""
    stash: ReplyStash = RedisReplyStash(redis.Redis.from_url(own_redis.url)) if kind == "redis" else LocalReplyStash()
    stash.put("k", REPLY, 1, 0.25, "a", 1)
    taken = stash.take("k", "b", 1)
    assert taken is not None and taken.counted_here
    stash.settle([("k", "b")])
    assert stash.present(["k"]) == set() and stash.take("k", "c", 2) is None  # the reply itself is gone
    assert stash.release_lost(["k"], "a") is False
    # a reply nobody took over stays the payer's to count (also when it was never stored: Redis was down)
    stash.put("k2", REPLY, 1, 0.25, "a", 1)
    assert stash.release_lost(["k2", "never-stored"], "a") is True


def test_a_lost_claim_counts_nothing_while_redis_cannot_say_and_nothing_twice_after(
    db_harness: Harness, redis_proxy: TcpProxy
) -> None:
    """A's reply was taken over by B, whose verdict (with the call) is committed. A's write is refused while Redis is
    unreachable: A adds nothing (the old code added A's call to the row: 2 calls recorded for 1 paid). Once Redis
    is back the writer asks again, learns that B counted it, and still adds nothing."""
    judgment_id = one_judgment(db_harness)
    token_a, token_b = take_over(judgment_id)
    stash = proxied_stash(redis_proxy)
    stash.put("k", REPLY, 1, 0.25, token_a, judgment_id)
    taken = stash.take("k", token_b, judgment_id)
    assert taken is not None and taken.counted_here
    writer = VerdictWriter(get_engine(), LocalSingleFlight(), linger_s=0.0, max_group=64, stash=stash)
    assert writer.write(VerdictWrite(judgment_id, token_b, verdict(60.0, 1), stash_keys=["k"])) is True
    assert recorded_calls(judgment_id) == 1
    redis_proxy.stop()
    assert writer.write(VerdictWrite(judgment_id, token_a, verdict(70.0, 1), stash_keys=["k"])) is False
    assert recorded_calls(judgment_id) == 1
    assert writer.undecided() == 1
    redis_proxy.start()
    deadline = time.monotonic() + 15
    while writer.undecided() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert writer.undecided() == 0
    assert recorded_calls(judgment_id) == 1


def test_a_lost_claim_whose_calls_are_its_own_counts_them_once_redis_is_back(
    db_harness: Harness, redis_proxy: TcpProxy
) -> None:
    """B paid for its own call (A's reply was not stashed yet when B asked). A's write is refused while Redis is
    unreachable: nothing is counted until Redis can say; then A's call is added to the row, once."""
    judgment_id = one_judgment(db_harness)
    token_a, token_b = take_over(judgment_id)
    stash = proxied_stash(redis_proxy)
    writer = VerdictWriter(get_engine(), LocalSingleFlight(), linger_s=0.0, max_group=64, stash=stash)
    stash.put("kb", REPLY, 1, 0.25, token_b, judgment_id)
    assert writer.write(VerdictWrite(judgment_id, token_b, verdict(60.0, 1), stash_keys=["kb"])) is True
    stash.put("ka", REPLY, 1, 0.25, token_a, judgment_id)
    redis_proxy.stop()
    assert writer.write(VerdictWrite(judgment_id, token_a, verdict(70.0, 1), stash_keys=["ka"])) is False
    assert recorded_calls(judgment_id) == 1 and writer.undecided() == 1
    redis_proxy.start()
    deadline = time.monotonic() + 15
    while recorded_calls(judgment_id) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(1.5)  # and it is not asked about (and counted) again
    assert (recorded_calls(judgment_id), writer.undecided()) == (2, 0)


class WorkerKilled(BaseException):
    """Stands for SIGKILL at a given instruction: nothing after it runs, no ``except Exception`` catches it."""


@pytest.mark.parametrize("dies_in", ["metrics", "pricing"])
def test_a_reply_is_stashed_before_anything_runs_after_the_client_returns_it(
    harness: Harness, dies_in: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 26.6: the worker dies at the first thing it does after the provider's reply is in hand (the call's
    metrics; or the price lookup, which the old code did between the reply and the stash). The reply is in the
    stash, and the judgment re-sent after its claim lapses uses it: the provider is asked once. The old code
    stashed only after the call was counted, its metrics recorded and its price looked up: asked twice."""
    import workers.billing as billing
    from judge_api import metrics

    judgment_id = one_judgment(harness)
    engine = harness.engine

    def killed(*_: Any, **__: Any) -> Any:
        raise WorkerKilled

    with monkeypatch.context() as patch:
        if dies_in == "metrics":
            patch.setattr(metrics, "call_tokens", killed)
        else:  # every price lookup after the reply (the old path priced the reply before stashing it)
            patch.setattr(billing, "price_of", killed)
        with pytest.raises(WorkerKilled):
            engine.judge(judgment_id)
    assert harness.calls() == 1
    with session_scope() as session:  # the dead worker's claim lapses
        session.execute(
            update(Judgment).where(Judgment.id == judgment_id).values(claimed_at=utcnow().replace(year=2000))
        )
    successor = harness.build()  # the next worker (the dead one's single-flight lock dies with it)
    successor.stash = engine.stash  # the stash outlives the worker (Redis in production)
    assert successor.judge(judgment_id) == "done"
    assert harness.calls() == 1
    assert recorded_calls(judgment_id) == 1
