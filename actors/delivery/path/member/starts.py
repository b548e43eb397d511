"""Starts: the instance member's room for where new cursors start (issue 32, items 1, 2
and 8). A cursor's `Rewind` (a new incarnation) waits for its group's committed offset and
the log's bounds, read in a task (io.read_positions); then `start_of` decides, a position
outside the log or one written before its topic was deleted applies `auto.offset.reset`
(journaled as `offset_reset`), the shared fetch is placed, and the cursor is told where it
starts. The commits read back also say who writes each group (writers.py): this room reads
a rotating sample of them every `VERIFY_MS` too.
"""

from __future__ import annotations

import logging

from aiokafka import TopicPartition

from actors.delivery.path.member import io
from actors.delivery.path.member.commits import Seat, seat_of
from actors.delivery.path.member.cursors import Cursors
from actors.delivery.path.member.messages import PositionsRead
from actors.delivery.path.member.positions import Bounds, start_of
from actors.delivery.path.member.rebalance import Rebalances
from actors.delivery.path.member.shape import Member
from actors.shared.group_consumer import child_name
from actors.shared.messages import Assigned, Rewind

log = logging.getLogger(__name__)


class Starts:
    def __init__(self, member: Member, cursors: Cursors, rebalance: Rebalances) -> None:
        self.member = member
        self.cursors = cursors
        self.rebalance = rebalance
        self._rewinds: dict[Seat, int] = {}  # new cursors waiting for their positions
        self._reading = False  # a read of positions is under way
        self._in_read = 0  # seats of the read under way not yet answered
        self._parked: dict[Seat, Rewind] = {}
        """Newer cursors of seats still retiring: they wait for the retirement's end (a
        tree restarted as a whole rejoins before its old cursors stopped; dropping their
        rewind left them without a position for good: chaos seed 1560064320)."""
        self._first: dict[Seat, int] = {}
        """Where a seat with nothing committed started (`latest` is the log's end when
        it first started; a restart of its cursor before any commit goes back there,
        not to the end then, which would skip what came since)."""

    def forget(self, seats: list[Seat]) -> None:
        """These seats are retired: a later start is a first start again."""
        for seat in seats:
            self._first.pop(seat, None)

    def rewind(self, rewind: Rewind) -> None:
        """A cursor incarnation runs: the newest of its seat waits for its position."""
        member = self.member
        seat = seat_of(rewind)
        key, tp = seat
        fanout = member.fanouts.get(tp)
        if seat in self.cursors.closing:
            self._parked[seat] = rewind
            return
        if fanout is None or key not in member.roster.riders:
            return
        if member.seats.started(seat, rewind.epoch):
            fanout.add(key)  # a restart waits for its position again
            member.cancel_read(seat)
            self._rewinds[seat] = rewind.epoch
            self._count()

    def reopened(self, retired: dict[Seat, int | None]) -> None:
        """These seats' retirement ended (the epochs it retired): a newer cursor parked
        there starts now."""
        for seat, epoch in retired.items():
            parked = self._parked.pop(seat, None)
            if parked is not None and (epoch is None or parked.epoch > epoch):
                self.rewind(parked)

    def read(self) -> None:
        member = self.member
        if self._reading or not self._rewinds or member.kafka is None or member.offsets is None:
            return
        asked = {s: e for s, e in self._rewinds.items() if member.seats.current(s, e)}
        self._rewinds = {}
        self._in_read = len(asked)
        self._count()
        if not asked:
            return
        self._reading = True
        groups = {s: member.roster.riders[s[0]].settings.group_id for s in asked}
        ends = {tp: hw for _k, tp in asked if (hw := member.highwater(tp)) is not None}
        member.spawn(io.read_positions(member.kafka, member.offsets, asked, groups, ends,
                                     member.context.clock, member), name=f"{member.path}:positions")

    def positions(self, read: PositionsRead) -> None:
        member = self.member
        self._reading = not read.last
        self._in_read = max(0, self._in_read - len(read.asked)) if self._reading else 0
        current = {s: e for s, e in read.asked.items()
                   if member.seats.current(s, e) and s[0] in member.roster.riders}
        held = {s: e for s, e in current.items() if s[1] in self.rebalance.suspended}
        if held:  # a rebalance holds their partitions: placed once it is over
            self._rewinds.update(held)
            current = {s: e for s, e in current.items() if s not in held}
        if read.failed is not None:
            log.warning("%s: reading committed offsets failed (%s); trying again",
                        member.path, read.failed)
            self._rewinds.update(current)
        self._count()
        if read.failed is not None:
            return
        for seat in current:
            group, committed = member.roster.riders[seat[0]].settings.group_id, read.committed[seat]
            self.note_writer(group, seat[1], committed, read.marks.get(seat, ""))
            if committed is not None:
                member.writers.wrote(group, seat[1], committed)  # what is there as it starts
        starts = {seat: self._start(seat, read.committed[seat], read.bounds.get(seat[1]))
                  for seat in current}
        for tp in {tp for _key, tp in starts}:
            self._seek(tp, {k: s[1] for (k, t), s in starts.items() if t == tp})
        for seat, (told, start) in starts.items():
            cursor = self.cursors.find(*seat)
            if cursor is not None:
                cursor.tell_system(Assigned(told, current[seat],
                                            pin=not self._earliest(seat)))
                member.feed(seat[1], member.fanouts[seat[1]].position(seat[0], start))

    def _earliest(self, seat: Seat) -> bool:
        rider = self.member.roster.riders.get(seat[0])
        return rider is not None and rider.settings.auto_offset_reset == "earliest"

    def _count(self) -> None:
        """The cursors awaiting their position: asked for, or waiting to be."""
        self.member.m_awaiting.set(len(self._rewinds) + self._in_read)

    def _start(self, seat: Seat, committed: int | None,
               bounds: Bounds | None) -> tuple[int | None, int | None]:
        """(the position the cursor is told, where the shared fetch serves it from)."""
        member = self.member
        settings = member.roster.riders[seat[0]].settings
        if committed is not None and not member.incarnations.trusts(settings.group_id, seat[1]):
            member.journal("offset_reset", seat[1], subscription=seat[0], offset=committed,
                         reason="committed before the topic was deleted and created again")
            log.warning("%s: %s: committed position %d of %s predates the topic's deletion; "
                        "auto.offset.reset=%s applies", member.path, seat[0], committed,
                        child_name(seat[1]), settings.auto_offset_reset)
            committed = None
        if committed is None and seat in self._first:
            committed = self._first[seat]  # a restart before its first commit
        start = start_of(committed, settings.auto_offset_reset, bounds or Bounds())
        if committed is None and start.offset is not None:
            self._first[seat] = start.offset
        if start.reset_from is not None:
            log.warning("%s: %s: committed position %d of %s is outside the log %s; "
                        "auto.offset.reset=%s starts it at %s", member.path, seat[0],
                        start.reset_from, child_name(seat[1]), bounds,
                        settings.auto_offset_reset, start.offset)
            member.journal("offset_reset", seat[1], subscription=seat[0],
                         offset=start.reset_from, reason=f"now {start.offset}")
        if committed is not None and start.reset_from is None:
            return committed, committed
        earliest = settings.auto_offset_reset == "earliest"
        return (None if earliest else start.offset), start.offset

    def _seek(self, tp: TopicPartition, starts: dict[str, int | None]) -> None:
        member = self.member
        kafka, fanout = member.kafka, member.fanouts[tp]
        target = fanout.seek_target(starts)
        if kafka is not None and target is not None and tp in kafka.assignment():
            kafka.seek(tp, target)
            fanout.seeked(target)

    def verify_writers(self) -> None:
        """Read back a rotating sample of the groups' commits (issue 32, item 8)."""
        member = self.member
        now = member.context.clock.monotonic_ms()
        if member.offsets is None or not member.writers.due(now):
            return
        roster, fanouts = member.roster, member.fanouts
        tps = {group: found for group in member.writers.sample(roster.groups(), now)
               if (found := sorted(tp for key in roster.of_group(group)
                                   for tp, fanout in fanouts.items() if key in fanout.cursors))}
        if not tps:  # none of them has a cursor yet
            member.writers.reading = False
            return
        member.writers.asking(tps)
        member.spawn(io.read_marks(member.offsets, tps, member.context.clock, member),
                     name=f"{member.path}:writers")

    def note_writer(self, group: str, tp: TopicPartition, offset: int | None,
                     metadata: str) -> None:
        member = self.member
        settled = not any(member.commits.holds(seat) for seat in self._seats_of(group, tp))
        if member.writers.seen(group, tp, offset, metadata, settled=settled) is not None:
            log.error("%s: %s", member.path, member.writers.reason(group))

    def _seats_of(self, group: str, tp: TopicPartition) -> list[Seat]:
        fanout = self.member.fanouts.get(tp)
        if fanout is None:
            return []
        return [(k, tp) for k in self.member.roster.of_group(group) if k in fanout.cursors]
