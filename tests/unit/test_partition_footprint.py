"""A partition actor's memory: 1,024 of them per subscription must stay cheap (issue 14
goal 4, bench/scale.py). Its metric series share one label key, and it keeps fewer instance
attributes than CPython's limit for sharing the class's key table (past it every instance
carries a dict of its own, about 1.3 KiB more)."""

from __future__ import annotations

import sys
from typing import cast

from actors.delivery.document.settings import cursor_settings
from actors.delivery.document.subscription import decode_consumer
from actors.delivery.path.partition import PARTITION_SERIES, PartitionActor, PartitionPeers
from runtime.host.metrics import Registry
from runtime.kernel import Ref

# CPython 3.11-3.12 share an instance's key table while it has fewer than 30 keys
# (SHARED_KEYS_MAX_SIZE); a partition actor had exactly 30 before issue 14.
SHARED_KEYS_LIMIT = 30


def partition_actor(registry: Registry, partition: int = 0) -> PartitionActor:
    sub = decode_consumer({
        "id": "s", "group": {"id": "g", "name": "g"}, "broker": "Kafka",
        "topics": [{"name": "t"}],
        "subscriptionMethod": {"type": "http", "uri": "http://127.0.0.1:9/hook"}})
    ref = cast(Ref, object())  # never told anything here
    return PartitionActor(f"t-{partition}", cursor_settings(sub, "t"), "t", partition, 1,
                          PartitionPeers(ref, ref, None), registry)


def test_instance_attributes_stay_under_the_shared_key_limit() -> None:
    actor = partition_actor(Registry())
    assert len(vars(actor)) < SHARED_KEYS_LIMIT, (
        f"{len(vars(actor))} attributes: group new state in an object of its own")
    if sys.implementation.name == "cpython":  # a shared-key dict is a fraction of a full one
        assert sys.getsizeof(vars(actor)) < sys.getsizeof(dict(vars(actor)))


def test_every_series_of_a_partition_shares_one_label_key() -> None:
    registry = Registry()
    partition_actor(registry, partition=5)
    keys = [next(iter(registry.counter(name, "").children)) if name.endswith("_total") else
            next(iter(registry.gauge(name, "").children)) for name in PARTITION_SERIES]
    assert keys[0] == (("subscription", "s_g"), ("topic", "t"), ("partition", "5"))
    assert all(key is keys[0] for key in keys)


async def test_stopping_removes_its_series_and_no_other() -> None:
    registry = Registry()
    gone, kept = partition_actor(registry, 0), partition_actor(registry, 1)
    gone.m_delivered.inc()
    kept.m_delivered.inc(2)
    await gone.on_stop()
    assert registry.series("hookstream_delivered_total", partition="0") == []
    assert [v.value for v in registry.series("hookstream_delivered_total")] == [2.0]
    assert all(len(registry.series(name)) == 1 for name in PARTITION_SERIES)
