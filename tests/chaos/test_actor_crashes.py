"""Chaos: kill actors of a running subscription mid-stream; nothing is lost."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

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
        # what the shared fetch reads after the restart reaches the new incarnation (the
        # member keeps the cursor it found last: issue 37)
        await produce(kafka_bootstrap, topic, 200, partitions=2, start=600)
        await receiver.wait_for(lambda: len(receiver.delivered()) == 800, timeout_s=60)
    finally:
        await runtime.stop()
        await receiver.stop()
    assert await committed(kafka_bootstrap, "g-chaos", topic, 2) == {0: 400, 1: 400}


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


async def test_a_tree_restarted_after_its_member_supervisor_was_rebuilt_still_delivers(
        kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path,
        fast_group_kwargs: dict[str, int]) -> None:
    """Chaos seed 1560064320: the `groups` supervisor killed (its member rebuilt under a
    new incarnation of it), then a subscription's tree restarted by its own supervisor,
    and later updated. Its rider told its leave and join to the old `groups`, which
    had no member: the member never heard, kept feeding the cursors that had stopped
    with the tree, and did not start the new tree's. Two subscriptions stopped at their
    committed offsets for good."""
    topic = await topic_factory(partitions=2)
    receiver = await Receiver(slow_ok).start()
    runtime = make_runtime(kafka_bootstrap, tmp_path)
    await runtime.start()
    sent = 0

    async def produce_and_deliver(count: int) -> None:
        nonlocal sent
        await produce(kafka_bootstrap, topic, count, partitions=2, start=sent)
        sent += count
        await receiver.wait_for(lambda: len(receiver.delivered()) == sent, timeout_s=60)

    try:
        await Admin(runtime).subscribe(document(topic, receiver.url, 5, fast_group_kwargs))
        await produce_and_deliver(100)
        groups = runtime.system.root.child("groups")
        groups.kill("chaos test")
        await until(lambda: _member_runs(runtime, groups), timeout_s=15,
                    what="the groups supervisor rebuilt with its member")
        await produce_and_deliver(100)  # the rebuilt member's cursors run
        egress = runtime.service("delivery").tree("again_g-again").child("egress")
        egress.kill("chaos test")  # one_for_all: the whole tree, its rider and cursors
        await receiver.wait_for(lambda: egress.state == "crashed", timeout_s=5)
        await produce_and_deliver(100)
        status, reply = await Admin(runtime).call(  # a new tree, a new rider
            "PUT", "/broker/subscription/again/g-again", document(topic, receiver.url, 3,
                                                                  fast_group_kwargs))
        assert status == 200, reply
        await produce_and_deliver(100)
    finally:
        await runtime.stop()
        await receiver.stop()
    assert await committed(kafka_bootstrap, "g-again", topic, 2) == {0: 200, 1: 200}


def document(topic: str, url: str, concurrency: int,
             fast_group: dict[str, int]) -> dict[str, Any]:
    return subscription("again", [{"name": topic, "config": {
        "concurrencyFactor": concurrency, "autoCommitPeriodMs": 100}}], url,
        fast_group=fast_group)


def _member_runs(runtime: Runtime, old_groups: Actor) -> bool:
    root = runtime.system.root
    if not root.has_child("groups") or root.child("groups") is old_groups:
        return False
    groups = root.child("groups")
    assert isinstance(groups, Supervisor)
    return groups.has_child("instance:Kafka") and groups.child("instance:Kafka").alive
