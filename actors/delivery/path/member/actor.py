"""InstanceMemberActor: the one Kafka group member of this instance for a broker (see the
package docstring). Its mailbox is the only writer of its state; its decisions live in
pure books (`Seats`, `CommitBook`, `TopicPlan`, `Fanout`, `start_of`); its I/O runs in
tasks that tell it what came back (io.py, fetcher.py)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from aiokafka import AIOKafkaConsumer, TopicPartition

from actors.delivery.path.catchup import CATCH_UP_READERS, CatchUpRead, catch_up
from actors.delivery.path.fanout import CatchUp, Fanout, Feed
from actors.delivery.path.member import io
from actors.delivery.path.member.commits import CommitBook, Position, Seat
from actors.delivery.path.member.cursors import Cursors
from actors.delivery.path.member.fetcher import fetch_forever
from actors.delivery.path.member.messages import (
    CatchUpEnded,
    CaughtUp,
    CommitsSettled,
    CursorFailed,
    Drained,
    Fetched,
    FetchPlan,
    HighwatersRead,
    Hold,
    Join,
    Leave,
    PositionsRead,
    Problems,
    Release,
    Retired,
    TopicsListed,
    WritersRead,
)
from actors.delivery.path.member.positions import Bounds, Incarnations, start_of
from actors.delivery.path.member.rebalance import Rebalances
from actors.delivery.path.member.seats import Seats, resolve
from actors.delivery.path.member.topics import Topics
from actors.delivery.path.member.writers import Writers, mark
from actors.delivery.path.roster import Rider, Roster
from actors.delivery.path.status import MemberStatus
from actors.shared.errors import UnexpectedMessage
from actors.shared.group_consumer import (
    DEFAULT_FETCH_WAIT_MS,
    HIGHWATER_REFRESH_MS,
    PAUSED_POLL_MS,
    POLL_MS,
    ClientSettings,
    Wiring,
    child_name,
)
from actors.shared.idle_pace import PROCESS_PACE
from actors.shared.messages import (
    Assigned,
    Batch,
    CommitRequest,
    FlowControl,
    Highwater,
    Rewind,
    StatusQuery,
)
from actors.shared.rebalance import Assign, RebalanceListener, Revoke
from runtime.host.journal import Event, EventType
from runtime.host.metrics import Registry
from runtime.kafka import compat, make_consumer
from runtime.kafka.group_offsets import GroupOffsets
from runtime.kernel import Actor

log = logging.getLogger(__name__)


class InstanceMemberActor(Actor):
    mailbox_capacity = 4096

    def __init__(self, name: str, group_id: str, riders: list[Rider], wiring: Wiring,
                 settings: ClientSettings, metrics: Registry,
                 long_lived: Callable[[], None] | None = None, *, held: bool = False,
                 ) -> None:
        super().__init__(name)
        self.wiring, self.settings = wiring, settings
        self.roster = Roster(group_id)
        for rider in riders:
            self.roster.join(rider)
        self.kafka: AIOKafkaConsumer | None = None
        self.offsets: GroupOffsets | None = None
        self.owned: set[TopicPartition] = set()
        self.fanouts: dict[TopicPartition, Fanout] = {}
        self.seats = Seats()
        self.commits = CommitBook()
        self.incarnations = Incarnations()
        self.writers = Writers(mark(group_id))
        self.commit_errors: dict[str, str] = {}  # group.id -> why its last commit failed
        self.cursors = Cursors(self, wiring, long_lived)
        self.topics = Topics(self, self.cursors.noted, self.cursors.route, held=held)
        self.rebalance = Rebalances(self, self.cursors)
        self.cursors.held = self.rebalance.suspended.__contains__
        self.reads: dict[Seat, CatchUpRead] = {}
        self._readers = asyncio.Semaphore(CATCH_UP_READERS)
        self._rewinds: dict[Seat, int] = {}  # new cursors waiting for their positions
        self._reading = False  # a read of positions is under way
        self._ends_due, self._reading_ends = 0, False
        self._quiet = False
        self._client_wait_ms = DEFAULT_FETCH_WAIT_MS
        self.released = asyncio.Event()
        self.listener = RebalanceListener(self, self.released)
        self.rebalances = 0
        self._metrics(metrics, group_id)

    def _metrics(self, metrics: Registry, group_id: str) -> None:
        labels = {"group": group_id, "member": self.name}
        self.m_generation = metrics.gauge(
            "hookstream_group_generation", "Generation of the instance group member"
        ).labels(**labels)
        self.m_assigned = metrics.gauge(
            "hookstream_group_assigned_partitions",
            "Partitions assigned to the instance group member").labels(**labels)
        self.m_riders = metrics.gauge(
            "hookstream_group_subscriptions",
            "Subscriptions reading through the instance group member").labels(**labels)
        self.m_rebalances = metrics.counter(
            "hookstream_group_rebalances_total",
            "Assignments the instance group member received").labels(**labels)

    # -- lifecycle ---------------------------------------------------------------------
    async def on_start(self) -> None:
        kafka = self.kafka = make_consumer(self.wiring.bootstrap,
                                           **{**self.wiring.broker_settings, **self.settings})
        await kafka.start()
        self.offsets = GroupOffsets(compat.client_of(kafka))
        await self.cursors.stop_leftovers(self.roster.riders.values())
        wait_ms = compat.fetch_wait_ms(kafka)
        self._client_wait_ms = DEFAULT_FETCH_WAIT_MS if wait_ms is None else wait_ms
        PROCESS_PACE.joined(self)
        self.spawn(fetch_forever(kafka, self, self.context.clock), name=f"{self.path}:fetch")

    async def on_stop(self) -> None:
        kafka, self.kafka = self.kafka, None
        PROCESS_PACE.left(self)
        if kafka is None:
            self.released.set()
            return
        try:
            try:
                await self.cursors.retire_now(
                    [(k, tp) for tp, f in self.fanouts.items() for k in f.cursors])
            finally:
                self.released.set()  # before the client stops: its stop waits for it
            await compat.leave_group(kafka)  # so the next member need not wait (quirk 6)
        finally:
            await kafka.stop()

    @property
    def held(self) -> bool:
        return self.topics.held

    @property
    def listening(self) -> bool:
        return self.topics.listening

    # -- messages ----------------------------------------------------------------------
    async def handle(self, message: object) -> object:
        if isinstance(message, Fetched):
            return self._on_fetched(message)
        if isinstance(message, CommitRequest):
            self._on_commit_request(message)
        elif isinstance(message, FlowControl):
            self.on_flow(message)
        elif isinstance(message, Rewind):
            self._on_rewind(message)
        elif isinstance(message, CommitsSettled):
            self._on_settled(message)
        elif isinstance(message, PositionsRead):
            self._on_positions(message)
        elif isinstance(message, HighwatersRead):
            self._reading_ends = False
            for tp, fanout in self.fanouts.items():
                self._tell_highwater(tp, fanout, message.highwaters.get(tp))
        elif isinstance(message, Assign):
            self.rebalance.assign(set(message.partitions))
        elif isinstance(message, Revoke):
            return self.rebalance.revoke(set(message.partitions))
        elif isinstance(message, Drained | Retired | CursorFailed):
            self.cursors.handle(message)
        elif isinstance(message, CaughtUp):
            self._on_caught_up(message)
        elif isinstance(message, CatchUpEnded):
            if self.reads.get(message.seat) is message.read:
                del self.reads[message.seat]
        elif isinstance(message, Join | Leave | Hold | Release | TopicsListed):
            self._on_roster(message)
        elif isinstance(message, WritersRead):
            self.writers.reading = False
            for group, marks in message.marks.items():
                for tp, (offset, metadata) in marks.items():
                    self._note_writer(group, tp, offset, metadata)
        elif isinstance(message, Problems):
            return [r for g in sorted(self.writers.foreign) if (r := self.writers.reason(g))]
        elif isinstance(message, StatusQuery) and message.subscription is not None:
            return self._status_of(message.subscription)
        else:
            raise UnexpectedMessage(self.path, message)
        return None

    def _on_roster(self, message: Join | Leave | Hold | Release | TopicsListed) -> None:
        if isinstance(message, Join):
            self.roster.join(message.rider)
        elif isinstance(message, Leave):
            self.cursors.leave(message.rider, resolve(message.done))
        elif isinstance(message, TopicsListed):
            self.topics.listed(message.topics)
        else:
            self.topics.held = isinstance(message, Hold)

    # -- the fetch turn ----------------------------------------------------------------
    def _on_fetched(self, fetched: Fetched) -> FetchPlan:
        for tp, records in fetched.batches.items():
            fanout = self.fanouts.get(tp)
            if fanout is not None and tp not in self.rebalance.suspended:
                highwater = fetched.highwaters.get(tp)
                self._feed(tp, fanout.append(records, highwater), highwater)
        self._pace(quiet=not fetched.batches and not self.commits.pending)
        self.topics.turn()
        self._read_positions()
        self._steer()
        self._read_ends()
        self._verify_writers()
        self.flush()
        return self._plan()

    def _plan(self) -> FetchPlan:
        kafka = self.kafka
        listening = self.topics.listening and kafka is not None
        paused = kafka is not None and bool(kafka.paused())
        timeout = PAUSED_POLL_MS if paused else (
            max(POLL_MS, PROCESS_PACE.idle_ms(self._wait_ms())) if self._quiet else POLL_MS)
        return FetchPlan(listening, timeout, self.cursors.tuning.records
                         or self.wiring.max_records)

    def _wait_ms(self) -> int:
        return self.cursors.tuning.wait_ms(self._client_wait_ms)

    def _pace(self, *, quiet: bool) -> None:
        """Idle: fetch less often, by how many consumers this process runs; busy: at the
        configured wait again (actors/shared/idle_pace.py)."""
        self._quiet = quiet
        kafka, configured = self.kafka, self._wait_ms()
        wait_ms = PROCESS_PACE.idle_ms(configured) if quiet else configured
        if kafka is not None and compat.fetch_wait_ms(kafka) != wait_ms:
            compat.set_fetch_wait_ms(kafka, wait_ms)

    def feed(self, tp: TopicPartition, decision: Feed | CatchUp) -> None:
        if isinstance(decision, CatchUp):
            self._start_catch_up(tp, decision)
        elif decision:
            self._feed(tp, decision, self._highwater(tp))

    def _feed(self, tp: TopicPartition, feed: Feed, highwater: int | None) -> None:
        """Hand records to cursors. With several cursors each gets its own copies: a
        cursor counts attempts on its records."""
        shared = len(self.fanouts[tp].cursors) > 1
        for key, records in feed:
            cursor = self.cursors.find(key, tp)
            if cursor is not None:
                batch = [r.clone() for r in records] if shared else records
                cursor.tell_system(Batch(batch, highwater))

    def _steer(self) -> None:
        """Fetch a partition only while some cursor is live on it."""
        kafka = self.kafka
        if kafka is None:
            return
        paused, assigned = kafka.paused(), kafka.assignment()
        for tp, fanout in self.fanouts.items():
            if fanout.fetching == (tp in paused) and tp in assigned:
                (kafka.resume if fanout.fetching else kafka.pause)(tp)

    # -- commits -----------------------------------------------------------------------
    def _on_commit_request(self, request: CommitRequest) -> None:
        seat = _seat(request)
        rider = self.roster.riders.get(seat[0])
        if rider is not None and self.seats.current(seat, request.epoch) \
                and seat not in self.cursors.closing:
            self.commits.note(seat, Position(rider.settings.group_id, request.offset,
                                             request.epoch))

    def flush(self) -> None:
        """Start a commit round if none is under way and some position moved."""
        round_ = self.commits.take(self.seats.current)
        if round_ is not None and self.offsets is not None:
            self.spawn(io.commit_round(self.offsets, round_, self.writers.ours, self),
                       name=f"{self.path}:commit")

    def _on_settled(self, settled: CommitsSettled) -> None:
        self.incarnations.gone(settled.outcome.gone)
        for (key, tp), position in self.commits.settle(settled.outcome,
                                                       self.seats.current).items():
            self.incarnations.committed(position.group, tp)
            self.writers.wrote(position.group, tp, position.offset)
            self.journal("committed", tp, subscription=key, offset=position.offset)
        groups = {p.group for p in settled.round.seats.values()}
        refused = dict(settled.outcome.refused)
        if settled.outcome.failed is not None:
            refused = dict.fromkeys(groups, f"commit failed: {settled.outcome.failed}")
        for group in groups:
            self._note_refusal(group, refused.get(group))
        self.cursors.committed()
        self.flush()  # what came in meanwhile

    def _note_refusal(self, group: str, reason: str | None) -> None:
        if reason is None:
            self.commit_errors.pop(group, None)
        elif self.commit_errors.get(group) != reason:
            self.commit_errors[group] = reason
            log.warning("%s: group %s: %s", self.path, group, reason)

    # -- positions ---------------------------------------------------------------------
    def _on_rewind(self, rewind: Rewind) -> None:
        """A cursor incarnation runs: the newest of its seat waits for its position."""
        seat = _seat(rewind)
        key, tp = seat
        fanout = self.fanouts.get(tp)
        if fanout is None or key not in self.roster.riders or seat in self.cursors.closing:
            return
        if self.seats.started(seat, rewind.epoch):
            fanout.add(key)  # a restart waits for its position again
            self.cancel_read(seat)
            self._rewinds[seat] = rewind.epoch

    def _read_positions(self) -> None:
        if self._reading or not self._rewinds or self.kafka is None or self.offsets is None:
            return
        asked = {s: e for s, e in self._rewinds.items() if self.seats.current(s, e)}
        self._rewinds = {}
        if not asked:
            return
        self._reading = True
        groups = {s: self.roster.riders[s[0]].settings.group_id for s in asked}
        ends = {tp: hw for _k, tp in asked if (hw := self._highwater(tp)) is not None}
        self.spawn(io.read_positions(self.kafka, self.offsets, asked, groups, ends,
                                     self.context.clock, self), name=f"{self.path}:positions")

    def _on_positions(self, read: PositionsRead) -> None:
        self._reading = False
        current = {s: e for s, e in read.asked.items()
                   if self.seats.current(s, e) and s[0] in self.roster.riders}
        held = {s: e for s, e in current.items() if s[1] in self.rebalance.suspended}
        if held:  # a rebalance holds their partitions: placed once it is over
            self._rewinds.update(held)
            current = {s: e for s, e in current.items() if s not in held}
        if read.failed is not None:
            log.warning("%s: reading committed offsets failed (%s); trying again",
                        self.path, read.failed)
            self._rewinds.update(current)
            return
        for seat in current:
            group, committed = self.roster.riders[seat[0]].settings.group_id, read.committed[seat]
            self._note_writer(group, seat[1], committed, read.marks.get(seat, ""))
            if committed is not None:
                self.writers.wrote(group, seat[1], committed)  # what is there as it starts
        starts = {seat: self._start(seat, read.committed[seat], read.bounds.get(seat[1]))
                  for seat in current}
        for tp in {tp for _key, tp in starts}:
            self._seek(tp, {k: s[1] for (k, t), s in starts.items() if t == tp})
        for seat, (told, start) in starts.items():
            cursor = self.cursors.find(*seat)
            if cursor is not None:
                cursor.tell_system(Assigned(told, current[seat]))
                self.feed(seat[1], self.fanouts[seat[1]].position(seat[0], start))

    def _start(self, seat: Seat, committed: int | None,
               bounds: Bounds | None) -> tuple[int | None, int | None]:
        """(the position the cursor is told, where the shared fetch serves it from)."""
        settings = self.roster.riders[seat[0]].settings
        if committed is not None and not self.incarnations.trusts(settings.group_id, seat[1]):
            self.journal("offset_reset", seat[1], subscription=seat[0], offset=committed,
                         reason="committed before the topic was deleted and created again")
            log.warning("%s: %s: committed position %d of %s predates the topic's deletion; "
                        "auto.offset.reset=%s applies", self.path, seat[0], committed,
                        child_name(seat[1]), settings.auto_offset_reset)
            committed = None
        start = start_of(committed, settings.auto_offset_reset, bounds or Bounds())
        if start.reset_from is not None:
            log.warning("%s: %s: committed position %d of %s is outside the log %s; "
                        "auto.offset.reset=%s starts it at %s", self.path, seat[0],
                        start.reset_from, child_name(seat[1]), bounds,
                        settings.auto_offset_reset, start.offset)
            self.journal("offset_reset", seat[1], subscription=seat[0],
                         offset=start.reset_from, reason=f"now {start.offset}")
        if committed is not None and start.reset_from is None:
            return committed, committed
        earliest = settings.auto_offset_reset == "earliest"
        return (None if earliest else start.offset), start.offset

    def _seek(self, tp: TopicPartition, starts: dict[str, int | None]) -> None:
        kafka, fanout = self.kafka, self.fanouts[tp]
        target = fanout.seek_target(starts)
        if kafka is not None and target is not None and tp in kafka.assignment():
            kafka.seek(tp, target)
            fanout.seeked(target)

    # -- writers -----------------------------------------------------------------------
    def _verify_writers(self) -> None:
        """Read back a rotating sample of the groups' commits (issue 32, item 8)."""
        now = self.context.clock.monotonic_ms()
        if self.offsets is None or not self.writers.due(now):
            return
        tps: dict[str, set[TopicPartition]] = {}
        riders = self.roster.riders
        for key, tp in self.seats.epochs:
            if key in riders:
                tps.setdefault(riders[key].settings.group_id, set()).add(tp)
        picked = self.writers.sample(sorted(tps), now)
        if picked:
            self.spawn(io.read_marks(self.offsets, {g: sorted(tps[g]) for g in picked},
                                     self.context.clock, self), name=f"{self.path}:writers")

    def _note_writer(self, group: str, tp: TopicPartition, offset: int | None,
                     metadata: str) -> None:
        settled = not any(self.commits.holds(seat) for seat in self._seats_of(group, tp))
        if self.writers.seen(group, tp, offset, metadata, settled=settled) is not None:
            log.error("%s: %s", self.path, self.writers.reason(group))

    def _seats_of(self, group: str, tp: TopicPartition) -> list[Seat]:
        riders, fanout = self.roster.riders, self.fanouts.get(tp)
        keys = list(fanout.cursors) if fanout is not None else []
        return [(k, tp) for k in keys if k in riders and riders[k].settings.group_id == group]

    # -- high watermarks ---------------------------------------------------------------
    def _highwater(self, tp: TopicPartition) -> int | None:
        """The highest high watermark known: the last fetch's, or one read since."""
        fanout = self.fanouts.get(tp)
        if self.kafka is None or fanout is None:
            return None
        known = [hw for hw in (compat.highwater(self.kafka, tp), fanout.highwater)
                 if hw is not None]
        return max(known) if known else None

    def _read_ends(self) -> None:
        """Every `HIGHWATER_REFRESH_MS`: the log ends of partitions whose fetch is paused,
        told to the cursors that get no batch (issue 25)."""
        now, kafka = self.context.clock.monotonic_ms(), self.kafka
        if kafka is None or self._reading_ends or now < self._ends_due:
            return
        self._ends_due = now + HIGHWATER_REFRESH_MS
        paused = kafka.paused()
        starts = {tp: hw for tp in self.fanouts
                  if tp in paused and (hw := self._highwater(tp)) is not None}
        if starts:
            self._reading_ends = True
            self.spawn(io.read_ends(kafka, starts, self.context.clock, HIGHWATER_REFRESH_MS,
                                    self), name=f"{self.path}:ends")

    def _tell_highwater(self, tp: TopicPartition, fanout: Fanout, read: int | None) -> None:
        known = [hw for hw in (read, self._highwater(tp)) if hw is not None]
        if not known:
            return
        highwater = max(known)
        for key in fanout.note_highwater(highwater):
            cursor = self.cursors.find(key, tp)
            if cursor is not None:
                cursor.tell_system(Highwater(highwater))

    # -- flow and catch-up -------------------------------------------------------------
    def on_flow(self, flow: FlowControl) -> None:
        seat = _seat(flow)
        fanout = self.fanouts.get(seat[1])
        if fanout is None or not self.seats.current(seat, flow.epoch):
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
        self.feed(seat[1], fanout.resume(seat[0]))

    def _start_catch_up(self, tp: TopicPartition, decision: CatchUp) -> None:
        seat = (decision.key, tp)
        cursor = self.cursors.find(decision.key, tp)
        if cursor is None or seat in self.reads:
            return
        read = self.reads[seat] = CatchUpRead(tp, decision.key, decision.position, cursor)
        self.spawn(self._catch_up(read), name=f"{self.path}:catch-up:{decision.key}")

    async def _catch_up(self, read: CatchUpRead) -> None:
        """A catch-up read, in a task: it only reads and tells (`CaughtUp`, then
        `CatchUpEnded`)."""
        try:
            async with self._readers:
                if not read.cancelled:
                    await catch_up(read, self.wiring.bootstrap, self.wiring.broker_settings,
                                   self._handover, self.context.clock.monotonic_ms)
        except io.FAILURES as exc:  # the cursor went away, or the read failed
            log.debug("%s: catch-up read of %s ended: %r", self.path, read.key, exc)
        finally:
            self.tell_system(CatchUpEnded((read.key, read.tp), read))

    async def _handover(self, read: CatchUpRead, next_offset: int) -> bool:
        answer: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self.tell_system(CaughtUp(read, next_offset, answer))
        return await answer

    def _on_caught_up(self, message: CaughtUp) -> None:
        read = message.read
        fanout = self.fanouts.get(read.tp)
        if read.cancelled or read.tp in self.rebalance.suspended:
            fanout = None  # over: nothing of the shared buffer goes to it now
        feed = fanout.caught_up(read.key, message.next_offset) if fanout else []
        if feed:
            self._feed(read.tp, feed, self._highwater(read.tp))
        if not message.answer.done():
            message.answer.set_result(feed is not None)

    def cancel_read(self, seat: Seat) -> None:
        read = self.reads.pop(seat, None)
        if read is not None:
            read.cancelled = True
            read.resumed.set()

    # -- status ------------------------------------------------------------------------
    def generation(self) -> int:
        return compat.generation(self.kafka)

    def member_id(self) -> str:
        return compat.member_id(self.kafka)

    def owned_by(self, key: str) -> set[TopicPartition]:
        """The partitions on which `key` has a cursor."""
        return {tp for tp, fanout in self.fanouts.items() if key in fanout.cursors}

    def _status_of(self, key: str) -> MemberStatus:
        mine = sorted(self.owned_by(key))
        rider = self.roster.riders.get(key)
        return MemberStatus(
            group=self.roster.group_id, member=self.name, member_id=self.member_id(),
            generation=self.generation(), subscriptions=len(self.roster),
            rebalances=self.rebalances, assigned=[child_name(tp) for tp in mine],
            cursors={child_name(tp): self.fanouts[tp].cursors[key].state for tp in mine},
            commit_error=(self.writers.reason(rider.settings.group_id)
                          or self.commit_errors.get(rider.settings.group_id)
                          if rider is not None else None),
            waiting_for_topics=sorted(self.topics.plan.missing),
            pattern_topics=self.topics.pattern_topics(rider), group_partitions=len(self.owned))

    def journal(self, kind: EventType, tp: TopicPartition, *, subscription: str | None = None,
                offset: int | None = None, reason: str | None = None,
                actor: str | None = None) -> None:
        self.context.emit(Event(type=kind, ts_ms=self.context.clock.wall_ms(),
                                subscription=subscription, topic=tp.topic,
                                partition=tp.partition, offset=offset, reason=reason,
                                actor=actor))

    def __repr__(self) -> str:
        return (f"<InstanceMemberActor {self.path} riders={len(self.roster)} "
                f"owned={len(self.owned)} reads={len(self.reads)} {self.commits!r} "
                f"mailbox={len(self._mailbox)}>")


def _seat(message: CommitRequest | FlowControl | Rewind) -> Seat:
    """The cursor a message of a partition actor comes from."""
    return message.subscription, TopicPartition(message.topic, message.partition)


