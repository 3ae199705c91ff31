"""kombu's Redis channel keeps one ``redis.Redis`` for its message bookkeeping (workers.celery_app; issue 26: it built
a new one, copying redis-py's response callbacks, twice per task message). The bookkeeping must still work: a
delivered message has its unacked entry, an ack removes it, and a channel on a new pool gets a new client."""

from __future__ import annotations

import kombu
import redis

import workers.celery_app  # noqa: F401  (installs the worker's kombu patches)
from dialogue_judge.testing import OwnRedis


def test_a_channel_reuses_one_client_per_pool_and_its_bookkeeping_holds(own_redis: OwnRedis) -> None:
    raw = redis.Redis.from_url(own_redis.url)
    with kombu.Connection(own_redis.url) as connection:
        channel = connection.channel()
        with channel.conn_or_acquire() as first, channel.conn_or_acquire() as second:
            assert first is second and first.connection_pool is channel.pool
        queue = kombu.Queue("dj-test-q", kombu.Exchange("dj-test-x"), "dj-test-q")
        producer = kombu.Producer(channel)
        for n in range(3):
            producer.publish({"n": n}, exchange=queue.exchange, routing_key="dj-test-q", declare=[queue])
        bound = queue(channel)
        messages = [bound.get(no_ack=False) for _ in range(3)]
        assert [m.payload["n"] for m in messages if m is not None] == [0, 1, 2]
        assert raw.hlen("unacked") == 3 and raw.zcard("unacked_index") == 3
        for message in messages:
            assert message is not None
            message.ack()
        assert raw.hlen("unacked") == 0 and raw.zcard("unacked_index") == 0
        old_pool = channel.pool
        channel._pool = None  # what a disconnect does to the channel's pool
        with channel.conn_or_acquire() as third:
            assert third.connection_pool is channel.pool is not old_pool
        channel.close()
