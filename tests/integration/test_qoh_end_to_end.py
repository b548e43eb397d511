"""Queue-Over-Http's own end-to-end case: 11 consumers in 11 groups x 10 topics x 100
records: exactly 11,000 deliveries, 1,000 per consumer, no duplicate per consumer."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import pytest

from tests.conftest import TopicFactory
from tests.integration.delivery_harness import Admin, Receiver, make_runtime, produce, subscription
from tests.waits import until

pytestmark = pytest.mark.integration

CONSUMERS, TOPICS, RECORDS = 11, 10, 100


async def test_eleven_consumers_ten_topics_hundred_records_each(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        fast_group_kwargs: dict[str, int]) -> None:
    topics = [await topic_factory(partitions=1, prefix="qoh") for _ in range(TOPICS)]
    await asyncio.gather(*(produce(kafka_bootstrap, t, RECORDS,
                                   key=lambda i: f"key-{i}".encode()) for t in topics))
    receiver = await Receiver().start()
    async with make_runtime(kafka_bootstrap, tmp_path) as runtime:
        ends: dict[tuple[str | None, str | None], int] = {}  # (subscription, topic) -> commit
        runtime.listen("committed", lambda e: ends.__setitem__(
            (e.subscription, e.topic), max(e.offset or 0, ends.get((e.subscription, e.topic), 0))))
        admin = Admin(runtime)
        for n in range(CONSUMERS):
            await admin.subscribe(subscription(
                f"consumer{n}", [{"name": t, "config": {"concurrencyFactor": 10}} for t in topics],
                receiver.url, group=f"group{n}", fast_group=fast_group_kwargs))
        total = CONSUMERS * TOPICS * RECORDS
        await receiver.wait_for(lambda: len(receiver.ok) >= total, timeout_s=120)
        # committed to the end: nothing is left in flight that could arrive again
        await until(lambda: len(ends) == CONSUMERS * TOPICS
                    and all(o == RECORDS for o in ends.values()),
                    what="every subscription committed every topic to the end")
    await receiver.stop()
    assert len(receiver.ok) == total
    per_consumer = Counter(p.consumer for p in receiver.ok)
    assert per_consumer == {f"consumer{n}_group{n}": TOPICS * RECORDS for n in range(CONSUMERS)}
    assert receiver.duplicates() == []
    for push in receiver.ok:
        assert push.headers["QOH-Topic"] in topics
        assert push.headers["QOH-Partition"] == "0"
        assert push.headers["QOH-Broker"] == "Kafka"
        assert push.headers["QOH-Message-Key"] == f"key-{push.offset}"
        assert push.body == f"v{push.offset}".encode()
