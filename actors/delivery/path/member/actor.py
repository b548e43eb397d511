"""InstanceMemberActor: the one Kafka group member of this instance for a broker (see the
package docstring). Its mailbox is the only writer of its state; its decisions live in
pure books (`Seats`, `CommitBook`, `TopicPlan`, `Fanout`, `start_of`); its I/O runs in
tasks that tell it what came back (io.py, fetcher.py)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from aiokafka import AIOKafkaConsumer, TopicPartition

from actors.delivery.path.fanout import CatchUp, Fanout, Feed
from actors.delivery.path.member import io
from actors.delivery.path.member.commits import CommitBook, Position, Seat, seat_of
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
    StartNext,
    TopicsListed,
    WritersRead,
)
from actors.delivery.path.member.positions import Incarnations
from actors.delivery.path.member.rebalance import Rebalances
from actors.delivery.path.member.refusals import RefusalSeries
from actors.delivery.path.member.seats import Seats, resolve
from actors.delivery.path.member.side_reads import SideReads
from actors.delivery.path.member.starts import Starts
from actors.delivery.path.member.topics import SETTLE_MS, Topics
from actors.delivery.path.member.writers import Writers, mark
from actors.delivery.path.roster import Rider, Roster
from actors.delivery.path.status import MemberStatus
from actors.shared.errors import UnexpectedMessage
from actors.shared.group_consumer import (
    DEFAULT_FETCH_WAIT_MS,
    PAUSED_POLL_MS,
    POLL_MS,
    ClientSettings,
    Wiring,
    child_name,
)
from actors.shared.messages import (
    Batch,
    CommitRequest,
    FlowControl,
    Rewind,
    StatusQuery,
)
from actors.shared.rebalance import Assign, RebalanceListener, Revoke, leave
from runtime.host.journal import Event, EventType, commit_round
from runtime.host.metrics import Registry, Value
from runtime.kafka import compat, make_consumer
from runtime.kafka.group_offsets import GroupOffsets
from runtime.kernel import Actor

log = logging.getLogger(__name__)


class InstanceMemberActor(Actor):
    mailbox_capacity = 4096

    def __init__(self, name: str, group_id: str, riders: list[Rider], wiring: Wiring,
                 settings: ClientSettings, metrics: Registry,
                 long_lived: Callable[[], None] | None = None, *, held: bool = False,
                 settle_ms: int = SETTLE_MS) -> None:
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
        self.refusals = RefusalSeries(metrics)
        self.cursors = Cursors(self, wiring, long_lived)
        self.topics = Topics(self, self.cursors.noted, self.cursors.route, held=held,
                             settle_ms=settle_ms)
        self.rebalance = Rebalances(self, self.cursors)
        self.cursors.held = self.rebalance.suspended.__contains__
        self.starts = Starts(self, self.cursors, self.rebalance)
        self.cursors.retired = self.starts.forget
        self.cursors.reopened = self.starts.reopened
        self.side = SideReads(self, self.cursors, self.rebalance)
        self._quiet = False
        self._client_wait_ms = DEFAULT_FETCH_WAIT_MS
        self.released = asyncio.Event()
        self.listener = RebalanceListener(self, self.released)
        self.rebalances = 0
        (self.m_generation, self.m_assigned, self.m_riders, self.m_awaiting,
         self.m_rebalances) = _series(metrics, {"group": group_id, "member": self.name})

    # -- lifecycle ---------------------------------------------------------------------
    async def on_start(self) -> None:
        kafka = self.kafka = make_consumer(self.wiring.bootstrap,
                                           **{**self.wiring.broker_settings, **self.settings})
        await kafka.start()
        self.offsets = await GroupOffsets.started(self.wiring.bootstrap)
        await self.cursors.stop_leftovers(self.roster.riders.values())
        wait_ms = compat.fetch_wait_ms(kafka)
        self._client_wait_ms = DEFAULT_FETCH_WAIT_MS if wait_ms is None else wait_ms
        self.wiring.pace.joined(self)
        self.spawn(fetch_forever(kafka, self, self.context.clock), name=f"{self.path}:fetch")

    async def on_stop(self) -> None:
        kafka, self.kafka = self.kafka, None
        self.wiring.pace.left(self)
        self.refusals.clear(list(self.refusals.shown))
        try:
            await leave(kafka, self.released, lambda _client: self.cursors.retire_now(
                [(k, tp) for tp, f in self.fanouts.items() for k in f.cursors]))
        finally:
            if self.offsets is not None:
                await self.offsets.close()

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
            self.starts.rewind(message)
        elif isinstance(message, CommitsSettled):
            self._on_settled(message)
        elif isinstance(message, PositionsRead):
            self.starts.positions(message)
        elif isinstance(message, HighwatersRead):
            self.side.ended(message)
        elif isinstance(message, Assign):
            self.rebalance.assign(set(message.partitions))
        elif isinstance(message, Revoke):
            return self.rebalance.revoke(set(message.partitions))
        elif isinstance(message, Drained | Retired | CursorFailed):
            self.cursors.handle(message)
        elif isinstance(message, StartNext):
            self.cursors.started(message.rested)
        elif isinstance(message, CaughtUp | CatchUpEnded):
            self.side.caught_up(message)
        elif isinstance(message, Join | Leave | Hold | Release | TopicsListed):
            self._on_roster(message)
        elif isinstance(message, WritersRead):
            self.writers.reading = False
            for group, marks in message.marks.items():
                for tp, (offset, metadata) in marks.items():
                    self.starts.note_writer(group, tp, offset, metadata)
        elif isinstance(message, Problems):
            return [r for g in sorted(self.writers.foreign) if (r := self.writers.reason(g))]
        elif isinstance(message, StatusQuery) and message.subscription is not None:
            return self._status_of(message.subscription)
        else:
            raise UnexpectedMessage(self.path, message)
        return None

    def _on_roster(self, message: Join | Leave | Hold | Release | TopicsListed) -> None:
        if isinstance(message, Join):
            self.cursors.join(message.rider)
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
                self.feed_records(tp, fanout.append(records, highwater), highwater)
        self._pace(quiet=not fetched.batches and not self.commits.pending)
        self.topics.turn()
        self.starts.read()
        self._steer()
        self.side.read_ends()
        self.starts.verify_writers()
        self.flush()
        return self._plan()

    def _plan(self) -> FetchPlan:
        kafka = self.kafka
        listening = self.topics.listening and kafka is not None
        paused = kafka is not None and bool(kafka.paused())
        idle = max(POLL_MS, self.wiring.pace.idle_ms(self.configured_wait_ms))
        timeout = PAUSED_POLL_MS if paused else (idle if self._quiet else POLL_MS)
        return FetchPlan(listening, timeout, self.cursors.tuning.records
                         or self.wiring.max_records)

    @property
    def configured_wait_ms(self) -> int:
        """The fetch wait while records come: the shortest a subscription asks for, else
        the client's (idle, `_pace` waits longer)."""
        return self.cursors.tuning.wait_ms(self._client_wait_ms)

    def _pace(self, *, quiet: bool) -> None:
        """Idle: fetch less often, by how many consumers this process runs; busy: at the
        configured wait again (actors/shared/idle_pace.py)."""
        self._quiet = quiet
        kafka, configured = self.kafka, self.configured_wait_ms
        wait_ms = self.wiring.pace.idle_ms(configured) if quiet else configured
        if kafka is not None and compat.fetch_wait_ms(kafka) != wait_ms:
            compat.set_fetch_wait_ms(kafka, wait_ms)

    def feed(self, tp: TopicPartition, decision: Feed | CatchUp) -> None:
        if isinstance(decision, CatchUp):
            self.side.start_catch_up(tp, decision)
        elif decision:
            self.feed_records(tp, decision, self.highwater(tp))

    def on_flow(self, flow: FlowControl) -> None:
        self.side.on_flow(flow)

    def cancel_read(self, seat: Seat) -> None:
        self.side.cancel_read(seat)

    def feed_records(self, tp: TopicPartition, feed: Feed, highwater: int | None) -> None:
        """Hand records to cursors. With several cursors each gets its own copies: a
        cursor counts attempts on its records."""
        shared = len(self.fanouts[tp].cursors) > 1
        for cursor, records in self.cursors.routes(tp, feed):
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
        seat = seat_of(request)
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
        written = self.commits.settle(settled.outcome, self.seats.current)
        for (_key, tp), position in written.items():
            self.incarnations.committed(position.group, tp)
            self.writers.wrote(position.group, tp, position.offset)
        if written:  # the round as one event (issue 35)
            self.context.emit(commit_round(self.context.clock.wall_ms(), [
                (key, tp.topic, tp.partition, p.offset) for (key, tp), p in written.items()]))
        self.refusals.settled(settled.round.seats, written, settled.outcome.gone,
                              lambda group, tp: self.writers.written.get((group, tp)))
        groups = {p.group for p in settled.round.seats.values()}
        failed = settled.outcome.failed
        refused = (settled.outcome.refused if failed is None
                   else dict.fromkeys(groups, f"commit failed: {failed}"))
        for group in groups:
            self._note_refusal(group, refused.get(group))
        self.cursors.committed()
        if self.seats.retiring:  # a leave or revoke waits for its final positions
            self.flush()  # else the next fetch turn sends what came in meanwhile

    def _note_refusal(self, group: str, reason: str | None) -> None:
        if reason is None:
            self.commit_errors.pop(group, None)
        elif self.commit_errors.get(group) != reason:
            self.commit_errors[group] = reason
            log.warning("%s: group %s: %s", self.path, group, reason)

    # -- high watermarks ---------------------------------------------------------------
    def highwater(self, tp: TopicPartition) -> int | None:
        """The highest high watermark known: the last fetch's, or one read since."""
        fanout = self.fanouts.get(tp)
        if self.kafka is None or fanout is None:
            return None
        known = [hw for hw in (compat.highwater(self.kafka, tp), fanout.highwater)
                 if hw is not None]
        return max(known) if known else None

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

    def describe(self) -> str:
        """Its state for a person reading a failure: the repr, then what its fetching
        depends on (held, listening, suspended and paused partitions, each fanout)."""
        kafka = self.kafka
        paused = sorted(map(child_name, kafka.paused())) if kafka is not None else None
        fanouts = {child_name(tp): repr(f) for tp, f in sorted(self.fanouts.items())}
        return (f"{self!r} held={self.held} listening={self.listening} "
                f"suspended={sorted(map(child_name, self.rebalance.suspended))} "
                f"paused={paused} fanouts={fanouts}")

    def __repr__(self) -> str:
        return (f"<InstanceMemberActor {self.path} riders={len(self.roster)} "
                f"owned={len(self.owned)} reads={len(self.side.reads)} {self.commits!r} "
                f"mailbox={len(self._mailbox)}>")


def _series(metrics: Registry, labels: dict[str, str],
            ) -> tuple[Value, Value, Value, Value, Value]:
    """The member's generation, assigned partitions, subscriptions, cursors awaiting their
    start position, and rebalances."""
    return (metrics.gauge("hookstream_group_generation",
                          "Generation of the instance group member").labels(**labels),
            metrics.gauge("hookstream_group_assigned_partitions",
                          "Partitions assigned to the instance group member").labels(**labels),
            metrics.gauge("hookstream_group_subscriptions",
                          "Subscriptions reading through the instance group member"
                          ).labels(**labels),
            metrics.gauge("hookstream_group_cursors_awaiting_position",
                          "Cursors started and not yet told where they start (their "
                          "groups' committed offsets and the logs' bounds are read)"
                          ).labels(**labels),
            metrics.counter("hookstream_group_rebalances_total",
                            "Assignments the instance group member received").labels(**labels))
