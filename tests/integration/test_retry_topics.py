"""Non-blocking retries on the real broker, through the real delay queue: a record that
keeps failing moves aside to the retry topic and its partition goes on; it comes back
with its original coordinates and `webhook-id`; crashes lose nothing."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from actors.delay.service import DelayService
from actors.delivery.path.partition import PartitionActor
from actors.delivery.path.retrytopic import RetryTopicActor
from actors.delivery.service import DeliveryService
from runtime.host.app import Runtime
from runtime.host.config import parse_config
from runtime.kafka import make_admin, make_consumer
from runtime.kernel.supervisor import Supervisor
from tests.conftest import TopicFactory
from tests.integration.delivery_harness import (
    Admin,
    Push,
    Receiver,
    committed,
    produce,
    runtime_config,
    subscription,
)
from tests.waits import until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(150)]
LEVEL_MS = 100


def _runtime(bootstrap: str, tmp: Path, group: dict[str, int]) -> Runtime:
    suffix = uuid.uuid4().hex[:10]
    config = runtime_config(bootstrap, tmp, delay={
        "group_id": f"delay-{suffix}", "partitions": 1, "dead_letter_topic": f"ddlt-{suffix}",
        "levels": [{"name": "100ms", "delay_ms": LEVEL_MS,
                    "topics": [f"delay-100-{suffix}"]}]})
    return Runtime(parse_config(config), services=[
        DeliveryService,
        lambda: DelayService(consumer_settings=group)])  # type: ignore[list-item]


def _delivery(runtime: Runtime) -> DeliveryService:
    service = runtime.service("delivery")
    assert isinstance(service, DeliveryService)
    return service


async def _until(predicate: Callable[[], bool], what: str, timeout_s: float = 60) -> None:
    await until(predicate, timeout_s=timeout_s, what=what)


async def test_a_failing_record_moves_aside_lets_the_next_1000_through_and_arrives_later(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        fast_group_kwargs: dict[str, int]) -> None:
    topic = await topic_factory(partitions=1)
    retry_topic = f"{topic}.retry"
    recovered = asyncio.Event()

    async def answer(push: Push) -> int:
        return 500 if push.body == b"v0" and not recovered.is_set() else 200

    receiver = await Receiver(answer).start()
    try:
        async with _runtime(kafka_bootstrap, tmp_path, fast_group_kwargs) as runtime:
            await Admin(runtime).subscribe(subscription(
                "rt", [{"name": topic, "config": {"ordering": "partition"}}], receiver.url,
                fast_group=fast_group_kwargs, delayOnErrorMs=10, retryBeforeCommit=4,
                retryTopics={"topic": retry_topic,
                             "delaysMs": [300, 1000, 3000, 10_000, 30_000, 30_000]}))
            await produce(kafka_bootstrap, topic, 1001)
            others = {(topic, o) for o in range(1, 1001)}
            await receiver.wait_for(
                lambda: others <= {(p.topic, p.offset) for p in receiver.ok}, timeout_s=90)
            assert not any(p.body == b"v0" for p in receiver.ok)
            first_ok = next(i for i, p in enumerate(receiver.pushes) if p.body == b"v1")
            assert [p.body for p in receiver.pushes[:first_ok]] == [b"v0"] * 5
            recovered.set()
            await receiver.wait_for(lambda: any(p.body == b"v0" for p in receiver.ok),
                                    timeout_s=75)
            await _until(lambda: _committed_all(runtime, topic, 1001), "commit past 1000")
            moved = runtime.metrics.counter("hookstream_retry_topic_moved_total", "")
            assert sum(v.value for v in moved.children.values()) >= 1
        assert (await committed(kafka_bootstrap, "g-rt", topic, 1)) == {0: 1001}
    finally:
        await receiver.stop()
    failed, [arrived] = receiver.pushes[0], [p for p in receiver.ok if p.body == b"v0"]
    for name in ("QOH-Topic", "QOH-Partition", "QOH-Message-Number", "webhook-id"):
        assert arrived.headers[name] == failed.headers[name], name
    assert arrived.offset == 0 and arrived.topic == topic


def _committed_all(runtime: Runtime, topic: str, end: int) -> bool:
    tree = _delivery(runtime).tree("rt_g-rt")
    parts = tree.child("partitions")
    assert isinstance(parts, Supervisor)
    actor = parts.child(f"{topic}-0") if parts.has_child(f"{topic}-0") else None
    return isinstance(actor, PartitionActor) and actor.book.committed == end


async def test_killing_actors_while_records_move_aside_loses_nothing(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        fast_group_kwargs: dict[str, int]) -> None:
    topic = await topic_factory(partitions=2)
    retry_topic, dlt = f"{topic}.retry", f"{topic}.dlt"
    records = 300
    pushes: dict[bytes, int] = {}

    async def answer(push: Push) -> int:
        pushes[push.body] = pushes.get(push.body, 0) + 1
        bad = int(push.body[1:]) % 10 == 0  # every tenth fails its first four attempts
        return 500 if bad and pushes[push.body] <= 4 else 200

    receiver = await Receiver(answer).start()
    try:
        async with _runtime(kafka_bootstrap, tmp_path, fast_group_kwargs) as runtime:
            await Admin(runtime).subscribe(subscription(
                "kill", [{"name": topic, "config": {"concurrencyFactor": 5}}], receiver.url,
                fast_group=fast_group_kwargs, delayOnErrorMs=10, retryBeforeCommit=2,
                deadLetterTopic=dlt,
                retryTopics={"topic": retry_topic, "delaysMs": [200, 400, 800]}))
            await produce(kafka_bootstrap, topic, records, partitions=2)
            tree = _delivery(runtime).tree("kill_g-kill")
            await _until(lambda: _moved(tree) >= 3, "records moved to the retry topic")
            parts = tree.child("partitions")
            assert isinstance(parts, Supervisor)
            for name in parts.children():
                parts.child(name).kill("chaos")
            await _until(lambda: len(receiver.delivered()) >= records // 2, "half delivered")
            tree = _delivery(runtime).tree("kill_g-kill")
            tree.child("retrytopic").kill("chaos")  # one_for_all: the whole tree restarts
            everything = {(topic, o % 2, o // 2) for o in range(records)}
            await _until(lambda: everything <= _delivered_or_dead(receiver, set()),
                         "every record delivered", timeout_s=90)
        dead = await _dead_letters(kafka_bootstrap, dlt)
    finally:
        await receiver.stop()
    assert everything <= _delivered_or_dead(receiver, dead)
    assert all(pushes[b"v%d" % i] >= 5 for i in range(0, records, 10))


def _moved(tree: Supervisor) -> int:
    actor = tree.child("retrytopic") if tree.has_child("retrytopic") else None
    return actor.moved if isinstance(actor, RetryTopicActor) else 0


def _delivered_or_dead(receiver: Receiver, dead: set[tuple[str, int, int]]
                       ) -> set[tuple[str, int, int]]:
    return {(p.topic, p.partition, p.offset) for p in receiver.ok} | dead


async def _dead_letters(bootstrap: str, topic: str) -> set[tuple[str, int, int]]:
    """What the dead-letter topic holds (none expected; read so a loss cannot hide there)."""
    from actors.shared.deadletter import dead_letter_source

    admin = make_admin(bootstrap)
    await admin.start()
    try:
        if topic not in await admin.list_topics():
            return set()  # never written to (consumers do not create topics)
    finally:
        await admin.close()
    consumer = make_consumer(bootstrap, topic, auto_offset_reset="earliest",
                             enable_auto_commit=False)
    await consumer.start()
    try:
        batches: dict[Any, Any] = await consumer.getmany(timeout_ms=1000)
        found = set()
        for messages in batches.values():
            for message in messages:
                source = dead_letter_source(message.headers or ())
                if source is not None:
                    found.add((source.topic, source.partition, source.offset))
        return found
    finally:
        await consumer.stop()


async def test_a_delay_no_level_holds_is_refused_naming_the_level_to_add(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        fast_group_kwargs: dict[str, int]) -> None:
    topic = await topic_factory(partitions=1)
    async with _runtime(kafka_bootstrap, tmp_path, fast_group_kwargs) as runtime:
        status, reply = await Admin(runtime).call("POST", "/broker/subscription", subscription(
            "lv", [{"name": topic}], "http://127.0.0.1:9/x",
            retryTopics={"topic": f"{topic}.r", "delaysMs": [LEVEL_MS, 50]}))
    assert status == 400
    assert reply["reason"] == "invalid subscriptionMethod.retryTopics.delaysMs[1]"
    assert "delay_ms <= 50" in reply["details"]


async def test_a_stored_subscription_whose_delay_no_longer_fits_fails_naming_the_level(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        fast_group_kwargs: dict[str, int]) -> None:
    topic = await topic_factory(partitions=1)
    async with _runtime(kafka_bootstrap, tmp_path, fast_group_kwargs) as runtime:
        await Admin(runtime).subscribe(subscription(
            "st", [{"name": topic}], "http://127.0.0.1:9/x", fast_group=fast_group_kwargs,
            retryTopics={"topic": f"{topic}.r", "delaysMs": [150]}))
    config = runtime_config(kafka_bootstrap, tmp_path, delay={
        "group_id": f"delay-{uuid.uuid4().hex[:8]}", "partitions": 1,
        "levels": [{"name": "1s", "delay_ms": 1000, "topics": [f"d1s-{uuid.uuid4().hex[:8]}"]}]})
    async with Runtime(parse_config(config), services=[
            DeliveryService,
            lambda: DelayService(consumer_settings=fast_group_kwargs)]  # type: ignore[list-item]
            ) as runtime:
        _, one = await Admin(runtime).call("GET", "/broker/subscription/st/g-st")
    status = one["data"]["status"]
    assert status["state"] == "failed"
    assert "delaysMs[0]" in status["reason"] and "delay_ms <= 150" in status["reason"]
