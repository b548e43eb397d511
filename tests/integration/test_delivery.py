"""End-to-end delivery: embedded broker, real runtime, real HTTP receivers on loopback."""

from __future__ import annotations

import asyncio
import base64
import random
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer

from tests import waits
from tests.conftest import TopicFactory
from tests.integration.delivery_harness import (
    Admin,
    Push,
    Receiver,
    committed,
    make_runtime,
    produce,
    subscription,
)

pytestmark = pytest.mark.integration


async def test_every_record_reaches_the_endpoint_with_its_headers_and_is_committed(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        fast_group_kwargs: dict[str, int]) -> None:
    topic = await topic_factory(partitions=3)
    await produce(kafka_bootstrap, topic, 90, partitions=3, key=lambda i: f"k{i}".encode())
    receiver = await Receiver().start()
    runtime = make_runtime(kafka_bootstrap, tmp_path)
    await runtime.start()
    try:
        sub = subscription("c1", [{"name": topic, "config": {"concurrencyFactor": 10}}],
                           receiver.url, fast_group=fast_group_kwargs,
                           additionalHeaders={"X-Token": "secret"})
        await Admin(runtime).subscribe(sub)
        await receiver.wait_for(lambda: len(receiver.delivered()) == 90)
        push = receiver.ok[0]
        assert push.headers["QOH-Consumer"] == "c1_g-c1"
        assert push.headers["QOH-Topic"] == topic
        assert push.headers["QOH-Broker"] == "Kafka"
        assert push.headers["X-Token"] == "secret"
        assert push.headers["QOH-Message-Key"].startswith("k")
        assert push.body == f"v{push.headers['QOH-Message-Key'][1:]}".encode()
        assert push.headers["webhook-id"].startswith("msg_")
    finally:
        await runtime.stop()
        await receiver.stop()
    assert await committed(kafka_bootstrap, "g-c1", topic, 3) == {0: 30, 1: 30, 2: 30}


async def test_out_of_order_completion_commits_only_contiguous_offsets(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        fast_group_kwargs: dict[str, int]) -> None:
    topic = await topic_factory(partitions=1)
    await produce(kafka_bootstrap, topic, 10)
    release = {i: asyncio.Event() for i in range(10)}

    async def held(push: Push) -> int:
        await release[push.offset].wait()
        return 200

    receiver = await Receiver(held).start()
    runtime = make_runtime(kafka_bootstrap, tmp_path)
    await runtime.start()
    group = "g-ooo"
    try:
        sub = subscription("ooo", [{"name": topic, "config": {
            "concurrencyFactor": 10, "autoCommitPeriodMs": 50}}], receiver.url, group=group,
            fast_group=fast_group_kwargs)
        await Admin(runtime).subscribe(sub)
        await receiver.wait_for(lambda: len(receiver.pushes) == 10)
        for offset in (2, 0, 9):
            release[offset].set()
        await receiver.wait_for(lambda: len(receiver.ok) == 3)
        await wait_committed(kafka_bootstrap, group, topic, 1)
        lag = f'hookstream_lag{{subscription="ooo_g-ooo",topic="{topic}",partition="0"}} 9'
        assert lag in runtime.metrics.render()  # 10 fetched (high watermark), 1 committed
        for offset in (1, 4, 5, 3, 7):
            release[offset].set()
        await receiver.wait_for(lambda: len(receiver.ok) == 8)
        await wait_committed(kafka_bootstrap, group, topic, 6)
        for event in release.values():
            event.set()
        await wait_committed(kafka_bootstrap, group, topic, 10)
    finally:
        await runtime.stop()
        await receiver.stop()


async def wait_committed(bootstrap: str, group: str, topic: str, expected: int) -> None:
    """Poll the group's committed offset until it equals `expected`; fail if it passes it."""
    async def reached() -> bool:
        position = (await committed(bootstrap, group, topic, 1))[0]
        assert position <= expected, f"committed {position} passed {expected}"
        return position == expected

    await waits.until(reached, timeout_s=6, poll_s=0.1,
                      what=f"{group} committed {expected} on {topic}")


async def test_a_failing_receiver_still_gets_everything_and_commits_reach_the_end(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        fast_group_kwargs: dict[str, int]) -> None:
    topic = await topic_factory(partitions=2)
    await produce(kafka_bootstrap, topic, 200, partitions=2)
    rng = random.Random(7)

    async def flaky(push: Push) -> int:
        return 500 if rng.random() < 0.3 else 200

    receiver = await Receiver(flaky).start()
    runtime = make_runtime(kafka_bootstrap, tmp_path)
    await runtime.start()
    try:
        sub = subscription("flaky", [{"name": topic, "config": {"concurrencyFactor": 20}}],
                           receiver.url, fast_group=fast_group_kwargs, delayOnErrorMs=10)
        await Admin(runtime).subscribe(sub)
        await receiver.wait_for(lambda: len(receiver.delivered()) == 200)
        assert len(receiver.pushes) > 200  # some were retried
    finally:
        await runtime.stop()
        await receiver.stop()
    assert await committed(kafka_bootstrap, "g-flaky", topic, 2) == {0: 100, 1: 100}


async def test_key_mode_keeps_each_keys_order_while_other_keys_flow_past_a_retry(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        fast_group_kwargs: dict[str, int]) -> None:
    topic = await topic_factory(partitions=1)
    keys = [b"slow", *(f"k{i}".encode() for i in range(9))]
    await produce(kafka_bootstrap, topic, 300, key=lambda i: keys[i % len(keys)])
    rng = random.Random(11)
    slow_attempts = 0

    async def failing(push: Push) -> int:
        nonlocal slow_attempts
        if push.headers["QOH-Message-Key"] == "slow" and push.offset == 0:
            slow_attempts += 1
            return 500 if slow_attempts <= 5 else 200
        return 500 if rng.random() < 0.2 else 200

    receiver = await Receiver(failing).start()
    runtime = make_runtime(kafka_bootstrap, tmp_path)
    await runtime.start()
    try:
        sub = subscription("keys", [{"name": topic, "config": {
            "concurrencyFactor": 8, "ordering": "key", "lanes": 16}}], receiver.url,
            fast_group=fast_group_kwargs, delayOnErrorMs=30)
        await Admin(runtime).subscribe(sub)
        await receiver.wait_for(lambda: len(receiver.delivered()) == 300)
    finally:
        await runtime.stop()
        await receiver.stop()
    by_key: dict[str, list[int]] = {}
    for push in receiver.ok:
        by_key.setdefault(push.headers["QOH-Message-Key"], []).append(push.offset)
    for key, offsets in by_key.items():
        assert offsets == sorted(offsets), f"key {key} out of order: {offsets}"
    first_slow_ok = next(i for i, p in enumerate(receiver.ok) if p.offset == 0)
    others_before = [p for p in receiver.ok[:first_slow_ok]
                     if p.headers["QOH-Message-Key"] != "slow"]
    assert others_before, "other keys waited for the retried key"


async def test_retry_before_commit_gives_exactly_n_retries_then_dead_letters(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        fast_group_kwargs: dict[str, int]) -> None:
    topic = await topic_factory(partitions=1)
    dlt = await topic_factory(partitions=1, prefix="dlt")
    await produce(kafka_bootstrap, topic, 5)

    async def poison(push: Push) -> int:
        return 500 if push.offset == 2 else 200

    receiver = await Receiver(poison).start()
    runtime = make_runtime(kafka_bootstrap, tmp_path)
    await runtime.start()
    try:
        sub = subscription("dl", [{"name": topic, "config": {"concurrencyFactor": 5}}],
                           receiver.url, fast_group=fast_group_kwargs, retryBeforeCommit=3,
                           deadLetterTopic=dlt, delayOnErrorMs=20)
        await Admin(runtime).subscribe(sub)
        await receiver.wait_for(lambda: len(receiver.delivered()) == 4)
        await wait_committed(kafka_bootstrap, "g-dl", topic, 5)
    finally:
        await runtime.stop()
        await receiver.stop()
    attempts = [p for p in receiver.pushes if p.offset == 2]
    assert len(attempts) == 4
    assert len({p.headers["webhook-id"] for p in attempts}) == 1
    records = await read_all(kafka_bootstrap, dlt, 1)
    assert [r.value for r in records] == [b"v2"]
    headers = dict(records[0].headers)
    assert headers["dlt-offset"] == b"2" and headers["dlt-attempts"] == b"4"
    assert headers["dlt-topic"] == topic.encode()


async def read_all(bootstrap: str, topic: str, count: int) -> list[Any]:
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap,
                                auto_offset_reset="earliest", enable_auto_commit=False)
    await consumer.start()
    records: list[Any] = []
    try:
        async with asyncio.timeout(15):
            while len(records) < count:
                batch = await consumer.getmany(timeout_ms=200)
                for messages in batch.values():
                    records.extend(messages)
    finally:
        await consumer.stop()
    return records


async def test_pattern_subscription_picks_up_a_topic_created_later(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        fast_group_kwargs: dict[str, int]) -> None:
    prefix = f"pat{random.randrange(10**9)}"
    first = await topic_factory(partitions=1, prefix=prefix)
    await produce(kafka_bootstrap, first, 3)
    receiver = await Receiver().start()
    runtime = make_runtime(kafka_bootstrap, tmp_path)
    await runtime.start()
    try:
        sub = subscription("pat", [{"pattern": f"{prefix}-.*"}], receiver.url,
                           fast_group=fast_group_kwargs)
        await Admin(runtime).subscribe(sub)
        await receiver.wait_for(lambda: len(receiver.delivered()) == 3)
        later = await topic_factory(partitions=1, prefix=prefix)
        await produce(kafka_bootstrap, later, 4)
        await receiver.wait_for(lambda: len(receiver.delivered()) == 7, timeout_s=30)
    finally:
        await runtime.stop()
        await receiver.stop()
    assert {p.topic for p in receiver.ok} == {first, later}


async def test_explicit_partitions_deliver_only_those_partitions(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path) -> None:
    topic = await topic_factory(partitions=3)
    await produce(kafka_bootstrap, topic, 30, partitions=3)
    receiver = await Receiver().start()
    runtime = make_runtime(kafka_bootstrap, tmp_path)
    await runtime.start()
    try:
        sub = subscription("pinned", [{"name": topic, "partitions": [{"number": 0},
                                                                       {"number": 2}]}],
                           receiver.url)
        await Admin(runtime).subscribe(sub)
        await receiver.wait_for(lambda: len(receiver.delivered()) == 20)
    finally:
        await runtime.stop()
        await receiver.stop()
    assert {p.partition for p in receiver.ok} == {0, 2}
    assert await committed(kafka_bootstrap, "g-pinned", topic, 3) == {0: 10, 1: -1, 2: 10}


async def test_records_with_arbitrary_byte_keys_are_delivered(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        fast_group_kwargs: dict[str, int]) -> None:
    topic = await topic_factory(partitions=1)
    keys = [b"\xff\xfe\x00binary", "ключ".encode(), b"", None]
    await produce(kafka_bootstrap, topic, 4, key=lambda i: keys[i])
    receiver = await Receiver().start()
    runtime = make_runtime(kafka_bootstrap, tmp_path)
    await runtime.start()
    try:
        sub = subscription("bytes", [{"name": topic, "config": {"ordering": "key",
                                                                "concurrencyFactor": 4}}],
                           receiver.url, fast_group=fast_group_kwargs)
        await Admin(runtime).subscribe(sub)
        await receiver.wait_for(lambda: len(receiver.delivered()) == 4)
    finally:
        await runtime.stop()
        await receiver.stop()
    by_offset = {p.offset: p.headers for p in receiver.ok}
    assert by_offset[0]["QOH-Message-Key-Encoding"] == "base64"
    assert base64.b64decode(by_offset[0]["QOH-Message-Key"]) == keys[0]
    assert by_offset[1]["QOH-Message-Key"] == "ключ"
    assert by_offset[2]["QOH-Message-Key"] == ""
    assert by_offset[3]["QOH-Message-Key"] == ""
