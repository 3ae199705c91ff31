"""The reply stash's put (issue 26.6: made the moment a paid reply is in hand) goes out on the calling thread's own
Redis connection, not through the pool (issue 26: service CPU). What the pool's path gave must still hold: the
script is loaded when the server does not know it, a broken connection (a Redis restart) is replaced and the put
still lands, Redis down costs a warning and no exception, and threads never share a connection."""

from __future__ import annotations

import logging
import threading

import pytest
import redis

from dialogue_judge.testing import OwnRedis, TcpProxy
from workers.clients import JudgeReply
from workers.stash import RedisReplyStash

from .harness import proxied_stash

REPLY = JudgeReply("Rating: [[70]]", "stop", 10, 5, 300.0, None, None)


def client_ids(own_redis: OwnRedis) -> set[int]:
    """The ids of the connections open now; Redis numbers connections in order, so newer ones have larger ids."""
    return {int(client["id"]) for client in redis.Redis.from_url(own_redis.url).client_list()}


def test_a_put_loads_the_script_when_the_server_does_not_know_it_and_then_uses_its_own_connection(
    own_redis: OwnRedis, redis_proxy: TcpProxy
) -> None:
    stash = proxied_stash(redis_proxy)
    redis.Redis.from_url(own_redis.url).script_flush()
    stash.put("k1", REPLY, 1, 0.01, "tok-a", 7)  # NOSCRIPT on the own connection: the pool's path loads it
    stash.put("k2", REPLY, 2, 0.02, "tok-b", 8)  # now it runs on the own connection
    for key, token, judgment_id, calls in (("k1", "tok-a", 7, 1), ("k2", "tok-b", 8, 2)):
        taken = stash.take(key, token, judgment_id)
        assert taken is not None and taken.reply == REPLY and taken.provider_calls == calls and taken.counted_here
    assert stash._local.conn is not None  # the thread keeps its connection for the next put


def test_a_put_after_the_connection_broke_reconnects_and_lands(own_redis: OwnRedis, redis_proxy: TcpProxy) -> None:
    stash = proxied_stash(redis_proxy)
    stash.put("k1", REPLY, 1, 0.01, "tok", 1)
    redis_proxy.stop()  # every open connection is cut, as a Redis restart would
    redis_proxy.start()
    stash.put("k2", REPLY, 1, 0.01, "tok", 2)
    taken = stash.take("k2", "tok", 2)
    assert taken is not None and taken.reply == REPLY


def test_a_put_with_redis_down_warns_and_does_not_raise(
    own_redis: OwnRedis, redis_proxy: TcpProxy, caplog: pytest.LogCaptureFixture
) -> None:
    stash = proxied_stash(redis_proxy)
    stash.put("k1", REPLY, 1, 0.01, "tok", 1)
    redis_proxy.stop()
    with caplog.at_level(logging.WARNING, logger="workers.stash"):
        stash.put("k2", REPLY, 1, 0.01, "tok", 2)
    assert "could not stash a paid reply" in caplog.text
    redis_proxy.start()
    stash.put("k3", REPLY, 1, 0.01, "tok", 3)  # back: the next put lands again
    assert stash.take("k3", "tok", 3) is not None


def test_each_thread_puts_on_a_connection_of_its_own(own_redis: OwnRedis) -> None:
    stash = RedisReplyStash(redis.Redis.from_url(own_redis.url))
    newest_before = max(client_ids(own_redis))
    start, done = threading.Barrier(4), threading.Barrier(5)  # done: the main thread counts while they live
    errors: list[BaseException] = []
    used: dict[int, object] = {}

    def put_many(thread: int) -> None:
        try:
            start.wait(10)
            for n in range(50):
                stash.put(f"t{thread}-{n}", REPLY, 1, 0.01, f"tok{thread}", thread * 100 + n)
            used[thread] = stash._local.conn
        except BaseException as exc:  # re-raised below
            errors.append(exc)
        finally:
            done.wait(10)  # a thread's own connection closes with the thread: hold it open to be counted

    threads = [threading.Thread(target=put_many, args=(t,)) for t in range(4)]
    for thread in threads:
        thread.start()
    done.wait(10)
    opened = {cid for cid in client_ids(own_redis) if cid > newest_before}
    for thread in threads:
        thread.join(30)
    assert not errors
    assert len({id(conn) for conn in used.values() if conn is not None}) == 4  # never shared, none dropped
    assert len(opened) >= 4 + 1  # the four threads' own, open at once, and the one that lists them
    for index in range(4):
        for n in range(50):
            taken = stash.take(f"t{index}-{n}", f"tok{index}", index * 100 + n)
            assert taken is not None and taken.reply == REPLY
