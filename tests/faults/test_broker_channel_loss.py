"""kombu's Redis transport after a broker outage, with the worker's tolerance installed (workers.celery_app): a
message acknowledged or rejected through the channel that the outage closed, and unacknowledged messages restored
while Redis is down, are logged and dropped from the worker's own books instead of raising inside the consumer loop
(which Celery treats as unrecoverable: the worker stopped consuming for good after a Redis restart, so re-sent work
waited forever - seen as an intermittent `test_redis_restart_mid_run` failure)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kombu import Connection

import workers.celery_app  # noqa: F401  (installs the tolerance)
from dialogue_judge.testing import OwnRedis


@pytest.fixture
def channel_and_message(own_redis: OwnRedis) -> Iterator[tuple[Connection, Any, Any]]:
    connection = Connection(own_redis.url)
    channel = connection.channel()
    queue = connection.SimpleQueue("dj-test-channel-loss", channel=channel)
    queue.put({"judgment": 1})
    message = queue.get(timeout=5)
    assert message.delivery_tag in channel.qos._delivered  # unacknowledged, held by this channel
    yield connection, channel, message
    connection.release()


@pytest.mark.parametrize("settle", ["ack", "reject"])
def test_settling_a_message_of_a_closed_channel_does_not_raise(
    channel_and_message: tuple[Connection, Any, Any], settle: str
) -> None:
    _, channel, message = channel_and_message
    qos = channel.qos
    # the old channel as the consumer's reconnect leaves it: closed, its connection and its pool dropped (close()
    # itself re-creates a pool to restore unacknowledged messages; during an outage that pool is gone as well)
    channel.close()
    channel._disconnect_pools()
    assert channel.connection is None
    getattr(message, settle)()
    qos._flush()
    assert message.delivery_tag not in qos._delivered  # the prefetch slot is free again


def test_settling_while_redis_is_down_does_not_raise(
    channel_and_message: tuple[Connection, Any, Any], own_redis: OwnRedis
) -> None:
    _, channel, message = channel_and_message
    qos = channel.qos
    own_redis.kill()
    message.ack()
    qos._flush()
    assert message.delivery_tag not in qos._delivered
    qos.restore_unacked()  # nothing left to restore, and no Redis to restore it to: no error


def test_restoring_through_a_closed_transport_does_not_raise(
    channel_and_message: tuple[Connection, Any, Any], caplog: pytest.LogCaptureFixture
) -> None:
    _, channel, _ = channel_and_message
    qos = channel.qos
    channel._disconnect_pools()
    # the transport as a lost connection leaves it: still attached to the channel, its client gone
    channel.connection.client = None
    qos.restore_unacked()  # the message stays unacknowledged in Redis: the visibility timeout or the sweeper resends
    assert "could not restore unacknowledged messages" in caplog.text


def test_a_bug_with_the_channel_open_still_raises(
    channel_and_message: tuple[Connection, Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, channel, message = channel_and_message
    qos = channel.qos

    def broken(*_: object, **__: object) -> None:
        raise AttributeError("a genuine bug")

    monkeypatch.setattr(qos, "_remove_from_indices", broken)
    with pytest.raises(AttributeError, match="a genuine bug"):
        message.ack()
