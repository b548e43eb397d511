"""In-process handlers (`Runtime.consume`, issue 18): an embedded runtime on the real
broker, an async function as the endpoint, with the HTTP path's guarantees."""

from __future__ import annotations

import asyncio
import random
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer

from actors.delivery.egress.handler import ConsumedRecord
from runtime.errors import DeadLetter, Skip
from runtime.host.app import Runtime
from runtime.kafka import make_producer
from tests.conftest import TopicFactory
from tests.integration.delivery_harness import Admin, committed, make_runtime

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

RECORDS = 10_000
KEYS = 200
PARTITIONS = 4
FAIL_RATE = 0.2
SKIPPED = "k7:0"  # key:sequence of the record the handler skips
POISON = "k11:3"  # ... and of the one it dead-letters


def properties(fast_group: dict[str, int]) -> dict[str, str | int]:
    return {name.replace("_", "."): value for name, value in fast_group.items()}


async def produce_keyed(bootstrap: str, topic: str) -> dict[int, int]:
    """RECORDS records, `k<n>:<sequence within the key>`, partitioned by key; returns the
    end offset of each partition, from the offsets the broker gave them."""
    producer = make_producer(bootstrap, acks="all", linger_ms=5)
    await producer.start()
    try:
        sent = [await producer.send(topic, f"k{i % KEYS}:{i // KEYS}".encode(),
                                    key=f"k{i % KEYS}".encode()) for i in range(RECORDS)]
        written = await asyncio.gather(*sent)
    finally:
        await producer.stop()
    ends = dict.fromkeys(range(PARTITIONS), 0)
    for metadata in written:
        ends[metadata.partition] = max(ends[metadata.partition], metadata.offset + 1)
    return ends


async def read_topic(bootstrap: str, topic: str, count: int) -> list[Any]:
    reader = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                              enable_auto_commit=False)
    await reader.start()
    records: list[Any] = []
    try:
        async with asyncio.timeout(15):
            while len(records) < count:
                for batch in (await reader.getmany(timeout_ms=200)).values():
                    records += batch
    finally:
        await reader.stop()
    return records


class Ledger:
    """What the handler saw: attempts per record, successes per key in handling order."""

    def __init__(self) -> None:
        self.attempts: Counter[str] = Counter()
        self.handled: dict[str, list[int]] = defaultdict(list)
        self.finished: set[tuple[int, int]] = set()
        self.all_finished = asyncio.Event()

    def finish(self, record: ConsumedRecord) -> None:
        self.finished.add((record.partition, record.offset))
        if len(self.finished) == RECORDS:
            self.all_finished.set()


async def test_ten_thousand_keyed_records_through_a_flaky_handler_keep_every_guarantee(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        fast_group_kwargs: dict[str, int]) -> None:
    topic = await topic_factory(partitions=PARTITIONS)
    dlt = await topic_factory(partitions=1, prefix="dlt")
    ends = await produce_keyed(kafka_bootstrap, topic)
    seen, rng = Ledger(), random.Random(18)

    async def handle(record: ConsumedRecord) -> None:
        assert record.value is not None and record.key is not None
        name = record.value.decode()
        key, sequence = name.split(":")
        seen.attempts[name] += 1
        await asyncio.sleep(rng.uniform(0.001, 0.004))
        if name == SKIPPED:
            seen.finish(record)
            raise Skip("already billed")
        if name == POISON:
            seen.finish(record)
            raise DeadLetter("unknown customer")
        if rng.random() < FAIL_RATE:
            raise RuntimeError("flaky downstream")
        seen.handled[key].append(int(sequence))
        seen.finish(record)

    async with make_runtime(kafka_bootstrap, tmp_path) as runtime:
        orders = await runtime.consume(
            "billing", handle, topics=[topic], ordering="key", concurrency=50, lanes=50,
            retries=0, delay_on_error_ms=5, dead_letter_topic=dlt,
            properties=properties(fast_group_kwargs))
        async with asyncio.timeout(60):
            await seen.all_finished.wait()
        status = await orders.status()
        await orders.stop()  # drains and commits

    assert len(seen.finished) == RECORDS  # every record handled
    for key, sequences in seen.handled.items():
        assert sequences == sorted(set(sequences)), f"{key} handled out of order"
    assert sum(len(s) for s in seen.handled.values()) == RECORDS - 2
    assert sum(seen.attempts.values()) > RECORDS * 1.1  # the failures were retried
    assert seen.attempts[SKIPPED] == 1 and seen.attempts[POISON] == 1  # neither retried
    assert await committed(kafka_bootstrap, "billing", topic, PARTITIONS) == ends
    [dead] = await read_topic(kafka_bootstrap, dlt, 1)
    headers = dict(dead.headers)
    assert dead.value == POISON.encode() and dead.key == b"k11"
    assert headers["dlt-reason"] == b"the receiver gave it up: DeadLetter: unknown customer"
    assert headers["dlt-topic"] == topic.encode()
    inner: Any = status["status"]
    assert inner["state"] == "running" and inner["in_process"] is True
    assert inner["counters"]["dead_lettered"] == 1


async def test_an_in_process_subscription_is_listed_read_only_and_never_persisted(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        fast_group_kwargs: dict[str, int]) -> None:
    topic = await topic_factory(partitions=1)

    async def ignore(record: ConsumedRecord) -> None:
        pass

    runtime: Runtime
    async with make_runtime(kafka_bootstrap, tmp_path) as runtime:
        admin = Admin(runtime)
        async with await runtime.consume("audit", ignore, topics=[topic],
                                         properties=properties(fast_group_kwargs)) as audit:
            assert audit.key == "ignore_audit"
            status, listing = await admin.call("GET", "/broker/subscription")
            assert status == 200
            [listed] = listing["data"]
            assert listed["inProcess"] is True and listed["state"] == "running"
            method = listed["subscriptionMethod"]
            assert method["type"] == "handler" and "uri" not in method
            assert method["handler"].endswith(".<locals>.ignore")
            document = {key: listed[key] for key in ("id", "group", "broker", "topics",
                                                     "subscriptionMethod")}
            status, refused = await admin.call("PUT", "/broker/subscription/ignore/audit",
                                               document)
            assert status == 400 and refused["reason"] == "in-process subscription"
            for verb in ("pause", "resume"):  # read-only through the admin API
                status, refused = await admin.call(
                    "POST", f"/broker/subscription/ignore/audit/{verb}")
                assert status == 400 and refused["reason"] == "in-process subscription"
            status, refused = await admin.call("POST", "/broker/unsubscribe",
                                               {"id": "ignore", "group": {"id": "audit"}})
            assert status == 400 and refused["reason"] == "in-process subscription"
            assert not list((tmp_path / "persist").glob("*.json"))
        status, listing = await admin.call("GET", "/broker/subscription")
        assert listing["data"] == []
        await audit.stop()  # idempotent


async def test_a_handle_stopped_after_its_runtime_has_nothing_left_to_do(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path) -> None:
    topic = await topic_factory()

    async def handle(record: ConsumedRecord) -> None:
        return None

    async with make_runtime(kafka_bootstrap, tmp_path) as runtime:
        handle_ = await runtime.consume("late", handle, topics=[topic])
    await handle_.stop()  # the runtime drained it already
    await handle_.stop()
