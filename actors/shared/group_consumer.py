"""GroupConsumerActor: owns one `AIOKafkaConsumer` and the actors of its partitions,
and commits their positions to its consumer group.

The pinned-partition consumer of a subscription (actors/delivery/path/consumer.py:
manual assignment, no membership) and the delay queue's consumer (actors/delay/
consumer.py, through `RebalancingConsumerActor` in actors/shared/rebalance.py: a group
member) share this core; subclasses say how to subscribe, which client settings to use
and which actor handles a partition, and add only what they use (the pinned consumer
the high watermarks of its paused partitions, the delay consumer the rebalance listener
and its own transactions' partitions kept out of commits).

The fetch loop (a task the actor owns) alternates between applying what partition actors
asked for (rewinds, pause/resume, commits batched into one call) and `getmany`, whose
batches it hands over with `ask`, so a partition's pause takes effect before the next fetch
and memory stays bounded. Requests arrive as messages; the handler only records them, so
the fetch loop is the one place that calls the Kafka client.

Positions. Every new partition actor (first assignment or restart) sends `Rewind`; the
loop seeks to the committed offset and answers `Assigned`. Batches fetched before the
seek are dropped by the actor. Commits carry the actor's epoch; stale ones are ignored.

Partitions change on the actor's own task: `assign` starts an actor per new partition;
`retire` drains the given partitions' actors (in parallel, within `drain_ms`), commits
their positions, then stops them. Its stop retires everything it owns. The fetch loop
runs meanwhile: what it holds across an await may have been retired when it resumes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError
from aiokafka.structs import ConsumerRecord, OffsetAndMetadata

from actors.shared.errors import UnexpectedMessage
from actors.shared.idle_pace import IdlePace
from actors.shared.messages import (
    Assigned,
    Batch,
    CommitRequest,
    Drain,
    FlowControl,
    Record,
    Rewind,
)
from runtime.errors import ActorDeadError
from runtime.host.journal import Event, EventType
from runtime.kafka import committed_offsets, compat, make_consumer
from runtime.kernel import Actor, ChildRef, ChildSpec, Supervisor, within

log = logging.getLogger(__name__)
POLL_MS = 100
# While a partition is paused its resume request waits for the poll to return: a long poll
# on the other partitions (or on none: all paused) would starve it for up to POLL_MS.
PAUSED_POLL_MS = 5
DEFAULT_FETCH_WAIT_MS = 500
"""aiokafka's `fetch_max_wait_ms`, when the client does not say what it uses."""
# How long the consumer waits for a drain beyond its deadline: the partition actor answers
# at the deadline, and its reply needs a turn of its mailbox.
DRAIN_GRACE_MS = 1000
HIGHWATER_REFRESH_MS = 2000
"""How often paused partitions' high watermarks are read (a paused partition is not
fetched, so its lag would freeze while the log grows: issue 25, item 3): the pinned
consumer's and the instance member's."""

ClientSettings = dict[str, object]
"""Keyword arguments of `AIOKafkaConsumer`."""


def group_client_settings(group_id: str, client_id: str, *, auto_offset_reset: str,
                          session_timeout_ms: int) -> ClientSettings:
    """The settings every group consumer here shares; subclasses add what differs.
    Commits are manual (partition actors say what is finished), a fetch brings at most
    4 MiB per partition, heartbeats go every second (a third of a shorter session), and
    the fetch loop may take five minutes between polls (a hand-over waits for its
    partition actor) before the group counts the consumer as gone."""
    return {
        "group_id": group_id,
        "client_id": client_id,
        "enable_auto_commit": False,
        "auto_offset_reset": auto_offset_reset,
        "max_partition_fetch_bytes": 4 * 1024 * 1024,
        "session_timeout_ms": session_timeout_ms,
        "heartbeat_interval_ms": min(1_000, session_timeout_ms // 3),
        "max_poll_interval_ms": 300_000,
    }


@dataclass(slots=True)
class Wiring:
    """What the base needs from its tree; refs follow restarts."""

    partitions: ChildRef
    """The Supervisor of the partition actors."""
    bootstrap: str
    drain_ms: int
    max_records: int
    broker_settings: ClientSettings = field(default_factory=dict)
    """Client settings for this broker (runtime.kafka.compat); `client_settings()` wins."""
    epochs: dict[TopicPartition, int] = field(default_factory=dict)
    pace: IdlePace = field(default_factory=IdlePace)
    """The idle pace of the runtime's consumers (one per runtime: two runtimes in one
    process do not pace each other, issue 34 item 14)."""


class GroupConsumerActor(Actor):
    mailbox_capacity = 4096

    def __init__(self, name: str, wiring: Wiring, *, subscription: str | None = None) -> None:
        super().__init__(name)
        self.wiring = wiring
        self.subscription = subscription
        """The `subscription` of its journal events (None: not a subscription's)."""
        self.kafka: AIOKafkaConsumer | None = None
        self.owned: set[TopicPartition] = set()
        self._rewinds: dict[TopicPartition, int] = {}
        self._flow: dict[TopicPartition, bool] = {}
        self._commits: dict[TopicPartition, int] = {}
        # where fetching started after assignment: the position to return to when nothing
        # is committed yet (with auto.offset.reset=latest, a reset would skip records)
        self._first_fetched: dict[TopicPartition, int] = {}
        self._configured_wait_ms = DEFAULT_FETCH_WAIT_MS
        self._quiet = False  # the last poll brought nothing (actors/shared/idle_pace.py)

    # -- what subclasses define --------------------------------------------------------
    def client_settings(self) -> ClientSettings:
        raise NotImplementedError

    async def subscribe(self, kafka: AIOKafkaConsumer) -> None:
        raise NotImplementedError

    def build_child(self, tp: TopicPartition, epoch: int) -> Actor:
        raise NotImplementedError

    # -- lifecycle ---------------------------------------------------------------------
    async def on_start(self) -> None:
        settings = {**self.wiring.broker_settings, **self.client_settings()}
        self.kafka = make_consumer(self.wiring.bootstrap, **settings)
        await self.kafka.start()
        # on failure `on_stop` (it runs after a failed start too) stops the client: stopping
        # it here would wait for a rebalance listener whose ask waits for this start
        await self.subscribe(self.kafka)
        wait_ms = compat.fetch_wait_ms(self.kafka)
        self._configured_wait_ms = DEFAULT_FETCH_WAIT_MS if wait_ms is None else wait_ms
        self.wiring.pace.joined(self)
        self.spawn(self._fetch_loop(), name=f"{self.path}:fetch")

    async def on_stop(self) -> None:
        # the fetch task is already cancelled: drain and commit what is ours, then stop
        kafka, self.kafka = self.kafka, None
        self.wiring.pace.left(self)
        if kafka is None:
            return
        try:
            await self.retire(kafka, set(self.owned))
        finally:
            await kafka.stop()

    # -- messages ----------------------------------------------------------------------
    async def handle(self, message: object) -> object:
        if isinstance(message, CommitRequest):
            tp = TopicPartition(message.topic, message.partition)
            if tp in self.owned and self.wiring.epochs.get(tp) == message.epoch:
                self._commits[tp] = message.offset
        elif isinstance(message, FlowControl):
            tp = TopicPartition(message.topic, message.partition)
            if self.wiring.epochs.get(tp) == message.epoch:  # a dead incarnation's is stale
                self._flow[tp] = message.paused
        elif isinstance(message, Rewind):
            self._rewinds[TopicPartition(message.topic, message.partition)] = message.epoch
        else:
            raise UnexpectedMessage(self.path, message)
        return None

    # -- the fetch loop ----------------------------------------------------------------
    async def _fetch_loop(self) -> None:
        kafka = self.kafka
        assert kafka is not None
        while True:
            await self.apply_requests(kafka)
            await self._poll(kafka)

    async def _poll(self, kafka: AIOKafkaConsumer) -> None:
        """One fetch, handed over to the partition actors."""
        batches = await kafka.getmany(timeout_ms=self._poll_ms(kafka),
                                      max_records=self.wiring.max_records)
        self._pace(kafka, quiet=not any(batches.values()) and not self._commits)
        now = self.context.clock.monotonic_ms()
        for tp, messages in batches.items():
            if messages:
                await self._hand_over(kafka, tp, messages, now)

    def _poll_ms(self, kafka: AIOKafkaConsumer) -> int:
        if kafka.paused():
            return PAUSED_POLL_MS
        if self._quiet:
            return max(POLL_MS, self.wiring.pace.idle_ms(self._configured_wait_ms))
        return POLL_MS

    def _pace(self, kafka: AIOKafkaConsumer, *, quiet: bool) -> None:
        """Idle: fetch less often, by how many consumers this process runs; busy: at the
        configured wait again (actors/shared/idle_pace.py)."""
        self._quiet = quiet
        configured = self._configured_wait_ms
        wait_ms = self.wiring.pace.idle_ms(configured) if quiet else configured
        if compat.fetch_wait_ms(kafka) != wait_ms:
            compat.set_fetch_wait_ms(kafka, wait_ms)

    async def _hand_over(self, kafka: AIOKafkaConsumer, tp: TopicPartition,
                         messages: list[ConsumerRecord[bytes, bytes]], now_ms: int) -> None:
        records = records_of(messages, now_ms)
        self._first_fetched.setdefault(tp, records[0].offset)
        try:
            # ask, not tell: the reply says whether the partition's buffer is full, and the
            # pause takes effect before the next fetch (with tell this loop would hand over
            # everything aiokafka prefetched: a whole backlog in memory)
            paused = await self.partition_actor(tp).ask(Batch(records, kafka.highwater(tp)))
        except Exception:
            return  # dead or crashed with it: its next incarnation rewinds to the commit
        if paused is True and tp in self.owned:
            kafka.pause(tp)

    def partition_actor(self, tp: TopicPartition) -> Actor:
        return self._partitions().child(child_name(tp))

    def _partitions(self) -> Supervisor:
        return self.wiring.partitions.actor_as(Supervisor)

    async def apply_requests(self, kafka: AIOKafkaConsumer) -> None:
        """What the partition actors asked for since the last poll (a subclass may add
        its own step between polls)."""
        flow, self._flow = self._flow, {}
        for tp, paused in flow.items():
            if tp in self.owned:
                (kafka.pause if paused else kafka.resume)(tp)
        # commits before rewinds: a restarted partition resumes from its predecessor's
        # last position, and the committed offset never moves back
        commits, self._commits = self._commits, {}
        if commits:
            await self.commit(kafka, commits)
        rewinds, self._rewinds = self._rewinds, {}
        current = {tp: epoch for tp, epoch in rewinds.items() if self._current(tp, epoch)}
        if current:
            await self._rewind(kafka, current)

    async def _rewind(self, kafka: AIOKafkaConsumer, rewinds: dict[TopicPartition, int]) -> None:
        """Seek each partition to its committed offset and tell its actor; one request
        for all of them."""
        found = await committed_offsets(kafka, list(rewinds))
        rewinds = {tp: e for tp, e in rewinds.items() if self._current(tp, e)}  # not revoked
        positions: dict[TopicPartition, int | None] = {}
        for tp in rewinds:
            committed = found[tp][0]
            positions[tp] = committed if committed is not None else self._first_fetched.get(tp)
            if positions[tp] is not None:
                kafka.seek(tp, positions[tp])
        # No position: nothing committed and nothing fetched since the assignment, so the
        # client's own reset (auto_offset_reset) puts it where it belongs. An explicit
        # seek_to_beginning here waited for the client's request timeout (40 s) after an
        # assignment of hundreds of partitions (issue 17).
        for tp in rewinds:
            kafka.resume(tp)
        for tp, epoch in rewinds.items():
            with contextlib.suppress(ActorDeadError):  # died again: its successor asks anew
                await self.partition_actor(tp).tell(Assigned(positions[tp], epoch, found[tp][1]))

    def _current(self, tp: TopicPartition, epoch: int) -> bool:
        return tp in self.owned and self.wiring.epochs.get(tp) == epoch

    async def commit(self, kafka: AIOKafkaConsumer, commits: dict[TopicPartition, int]) -> None:
        """Commit the positions of the partitions still owned (a subclass may keep some
        out: the delay queue's exactly-once levels commit in their own transactions)."""
        ours = {tp: off for tp, off in commits.items() if tp in self.owned}
        if not ours:
            return
        try:
            await kafka.commit({tp: OffsetAndMetadata(off, "") for tp, off in ours.items()})
        except KafkaError as exc:
            # a rebalance in progress: the next owner resumes from the last good commit
            log.warning("%s: commit failed (%r); records may be handled again", self.path, exc)
            return
        for tp, offset in ours.items():
            self._journal("committed", tp, offset=offset)

    # -- partitions coming and going ---------------------------------------------------
    async def assign(self, tps: set[TopicPartition]) -> None:
        new = sorted(tps - self.owned)
        if new:
            log.info("%s: partitions assigned: %s", self.path, _names(new))
        for tp in new:
            self.owned.add(tp)
            await self._partitions().start_child(ChildSpec(child_name(tp), self._factory(tp),
                                                 restart="transient",
                                                 shutdown_ms=self.wiring.drain_ms + 2000))
            self._journal("partition_assigned", tp, actor=self.path)

    def _factory(self, tp: TopicPartition) -> Callable[[], Actor]:
        def build() -> Actor:
            epoch = self.wiring.epochs.get(tp, 0) + 1
            self.wiring.epochs[tp] = epoch
            return self.build_child(tp, epoch)

        return build

    async def retire(self, kafka: AIOKafkaConsumer, tps: set[TopicPartition]) -> None:
        """Drain `tps`' actors, commit their positions, then stop them."""
        ordered = sorted(tps & self.owned)
        if not ordered:
            return
        clock = self.context.clock
        started = clock.monotonic_ms()
        positions = await asyncio.gather(*(self._drain(tp) for tp in ordered))
        drained = clock.monotonic_ms()
        final = {tp: pos for tp, pos in zip(ordered, positions, strict=True) if pos is not None}
        await self.commit(kafka, final)
        log.info("%s: partitions revoked (drained in %d ms, committed in %d ms): %s",
                 self.path, drained - started, clock.monotonic_ms() - drained, _names(ordered))
        for tp in ordered:
            self.owned.discard(tp)
            self._commits.pop(tp, None)
            self._first_fetched.pop(tp, None)
            self.forget(tp)
            await self._stop_partition_actor(tp)
            self._journal("partition_revoked", tp, actor=self.path)

    def forget(self, tp: TopicPartition) -> None:
        """What a subclass keeps of `tp` goes with it (a later owner's actor starts anew)."""

    async def _stop_partition_actor(self, tp: TopicPartition) -> None:
        try:
            sup = self._partitions()
        except ActorDeadError:
            return  # its supervisor is gone already (a one_for_all restart under way)
        if sup.alive and sup.has_child(child_name(tp)):
            await sup.stop_child(child_name(tp))

    async def _drain(self, tp: TopicPartition) -> int | None:
        done: asyncio.Future[int | None] = asyncio.get_running_loop().create_future()
        drain_ms = self.wiring.drain_ms
        deadline = self.context.clock.monotonic_ms() + drain_ms
        try:
            await self.partition_actor(tp).tell(Drain(deadline, done))
            return await within(self.context.clock, done, drain_ms + DRAIN_GRACE_MS)
        except (ActorDeadError, TimeoutError):
            return None  # nothing trustworthy to commit: the last commit stands

    def _journal(self, kind: EventType, tp: TopicPartition, *, offset: int | None = None,
                 actor: str | None = None) -> None:
        self.context.emit(Event(type=kind, ts_ms=self.context.clock.wall_ms(),
                                subscription=self.subscription, topic=tp.topic,
                                partition=tp.partition, offset=offset, actor=actor))

    def __repr__(self) -> str:
        return (f"<{type(self).__name__} {self.path} owned={len(self.owned)} "
                f"pending_commits={len(self._commits)} mailbox={len(self._mailbox)}>")


def _names(tps: list[TopicPartition]) -> str:
    return ", ".join(child_name(tp) for tp in tps)


def records_of(messages: list[ConsumerRecord[bytes, bytes]], now_ms: int) -> list[Record]:
    """Fetched Kafka records as the delivery path's `Record`s (fetched at `now_ms`)."""
    return [Record(m.topic, m.partition, m.offset, m.key, m.value, tuple(m.headers or ()),
                   m.timestamp, now_ms) for m in messages]


def child_name(tp: TopicPartition) -> str:
    return f"{tp.topic}-{tp.partition}"
