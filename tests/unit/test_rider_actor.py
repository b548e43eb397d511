"""A subscription's seat on the instance member (actors/delivery/path/member/rider.py)
starts while its member is away (being built again by its supervisor): the member takes
it from the control plane's record when it starts. Failing there ran the tree's restart
budget out during a member's restart (chaos seed 1560064320)."""

from __future__ import annotations

from typing import Any, cast

from actors.delivery.path.member.rider import RiderActor
from actors.delivery.path.roster import Rider
from runtime.kernel.clock import FakeClock
from runtime.kernel.supervisor import ChildRef, ChildSpec, Supervisor
from runtime.kernel.system import ActorSystem


async def test_a_rider_starts_while_its_member_is_away() -> None:
    system = ActorSystem(clock=FakeClock())
    await system.start()
    try:
        groups = await system.spawn(ChildSpec(
            "groups", lambda: Supervisor("groups", "one_for_one")))
        member = ChildRef(groups.actor_as(Supervisor), "instance:Kafka")  # not started
        seat = Rider(cast(Any, None), cast(Any, None), cast(Any, None))
        rider = await system.spawn(ChildSpec(
            "rider", lambda: RiderActor("rider", seat, member, leave_ms=100)))
        assert rider.actor_as(RiderActor).alive
    finally:
        await system.stop()
