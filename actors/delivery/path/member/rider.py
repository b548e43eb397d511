"""RiderActor: a subscription's seat on the instance member (the `consumer` of its tree).

It joins the member when it starts and leaves when it stops (the member drains and commits
its cursors first), and relays the member's status for its subscription."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from actors.delivery.path.member.messages import Join, Leave
from actors.delivery.path.roster import Rider
from actors.delivery.path.status import STATUS_TIMEOUT_MS, MemberStatus
from actors.shared.errors import UnexpectedMessage
from actors.shared.messages import StatusQuery
from runtime.errors import ActorDeadError
from runtime.kernel import Actor, ChildRef, settle_within, within

REJOIN_MS = 250
"""How soon a rider tries its join again while its member is away."""
LEAVE_GRACE_MS = 2000
"""How long a rider waits for its member beyond the drain deadline before leaving alone."""


@dataclass(frozen=True, slots=True)
class _Rejoin:
    """Timer: try the join again (the member was away)."""


class RiderActor(Actor):
    """A subscription's seat on the instance member: the `consumer` of its tree."""

    paced = False  # it journals nothing: its join and leave are never held back

    def __init__(self, name: str, rider: Rider, member: ChildRef, leave_ms: int) -> None:
        super().__init__(name)
        self.rider = rider
        self.member = member
        self.leave_ms = leave_ms

    async def on_start(self) -> None:
        await self._join()

    async def _join(self) -> None:
        """Told, not asked: the member may be busy with a rebalance (its Assign starts
        thousands of cursors); the join is in its mailbox before any later Leave. A
        member being built again (its supervisor restarted it) is not there to tell: the
        join is tried again on a timer until it is (a join it already has changes
        nothing). Failing the start instead ran the tree's restart budget out while the
        member was away (chaos seed 1560064320)."""
        try:
            await self.member.tell(Join(self.rider))
        except ActorDeadError:
            self.schedule(self.context.clock.monotonic_ms() + REJOIN_MS, _Rejoin())

    async def on_stop(self) -> None:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        try:
            await self.member.tell(Leave(self.rider, done))
            await within(self.context.clock, done, self.leave_ms + LEAVE_GRACE_MS)
        except (ActorDeadError, TimeoutError):
            # no member runs to drain us: its last commits stand; a member rebuilt
            # meanwhile never had us (the control plane's record drops us first)
            pass

    async def handle(self, message: object) -> MemberStatus | None:
        if isinstance(message, _Rejoin):
            await self._join()
            return None
        if isinstance(message, StatusQuery):
            return await self._member_status()
        raise UnexpectedMessage(self.path, message)

    async def _member_status(self) -> MemberStatus | None:
        """The member's status for this subscription, asked of the member (None when it
        does not answer in time: busy with a rebalance, say). The member's handler never
        waits for a rider, so this wait cannot close a circle; it holds only this rider,
        whose mailbox carries nothing else but its stop."""
        try:
            reply = self.member.ask_nowait(StatusQuery(self.rider.settings.key))
        except ActorDeadError:
            return None
        await settle_within(self.context.clock, [reply], STATUS_TIMEOUT_MS)
        if reply.cancelled() or reply.exception() is not None:
            return None
        status = reply.result()
        return status if isinstance(status, MemberStatus) else None

    def __repr__(self) -> str:
        return f"<RiderActor {self.path} {self.rider.settings.key} on {self.member.name}>"
