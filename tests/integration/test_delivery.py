"""End-to-end delivery: embedded broker, real runtime, real HTTP receivers on loopback."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import TopicFactory
from tests.integration.delivery_harness import (
    Admin,
    Receiver,
    committed,
    make_runtime,
    produce,
    subscription,
)


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
        await receiver.wait_for(lambda: True)
    finally:
        await runtime.stop()
        await receiver.stop()
    assert await committed(kafka_bootstrap, "g-c1", topic, 3) == {0: 30, 1: 30, 2: 30}
