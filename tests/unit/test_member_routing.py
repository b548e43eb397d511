"""The instance member's routing of riders to cursors when a rider joins while a
rebalance's assignment is being handled (actors/delivery/path/member.py): the join is a
message on the member's task, the assignment runs on aiokafka's rebalance listener, and
each cursor start awaits. Cursor starts are recorded here instead of started."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from aiokafka import TopicPartition

from actors.delivery.path.member import InstanceMemberActor
from actors.delivery.path.roster import Rider
from actors.shared.group_consumer import Wiring
from runtime.host.metrics import Registry
from tests.unit.test_group_roster import consumer, rider


class RecordingMember(InstanceMemberActor):
    """Records which cursors it would start; lets one rider join after the first start
    (as a Join handled while the assignment awaited)."""

    def __init__(self, riders: list[Rider], late: Rider) -> None:
        super().__init__("instance:Kafka", "hookstream-instances-x", riders,
                         Wiring(cast(Any, None), "", 0, 100), {}, Registry())
        self.started: list[tuple[str, TopicPartition]] = []
        self._late: Rider | None = late

    async def _add_cursor(self, rider: Rider, tp: TopicPartition) -> None:
        fanout = self.fanouts[tp]
        if rider.sub.key in fanout.cursors:
            return
        fanout.add(rider.sub.key)
        self.started.append((rider.sub.key, tp))
        await asyncio.sleep(0)
        if self._late is not None:
            self.roster.join(self._late)
            self._late = None

    def _journal(self, *args: Any, **kwargs: Any) -> None:
        pass


async def test_a_rider_that_joins_while_partitions_are_assigned_still_gets_its_cursor() -> None:
    late = rider(consumer("late", {"name": "a"}, group="g2"))
    member = RecordingMember([rider(consumer("early", {"name": "a"}, group="g1"))], late)
    tp_a, tp_b = TopicPartition("a", 0), TopicPartition("a", 1)
    await member.assign({tp_a, tp_b})
    # `late` joined after tp (a, 0) was handled; it got (a, 1) there, (a, 0) still waits
    assert ("early_g1", tp_a) in member.started and ("early_g1", tp_b) in member.started
    assert ("late_g2", tp_a) not in member.started
    await member._reroute()  # the fetch loop's next turn: the roster's version moved
    assert ("late_g2", tp_a) in member.started
    assert sorted(key for key, _ in member.started) == ["early_g1", "early_g1",
                                                         "late_g2", "late_g2"]
