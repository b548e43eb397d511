"""A dead endpoint opens its origin's circuit breaker: requests stop (no hot loop of
retries), the status shows it, and the probe closes it again once the endpoint is back."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.conftest import TopicFactory
from tests.integration.delivery_harness import (
    Admin,
    Push,
    Receiver,
    make_runtime,
    produce,
    subscription,
)

pytestmark = pytest.mark.integration


async def test_a_dead_endpoint_opens_the_breaker_and_a_probe_closes_it(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        fast_group_kwargs: dict[str, int]) -> None:
    topic = await topic_factory(partitions=1)
    dead = {"yes": True}

    async def answer(push: Push) -> int:
        return 500 if dead["yes"] else 200

    receiver = await Receiver(answer).start()
    try:
        async with make_runtime(kafka_bootstrap, tmp_path,
                                egress={"circuit_breaker": True}) as runtime:
            admin = Admin(runtime)
            await admin.subscribe(subscription(
                "cb", [{"name": topic, "config": {"concurrencyFactor": 10}}], receiver.url,
                fast_group=fast_group_kwargs, delayOnErrorMs=20))
            await produce(kafka_bootstrap, topic, 30)
            state = ""
            for _ in range(200):
                _, one = await admin.call("GET", "/broker/subscription/cb/g-cb")
                state = one["data"]["status"]["endpoint"]["origin"]["breaker"]
                if state == "open":
                    break
                await asyncio.sleep(0.05)
            assert state == "open"
            before = len(receiver.pushes)
            await asyncio.sleep(2)  # with retries every 20 ms, a hot loop would send ~100s
            assert len(receiver.pushes) - before <= 1, "requests went to an open origin"
            dead["yes"] = False
            await receiver.wait_for(lambda: len(receiver.delivered()) == 30, timeout_s=30)
            _, one = await admin.call("GET", "/broker/subscription/cb/g-cb")
            assert one["data"]["status"]["endpoint"]["origin"]["breaker"] == "closed"
    finally:
        await receiver.stop()
