"""Poison records never crash-loop nor block forever, and a dead letter is written once
(issue 13, item 8), on the real broker: the delay queue and the delivery path.

"Too large" here is the producer's own limit (`max_request_size`, 1 MB by default): the
records are written by a producer allowed more, as another client of the cluster may be.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from actors.delay.book import DELAY_DUE_MS, DELAY_TARGET
from actors.delivery.path.deadletter import DeadLetterActor
from runtime.host.app import Runtime
from runtime.kafka import make_producer
from runtime.kernel import Actor, Supervisor
from tests.conftest import TopicFactory
from tests.integration.delivery_harness import (
    Admin,
    Push,
    Receiver,
    make_runtime,
    subscription,
)
from tests.integration.test_delay import (
    _config,
    _delay,
    _journal,
    _levels,
    _metric,
    _read,
    _runtime,
    _until,
)
from tests.integration.test_delivery import wait_committed

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

HUGE_VALUE = b"x" * 1_500_000  # over the producers' 1 MB limit
HUGE_HEADER = ("blob", b"h" * 1_200_000)  # too large even when the value is left out


async def produce_raw(bootstrap: str, topic: str,
                      records: list[tuple[bytes, list[tuple[str, bytes]]]]) -> None:
    """Write `(value, headers)` records in order to partition 0, allowed 8 MB each."""
    producer = make_producer(bootstrap, acks="all", max_request_size=8 << 20)
    await producer.start()
    try:
        for value, headers in records:
            await producer.send_and_wait(topic, value, key=b"k", partition=0,
                                         headers=headers)
    finally:
        await producer.stop()


async def read_to_end(bootstrap: str, topic: str, partition: int = 0) -> list[Any]:
    """Every record of `partition`, up to the high watermark of the fetch responses."""
    tp = TopicPartition(topic, partition)
    reader = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                              max_partition_fetch_bytes=8 << 20)
    await reader.start()
    records: list[Any] = []
    try:
        reader.assign([tp])
        await reader.seek_to_beginning(tp)
        async with asyncio.timeout(15):
            while (end := reader.highwater(tp)) is None or await reader.position(tp) < end:
                records += (await reader.getmany(tp, timeout_ms=200)).get(tp, [])
    finally:
        await reader.stop()
    return records


def dlt_offsets(records: list[Any]) -> list[int]:
    return [int(dict(r.headers)["dlt-offset"]) for r in records]


# -- the delay queue -----------------------------------------------------------------------


async def test_a_delayed_record_too_large_to_forward_is_dead_lettered_without_its_value(
    kafka_bootstrap: str, topic_factory: TopicFactory, fast_group_kwargs: dict[str, int],
    tmp_path: Path,
) -> None:
    target = await topic_factory(prefix="target")
    config = _config(kafka_bootstrap, _levels(100), journal_dir=tmp_path / "journal")
    level_topic, dlt = config.delay.levels[0].topics[0], config.delay.dead_letter_topic
    route = (DELAY_TARGET, target.encode())
    async with _runtime(config, fast_group_kwargs) as runtime:
        await _until(lambda: len(_delay(runtime).assignment()) == 1)
        await produce_raw(kafka_bootstrap, level_topic, [
            (HUGE_VALUE, [route]),           # 0: too large to forward: value dropped
            (b"small", [route, HUGE_HEADER]),  # 1: too large even without its value
            (b"fine", [route]),              # 2: the partition went on
        ])
        [forwarded] = await _read(kafka_bootstrap, target, 1)
        await _until(lambda: _delay_committed(runtime, level_topic) == 3)
        assert _metric(runtime, "hookstream_delay_dead_letter_dropped_total") == 1
        assert _metric(runtime, "hookstream_delay_dead_lettered_total") == 1

    assert forwarded.value == b"fine"
    [dead] = await read_to_end(kafka_bootstrap, dlt)
    headers = dict(dead.headers)
    assert dead.value == b"" and dead.key == b"k"
    assert headers["dlt-value-dropped"] == b"1500000" and headers["dlt-offset"] == b"0"
    assert b"MessageSizeTooLargeError" in headers["dlt-reason"]
    assert b"value dropped" in headers["dlt-reason"]
    assert headers[DELAY_TARGET] == target.encode()  # the record's own headers are kept
    dropped = [e for e in _journal(tmp_path / "journal", "dead_lettered") if e["offset"] == 1]
    assert len(dropped) == 1 and dropped[0]["reason"].startswith(f"dropped: not written to {dlt}")


def _delay_committed(runtime: Runtime, level_topic: str) -> float:
    return _metric_gauge(runtime, "hookstream_delay_committed_offset", topic=level_topic)


def _metric_gauge(runtime: Runtime, name: str, **labels: str) -> float:
    family = runtime.metrics.gauge(name, "")
    return sum(child.value for key, child in family.children.items()
               if set(labels.items()) <= set(key))


async def test_a_restarted_delay_actor_does_not_dead_letter_a_record_twice(
    kafka_bootstrap: str, topic_factory: TopicFactory, fast_group_kwargs: dict[str, int],
) -> None:
    """The committed position waits below a record still in the wheel; a dead letter above
    it is given up again by the restarted actor. It must be written once."""
    target = await topic_factory(prefix="target")
    config = _config(kafka_bootstrap, _levels(60_000))
    level_topic, dlt = config.delay.levels[0].topics[0], config.delay.dead_letter_topic
    waits = [(DELAY_TARGET, target.encode()), (DELAY_DUE_MS, b"4102444800000")]  # in 2100
    async with _runtime(config, fast_group_kwargs) as runtime:
        await _until(lambda: len(_delay(runtime).assignment()) == 1)
        await produce_raw(kafka_bootstrap, level_topic, [
            (b"later", waits),   # 0: waits in the wheel, holding the commit position
            (b"no target", []),  # 1: dead-lettered at once
        ])
        assert dlt_offsets(await _read(kafka_bootstrap, dlt, 1)) == [1]
        victim = _delay_actor(runtime, level_topic)
        victim.kill("chaos test")
        await _until(lambda: _delay_actor(runtime, level_topic) is not victim
                     and _delay_actor(runtime, level_topic).alive)
        # a sentinel behind record 1: once it is dead-lettered, so is any second copy of 1
        await produce_raw(kafka_bootstrap, level_topic, [(b"sentinel", [])])
        await _until(lambda: _metric(runtime, "hookstream_delay_dead_lettered_total") == 3)

    assert dlt_offsets(await read_to_end(kafka_bootstrap, dlt)) == [1, 2]


def _delay_actor(runtime: Runtime, level_topic: str) -> Actor:
    delay = runtime.system.root.child("delay")
    assert isinstance(delay, Supervisor)
    partitions = delay.child("partitions")
    assert isinstance(partitions, Supervisor)
    return partitions.child(f"{level_topic}-0")


# -- the delivery path ----------------------------------------------------------------------


async def test_a_record_too_large_for_the_dead_letter_topic_goes_without_its_value(
    kafka_bootstrap: str, topic_factory: TopicFactory, fast_group_kwargs: dict[str, int],
    tmp_path: Path,
) -> None:
    topic = await topic_factory(partitions=1)
    dlt = await topic_factory(partitions=1, prefix="dlt")
    await produce_raw(kafka_bootstrap, topic, [
        (HUGE_VALUE, []),           # 0: dead-lettered without its value
        (b"small", [HUGE_HEADER]),  # 1: too large even so: dropped, journaled, counted
        (b"fine", []),              # 2: dead-lettered as it is
    ])
    async with make_runtime(kafka_bootstrap, tmp_path) as runtime:
        sub = subscription("poison", [{"name": topic}], "http://127.0.0.1:1/refused",
                           fast_group=fast_group_kwargs, retryBeforeCommit=1,
                           delayOnErrorMs=10, deadLetterTopic=dlt)
        await Admin(runtime).subscribe(sub)
        await wait_committed(kafka_bootstrap, "g-poison", topic, 3)
        writer = runtime.service("delivery").tree("poison_g-poison").child("deadletter")
        assert isinstance(writer, DeadLetterActor) and writer.dropped == 1

    records = await read_to_end(kafka_bootstrap, dlt)
    assert dlt_offsets(records) == [0, 2]
    bare, fine = records
    headers = dict(bare.headers)
    assert bare.value == b"" and bare.key == b"k" and headers["dlt-value-dropped"] == b"1500000"
    assert headers["dlt-reason"].startswith(b"gave up after 2 attempts: ")
    assert b"; value dropped: too large to write (MessageSizeTooLargeError" in \
        headers["dlt-reason"]
    assert fine.value == b"fine" and "dlt-value-dropped" not in dict(fine.headers)
    failures = [e for e in _journal(tmp_path / "journal", "dead_letter_failed")
                if e["offset"] == 1]
    assert failures[-1]["reason"].startswith(f"dropped: not written to {dlt}")


async def test_a_restarted_partition_actor_does_not_dead_letter_a_record_twice(
    kafka_bootstrap: str, topic_factory: TopicFactory, fast_group_kwargs: dict[str, int],
    tmp_path: Path,
) -> None:
    """Record 0 holds the commit position (its push hangs); record 1 is dead-lettered,
    then its partition actor restarts from the commit and gives record 1 up again."""
    topic = await topic_factory(partitions=1)
    dlt = await topic_factory(partitions=1, prefix="dlt")
    await produce_raw(kafka_bootstrap, topic, [(b"slow", []), (b"poison", [])])
    release, pushes_of_0 = asyncio.Event(), 0

    async def behaviour(push: Push) -> int:
        nonlocal pushes_of_0
        if push.offset == 1:
            return 500
        pushes_of_0 += 1
        if pushes_of_0 == 1:
            await release.wait()  # the first push of record 0 hangs past the restart
        return 200

    receiver = await Receiver(behaviour).start()
    try:
        async with make_runtime(kafka_bootstrap, tmp_path) as runtime:
            sub = subscription("twice", [{"name": topic, "config": {"concurrencyFactor": 2}}],
                               receiver.url, fast_group=fast_group_kwargs,
                               retryBeforeCommit=1, delayOnErrorMs=10, deadLetterTopic=dlt)
            await Admin(runtime).subscribe(sub)
            assert dlt_offsets(await _read(kafka_bootstrap, dlt, 1)) == [1]
            victim = _partition_actor(runtime, "twice_g-twice", topic)
            victim.kill("chaos test")
            await wait_committed(kafka_bootstrap, "g-twice", topic, 2)
            assert _partition_actor(runtime, "twice_g-twice", topic) is not victim
            release.set()
    finally:
        release.set()
        await receiver.stop()

    assert dlt_offsets(await read_to_end(kafka_bootstrap, dlt)) == [1]


def _partition_actor(runtime: Runtime, key: str, topic: str) -> Actor:
    partitions = runtime.service("delivery").tree(key).child("partitions")
    assert isinstance(partitions, Supervisor)
    return partitions.child(f"{topic}-0")
