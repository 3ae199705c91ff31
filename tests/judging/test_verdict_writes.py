"""The claim-and-write path of provider-call judgments, on SQLite and PostgreSQL: one statement claims a batch, a
group of verdicts is written in one transaction with the cache entries it paid for, a lost claim in the group is
found and left alone, and the group writer neither delays a lone verdict nor loses one when the database fails."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import func, select, update

from judge_api.db import get_engine, session_scope
from judge_api.models import CacheEntry, Judgment, utcnow
from judge_api.repository import claims
from workers.singleflight import LocalSingleFlight
from workers.writer import VerdictWrite, VerdictWriter

from .harness import Harness, dialogue_item


@pytest.fixture
def db_harness(harness: Harness, db_url: str) -> Iterator[Harness]:
    harness.monkeypatch.setenv("DATABASE_URL", db_url)
    harness.build()
    yield harness


def make_run(harness: Harness, n: int) -> list[int]:
    run_id = harness.create(
        items=[dialogue_item(f"w{k}", {"a": f"Rex {k} <<q={50 + k}>>"}) for k in range(n)],
        rubrics=["rsum-single"],
        judges=[harness.judge("openai-compatible")],
        aspects=["consistency"],
    )
    return harness.pending(run_id)


def cache_row(key: str, text: str = "Rating: [[70]]") -> dict[str, Any]:
    return {
        "key": key,
        "judge": "openai-compatible:sim-judge",
        "raw_output": text,
        "finish_reason": "stop",
        "structured": None,
        "input_tokens": 10,
        "output_tokens": 5,
        "created_at": utcnow(),
    }


def done(score: float) -> dict[str, Any]:
    return {"status": "done", "score": score, "provider_calls": 1, "attempts": 1, "raw_output": f"[[{score}]]"}


def test_claim_many_takes_pending_and_lapsed_claims_only(db_harness: Harness) -> None:
    ids = make_run(db_harness, 4)
    pending, lapsed, live, finished = ids
    with session_scope() as session:
        session.execute(
            update(Judgment)
            .where(Judgment.id == lapsed)
            .values(status="running", claim_token="old", claimed_at=utcnow().replace(year=2000))
        )
        session.execute(
            update(Judgment).where(Judgment.id == live).values(status="running", claim_token="x", claimed_at=utcnow())
        )
        session.execute(update(Judgment).where(Judgment.id == finished).values(status="done", score=1.0))
    token, claimed = claims.claim_many(get_engine(), ids, lease_s=600)
    assert claimed == {pending, lapsed}
    again_token, again = claims.claim_many(get_engine(), ids, lease_s=600)
    assert again == set() and again_token != token
    with session_scope() as session:
        tokens = dict(session.execute(select(Judgment.id, Judgment.claim_token).where(Judgment.id.in_(ids))).all())
    assert tokens[pending] == tokens[lapsed] == token and tokens[live] == "x" and tokens[finished] is None


def test_a_group_is_written_in_one_transaction_with_its_cache_entries(db_harness: Harness) -> None:
    ids = make_run(db_harness, 3)
    token, claimed = claims.claim_many(get_engine(), ids, lease_s=600)
    assert claimed == set(ids)
    verdicts = [
        (ids[0], token, done(61.0)),
        (ids[1], token, done(62.0)),
        (ids[2], token, {"status": "failed", "error": "timeout: no reply", "attempts": 5, "provider_calls": 5}),
    ]
    # the same key twice in a group (one request paid once, two judgments) is stored once
    written = claims.write_verdicts(get_engine(), verdicts, [cache_row("k1"), cache_row("k2"), cache_row("k1")])
    assert written == [True, True, True]
    rows = {r.id: r for r in db_harness.rows(run_of(ids[0]))}
    assert [rows[i].score for i in ids] == [61.0, 62.0, None]
    assert [rows[i].status for i in ids] == ["done", "done", "failed"]
    assert rows[ids[2]].error == "timeout: no reply" and all(rows[i].claim_token is None for i in ids)
    with session_scope() as session:
        assert session.scalar(select(func.count()).select_from(CacheEntry)) == 2
    # an entry that exists is kept, not overwritten and not an error
    claims.write_verdicts(get_engine(), [], [cache_row("k1", "other text")])
    with session_scope() as session:
        assert session.get(CacheEntry, "k1").raw_output == "Rating: [[70]]"  # type: ignore[union-attr]


def test_a_lost_claim_in_a_group_is_found_and_the_others_are_written(db_harness: Harness) -> None:
    ids = make_run(db_harness, 3)
    token, _ = claims.claim_many(get_engine(), ids, lease_s=600)
    # another worker took ids[1] over after our lease lapsed, and holds it now
    with session_scope() as session:
        session.execute(update(Judgment).where(Judgment.id == ids[1]).values(claim_token="theirs"))
    written = claims.write_verdicts(
        get_engine(), [(i, token, done(70.0 + k)) for k, i in enumerate(ids)], [cache_row("lost-group")]
    )
    assert written == [True, False, True]
    rows = {r.id: r for r in db_harness.rows(run_of(ids[0]))}
    assert rows[ids[1]].status == "running" and rows[ids[1]].claim_token == "theirs" and rows[ids[1]].score is None
    assert rows[ids[0]].score == 70.0 and rows[ids[2]].score == 72.0
    with session_scope() as session:
        assert session.get(CacheEntry, "lost-group") is not None


def run_of(judgment_id: int) -> str:
    with session_scope() as session:
        row = session.get(Judgment, judgment_id)
        assert row is not None
        return row.run_id


class CountingFlight(LocalSingleFlight):
    def __init__(self) -> None:
        super().__init__()
        self.released: list[tuple[str, bool]] = []

    def release(self, leases: Any, committed: bool) -> None:
        self.released += [(lease.key, committed) for lease in leases]
        super().release(leases, committed)


def test_the_writer_writes_a_lone_verdict_at_once_and_groups_concurrent_ones(
    db_harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = make_run(db_harness, 6)
    token, _ = claims.claim_many(get_engine(), ids, lease_s=600)
    groups: list[int] = []
    real = claims.write_verdicts

    def counting(engine: Any, verdicts: Any, *args: Any, **kwargs: Any) -> list[bool]:
        groups.append(len(verdicts))
        return real(engine, verdicts, *args, **kwargs)

    monkeypatch.setattr(claims, "write_verdicts", counting)
    flight = CountingFlight()
    writer = VerdictWriter(get_engine(), flight, linger_s=5.0, max_group=64)

    lease = flight.acquire("lone", 60)
    assert lease is not None
    lease.filled = True
    started = time.monotonic()
    assert writer.write(VerdictWrite(ids[0], token, done(50.0), [cache_row("lone")], [lease])) is True
    assert time.monotonic() - started < 1.0  # nothing else under way: no linger
    assert groups == [1] and flight.released == [("lone", True)]
    assert flight.acquire("lone", 60) is None  # filled: a late identical request looks the cache up instead

    # five judgments under way: the writer waits for them and writes them together
    results: list[bool] = []
    gate = threading.Barrier(5)

    def judge(judgment_id: int) -> None:
        with writer.asking():
            gate.wait(5)
            time.sleep(0.05)
        results.append(writer.write(VerdictWrite(judgment_id, token, done(60.0))))

    threads = [threading.Thread(target=judge, args=(i,)) for i in ids[1:]]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert results == [True] * 5
    assert groups[1:] and sum(groups[1:]) == 5 and len(groups[1:]) < 5


def test_a_failed_group_write_reaches_every_caller_and_keeps_their_locks(
    db_harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = make_run(db_harness, 2)
    token, _ = claims.claim_many(get_engine(), ids, lease_s=600)

    def broken(*_: Any, **__: Any) -> list[bool]:
        raise ConnectionError("database went away")

    monkeypatch.setattr(claims, "write_verdicts", broken)
    flight = CountingFlight()
    writer = VerdictWriter(get_engine(), flight, linger_s=0.0, max_group=64)
    lease = flight.acquire("k", 60)
    assert lease is not None
    with pytest.raises(ConnectionError, match="went away"):
        writer.write(VerdictWrite(ids[0], token, done(1.0), [cache_row("k")], [lease]))
    assert flight.released == []  # the caller hands back its judgment and its locks (not committed)
    assert all(r.status == "running" for r in db_harness.rows(run_of(ids[0])))


def test_held_claims_are_renewed_so_a_long_wait_for_a_provider_slot_is_not_taken_over(db_harness: Harness) -> None:
    """A batch claims all its misses at once; under a low rate limit the last may wait past the lease. The keeper
    renews what this process holds, so another worker cannot take it over; once dropped, the claim lapses again."""
    from workers.leases import LeaseKeeper

    ids = make_run(db_harness, 2)
    lease_s = 0.6
    token, claimed = claims.claim_many(get_engine(), ids, lease_s=lease_s)
    assert claimed == set(ids)
    keeper = LeaseKeeper(get_engine(), lease_s)
    keeper.hold([ids[0]], token)  # ids[1] is not held: it stands for a worker that died
    time.sleep(lease_s * 2)
    _, taken = claims.claim_many(get_engine(), ids, lease_s=lease_s)
    assert taken == {ids[1]}
    keeper.drop(ids[0])
    time.sleep(lease_s * 1.5)
    _, taken = claims.claim_many(get_engine(), ids, lease_s=lease_s)
    assert ids[0] in taken


def test_a_lost_claim_still_counts_the_calls_it_paid_for(db_harness: Harness) -> None:
    """Worker A's claim lapses and B takes the judgment over and writes it. A's write is refused, but the provider
    was paid for A's call: it is added to the row, so the run's provider_calls and cost equal what was paid."""
    from workers.stash import LocalReplyStash

    ids = make_run(db_harness, 1)
    token_a, _ = claims.claim_many(get_engine(), ids, lease_s=600)
    with session_scope() as session:  # A's lease lapses
        session.execute(update(Judgment).where(Judgment.id == ids[0]).values(claimed_at=utcnow().replace(year=2000)))
    token_b, taken = claims.claim_many(get_engine(), ids, lease_s=600)
    assert taken == set(ids)
    writer = VerdictWriter(get_engine(), LocalSingleFlight(), linger_s=0.0, max_group=64, stash=LocalReplyStash())
    assert writer.write(VerdictWrite(ids[0], token_b, {**done(60.0), "cost_usd": 0.5})) is True
    assert writer.write(VerdictWrite(ids[0], token_a, {**done(70.0), "provider_calls": 2, "cost_usd": 0.25})) is False
    with session_scope() as session:
        row = session.execute(select(Judgment).where(Judgment.id == ids[0])).scalar_one()
    assert (row.status, row.score, row.provider_calls, row.cost_usd) == ("done", 60.0, 3, 0.75)


@pytest.mark.parametrize(
    ("taker_token", "taker_jid", "token", "jid", "counted"),
    [
        ("a", 1, "a", 1, True),  # the payer itself (its write failed and is retried)
        ("a", 1, "b", 1, True),  # another claim of the same judgment: the payer's claim was lost
        ("a", 1, "b", 2, False),  # another judgment with the identical request: a cache hit, the payer counts
    ],
)
def test_a_stashed_reply_is_counted_by_exactly_one_claim(
    machine_redis_url: str, taker_token: str, taker_jid: int, token: str, jid: int, counted: bool
) -> None:
    import redis

    from workers.clients import JudgeReply
    from workers.stash import LocalReplyStash, RedisReplyStash

    reply = JudgeReply("Rating: [[70]]", "stop", 10, 5, 300.0, None, None)
    for stash in (RedisReplyStash(redis.Redis.from_url(machine_redis_url)), LocalReplyStash()):
        stash.put("k", reply, 2, 0.5, taker_token, taker_jid)
        assert stash.present(["k", "other"]) == {"k"}
        found = stash.take("k", token, jid)
        assert found is not None and found.reply == reply and (found.provider_calls, found.cost_usd) == (2, 0.5)
        assert found.counted_here is counted
        # a claim that is not the taker loses its judgment: the calls are not its to record, the stash stays
        assert stash.release_lost(["k"], "someone-else") is False
        stash.settle([("k", "someone-else")])
        assert stash.present(["k"]) == {"k"}
        if counted:  # the taker's write commits: the stash is gone
            stash.settle([("k", token)])
        else:  # the payer (still the taker) loses its claim: it records the calls itself
            assert stash.release_lost(["k"], taker_token) is True
        assert stash.present(["k"]) == set()


class BrokenSettleStash:
    """A reply stash whose settle step fails after the commit (a Redis error the writer did not expect)."""

    def settle(self, *_: Any) -> None:
        raise RuntimeError("stash exploded")

    def release_lost(self, *_: Any) -> bool:
        raise RuntimeError("stash exploded")


def test_a_failure_after_the_commit_resolves_every_future_and_the_writer_goes_on(db_harness: Harness) -> None:
    """Issue 28.3: the settle step once ran outside any ``try``; an exception there ended the writer thread and the
    group's futures never resolved, so the task waited for good while its claims were renewed."""
    ids = make_run(db_harness, 3)
    token, _ = claims.claim_many(get_engine(), ids, lease_s=600)
    writer = VerdictWriter(
        get_engine(),
        LocalSingleFlight(),
        linger_s=0.0,
        max_group=64,
        stash=BrokenSettleStash(),  # type: ignore[arg-type]
    )
    first = writer.submit(VerdictWrite(ids[0], token, done(40.0), stash_keys=["k0"]))
    assert first.result(timeout=10) is True
    lost = writer.submit(VerdictWrite(ids[0], "another-token", done(41.0), stash_keys=["k0"]))
    assert lost.result(timeout=10) is False  # release_lost raised too: the caller still gets its answer
    second = writer.submit(VerdictWrite(ids[1], token, done(50.0)))
    assert second.result(timeout=10) is True  # the writer is still serving
    with session_scope() as session:
        rows = {r.id: r for r in session.scalars(select(Judgment).where(Judgment.id.in_(ids)))}
    assert (rows[ids[0]].status, rows[ids[0]].score) == ("done", 40.0)
    assert (rows[ids[1]].status, rows[ids[1]].score) == ("done", 50.0)
    assert rows[ids[2]].status == "running"


def test_a_failed_settle_step_still_counts_the_calls_of_a_lost_claim(db_harness: Harness) -> None:
    """Issue 28.3: settling the stashes and counting a lost claim's calls were one step, so a settle that raised
    skipped the count and the calls the lost claim paid for were never recorded."""
    from workers.stash import LocalReplyStash

    class SettleFails(LocalReplyStash):
        def settle(self, *_: Any) -> None:
            raise RuntimeError("stash exploded")

    ids = make_run(db_harness, 1)
    token_a, _ = claims.claim_many(get_engine(), ids, lease_s=600)
    with session_scope() as session:  # A's lease lapses and B takes the judgment over
        session.execute(update(Judgment).where(Judgment.id == ids[0]).values(claimed_at=utcnow().replace(year=2000)))
    token_b, taken = claims.claim_many(get_engine(), ids, lease_s=600)
    assert taken == set(ids)
    writer = VerdictWriter(get_engine(), LocalSingleFlight(), linger_s=0.0, max_group=64, stash=SettleFails())
    assert writer.submit(VerdictWrite(ids[0], token_b, {**done(60.0), "cost_usd": 0.5})).result(timeout=10) is True
    lost = writer.submit(VerdictWrite(ids[0], token_a, {**done(70.0), "provider_calls": 2, "cost_usd": 0.25}))
    assert lost.result(timeout=10) is False
    with session_scope() as session:
        row = session.execute(select(Judgment).where(Judgment.id == ids[0])).scalar_one()
    assert (row.status, row.score, row.provider_calls, row.cost_usd) == ("done", 60.0, 3, 0.75)


def test_a_permanent_database_error_reaches_the_caller_instead_of_being_retried_forever(
    db_harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sqlite3

    from sqlalchemy.exc import OperationalError

    ids = make_run(db_harness, 1)
    token, _ = claims.claim_many(get_engine(), ids, lease_s=600)
    tries: list[int] = []

    def missing_table(*_: Any, **__: Any) -> list[bool]:
        tries.append(1)
        raise OperationalError("UPDATE judgments ...", {}, sqlite3.OperationalError("no such table: judgments"))

    monkeypatch.setattr(claims, "write_verdicts", missing_table)
    writer = VerdictWriter(get_engine(), LocalSingleFlight(), linger_s=0.0, max_group=64, sleep=lambda _: None)
    future = writer.submit(VerdictWrite(ids[0], token, done(1.0)))
    with pytest.raises(OperationalError, match="no such table"):
        future.result(timeout=10)
    assert 1 <= len(tries) <= 5


class _ServerEnded(Exception):
    sqlstate = "25P03"  # psycopg's IdleInTransactionSessionTimeout


@pytest.mark.parametrize(
    ("error", "retried"),
    [("idle_in_transaction_session_timeout", True), ("an internal error of the server", False)],
)
def test_a_transaction_the_server_ended_is_retried_and_an_internal_error_handed_back(
    db_harness: Harness, monkeypatch: pytest.MonkeyPatch, error: str, retried: bool
) -> None:
    """Session 56: psycopg raises a transaction the server ended (25P03) as an ``InternalError``; the writer used to
    hand the group back at once. It is the database being away: retried until written. Any other ``InternalError``
    still reaches the caller at once."""
    from sqlalchemy.exc import InternalError

    ids = make_run(db_harness, 1)
    token, _ = claims.claim_many(get_engine(), ids, lease_s=600)
    real_write = claims.write_verdicts
    tries: list[int] = []

    def ended_twice(*args: Any, **kwargs: Any) -> list[bool]:
        tries.append(1)
        if len(tries) <= 2:
            orig = _ServerEnded(error) if retried else Exception(error)
            raise InternalError("UPDATE judgments ...", {}, orig)
        return real_write(*args, **kwargs)

    monkeypatch.setattr(claims, "write_verdicts", ended_twice)
    writer = VerdictWriter(get_engine(), LocalSingleFlight(), linger_s=0.0, max_group=64, sleep=lambda _: None)
    future = writer.submit(VerdictWrite(ids[0], token, done(1.0)))
    if retried:
        assert future.result(timeout=10) is True
        assert len(tries) == 3
        assert [r.status for r in db_harness.rows(run_of(ids[0]))] == ["done"]
    else:
        with pytest.raises(InternalError, match="internal error"):
            future.result(timeout=10)
        assert len(tries) == 1
        assert [r.status for r in db_harness.rows(run_of(ids[0]))] == ["running"]


@pytest.mark.parametrize(
    ("orig", "unreachable"),
    [
        ("connection failed: connection to server at 127.0.0.1, port 5432 failed: Connection refused", True),
        ("server closed the connection unexpectedly", True),
        ("database is locked", True),
        ("no such table: judgments", False),
        ("unable to open database file", False),
    ],
)
def test_which_database_errors_are_waited_out(orig: str, unreachable: bool) -> None:
    from sqlalchemy.exc import OperationalError

    from judge_api.dberrors import database_unreachable

    assert database_unreachable(OperationalError("SELECT 1", {}, Exception(orig))) is unreachable


def test_a_deleted_runs_paid_reply_is_stored_nowhere_and_a_lapsed_claims_is_kept(db_harness: Harness) -> None:
    """Issue 43: a verdict whose judgment is gone (its run deleted mid-call) writes no cache entry and gives its stash
    up; one whose claim another worker took over (a lapsed lease) still leaves its entry, sparing that worker a call;
    the group's live verdicts are written with theirs."""
    from judge_api.repository import retention
    from workers.clients import JudgeReply
    from workers.stash import LocalReplyStash

    gone_ids = make_run(db_harness, 2)
    live_ids = make_run(db_harness, 2)
    engine = get_engine()
    token, _ = claims.claim_many(engine, gone_ids + live_ids, lease_s=600)
    with session_scope() as session:
        retention.delete_run(session, run_of(gone_ids[0]))
    with session_scope() as session:
        session.execute(update(Judgment).where(Judgment.id == live_ids[1]).values(claim_token="theirs"))
    stash = LocalReplyStash()
    for key, jid in (("gone-0", gone_ids[0]), ("gone-1", gone_ids[1])):
        stash.put(key, JudgeReply("[[70]]", "stop", 10, 5, 1.0), 1, 0.0, token, jid)
    writer = VerdictWriter(engine, LocalSingleFlight(), linger_s=0.0, max_group=64, stash=stash)
    writes = [
        VerdictWrite(gone_ids[0], token, done(70.0), [cache_row("gone-0")], stash_keys=["gone-0"]),
        VerdictWrite(gone_ids[1], token, done(71.0), [cache_row("gone-1")], stash_keys=["gone-1"]),
        VerdictWrite(live_ids[0], token, done(72.0), [cache_row("live")]),
        VerdictWrite(live_ids[1], token, done(73.0), [cache_row("lapsed")]),
    ]
    for write in writes:
        writer.submit(write)
    assert [write.written.result(timeout=30) for write in writes] == [False, False, True, False]
    with session_scope() as session:
        keys = set(session.scalars(select(CacheEntry.key)))
    assert keys == {"live", "lapsed"}
    assert stash.present(["gone-0", "gone-1"]) == set()


def test_claim_holds_only_for_the_live_claim_of_an_existing_judgment(db_harness: Harness) -> None:
    from judge_api.repository import retention

    ids = make_run(db_harness, 2)
    engine = get_engine()
    token, _ = claims.claim_many(engine, ids, lease_s=600)
    assert claims.claim_holds(engine, ids[0], token)
    assert not claims.claim_holds(engine, ids[0], "another")
    with session_scope() as session:
        retention.delete_run(session, run_of(ids[0]))
    assert not claims.claim_holds(engine, ids[0], token)
