"""Cursors: the instance member's room for starting, routing and retiring cursors (one
`PartitionActor` per subscription and owned partition). It runs on the member's task only
(called from its handlers); what it awaits runs in the member's tasks (io.py), which tell
the member when they are done.

- Start: a new partition (`Assign`) gets a cursor for every subscription that reads its
  topic, one per group; a subscription that joins gets cursors on the partitions already
  owned (`route`, no rebalance). The epoch is allocated by the cursor's factory
  (seats.next_epoch), so a restart by its supervisor writes nothing of the member's.
  Each wanted cursor is first a claim (partition, subscription); claims become cursors in
  waves (waves.py: one at a time, with a rest between), so a rebalance that brings
  thousands holds neither the member's mailbox nor the event loop.
- Retire (a leave, a revoke, the member's stop): the cursors leave their fanouts at
  once, drain in a task (`Drained`), their final positions go out in the next commit
  round, then they stop in a task (`Retired`), and whoever waits is answered. A leave or
  revoke never holds the fetch or other subscriptions.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable

from aiokafka import TopicPartition

from actors.delivery.path.fanout import Fanout, Feed
from actors.delivery.path.member import io
from actors.delivery.path.member.commits import Position, Seat
from actors.delivery.path.member.messages import CursorFailed, Drained, Retired, StartNext
from actors.delivery.path.member.seats import Retirement, next_epoch
from actors.delivery.path.member.shape import Member
from actors.delivery.path.member.tuning import FetchTuning
from actors.delivery.path.member.waves import Waves
from actors.delivery.path.partition import PartitionActor, PartitionPeers
from actors.delivery.path.roster import Rider, consumes
from actors.shared.group_consumer import Wiring, child_name
from actors.shared.messages import Record
from runtime.errors import ActorDeadError
from runtime.kafka import topic_creation
from runtime.kernel import Actor, ChildSpec, Supervisor

log = logging.getLogger(__name__)
RING_MIN_RECORDS = 2000
"""The shared buffer of a partition holds at least this many records (more when one
fetch brings more), so a cursor that paused briefly resumes from memory."""
CursorStart = tuple[Seat, Supervisor, ChildSpec]
Claim = tuple[TopicPartition, Fanout, str]
"""A cursor wanted: on this partition (as long as it is this fanout's), for this rider."""


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
        self.held: Callable[[TopicPartition], bool] = lambda tp: False
        """Whether a rebalance holds `tp` (no cursor starts there meanwhile)."""
        self.retired: Callable[[list[Seat]], None] = lambda seats: None
        """Told the seats retired (where they first started is forgotten)."""
        self.reopened: Callable[[dict[Seat, int | None]], None] = lambda seats: None
        """Told the seats whose retirement ended, with the epoch retired (a newer cursor
        there may start)."""
        self._routed_version = -1
        self.waves: Waves[Claim] = Waves()

    # -- lookups -----------------------------------------------------------------------
    def find(self, key: str, tp: TopicPartition) -> Actor | None:
        rider = self.member.roster.riders.get(key)
        return _cursor_of(rider, tp) if rider is not None else None

    def routes(self, tp: TopicPartition, feed: Feed) -> list[tuple[Actor, list[Record]]]:
        """The cursors of a fanout's feed on `tp` (`find` of each key) with their records,
        those not running left out: in one call, the partition's cursor name made once (a
        fetched batch goes to every cursor of its partition: issue 37)."""
        riders, name = self.member.roster.riders, child_name(tp)
        fanout = self.member.fanouts.get(tp)
        entries = fanout.cursors if fanout is not None else {}
        routed = []
        for key, records in feed:
            entry = entries.get(key)
            cursor = entry.target if entry is not None else None
            # the one found last, while it has not ended, is still its supervisor's (a
            # supervisor replaces a child after it ended): no walk through the rider, its
            # supervisor and its children at every batch (issue 37: 4% of a delivery at
            # 10,000 subscribers, a few cold objects each)
            if not isinstance(cursor, Actor) or not cursor.alive:
                rider = riders.get(key)
                cursor = _cursor_named(rider, name) if rider is not None else None
                if entry is not None:
                    entry.target = cursor
            if cursor is not None:
                routed.append((cursor, records))
        return routed

    # -- starting ----------------------------------------------------------------------
    def start_partitions(self, new: list[TopicPartition]) -> None:
        """New partitions: a fanout each, and a cursor for every claimant."""
        member = self.member
        capacity = max(RING_MIN_RECORDS, self.wiring.max_records)
        kafka = member.kafka
        for tp in new:
            member.owned.add(tp)
            member.fanouts[tp] = Fanout(capacity)
            member.commits.assigned(tp)
            if kafka is not None and tp in kafka.assignment():
                kafka.pause(tp)  # until some cursor knows where it starts
            member.journal("partition_assigned", tp, actor=member.path)
        self._claim({tp: member.roster.claimants(tp.topic) for tp in new})
        self.routed.update(member.roster.riders)
        self.start_next()

    def noted(self) -> None:
        """The roster changed: its size, fetch size and fetch wait apply."""
        member = self.member
        member.m_riders.set(len(member.roster))
        self.tuning.note(member.roster.riders, member.roster.joins)
        if self.tuning.records:
            self.wiring.max_records = self.tuning.records

    def join(self, rider: Rider) -> None:
        """A subscription rides the member: on the roster (routed in a later turn), and
        the waves stay small meanwhile (waves.py)."""
        self.member.roster.join(rider)
        self.waves.joined(self.member.context.clock.monotonic_ms())

    def route(self) -> None:
        """Riders that joined since get cursors on the partitions already owned (only
        theirs are looked at: a burst of thousands of joins must not rescan every one)."""
        member = self.member
        if member.roster.version == self._routed_version:
            return
        self._routed_version = member.roster.version
        riders = member.roster.riders
        joined = [key for key in member.roster.joined() if key not in self.routed]
        self.routed.update(joined)
        claimed = len(self.waves.claims)
        self._claim({tp: [k for k in joined if consumes(riders[k].settings, tp.topic)]
                     for tp in member.fanouts if not self.held(tp)})
        self.start_next()
        if joined:
            log.info("%s: %d subscriptions (roster version %d): %d cursors wanted without "
                     "a rebalance", member.path, len(riders), member.roster.version,
                     len(self.waves.claims) - claimed)

    def fill(self, tp: TopicPartition) -> None:
        """Cursors for the subscriptions that read `tp` and have none on it yet."""
        self._claim({tp: self.member.roster.claimants(tp.topic)})
        self.start_next()

    def _claim(self, wanted: dict[TopicPartition, list[str]]) -> None:
        """Claim the cursors `wanted` (each partition's subscriptions), a subscription's
        together: its cursors start in one wave, so its group's committed offsets are
        read in one request (claimed a partition after another, 10,000 subscribers'
        groups were read four times each, the reads running seconds past the last
        cursor's start)."""
        fanouts = self.member.fanouts
        by_key: dict[str, list[TopicPartition]] = {}
        for tp, keys in wanted.items():
            for key in keys:
                by_key.setdefault(key, []).append(tp)
        self.waves.claim((tp, fanouts[tp], key) for key, tps in by_key.items() for tp in tps)

    def start_next(self) -> None:
        """Start the next wave of claimed cursors, unless one is under way (its end,
        `StartNext`, calls `started`)."""
        member = self.member
        starts = self.waves.take(member.context.clock.monotonic_ms(),
                                 lambda claim: self._claimed(*claim))
        if starts:
            member.spawn(io.start_cursors(starts, member, self.long_lived),
                         name=f"{member.path}:start")
        elif starts is not None:  # only passed over: go on in the next turn
            member.tell_system(StartNext(rested=True))

    def started(self, rested: bool) -> None:
        """A wave of starts (or its rest) ended: the next begins, after a rest if due."""
        member = self.member
        rest_until = self.waves.ended(member.context.clock.monotonic_ms(), rested=rested)
        if rest_until is not None:
            member.schedule(rest_until, StartNext(rested=True))
        else:
            self.start_next()

    def _claimed(self, tp: TopicPartition, fanout: Fanout, key: str) -> list[CursorStart]:
        """The start a claim still asks for: none when its rider left, its partition went
        or is held by a rebalance (`fill` claims again once it is over), or its group has
        a cursor there (one per group: only patterns can overlap within a group, the first
        to claim wins)."""
        member = self.member
        rider = member.roster.riders.get(key)
        if rider is None or member.fanouts.get(tp) is not fanout or self.held(tp):
            return []
        settings = rider.settings
        if not consumes(settings, tp.topic) or any(
                k in fanout.cursors for k in member.roster.of_group(settings.group_id)):
            return []
        return self._spec(rider, tp)

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

    def leave_partitions(self, tps: list[TopicPartition], done: Callable[[], None]) -> None:
        """Partitions that are no longer ours: their cursors retire."""
        member = self.member
        riders = member.roster.riders
        self.retire({(key, tp): riders[key] for tp in tps
                     for key in member.fanouts[tp].cursors if key in riders}, done)
        for tp in tps:
            member.owned.discard(tp)
            member.fanouts.pop(tp, None)
            member.journal("partition_revoked", tp, actor=member.path)

    def note_deleted(self, tps: list[TopicPartition]) -> None:
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

    def retire(self, riders: dict[Seat, Rider], done: Callable[[], None], *,
               keep: bool = False) -> None:
        """Drain these cursors, commit their final positions, then stop them and call
        `done`. With `keep` (a rebalance under way) they only drain and commit, keeping
        their records and seats: `done` is called once committed, and they are resumed
        or retired when the assignment says whether they stay."""
        member = self.member
        if keep:
            self._drain(member.seats.retire(riders, done, keep=True))
            return
        for seat in riders:
            self.closing.add(seat)
            fanout = member.fanouts.get(seat[1])
            if fanout is not None:
                fanout.remove(seat[0])
            member.cancel_read(seat)
        member.commits.forget(list(riders))
        member.refusals.clear(riders)
        self.retired(list(riders))
        for (_key, tp), rider in riders.items():  # another instance may write there next
            member.writers.forget(rider.settings.group_id, tp)
        self._drain(member.seats.retire(riders, done))

    def _drain(self, retirement: Retirement) -> None:
        member = self.member
        if not retirement.riders:
            self._stop(retirement)
            return
        cursors = {seat: _cursor_of(rider, seat[1]) for seat, rider in retirement.riders.items()}
        member.spawn(io.drain(retirement.number, cursors, member.context.clock,
                              self.wiring.drain_ms, member, keep=retirement.keep),
                     name=f"{member.path}:drain")

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
        if retirement.keep:  # nothing stops: the assignment decides
            member.seats.retired(retirement.number)
            retirement.done()
            return
        member.spawn(io.stop(retirement.number, _supervised(retirement.riders), member),
                     name=f"{member.path}:stop")

    def _forget(self, retirement: Retirement) -> None:
        for seat in retirement.riders:
            self.closing.discard(seat)
            self.member.seats.end(seat, retirement.epochs.get(seat))
        retirement.done()
        self.reopened({seat: retirement.epochs.get(seat) for seat in retirement.riders})

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
        commit what is pending with their final positions, answer every retirement still
        under way."""
        member, riders = self.member, self.member.roster.riders
        mine = {seat: riders[seat[0]] for seat in seats if seat[0] in riders}
        for retirement in member.seats.retiring.values():
            mine.update(retirement.riders)
        final = await io.drain_positions(
            {seat: _cursor_of(rider, seat[1]) for seat, rider in mine.items()},
            member.context.clock, self.wiring.drain_ms)
        positions = _last_positions(member, mine, final)
        if positions and member.offsets is not None:
            refusals = await member.offsets.commit(positions, member.writers.ours)
            for refusal in refusals:
                log.warning("%s: final commit of group %s: %s", member.path,
                            refusal.group, refusal.reason)
        # not stopped here: their trees stop them next (the runtime's stop), or the next
        # member's start does (a crash); stopping 40,000 drained cursors one tree after
        # another ran past the member's stop deadline
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
    """`rider`'s cursor on `tp`, None when it has none running."""
    return _cursor_named(rider, child_name(tp))


def _cursor_named(rider: Rider, name: str) -> Actor | None:
    """`rider`'s cursor `name`, None when it has none running. Asked for every cursor a
    fetched batch goes to: one lookup of the name, no context manager (issue 37)."""
    try:
        sup = rider.partitions.actor_as(Supervisor)
        return sup.child(name) if sup.alive else None
    except ActorDeadError:  # no supervisor running, or no such child
        return None


def _supervised(riders: dict[Seat, Rider]) -> list[tuple[Supervisor, str]]:
    found = []
    for (_key, tp), rider in riders.items():
        with contextlib.suppress(ActorDeadError):
            found.append((rider.partitions.actor_as(Supervisor), child_name(tp)))
    return found
