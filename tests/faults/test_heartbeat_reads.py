"""The sweepers look for dead workers on every tick of every process (``judge_api.sweeper``). That look reads the
registry of instances and their beats by name, never by walking the keyspace: a SCAN for the heartbeat prefix went
through every reply stash and its hour-long tombstone, so its cost grew with the judgments of the last hour (issue 26:
service CPU). And a tick with no death to act on takes no lock."""

from __future__ import annotations

import time

import redis

from dialogue_judge.testing import OwnRedis
from judge_api import heartbeats
from judge_api.config import get_settings
from judge_api.sweeper import DEATH_KEY, Sweeper

LIVE, DEAD = "a" * 16, "d" * 16


def calls(client: redis.Redis) -> dict[str, int]:
    """Commands the server has run so far, by name."""
    return {name.removeprefix("cmdstat_"): int(stat["calls"]) for name, stat in client.info("commandstats").items()}


def ran_since(client: redis.Redis, before: dict[str, int]) -> dict[str, int]:
    after = calls(client)
    ran = {name: n - before.get(name, 0) for name, n in after.items() if n > before.get(name, 0)}
    ran.pop("info", None)  # the counting itself
    return ran


def crowded(own_redis: OwnRedis) -> redis.Redis:
    """A keyspace like a busy service's: thousands of stash tombstones, one live worker and one dead."""
    client = redis.Redis.from_url(own_redis.url)
    pipe = client.pipeline(transaction=False)
    for n in range(20_000):
        pipe.hset(f"dj:paid:key{n}", mapping={"taker": "t", "jid": n})
    pipe.execute()
    heartbeats.beat(client, "w-live", instance=LIVE)
    heartbeats.beat(client, "w-dead", ttl_s=0.05, instance=DEAD)
    time.sleep(0.1)
    return client


def test_alive_and_dead_read_the_registry_and_the_beats_by_name_not_by_scanning(own_redis: OwnRedis) -> None:
    client = crowded(own_redis)
    before = calls(client)
    living = heartbeats.alive(client)
    dead = heartbeats.dead_instances(client)
    assert [w["instance"] for w in living] == [LIVE] and living[0]["name"] == "w-live"
    assert living[0]["age_s"] >= 0
    assert dead == {DEAD: "w-dead"}
    assert ran_since(client, before) == {"hgetall": 2, "mget": 2}  # two round trips each, whatever the keyspace


def test_a_beat_that_stopped_between_the_registry_and_the_keys_is_not_alive(own_redis: OwnRedis) -> None:
    client = redis.Redis.from_url(own_redis.url)
    heartbeats.beat(client, "w1", instance=LIVE)
    assert heartbeats.registered(client) == {LIVE: "w1"}
    client.delete(f"{heartbeats.PREFIX}w1#{LIVE}")  # its key expired: registered, not alive
    assert heartbeats.alive(client) == []
    assert heartbeats.dead_instances(client) == {LIVE: "w1"}
    heartbeats.forget(client, "w1", instance=LIVE)
    assert heartbeats.alive(client) == [] and heartbeats.dead_instances(client) == {}


def test_a_tick_with_no_death_takes_no_lock(own_redis: OwnRedis) -> None:
    client = redis.Redis.from_url(own_redis.url)
    heartbeats.beat(client, "w-live", instance=LIVE)
    sweeper = Sweeper(get_settings(), client)
    before = calls(client)
    assert sweeper.check_workers() == 0
    ran = ran_since(client, before)
    assert ran == {"hgetall": 1, "mget": 1, "get": 1}, ran  # no SET NX of the lock, no release script
    assert client.get(DEATH_KEY) is None
