"""Cluster mode: instances share their subscriptions through a compacted Kafka topic. A
subscription posted to one instance runs on all (partitions spread), an update posted to
another applies everywhere, an instance started later takes its share without any post,
and an unsubscribe stops it everywhere (real broker, real runtimes, real receiver)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from actors.delivery.service import DeliveryService
from runtime.host.app import Runtime
from tests.conftest import TopicFactory
from tests.integration.delivery_harness import (
    Admin,
    Receiver,
    committed,
    make_runtime,
    produce,
    subscription,
)

pytestmark = pytest.mark.integration


def instance(bootstrap: str, tmp: Path, name: str, topic: str) -> Runtime:
    return make_runtime(bootstrap, tmp / name, cluster={"subscriptions_topic": topic,
                                                        "replication_factor": 1})


def delivery(runtime: Runtime) -> DeliveryService:
    return runtime.service(DeliveryService)


def owned(runtime: Runtime, key: str) -> int:
    """Partitions of subscription `key` this instance delivers right now."""
    service = delivery(runtime)
    if key not in service.subscriptions:
        return 0
    status = service.status_of(key)["status"]
    assert isinstance(status, dict)
    return len(status["partitions"])


async def until(check: Callable[[], bool], timeout_s: float = 30) -> None:
    for _ in range(int(timeout_s * 10)):
        if check():
            return
        await asyncio.sleep(0.1)
    raise AssertionError("condition not met in time")


async def test_instances_share_subscriptions_through_the_topic(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        fast_group_kwargs: dict[str, int]) -> None:
    topic = await topic_factory(partitions=4)
    log_topic = f"subs-{uuid.uuid4().hex[:8]}"
    receiver = await Receiver().start()
    key = "cl_g-cl"
    try:
        async with instance(kafka_bootstrap, tmp_path, "a", log_topic) as a, \
                instance(kafka_bootstrap, tmp_path, "b", log_topic) as b:
            body = subscription("cl", [{"name": topic}], receiver.url,
                                fast_group=fast_group_kwargs)
            await Admin(a).subscribe(body)
            assert key in delivery(a).subscriptions  # applied here before the answer
            await until(lambda: key in delivery(b).subscriptions)
            await until(lambda: owned(a, key) + owned(b, key) == 4 and owned(a, key) > 0
                        and owned(b, key) > 0)
            await produce(kafka_bootstrap, topic, 40, partitions=4)
            await receiver.wait_for(lambda: len(receiver.delivered()) == 40)

            body["subscriptionMethod"]["additionalHeaders"] = {"X-Version": "2"}
            status, answer = await Admin(b).call("PUT", "/broker/subscription/cl/g-cl", body)
            assert status == 200, answer
            await until(lambda: delivery(a).subscriptions[key].subscriptionMethod
                        .additionalHeaders == {"X-Version": "2"})

            async with instance(kafka_bootstrap, tmp_path, "c", log_topic) as c:
                assert key in delivery(c).subscriptions  # read before it reported ready
                await until(lambda: owned(c, key) > 0)
                await produce(kafka_bootstrap, topic, 40, partitions=4, start=40)
                await receiver.wait_for(lambda: len(receiver.delivered()) == 80)
                assert all(p.headers.get("X-Version") == "2" for p in receiver.ok
                           if int(p.body[1:]) >= 40)

                status, _ = await Admin(c).call("POST", "/broker/unsubscribe",
                                                {"id": "cl", "group.id": "g-cl"})
                assert status == 200
                for runtime in (a, b, c):
                    await until(lambda r=runtime: key not in delivery(r).subscriptions)
    finally:
        await receiver.stop()
    assert await committed(kafka_bootstrap, "g-cl", topic, 4) == {p: 20 for p in range(4)}
