"""Batched pushes (`subscriptionMethod.batchSize`): embedded broker, real runtime, real
HTTP receivers on loopback; one request carries records of one partition as JSON."""

from __future__ import annotations

import asyncio
import base64
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer

from runtime.kafka.broker import free_port
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
from tests.integration.processes import admin, kill, paced, start_process, write_config

pytestmark = pytest.mark.integration

Coordinates = tuple[int, int]  # partition, offset


def batch_of(push: Push) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = json.loads(push.body)["records"]
    return records


def delivered_records(receiver: Receiver) -> list[Coordinates]:
    return [(r["partition"], r["offset"]) for push in receiver.ok for r in batch_of(push)]


def distinct(receiver: Receiver) -> set[Coordinates]:
    return set(delivered_records(receiver))


async def wait_committed(bootstrap: str, group: str, topic: str,
                         expected: dict[int, int]) -> None:
    """Poll the group's committed offsets until they equal `expected`."""
    async def reached() -> bool:
        return await committed(bootstrap, group, topic, len(expected)) == expected

    await waits.until(reached, timeout_s=20, poll_s=0.1,
                      what=f"{group} committed {expected} on {topic}")


async def test_every_record_arrives_once_in_json_batches_of_one_partition(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        fast_group_kwargs: dict[str, int]) -> None:
    topic = await topic_factory(partitions=2)
    await produce(kafka_bootstrap, topic, 300, partitions=2, key=lambda i: f"k{i}".encode())
    receiver = await Receiver().start()
    runtime = make_runtime(kafka_bootstrap, tmp_path)
    await runtime.start()
    try:
        sub = subscription("b1", [{"name": topic, "config": {"concurrencyFactor": 2}}],
                           receiver.url, fast_group=fast_group_kwargs, batchSize=50,
                           batchLingerMs=20)
        await Admin(runtime).subscribe(sub)
        await receiver.wait_for(lambda: len(distinct(receiver)) == 300)
        await wait_committed(kafka_bootstrap, "g-b1", topic, {0: 150, 1: 150})
    finally:
        await runtime.stop()
        await receiver.stop()
    assert sorted(delivered_records(receiver)) == sorted(distinct(receiver))  # no duplicates
    assert max(len(batch_of(p)) for p in receiver.ok) > 1
    assert all(len(batch_of(p)) <= 50 for p in receiver.ok)
    for push in receiver.ok:
        records = batch_of(push)
        assert push.headers["Content-Type"] == "application/json"
        assert push.headers["QOH-Batch-Size"] == str(len(records))
        assert {r["partition"] for r in records} == {push.partition}
        assert [r["offset"] for r in records] == sorted(r["offset"] for r in records)
        first = records[0]
        assert first["topic"] == topic and first["offset"] == push.offset
        assert first["value"] == f"v{first['key'][1:]}"
        assert "valueEncoding" not in first and isinstance(first["timestamp"], int)


async def test_bytes_that_are_not_utf8_travel_as_base64(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        fast_group_kwargs: dict[str, int]) -> None:
    topic = await topic_factory(partitions=1)
    await produce(kafka_bootstrap, topic, 4, key=lambda i: b"\xff\xfe" + bytes([i]))
    receiver = await Receiver().start()
    runtime = make_runtime(kafka_bootstrap, tmp_path)
    await runtime.start()
    try:
        sub = subscription("b64", [{"name": topic, "config": {"concurrencyFactor": 1}}],
                           receiver.url, fast_group=fast_group_kwargs, batchSize=10)
        await Admin(runtime).subscribe(sub)
        await receiver.wait_for(lambda: len(distinct(receiver)) == 4)
    finally:
        await runtime.stop()
        await receiver.stop()
    records = sorted((r for p in receiver.ok for r in batch_of(p)), key=lambda r: r["offset"])
    assert [r["keyEncoding"] for r in records] == ["base64"] * 4
    assert [base64.b64decode(r["key"]) for r in records] == [
        b"\xff\xfe" + bytes([i]) for i in range(4)]
    assert [r["value"] for r in records] == [f"v{i}" for i in range(4)]


async def test_key_mode_keeps_each_keys_order_within_and_across_batches(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        fast_group_kwargs: dict[str, int]) -> None:
    topic = await topic_factory(partitions=1)
    await produce(kafka_bootstrap, topic, 200, key=lambda i: f"key{i % 7}".encode())
    failed_once: set[int] = set()

    async def flaky(push: Push) -> int:
        offsets = [r["offset"] for r in batch_of(push)]
        if any(o % 11 == 0 and o not in failed_once for o in offsets):
            failed_once.update(offsets)
            return 503
        return 200

    receiver = await Receiver(flaky).start()
    runtime = make_runtime(kafka_bootstrap, tmp_path)
    await runtime.start()
    try:
        sub = subscription("bk", [{"name": topic, "config": {
            "concurrencyFactor": 4, "ordering": "key", "lanes": 7}}],
            receiver.url, fast_group=fast_group_kwargs, batchSize=5, delayOnErrorMs=20)
        await Admin(runtime).subscribe(sub)
        await receiver.wait_for(lambda: len(distinct(receiver)) == 200)
    finally:
        await runtime.stop()
        await receiver.stop()
    by_key: dict[str, list[int]] = defaultdict(list)
    for push in receiver.ok:
        for record in batch_of(push):
            by_key[record["key"]].append(record["offset"])
    assert len(by_key) == 7
    for key, offsets in by_key.items():
        assert offsets == sorted(offsets), f"{key} out of order: {offsets}"
    assert failed_once, "no batch failed: the test proved nothing about retries"


async def test_a_failed_batch_is_retried_until_every_record_is_delivered(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        fast_group_kwargs: dict[str, int]) -> None:
    topic = await topic_factory(partitions=1)
    await produce(kafka_bootstrap, topic, 40)
    answers = iter([500, 500])

    async def fail_twice(push: Push) -> int:
        return next(answers, 200)

    receiver = await Receiver(fail_twice).start()
    runtime = make_runtime(kafka_bootstrap, tmp_path)
    await runtime.start()
    try:
        sub = subscription("br", [{"name": topic, "config": {"concurrencyFactor": 1}}],
                           receiver.url, fast_group=fast_group_kwargs, batchSize=20,
                           batchLingerMs=50, delayOnErrorMs=20)
        await Admin(runtime).subscribe(sub)
        await receiver.wait_for(lambda: len(distinct(receiver)) == 40)
        await wait_committed(kafka_bootstrap, "g-br", topic, {0: 40})
    finally:
        await runtime.stop()
        await receiver.stop()
    ok = {id(p) for p in receiver.ok}
    failed = [p for p in receiver.pushes if id(p) not in ok]
    assert len(failed) == 2
    retried = {r["offset"] for p in failed for r in batch_of(p)}
    assert retried <= distinct_offsets(receiver)
    assert len(retried) > 1  # a whole batch failed and came back


def distinct_offsets(receiver: Receiver) -> set[int]:
    return {offset for _, offset in distinct(receiver)}


async def test_a_batch_that_gives_up_dead_letters_each_of_its_records(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        fast_group_kwargs: dict[str, int]) -> None:
    topic = await topic_factory(partitions=1)
    dlt = await topic_factory(partitions=1, prefix="dlt")
    await produce(kafka_bootstrap, topic, 12)

    async def refuse(push: Push) -> int:
        return 500

    receiver = await Receiver(refuse).start()
    runtime = make_runtime(kafka_bootstrap, tmp_path)
    await runtime.start()
    try:
        sub = subscription("bd", [{"name": topic, "config": {"concurrencyFactor": 2}}],
                           receiver.url, fast_group=fast_group_kwargs, batchSize=4,
                           retryBeforeCommit=1, deadLetterTopic=dlt, delayOnErrorMs=20)
        await Admin(runtime).subscribe(sub)
        await wait_committed(kafka_bootstrap, "g-bd", topic, {0: 12})
    finally:
        await runtime.stop()
        await receiver.stop()
    records = await read_all(kafka_bootstrap, dlt, 12)
    assert sorted(r.value for r in records) == sorted(f"v{i}".encode() for i in range(12))
    assert all(len(batch_of(p)) <= 4 for p in receiver.pushes)


async def read_all(bootstrap: str, topic: str, count: int) -> list[Any]:
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap,
                                auto_offset_reset="earliest", enable_auto_commit=False)
    await consumer.start()
    records: list[Any] = []
    try:
        async with asyncio.timeout(15):
            while len(records) < count:
                for messages in (await consumer.getmany(timeout_ms=200)).values():
                    records.extend(messages)
    finally:
        await consumer.stop()
    return records


async def test_a_killed_process_loses_no_record_of_its_batches(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        fast_group_kwargs: dict[str, int]) -> None:
    topic = await topic_factory(partitions=2)
    await produce(kafka_bootstrap, topic, 600, partitions=2)

    receiver = await Receiver(paced(0.01)).start()
    port = free_port()
    config = write_config(tmp_path, kafka_bootstrap, port)
    process = await start_process(config, port)
    try:
        sub = subscription("bkill", [{"name": topic, "config": {"concurrencyFactor": 2}}],
                           receiver.url, fast_group=fast_group_kwargs, batchSize=10)
        status, reply = await admin(port, "POST", "/broker/subscription", sub)
        assert status == 200, reply
        await receiver.wait_for(lambda: len(distinct(receiver)) >= 100)
        await kill(process)  # SIGKILL: no drain, no final commit, batches in flight
        killed_at = len(distinct(receiver))
        assert killed_at < 600, "everything was delivered before the kill"
        process = await start_process(config, port)
        await receiver.wait_for(lambda: len(distinct(receiver)) == 600, timeout_s=60)
    finally:
        await kill(process)
        await receiver.stop()
    assert distinct(receiver) == {(i % 2, i // 2) for i in range(600)}
