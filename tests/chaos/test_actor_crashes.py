"""Chaos: kill actors of a running subscription mid-stream; nothing is lost."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from runtime.host.app import Runtime
from runtime.kernel.actor import Actor
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
from tests.waits import until

pytestmark = pytest.mark.chaos


async def slow_ok(push: Push) -> int:
    await asyncio.sleep(0.002)
    return 200


@pytest.mark.parametrize("victim", ["partition", "consumer", "egress"])
async def test_a_killed_actor_is_rebuilt_and_every_record_is_delivered(
        victim: str, kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        fast_group_kwargs: dict[str, int]) -> None:
    topic = await topic_factory(partitions=2)
    await produce(kafka_bootstrap, topic, 600, partitions=2)
    receiver = await Receiver(slow_ok).start()
    runtime = make_runtime(kafka_bootstrap, tmp_path)
    await runtime.start()
    try:
        sub = subscription("chaos", [{"name": topic, "config": {
            "concurrencyFactor": 5, "autoCommitPeriodMs": 100}}], receiver.url,
            fast_group=fast_group_kwargs)
        await Admin(runtime).subscribe(sub)
        await receiver.wait_for(lambda: len(receiver.delivered()) >= 100)
        tree = runtime.service("delivery").tree("chaos_g-chaos")
        target = pick(tree, victim, topic)
        target.kill("chaos test")
        await receiver.wait_for(lambda: target.state == "crashed", timeout_s=5)
        await receiver.wait_for(lambda: len(receiver.delivered()) == 600, timeout_s=60)
        replacement = pick(runtime.service("delivery").tree("chaos_g-chaos"), victim, topic)
        assert replacement is not target and replacement.alive
    finally:
        await runtime.stop()
        await receiver.stop()
    assert await committed(kafka_bootstrap, "g-chaos", topic, 2) == {0: 300, 1: 300}


def pick(tree: Supervisor, victim: str, topic: str) -> Actor:
    if victim == "partition":
        partitions = tree.child("partitions")
        assert isinstance(partitions, Supervisor)
        return partitions.child(f"{topic}-0")
    return tree.child(victim)


async def placed(runtime: Runtime, partition: str) -> None:
    """Until the subscription's cursor on `partition` knows where it starts."""
    async def check() -> bool:
        status, body = await Admin(runtime).call("GET", "/broker/subscription/late/g-late")
        member = body["data"]["status"].get("member") if status == 200 else None
        return bool(member) and member["cursors"].get(partition) not in (None, "waiting")

    await until(check, timeout_s=30, what=f"the cursor on {partition} placed")


async def test_with_reset_latest_a_crash_before_the_first_commit_loses_nothing(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        fast_group_kwargs: dict[str, int]) -> None:
    topic = await topic_factory(partitions=1)
    receiver = await Receiver(slow_ok).start()
    runtime = make_runtime(kafka_bootstrap, tmp_path)
    await runtime.start()
    try:
        sub = subscription("late", [{"name": topic, "config": {
            "concurrencyFactor": 3, "autoCommitPeriodMs": 600_000}}], receiver.url,
            fast_group=fast_group_kwargs)
        sub["properties"]["auto.offset.reset"] = "latest"
        await Admin(runtime).subscribe(sub)
        tree = runtime.service("delivery").tree("late_g-late")
        partitions = tree.child("partitions")
        assert isinstance(partitions, Supervisor)
        await receiver.wait_for(lambda: partitions.has_child(f"{topic}-0"), timeout_s=15)
        await placed(runtime, f"{topic}-0")  # "latest" is the log's end once it is placed
        await produce(kafka_bootstrap, topic, 300)
        await receiver.wait_for(lambda: len(receiver.delivered()) >= 30)
        victim = partitions.child(f"{topic}-0")
        victim.kill("chaos test")
        await receiver.wait_for(lambda: victim.state == "crashed", timeout_s=5)
        await receiver.wait_for(lambda: len(receiver.delivered()) == 300, timeout_s=60)
        assert partitions.child(f"{topic}-0") is not victim
    finally:
        await runtime.stop()
        await receiver.stop()
    assert await committed(kafka_bootstrap, "g-late", topic, 1) == {0: 300}
