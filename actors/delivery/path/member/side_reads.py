"""SideReads: the instance member's room for the reads beside the shared fetch: catch-up
readers of cursors that fell behind the shared buffer (../catchup.py), the high watermark
of partitions whose fetch is paused (issue 25), and the flow requests of cursors that
start or end them. Each read runs in a task that only reads and tells the member.
"""

from __future__ import annotations

import asyncio
import logging

from aiokafka import TopicPartition

from actors.delivery.path.catchup import CATCH_UP_READERS, CatchUpRead, catch_up
from actors.delivery.path.fanout import CatchUp, Fanout
from actors.delivery.path.member import io
from actors.delivery.path.member.commits import Seat, seat_of
from actors.delivery.path.member.cursors import Cursors
from actors.delivery.path.member.messages import CatchUpEnded, CaughtUp, HighwatersRead
from actors.delivery.path.member.rebalance import Rebalances
from actors.delivery.path.member.shape import Member
from actors.shared.group_consumer import HIGHWATER_REFRESH_MS
from actors.shared.messages import FlowControl, Highwater

log = logging.getLogger(__name__)


class SideReads:
    def __init__(self, member: Member, cursors: Cursors, rebalance: Rebalances) -> None:
        self.member = member
        self.cursors = cursors
        self.rebalance = rebalance
        self.reads: dict[Seat, CatchUpRead] = {}
        self._readers = asyncio.Semaphore(CATCH_UP_READERS)
        self._ends_due, self._reading_ends = 0, False

    def read_ends(self) -> None:
        """Every `HIGHWATER_REFRESH_MS`: the log ends of partitions whose fetch is paused,
        told to the cursors that get no batch (issue 25)."""
        member = self.member
        now, kafka = member.context.clock.monotonic_ms(), member.kafka
        if kafka is None or self._reading_ends or now < self._ends_due:
            return
        self._ends_due = now + HIGHWATER_REFRESH_MS
        paused = kafka.paused()
        starts = {tp: hw for tp in member.fanouts
                  if tp in paused and (hw := member.highwater(tp)) is not None}
        if starts:
            self._reading_ends = True
            member.spawn(io.read_ends(kafka, starts, member.context.clock,
                                      HIGHWATER_REFRESH_MS, member), name=f"{member.path}:ends")

    def tell_highwater(self, tp: TopicPartition, fanout: Fanout, read: int | None) -> None:
        member = self.member
        known = [hw for hw in (read, member.highwater(tp)) if hw is not None]
        if not known:
            return
        highwater = max(known)
        for key in fanout.note_highwater(highwater):
            cursor = self.cursors.find(key, tp)
            if cursor is not None:
                cursor.tell_system(Highwater(highwater))

    def on_flow(self, flow: FlowControl) -> None:
        member = self.member
        seat = seat_of(flow)
        fanout = member.fanouts.get(seat[1])
        if fanout is None or not member.seats.current(seat, flow.epoch):
            return
        if seat[1] in self.rebalance.suspended:
            self.rebalance.deferred.append(flow)  # applied if the partition stays
            return
        if flow.paused:
            fanout.pause(seat[0])
            return
        read = self.reads.get(seat)
        if read is not None:
            read.resumed.set()
        member.feed(seat[1], fanout.resume(seat[0]))

    def start_catch_up(self, tp: TopicPartition, decision: CatchUp) -> None:
        member = self.member
        seat = (decision.key, tp)
        cursor = self.cursors.find(decision.key, tp)
        if cursor is None or seat in self.reads:
            return
        read = self.reads[seat] = CatchUpRead(tp, decision.key, decision.position, cursor)
        member.spawn(self._catch_up(read), name=f"{member.path}:catch-up:{decision.key}")

    async def _catch_up(self, read: CatchUpRead) -> None:
        """A catch-up read, in a task: it only reads and tells (`CaughtUp`, then
        `CatchUpEnded`)."""
        member = self.member
        try:
            async with self._readers:
                if not read.cancelled:
                    await catch_up(read, member.wiring.bootstrap, member.wiring.broker_settings,
                                   self._handover, member.context.clock.monotonic_ms)
        except io.FAILURES as exc:  # the cursor went away, or the read failed
            log.debug("%s: catch-up read of %s ended: %r", member.path, read.key, exc)
        finally:
            member.tell_system(CatchUpEnded((read.key, read.tp), read))

    async def _handover(self, read: CatchUpRead, next_offset: int) -> bool:
        answer: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self.member.tell_system(CaughtUp(read, next_offset, answer))
        return await answer

    def ended(self, message: HighwatersRead) -> None:
        self._reading_ends = False
        for tp, fanout in self.member.fanouts.items():
            self.tell_highwater(tp, fanout, message.highwaters.get(tp))

    def caught_up(self, message: CaughtUp | CatchUpEnded) -> None:
        if isinstance(message, CatchUpEnded):
            if self.reads.get(message.seat) is message.read:
                del self.reads[message.seat]
            return
        member = self.member
        read = message.read
        fanout = member.fanouts.get(read.tp)
        if read.cancelled or read.tp in self.rebalance.suspended:
            fanout = None  # over: nothing of the shared buffer goes to it now
        feed = fanout.caught_up(read.key, message.next_offset) if fanout else []
        if feed:
            member.feed_records(read.tp, feed, member.highwater(read.tp))
        if not message.answer.done():
            message.answer.set_result(feed is not None)

    def cancel_read(self, seat: Seat) -> None:
        read = self.reads.pop(seat, None)
        if read is not None:
            read.cancelled = True
            read.resumed.set()
