"""Rebalance: a second runtime joins the group mid-stream; partitions move, nothing is lost."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from runtime.host.app import Runtime
from runtime.kernel.supervisor import Supervisor
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


async def paced(push: Push) -> int:
    await asyncio.sleep(0.005)
    return 200


async def test_a_second_runtime_joining_takes_partitions_and_nothing_is_lost(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        fast_group_kwargs: dict[str, int]) -> None:
    topic = await topic_factory(partitions=4)
    total = 2000
    await produce(kafka_bootstrap, topic, total, partitions=4)
    receiver = await Receiver(paced).start()
    shared = {"instance_group": f"rb-{topic}"}  # two instances of one deployment
    first = make_runtime(kafka_bootstrap, tmp_path / "a", delivery=shared)
    second = make_runtime(kafka_bootstrap, tmp_path / "b", delivery=shared)
    sub = subscription("rb", [{"name": topic, "config": {"concurrencyFactor": 4}}],
                       receiver.url, fast_group=fast_group_kwargs)
    await first.start()
    try:
        await Admin(first).subscribe(sub)
        await receiver.wait_for(lambda: len(receiver.delivered()) >= 200)
        await second.start()
        await Admin(second).subscribe(sub)
        owners = runtime_partitions(first, second)
        await receiver.wait_for(lambda: all(owners()) and sum(owners()) == 4, timeout_s=30)
        await receiver.wait_for(lambda: len(receiver.delivered()) == total, timeout_s=60)
    finally:
        await second.stop()
        await first.stop()
        await receiver.stop()
    assert await committed(kafka_bootstrap, "g-rb", topic, 4) == {p: 500 for p in range(4)}


def runtime_partitions(*runtimes: Runtime) -> Callable[[], list[int]]:
    """How many partitions each runtime's subscription holds right now."""

    def owners() -> list[int]:
        counts = []
        for runtime in runtimes:
            partitions = runtime.service("delivery").tree("rb_g-rb").child("partitions")
            assert isinstance(partitions, Supervisor)
            counts.append(len(partitions.children()))
        return counts

    return owners
