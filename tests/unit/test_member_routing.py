"""The instance member's routing of riders to cursors around a rebalance's assignment
(actors/delivery/path/member.py): the assignment and the joins are messages on the
member's task, so a rider joins before an assignment or after it, never during it; the
fetch loop's next reroute gives the riders that joined their cursors on the partitions
already owned. Cursor starts are recorded here instead of started."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, cast

from aiokafka import TopicPartition

from actors.delivery.path.member import InstanceMemberActor, Join
from actors.delivery.path.roster import Rider
from actors.shared.group_consumer import Wiring
from actors.shared.rebalance import Assign
from runtime.host.metrics import Registry
from tests.unit.test_group_roster import consumer, rider

TP_A, TP_B = TopicPartition("a", 0), TopicPartition("a", 1)


class RecordingMember(InstanceMemberActor):
    """Records which cursors it would start."""

    def __init__(self, riders: list[Rider]) -> None:
        super().__init__("instance:Kafka", "hookstream-instances-x", riders,
                         Wiring(cast(Any, None), "", 0, 100), {}, Registry())
        self.started: list[tuple[str, TopicPartition]] = []
        self.while_starting: Callable[[], None] = lambda: None

    async def _add_cursor(self, rider: Rider, tp: TopicPartition) -> None:
        fanout = self.fanouts[tp]
        if rider.settings.key in fanout.cursors:
            return
        fanout.add(rider.settings.key)
        self.started.append((rider.settings.key, tp))
        await asyncio.sleep(0)
        self.while_starting()

    def _journal(self, *args: Any, **kwargs: Any) -> None:
        pass


def early_and_late() -> tuple[RecordingMember, Rider]:
    member = RecordingMember([rider(consumer("early", {"name": "a"}, group="g1"))])
    return member, rider(consumer("late", {"name": "a"}, group="g2"))


async def test_a_rider_that_joins_after_an_assignment_gets_its_cursors_at_the_reroute() -> None:
    member, late = early_and_late()
    await member.handle(Assign(frozenset({TP_A, TP_B})))
    await member.handle(Join(late))
    assert sorted(member.started) == [("early_g1", TP_A), ("early_g1", TP_B)]
    await member._reroute()  # the fetch loop's next turn: the roster's version moved
    assert sorted(member.started) == [("early_g1", TP_A), ("early_g1", TP_B),
                                      ("late_g2", TP_A), ("late_g2", TP_B)]


async def test_an_assignment_that_keeps_a_partition_leaves_it_to_the_reroute_of_a_new_rider(
        ) -> None:
    member, late = early_and_late()
    await member.handle(Assign(frozenset({TP_A})))
    await member.handle(Join(late))  # joined, not routed yet: no cursor on (a, 0)
    await member.handle(Assign(frozenset({TP_A, TP_B})))  # (a, 0) kept
    assert ("late_g2", TP_B) in member.started and ("late_g2", TP_A) not in member.started
    await member._reroute()
    assert ("late_g2", TP_A) in member.started
    assert sorted(key for key, _ in member.started) == ["early_g1", "early_g1",
                                                        "late_g2", "late_g2"]


async def test_a_partition_revoked_while_the_reroute_starts_cursors_is_passed_over() -> None:
    member, late = early_and_late()
    await member.handle(Assign(frozenset({TP_A, TP_B})))
    await member.handle(Join(late))

    def revoke_b() -> None:  # as a `Revoke` handled while the reroute awaits a start
        member.fanouts.pop(TP_B, None)
        member.owned.discard(TP_B)

    member.while_starting = revoke_b
    await member._reroute()
    assert ("late_g2", TP_A) in member.started and ("late_g2", TP_B) not in member.started
