"""A subscription's seat on the instance member (actors/delivery/path/member/rider.py)
starts while its member is away (being built again by its supervisor) and tries its join
again on a timer until the member is there. Failing there ran the tree's restart
budget out during a member's restart (chaos seed 1560064320)."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from actors.delivery.path.member.messages import Join, Leave
from actors.delivery.path.member.rider import REJOIN_MS, RiderActor
from actors.delivery.path.roster import Rider
from runtime.kernel.actor import Actor
from runtime.kernel.clock import FakeClock
from runtime.kernel.supervisor import ChildRef, ChildSpec, Supervisor
from runtime.kernel.system import ActorSystem


async def test_a_rider_starts_while_its_member_is_away() -> None:
    clock = FakeClock()
    system = ActorSystem(clock=clock)
    await system.start()
    try:
        groups = await system.spawn(ChildSpec(
            "groups", lambda: Supervisor("groups", "one_for_one")))
        member = ChildRef(groups.actor_as(Supervisor), "instance:Kafka")  # not started
        seat = Rider(cast(Any, None), cast(Any, None), cast(Any, None))
        rider = await system.spawn(ChildSpec(
            "rider", lambda: RiderActor("rider", seat, member, leave_ms=100)))
        assert rider.actor_as(RiderActor).alive
        await groups.actor_as(Supervisor).start_child(ChildSpec(
            "instance:Kafka", lambda: Heard("instance:Kafka")))
        heard = member.actor_as(Heard)
        await moved(clock, REJOIN_MS)  # the join is tried again: it lands
        assert [type(m) for m in heard.messages] == [Join]
        await moved(clock, 10 * REJOIN_MS)
        assert [type(m) for m in heard.messages] == [Join]  # once there, no more tries
    finally:
        await system.stop()


async def moved(clock: FakeClock, ms: int) -> None:
    clock.advance(ms)
    for _ in range(20):  # what the move woke runs
        await asyncio.sleep(0)


class Heard(Actor):
    """A member that notes what it is told."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.messages: list[object] = []

    async def handle(self, message: object) -> None:
        self.messages.append(message)
        if isinstance(message, Leave) and not message.done.done():
            message.done.set_result(None)  # the rider's stop waits for it
