"""A running subscription's status travels by message (issue 23, item 4): real partition
actors and a real handler outlet in a real tree answer `StatusQuery` through their
mailboxes, in turn with the messages queued before it; one that does not answer in time
or dies meanwhile shows nothing, and the asker gets no error."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import msgspec
import pytest

from actors.delivery.control.live import has_partitions, live, lives
from actors.delivery.document.settings import cursor_settings
from actors.delivery.document.subscription import decode_consumer
from actors.delivery.egress.handler import ConsumedRecord, HandlerDestination
from actors.delivery.path.partition import PartitionActor, PartitionPeers
from actors.delivery.path.status import PartitionStatus
from actors.shared.messages import Assigned, Highwater, StatusQuery
from runtime.host.metrics import Registry
from runtime.kernel import Actor, ActorSystem, ChildSpec, RealClock, Supervisor

CLOCK = RealClock()


class Sink(Actor):
    """Stands where the consumer stands: takes what a partition actor tells it."""

    async def handle(self, message: object) -> None:
        return None


class Stuck(PartitionActor):
    """A partition actor busy in its handler until `free` is set."""

    free = asyncio.Event()

    async def handle(self, message: object) -> Any:
        if isinstance(message, StatusQuery):
            await self.free.wait()
        return await super().handle(message)


async def ignore(record: ConsumedRecord) -> None:
    return None


def partition_actor(sink: Actor, partition: int,
                    kind: type[PartitionActor] = PartitionActor) -> PartitionActor:
    sub = decode_consumer({
        "id": "s", "group": {"id": "g"}, "broker": "Kafka", "topics": [{"name": "t"}],
        "subscriptionMethod": {"type": "http", "uri": "http://127.0.0.1:9/hook"}})
    return kind(f"t-{partition}", cursor_settings(sub, "t"), "t", partition, 1,
                PartitionPeers(sink, sink, None), Registry())


@dataclass
class Tree:
    system: ActorSystem
    sink: Sink
    tree: Supervisor
    partitions: Supervisor

    async def add(self, partition: int, kind: type[PartitionActor] = PartitionActor,
                  ) -> PartitionActor:
        actor = partition_actor(self.sink, partition, kind)
        await self.partitions.start_child(ChildSpec(actor.name, lambda: actor,
                                                    restart="temporary"))
        return actor


@pytest.fixture
async def tree() -> AsyncIterator[Tree]:
    system = ActorSystem()
    await system.start()
    sink = Sink("consumer")
    await system.spawn(ChildSpec("consumer", lambda: sink))
    sub = (await system.spawn(ChildSpec("s_g", lambda: Supervisor("s_g")))).actor_as(
        Supervisor)
    outlet = HandlerDestination(ignore, 2, 1000).outlet("egress", "s_g", Registry())
    await sub.start_child(ChildSpec("egress", lambda: outlet))
    parts = (await sub.start_child(ChildSpec("partitions", lambda: Supervisor(
        "partitions")))).actor_as(Supervisor)
    try:
        yield Tree(system, sink, sub, parts)
    finally:
        Stuck.free.set()
        await system.stop(deadline_ms=2000)
        Stuck.free = asyncio.Event()


async def test_a_partition_actor_answers_its_status_through_its_mailbox_in_turn(
        tree: Tree) -> None:
    actor = await tree.add(0)
    await actor.tell(Assigned(position=10, epoch=1))
    await actor.tell(Highwater(42))
    shown = await actor.ask_nowait(StatusQuery())
    assert shown == PartitionStatus(topic="t", partition=0, committed=10, highwater=42,
                                    lag=32)


async def test_a_running_tree_shows_its_partitions_in_order_and_its_outlet(
        tree: Tree) -> None:
    for partition in (1, 0):
        await tree.add(partition)
    shown = await live(tree.tree, CLOCK)
    assert [(p.topic, p.partition) for p in shown.partitions] == [("t", 0), ("t", 1)]
    assert msgspec.to_builtins(shown.endpoint) == {  # a handler outlet: no `origin`
        "last_status": None, "last_error": None, "last_success_at": None,
        "error_rate": 0.0, "recent_failures": []}
    assert shown.counters is not None and shown.counters.delivered == 0
    assert shown.member is None  # its own consumer: no instance member
    assert has_partitions(tree.tree)


async def test_an_actor_that_does_not_answer_in_time_shows_nothing(tree: Tree) -> None:
    await tree.add(0)
    await tree.add(1, Stuck)
    shown = await live(tree.tree, CLOCK, timeout_ms=100)
    assert [p.partition for p in shown.partitions] == [0]
    assert shown.endpoint is not None  # the others answered


async def test_an_actor_that_dies_while_asked_shows_nothing_and_raises_nothing(
        tree: Tree) -> None:
    await tree.add(0)
    dying = await tree.add(1)
    dying.kill("chaos")  # handled before the question: its reply fails
    shown = await lives({"s_g": tree.tree, "gone_g": None}, CLOCK)
    assert [p.partition for p in shown["s_g"].partitions] == [0]
    assert shown["gone_g"].partitions == [] and shown["gone_g"].endpoint is None
