"""Cursors: the instance member's room for starting, routing and retiring cursors (one
`PartitionActor` per subscription and owned partition). It runs on the member's task only
(called from its handlers); what it awaits runs in the member's tasks (io.py), which tell
the member when they are done.

- Start: a new partition (`Assign`) gets a cursor for every subscription that reads its
  topic, one per group; a subscription that joins gets cursors on the partitions already
  owned (`route`, no rebalance). The epoch is allocated by the cursor's factory
  (seats.next_epoch), so a restart by its supervisor writes nothing of the member's.
- Retire (a leave, a revoke, the member's stop): the cursors leave their fanouts at
  once, drain in a task (`Drained`), their final positions go out in the next commit
  round, then they stop in a task (`Retired`), and whoever waits is answered. A leave or
  revoke never holds the fetch or other subscriptions.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable

from aiokafka import TopicPartition

from actors.delivery.path.fanout import Fanout
from actors.delivery.path.member import io
from actors.delivery.path.member.commits import Position, Seat
from actors.delivery.path.member.messages import CursorFailed, Drained, Retired
from actors.delivery.path.member.seats import Retirement, next_epoch
from actors.delivery.path.member.shape import Member
from actors.delivery.path.member.tuning import FetchTuning
from actors.delivery.path.partition import PartitionActor, PartitionPeers
from actors.delivery.path.roster import Rider, consumes
from actors.shared.group_consumer import Wiring, child_name
from runtime.errors import ActorDeadError
from runtime.kafka import topic_creation
from runtime.kernel import Actor, ChildSpec, Supervisor

log = logging.getLogger(__name__)
RING_MIN_RECORDS = 2000
"""The shared buffer of a partition holds at least this many records (more when one
fetch brings more), so a cursor that paused briefly resumes from memory."""
CursorStart = tuple[Seat, Supervisor, ChildSpec]


class Cursors:
    def __init__(self, member: Member, wiring: Wiring,
                 long_lived: Callable[[], None] | None) -> None:
        self.member = member
        self.wiring = wiring
        self.long_lived = long_lived or (lambda: None)
        self.tuning = FetchTuning()
        self.routed: set[str] = set()
        """Riders whose cursors on the owned partitions exist (or are starting)."""
        self.closing: set[Seat] = set()
        """Seats being retired: their cursors' commits and rewinds no longer count."""
        self._routed_version = -1

    # -- lookups -----------------------------------------------------------------------
    def find(self, key: str, tp: TopicPartition) -> Actor | None:
        rider = self.member.roster.riders.get(key)
        return _cursor_of(rider, tp) if rider is not None else None

    # -- starting ----------------------------------------------------------------------
    def assign(self, tps: set[TopicPartition]) -> None:
        """New partitions: a fanout each, and a cursor for every claimant."""
        member = self.member
        member.rebalances += 1
        member.m_rebalances.inc()
        member.m_generation.set(member.generation())
        member.m_assigned.set(len(tps))
        new = sorted(tps - member.owned)
        if new:
            log.info("%s: partitions assigned: %s", member.path,
                     ", ".join(child_name(tp) for tp in new))
        capacity = max(RING_MIN_RECORDS, self.wiring.max_records)
        kafka, starts = member.kafka, []
        for tp in new:
            member.owned.add(tp)
            member.fanouts[tp] = Fanout(capacity)
            member.commits.assigned(tp)
            if kafka is not None and tp in kafka.assignment():
                kafka.pause(tp)  # until some cursor knows where it starts
            for key in self._claimants(tp.topic):
                starts += self._spec(member.roster.riders[key], tp)
            member.journal("partition_assigned", tp, actor=member.path)
        self.routed.update(member.roster.riders)
        self._start(starts)

    def noted(self) -> None:
        """The roster changed: its size, fetch size and fetch wait apply."""
        member = self.member
        member.m_riders.set(len(member.roster))
        self.tuning.note(member.roster.riders.values())
        if self.tuning.records:
            self.wiring.max_records = self.tuning.records

    def route(self) -> None:
        """Riders that joined since get cursors on the partitions already owned (only
        theirs are looked at: a burst of thousands of joins must not rescan every one)."""
        member = self.member
        if member.roster.version == self._routed_version:
            return
        self._routed_version = member.roster.version
        riders = member.roster.riders
        joined = [key for key in riders if key not in self.routed]
        self.routed.update(joined)
        starts: list[CursorStart] = []
        for key in joined:
            settings = riders[key].settings
            for tp, fanout in member.fanouts.items():
                if key not in fanout.cursors and consumes(settings, tp.topic) \
                        and not self._group_reads(fanout, settings.group_id):
                    starts += self._spec(riders[key], tp)
        self._start(starts)
        if joined:
            log.info("%s: %d subscriptions (roster version %d): %d cursors added without "
                     "a rebalance", member.path, len(riders), member.roster.version,
                     len(starts))

    def _start(self, starts: list[CursorStart]) -> None:
        if starts:
            self.member.spawn(io.start_cursors(starts, self.member),
                              name=f"{self.member.path}:start")
            self.long_lived()

    def _spec(self, rider: Rider, tp: TopicPartition) -> list[CursorStart]:
        """The start of `rider`'s cursor on `tp` (none if it has one or its tree stops);
        its fanout entry is taken now, so a second start is not asked for."""
        key, fanout = rider.settings.key, self.member.fanouts[tp]
        try:
            sup = rider.partitions.actor_as(Supervisor)
        except ActorDeadError:
            return []
        if key in fanout.cursors or not sup.alive or sup.has_child(child_name(tp)):
            return []
        fanout.add(key)
        spec = ChildSpec(child_name(tp), self._factory(rider, tp), restart="transient",
                         shutdown_ms=self.wiring.drain_ms + 2000)
        return [((key, tp), sup, spec)]

    def _factory(self, rider: Rider, tp: TopicPartition) -> Callable[[], Actor]:
        member = self.member

        def build() -> Actor:
            deps = rider.deps
            peers = PartitionPeers(member, deps.egress, deps.deadletter, deps.retrytopic)
            return PartitionActor(child_name(tp), deps.cursors(tp.topic), tp.topic,
                                  tp.partition, next_epoch(), peers, deps.metrics,
                                  deps.stall_after_ms)

        return build

    def _group_reads(self, fanout: Fanout, group: str) -> bool:
        """Whether a subscription of `group` has a cursor on that partition already."""
        riders = self.member.roster.riders
        return any(k in riders and riders[k].settings.group_id == group for k in fanout.cursors)

    def _claimants(self, topic: str) -> list[str]:
        """Every subscription that reads `topic`, but one per group (two cursors of one
        group would commit over each other; only patterns can overlap within a group,
        the first to join wins)."""
        riders, groups, keys = self.member.roster.riders, set(), []
        for key in self.member.roster.claimants(topic):
            group = riders[key].settings.group_id
            if group not in groups:
                groups.add(group)
                keys.append(key)
        return keys

    # -- retiring ----------------------------------------------------------------------
    def leave(self, rider: Rider, done: Callable[[], None]) -> None:
        member, key = self.member, rider.settings.key
        if member.roster.riders.get(key) is not rider:
            done()  # not seated (a newer seat of the subscription replaced it)
            return
        member.roster.leave(key)
        self.routed.discard(key)
        self.tuning.left()
        self.retire({(key, tp): rider for tp, f in member.fanouts.items() if key in f.cursors},
                    done)

    def revoke(self, tps: set[TopicPartition]) -> asyncio.Future[None]:
        """Revoked partitions: their cursors retire; the future (the rebalance listener
        waits for it) is answered once their final positions are committed."""
        member = self.member
        answered: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        ordered = sorted(tps & member.owned)
        started = member.context.clock.monotonic_ms()
        riders = member.roster.riders
        seats = {(key, tp): riders[key] for tp in ordered
                 for key in member.fanouts[tp].cursors if key in riders}

        def done() -> None:
            log.info("%s: partitions revoked (drained and committed in %d ms): %s",
                     member.path, member.context.clock.monotonic_ms() - started,
                     ", ".join(child_name(tp) for tp in ordered))
            if not answered.done():
                answered.set_result(None)

        self._note_deleted(ordered)
        self.retire(seats, done)
        for tp in ordered:
            member.owned.discard(tp)
            member.fanouts.pop(tp, None)
            member.journal("partition_revoked", tp, actor=member.path)
        return answered

    def _note_deleted(self, tps: list[TopicPartition]) -> None:
        """Revoked because their topic is gone (the client's metadata lacks it): their
        positions are not committed (a topic created again under that name would take
        them), and the groups' commits there are not trusted until they commit anew."""
        kafka = self.member.kafka
        if kafka is None:
            return
        missing = topic_creation.missing(kafka, {tp.topic for tp in tps})
        gone = [tp for tp in tps if tp.topic in missing]
        if gone:
            log.warning("%s: topics deleted: %s; their positions are dropped", self.member.path,
                        ", ".join(sorted(missing)))
            self.member.commits.gone.update(gone)
            self.member.incarnations.gone(gone)

    def retire(self, riders: dict[Seat, Rider], done: Callable[[], None]) -> None:
        member = self.member
        for seat in riders:
            self.closing.add(seat)
            fanout = member.fanouts.get(seat[1])
            if fanout is not None:
                fanout.remove(seat[0])
            member.cancel_read(seat)
        member.commits.forget(list(riders))
        retirement = member.seats.retire(riders, done)
        if not riders:
            self._stop(retirement)
            return
        cursors = {seat: _cursor_of(rider, seat[1]) for seat, rider in riders.items()}
        member.spawn(io.drain(retirement.number, cursors, member.context.clock,
                              self.wiring.drain_ms, member), name=f"{member.path}:drain")

    def handle(self, message: Drained | Retired | CursorFailed) -> None:
        member = self.member
        if isinstance(message, CursorFailed):
            fanout = member.fanouts.get(message.seat[1])
            if fanout is not None:
                fanout.remove(message.seat[0])
            return
        if isinstance(message, Retired):
            retirement = member.seats.retired(message.retirement)
            if retirement is not None:
                self._forget(retirement)
            return
        retirement = member.seats.retiring.get(message.retirement)
        if retirement is None:
            return
        for seat, position in message.positions.items():
            epoch = retirement.epochs.get(seat)
            if position is not None and epoch is not None:
                group = retirement.riders[seat].settings.group_id
                member.commits.note(seat, Position(group, position, epoch, final=True))
        retirement.stage = "committing"
        member.flush()
        self.committed()

    def committed(self) -> None:
        """A commit round settled: retirements whose final positions went out stop."""
        commits = self.member.commits
        for retirement in list(self.member.seats.retiring.values()):
            if retirement.stage == "committing" \
                    and not any(commits.holds(seat) for seat in retirement.riders):
                self._stop(retirement)

    def _stop(self, retirement: Retirement) -> None:
        retirement.stage = "stopping"
        member = self.member
        member.spawn(io.stop(retirement.number, _supervised(retirement.riders), member),
                     name=f"{member.path}:stop")

    def _forget(self, retirement: Retirement) -> None:
        for seat in retirement.riders:
            self.closing.discard(seat)
            self.member.seats.end(seat, retirement.epochs.get(seat))
        retirement.done()

    # -- the member's own start and stop -----------------------------------------------
    async def stop_leftovers(self, riders: Iterable[Rider]) -> None:
        """A previous incarnation's cursors (it crashed): their positions are committed
        or not; the new assignment starts them again from what is."""
        for rider in list(riders):
            with contextlib.suppress(ActorDeadError):
                sup = rider.partitions.actor_as(Supervisor)
                if sup.children():
                    await sup.stop_children(sup.children())

    async def retire_now(self, seats: list[Seat]) -> None:
        """The member stops (on its own task, its mailbox closed): drain every cursor,
        commit what is pending with their final positions, stop them, answer every
        retirement still under way."""
        member, riders = self.member, self.member.roster.riders
        mine = {seat: riders[seat[0]] for seat in seats if seat[0] in riders}
        for retirement in member.seats.retiring.values():
            mine.update(retirement.riders)
        final = await io.drain_positions(
            {seat: _cursor_of(rider, seat[1]) for seat, rider in mine.items()},
            member.context.clock, self.wiring.drain_ms)
        positions = _last_positions(member, mine, final)
        if positions and member.offsets is not None:
            refusals = await member.offsets.commit(positions)
            for refusal in refusals:
                log.warning("%s: final commit of group %s: %s", member.path,
                            refusal.group, refusal.reason)
        await io.stop_all(_supervised(mine))
        for retirement in list(member.seats.retiring.values()):
            retirement.done()


def _last_positions(member: Member, riders: dict[Seat, Rider],
                    final: dict[Seat, int | None]) -> dict[str, dict[TopicPartition, int]]:
    """Per group, the newest position of each seat: a drain's, else one still pending or
    being sent when the member stopped."""
    commits = member.commits
    known: dict[Seat, Position] = dict(commits.in_flight.seats) if commits.in_flight else {}
    known.update(commits.pending)
    groups: dict[str, dict[TopicPartition, int]] = {}
    for seat, position in known.items():
        groups.setdefault(position.group, {})[seat[1]] = position.offset
    for seat, offset in final.items():
        if offset is not None:
            groups.setdefault(riders[seat].settings.group_id, {})[seat[1]] = offset
    return groups


def _cursor_of(rider: Rider, tp: TopicPartition) -> Actor | None:
    with contextlib.suppress(ActorDeadError):
        sup = rider.partitions.actor_as(Supervisor)
        if sup.alive and sup.has_child(child_name(tp)):
            return sup.child(child_name(tp))
    return None


def _supervised(riders: dict[Seat, Rider]) -> list[tuple[Supervisor, str]]:
    found = []
    for (_key, tp), rider in riders.items():
        with contextlib.suppress(ActorDeadError):
            found.append((rider.partitions.actor_as(Supervisor), child_name(tp)))
    return found
