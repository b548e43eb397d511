"""Rebalances: the instance member's room for `Revoke` and `Assign` (issue 32, item 6).

aiokafka speaks the eager protocol: every rebalance revokes every partition first, then
assigns. Retiring every cursor at each revoke delivered again, on the survivors of a
failover, whatever their cursors held. So a revoke only holds the cursors: each drains
what it has in flight (its buffered records stay), the positions are committed, and the
group moves on. The assignment then decides, partition by partition:

- kept (the sticky assignor keeps most partitions where they were): the cursors resume
  from their own buffers and the shared fetch continues where it was; nothing is read or
  delivered again;
- moved: the cursors, drained already, retire (final commit, stop);
- new: cursors start, each at its group's committed position.

A revoke while the member subscribes to nothing (its last subscription left) retires at
once: no assignment follows.
"""

from __future__ import annotations

import asyncio
import logging

from aiokafka import TopicPartition

from actors.delivery.path.fanout import CatchUp
from actors.delivery.path.member.cursors import Cursors
from actors.delivery.path.member.shape import Member
from actors.shared.group_consumer import child_name
from actors.shared.messages import FlowControl, Resume
from runtime.host.logs import few

log = logging.getLogger(__name__)


class Rebalances:
    def __init__(self, member: Member, cursors: Cursors) -> None:
        self.member = member
        self.cursors = cursors
        self.suspended: set[TopicPartition] = set()
        """Revoked, held until the assignment says whether they stay."""
        self.deferred: list[FlowControl] = []
        """Flow requests of held cursors, applied once their partition stays."""

    def revoke(self, tps: set[TopicPartition]) -> asyncio.Future[None]:
        """Hold the revoked partitions' cursors; the future (the rebalance listener waits
        for it) is answered once their positions are committed."""
        member = self.member
        answered: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        ordered = sorted(tps & member.owned - self.suspended)
        started = member.context.clock.monotonic_ms()

        def done() -> None:
            if ordered:
                names = [child_name(tp) for tp in ordered]
                log.info("%s: %d partitions revoked (drained and committed in %d ms): %s",
                         member.path, len(names),
                         member.context.clock.monotonic_ms() - started, few(names))
                log.debug("%s: revoked: %s", member.path, ", ".join(names))
            if not answered.done():
                answered.set_result(None)

        self.cursors.note_deleted(ordered)
        if not member.listening:
            self.cursors.leave_partitions(ordered, done)
            return answered
        riders = member.roster.riders
        seats = {(key, tp): riders[key] for tp in ordered
                 for key in member.fanouts[tp].cursors if key in riders}
        for seat in seats:
            member.cancel_read(seat)
        self.suspended.update(ordered)
        self.cursors.retire(seats, done, keep=True)
        return answered

    def assign(self, tps: set[TopicPartition]) -> None:
        member = self.member
        member.rebalances += 1
        member.m_rebalances.inc()
        member.m_generation.set(member.generation())
        member.m_assigned.set(len(tps))
        kept, moved = self.suspended & tps, sorted(self.suspended - tps)
        self.suspended.clear()
        if moved:
            self.cursors.leave_partitions(moved, lambda: None)
        for tp in sorted(kept):
            self._resume(tp)
        deferred, self.deferred = self.deferred, []
        for flow in deferred:
            self.member.on_flow(flow)
        new = sorted(tps - member.owned)
        if new:
            names = [child_name(tp) for tp in new]
            log.info("%s: %d partitions assigned: %s (kept %d)", member.path, len(names),
                     few(names), len(kept))
            log.debug("%s: assigned: %s", member.path, ", ".join(names))
        self.cursors.start_partitions(new)

    def _resume(self, tp: TopicPartition) -> None:
        """A partition assigned back: its cursors carry on, the fetch where it was."""
        member, kafka = self.member, self.member.kafka
        fanout = member.fanouts[tp]
        if kafka is not None and fanout.head is not None and tp in kafka.assignment():
            kafka.seek(tp, fanout.head)
        for key, cursor in fanout.cursors.items():
            actor = self.cursors.find(key, tp)
            if actor is not None:
                actor.tell_system(Resume())
            if cursor.state == "behind" and cursor.next is not None:
                member.feed(tp, CatchUp(key, cursor.next))  # its read was cancelled
        self.cursors.fill(tp)  # subscriptions that joined while it was held
