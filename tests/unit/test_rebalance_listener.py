"""The rebalance listener hands its work to the group consumer's mailbox
(actors/shared/rebalance.py): assignments and revocations run on the consumer's own task,
the listener (aiokafka's coordinator task here is a task of the test) waits for them, and
a consumer that is stopping, dead or crashing on the work raises nothing into aiokafka. A
revocation it can no longer take waits for its stop to drain and commit.

The consumer here owns no Kafka client (its `on_start` makes none); its stop finds a
stand-in client with a `stop()`."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from aiokafka import AIOKafkaConsumer, TopicPartition

from actors.shared.group_consumer import Wiring
from actors.shared.rebalance import RebalancingConsumerActor
from runtime.kernel import ActorSystem, ChildSpec

TP = TopicPartition("orders", 0)


class StandInClient:
    def __init__(self) -> None:
        self.stopped = False

    async def stop(self) -> None:
        self.stopped = True


class TaskRecorder(RebalancingConsumerActor):
    """Records the task each assignment and revocation runs on; `gate` holds them, and
    so does the revocation of its stop (what it drains and commits)."""

    def __init__(self) -> None:
        super().__init__("consumer", Wiring(cast(Any, None), "", 0, 100))
        self.ran: list[tuple[str, asyncio.Task[Any] | None]] = []
        self.gate = asyncio.Event()
        self.gate.set()
        self.entered = asyncio.Event()  # some step began
        self.fail = False
        self.task: asyncio.Task[Any] | None = None
        self.client = StandInClient()

    async def on_start(self) -> None:
        self.task = asyncio.current_task()
        self.kafka = cast(AIOKafkaConsumer, self.client)

    async def assign(self, tps: set[TopicPartition]) -> None:
        self.ran.append(("assign", asyncio.current_task()))
        self.entered.set()
        self.owned |= tps
        await self.gate.wait()

    async def revoke(self, tps: set[TopicPartition]) -> None:
        self.ran.append(("revoke", asyncio.current_task()))
        self.entered.set()
        await self.gate.wait()
        if self.fail:
            raise RuntimeError("revoke failed")
        self.owned -= tps

    async def retire(self, kafka: AIOKafkaConsumer, tps: set[TopicPartition]) -> None:
        self.ran.append(("stop", asyncio.current_task()))
        self.entered.set()
        await self.gate.wait()


async def started() -> tuple[ActorSystem, TaskRecorder]:
    system = ActorSystem()
    await system.start()
    actor = TaskRecorder()
    await system.spawn(ChildSpec(actor.name, lambda: actor, restart="temporary"))
    return system, actor


async def test_assignments_and_revocations_run_on_the_consumers_own_task() -> None:
    system, actor = await started()
    coordinator = asyncio.create_task(actor.listener.on_partitions_assigned({TP}))
    await coordinator
    await asyncio.create_task(actor.listener.on_partitions_revoked({TP}))
    assert actor.ran == [("assign", actor.task), ("revoke", actor.task)]
    assert coordinator is not actor.task
    await system.stop()


async def test_the_listener_returns_only_once_the_revocation_is_done() -> None:
    system, actor = await started()
    actor.owned.add(TP)
    actor.gate.clear()
    listener = asyncio.create_task(actor.listener.on_partitions_revoked({TP}))
    await actor.entered.wait()
    assert not listener.done()
    actor.gate.set()
    await asyncio.wait_for(listener, 2)
    assert not actor.owned
    await system.stop()


async def test_a_revocation_the_stopping_consumer_cannot_take_waits_for_its_stop() -> None:
    system, actor = await started()
    actor.gate.clear()  # its stop's drain and commit will wait here
    await actor.stop()
    revoked = asyncio.create_task(actor.listener.on_partitions_revoked({TP}))
    assigned = asyncio.create_task(actor.listener.on_partitions_assigned({TP}))
    await asyncio.wait_for(assigned, 2)  # nothing to start: it leaves the group
    await actor.entered.wait()
    assert actor.ran == [("stop", actor.task)]
    assert not revoked.done() and not actor.client.stopped
    actor.gate.set()
    await asyncio.wait_for(revoked, 2)
    assert [kind for kind, _ in actor.ran] == ["stop"]
    await system.stop()
    assert actor.client.stopped


async def test_a_consumer_that_crashes_on_a_revocation_raises_nothing_into_the_listener(
        ) -> None:
    system, actor = await started()
    actor.fail = True
    await asyncio.wait_for(actor.listener.on_partitions_revoked({TP}), 2)
    assert [kind for kind, _ in actor.ran] == ["revoke", "stop"]
    assert actor.client.stopped
    await asyncio.wait_for(actor.listener.on_partitions_assigned({TP}), 2)
    await system.stop()
