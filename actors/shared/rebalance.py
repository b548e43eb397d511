"""The rebalance listener of a group member, and `RebalancingConsumerActor`: a
`GroupConsumerActor` (actors/shared/group_consumer.py) that is a member of its group
(the delay queue's consumer; the instance member, actors/delivery/path/member/, takes
the same listener and `leave`).

aiokafka calls it on its coordinator's task while the group rebalances, and waits for it.
It hands the work to its consumer's mailbox (it asks `Revoke` or `Assign`), so the
consumer's partitions change on the consumer's own task only (issue 23, item 4), and waits
for the answer: the group moves on once the revoked partitions are drained and committed.

No deadlock: the consumer's handler only records requests and never waits for the group
(its fetch loop, the task that calls `getmany`, is a task of its own), so an ask gets its
turn, and waiting for room in the mailbox ends within a turn too. A `Revoke` or `Assign`
waits for partition actors, their supervisor and a commit request, none of which waits
for the rebalance.

A consumer that is stopping or dead cannot take the work (`ActorDeadError`; or it crashed
on it):
- revoked: its `on_stop` drains and commits every partition it still owns, these among
  them; the listener waits until that is done (`released`), so the group still moves on
  only after the commit. `on_stop` releases before it stops the client, whose stop waits
  for this listener: no cycle.
- assigned: nothing is started; the consumer leaves the group as it stops, and the next
  rebalance gives the partitions to another member.
Nothing is raised into aiokafka (it would log it and carry on).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition

from actors.shared.group_consumer import GroupConsumerActor, Wiring
from runtime.errors import ActorDeadError
from runtime.kafka import compat
from runtime.kernel import Ref

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Revoke:
    """Listener -> consumer: drain and commit these partitions, then stop their actors."""

    partitions: frozenset[TopicPartition]


@dataclass(frozen=True, slots=True)
class Assign:
    """Listener -> consumer: start an actor on each of these partitions not yet owned."""

    partitions: frozenset[TopicPartition]


class RebalanceListener(ConsumerRebalanceListener):  # type: ignore[misc]  # aiokafka is untyped
    def __init__(self, consumer: Ref, released: asyncio.Event) -> None:
        self.consumer = consumer
        self.released = released
        """Set by the consumer's `on_stop` once what it owned is drained and committed."""

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        if not await self._hand_over(Revoke(frozenset(revoked))):
            await self.released.wait()

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        await self._hand_over(Assign(frozenset(assigned)))

    async def _hand_over(self, message: Revoke | Assign) -> bool:
        """Whether the consumer did the work."""
        try:
            answer = await self.consumer.ask(message)
            if isinstance(answer, asyncio.Future):
                await answer  # done on the consumer's own tasks (the instance member)
        except ActorDeadError:
            log.debug("rebalance: the consumer stopped before it could take %r", message)
            return False
        except Exception as exc:  # it crashed on it: its supervisor has the error
            log.warning("rebalance: the consumer failed on %r (%r)", message, exc)
            return False
        return True


async def leave(kafka: AIOKafkaConsumer | None, released: asyncio.Event,
                retire: Callable[[AIOKafkaConsumer], Awaitable[None]]) -> None:
    """A group consumer's stop: `retire` drains and commits what it owns, then the
    listener is released (before the client stops: the client's stop waits for the
    listener, which waits for this), the group is left so the next member need not wait
    (runtime/kafka/compat.py quirk 6), and the client stops."""
    if kafka is None:
        released.set()
        return
    try:
        try:
            await retire(kafka)
        finally:
            released.set()
        await compat.leave_group(kafka)
    finally:
        await kafka.stop()


class RebalancingConsumerActor(GroupConsumerActor):
    """A group consumer that subscribes as a member of its group: the listener hands it
    `Assign` and `Revoke`, and its stop leaves the group once what it owned is drained
    and committed (`released`)."""

    def __init__(self, name: str, wiring: Wiring) -> None:
        super().__init__(name, wiring)
        # set once `on_stop` drained and committed what it owned: a revocation this actor
        # could no longer take waits for it
        self.released = asyncio.Event()
        self.listener = RebalanceListener(self, self.released)

    async def on_stop(self) -> None:
        # the fetch task is already cancelled: drain and commit what is ours, then leave
        kafka, self.kafka = self.kafka, None
        self.wiring.pace.left(self)
        await leave(kafka, self.released, lambda client: self.retire(client, set(self.owned)))

    async def handle(self, message: object) -> object:
        if isinstance(message, Assign):
            await self.assign(set(message.partitions))
            return None
        if isinstance(message, Revoke):
            await self.revoke(set(message.partitions))
            return None
        return await super().handle(message)

    async def revoke(self, tps: set[TopicPartition]) -> None:
        if self.kafka is not None:
            await self.retire(self.kafka, tps)
