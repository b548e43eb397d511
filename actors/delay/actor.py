"""DelayActor: one per assigned level-topic partition.

It holds the partition's `DelayBook` (waiting records in a wall-clock timer wheel, the
offset tracker) and performs what the book decides: forwards, cascades, recycles and
dead letters. It never touches the consumer: batches come from `DelayConsumerActor`,
commits and pause/resume go back to it as requests, exactly like the delivery path's
partition actors.

Timing. One owned "alarm" task sleeps until the book's next deadline (wall ms, through the
injected clock) and sends `_Tick`; the handler advances the book and produces everything
due in one go. A batch that brings an earlier deadline re-arms the alarm. Not
`Actor.schedule`: its timer loop of that time (a monotonic wheel, re-armed through an
event; timers are the clock's alarms now) measured about 1 ms worse at p99 lateness at
5,000 records/s, against a 5 ms budget (bench/RESULTS.md, "Delay queue"). Deadlines are
wall-clock times but sleeps run on the monotonic clock, so the alarm sleeps at most
`ALARM_RECHECK_MS` at a time and reads the wall clock again after each sleep (issue 13):
a forward step of the wall clock (NTP, a
resumed VM) makes records late by at most that much instead of by the whole step, and a
backward step only makes the alarm wait longer (never early).

At-least-once levels. Outputs go to the shared acks=all producer (`ForwardProducerActor`,
with the batching `Forwarder`, both in actors/delay/forwarder.py):
all records of a tick are sent, then one owned task awaits their acknowledgements and
reports `_Acked`; only then are the offsets finished and a commit requested, so the
commit position never passes a record that is not safely in its target.

Exactly-once levels (`exactly_once = true`). The actor owns a transactional producer whose
`transactional_id` is fixed by group, level topic and partition
(`<group_id>-<topic>-<partition>`), started *before* the actor asks for its position:
InitProducerId fences a zombie owner (a restarted or moved instance) and settles its open
transaction before we read the committed offset. Each batch of due records is one
transaction: the outputs plus `send_offsets_to_transaction` of the new position. One
transaction runs at a time; what falls due meanwhile goes into the next. Readers of the
targets must use `isolation_level="read_committed"`.

Failures. A forward refused for that record alone is dead-lettered with the reason, so
a bad target cannot stall the partition: a target whose metadata never arrives (a topic
that does not exist and is not auto-created) and a record over the producer's size limit
(refused by `send` at once) on every level; a record the broker refuses (too large,
invalid topic) on at-least-once levels, where a refused batch is retried record by record.
A dead letter too large to write goes without its value, and one refused even then is
dropped: journaled (`dead_lettered`, reason "dropped: ..."), counted
(`hookstream_delay_dead_letter_dropped_total`) and logged, and its offset finished
(actors/shared/deadletter.py). Any other produce or transaction error crashes the actor;
its supervisor builds a new one that rewinds to the committed offset and forwards again
(at-least-once) or re-runs the aborted transaction (exactly-once), so on an exactly-once
level a record the broker (not the producer) refuses keeps failing (it shows in the
restart journal). Dead letters of at-least-once levels are written once per record, also
across a restart of this actor (the producer actor's ledger, actors/delay/forwarder.py).

Drain (revoke, shutdown): take no new batches, keep forwarding what falls due until the
drain deadline, wait for acknowledgements, answer with the final commit position.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.structs import OffsetAndMetadata

from actors.delay.book import DelayBook, Output, dead_letter, decode_done, encode_done
from actors.delay.forwarder import BATCH_BYTES, Flight, Forwarder, ForwardProducerActor
from actors.shared.deadletter import DeadLetterLedger
from actors.shared.errors import UnexpectedMessage
from actors.shared.flow import CommitPoint, DrainWaiters
from actors.shared.messages import (
    Assigned,
    Batch,
    CommitRequest,
    Drain,
    DrainDeadline,
    FlowControl,
    Rewind,
)
from runtime.host.config import DelayLevel
from runtime.host.journal import Event
from runtime.host.metrics import Gauge, HistogramValue, Registry, Value
from runtime.kafka import make_producer
from runtime.kernel import Actor, ChildRef, Ref

log = logging.getLogger(__name__)
ALARM_RECHECK_MS = 1000
"""The alarm reads the wall clock again at least this often (see the module docstring):
the most a forward wall-clock step can make a record late."""


# -- settings and messages -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DelaySettings:
    """The delay queue's slice of the config, resolved (bootstrap) once."""

    bootstrap: str
    group_id: str
    levels: tuple[DelayLevel, ...]
    dead_letter_topic: str
    max_waiting: int
    drain_ms: int

    def level_of(self, topic: str) -> DelayLevel:
        for level in self.levels:
            if topic in level.topics:
                return level
        raise KeyError(f"{topic!r} is not a delay level topic")

    def transactional_id(self, topic: str, partition: int) -> str:
        return f"{self.group_id}-{topic}-{partition}"


@dataclass(frozen=True, slots=True)
class _Tick:
    alarm: int


@dataclass(frozen=True, slots=True)
class _Acked:
    outputs: list[Output]
    acked_ms: int


@dataclass(frozen=True, slots=True)
class _TxnDone:
    outputs: list[Output]
    position: int
    committed_ms: int


@dataclass(slots=True)
class DelayPeers:
    consumer: Ref
    """The DelayConsumerActor."""
    producer: ChildRef
    """The ForwardProducerActor (at-least-once levels produce with its producer)."""


# -- the delay actor -----------------------------------------------------------------------


@dataclass(slots=True)
class _Meters:
    forwarded: Value
    cascaded: Value
    dead: Value
    waiting: Value
    lateness: HistogramValue
    committed: Value
    pauses: Value
    waiting_family: Gauge
    dropped: Value
    labels: dict[str, str] = field(default_factory=dict)


class DelayActor(Actor):
    mailbox_capacity = 512

    def __init__(self, name: str, topic: str, partition: int, epoch: int,
                 settings: DelaySettings, peers: DelayPeers, metrics: Registry) -> None:
        super().__init__(name)
        self.topic, self.partition, self.epoch = topic, partition, epoch
        self.settings = settings
        self.level = settings.level_of(topic)
        self.exactly_once = self.level.exactly_once
        self.peers = peers
        self.book: DelayBook | None = None
        self._commit = CommitPoint()
        self._m = self._bind_metrics(metrics)
        self._inflight = 0  # outputs handed to a producer, not yet acknowledged/committed
        self._alarm: asyncio.Task[None] | None = None
        self._alarm_at: int | None = None
        self._alarm_seq = 0
        self._drains = DrainWaiters()
        self._drain_wall_deadline: int | None = None
        self._txn: AIOKafkaProducer | None = None
        self._forwarder = Forwarder(self._dead)
        self._txn_queue: list[Output] = []
        self._txn_busy = False

    def _bind_metrics(self, metrics: Registry) -> _Meters:
        level = {"level": self.level.name}
        part = {**level, "topic": self.topic, "partition": str(self.partition)}
        waiting = metrics.gauge("hookstream_delay_waiting", "Records held until due")
        return _Meters(
            forwarded=metrics.counter("hookstream_delay_forwarded_total",
                                      "Delayed records forwarded to their target").labels(**level),
            cascaded=metrics.counter("hookstream_delay_cascaded_total",
                                     "Records moved on to another level (or recycled)"
                                     ).labels(**level),
            dead=metrics.counter("hookstream_delay_dead_lettered_total",
                                 "Records given up to the dead-letter topic (bad delay "
                                 "headers, refused forwards)").labels(**level),
            waiting=waiting.labels(**part),
            lateness=metrics.histogram("hookstream_delay_lateness_ms",
                                       "Forward time minus due time").labels(**level),
            committed=metrics.gauge("hookstream_delay_committed_offset",
                                    "Last committed position").labels(**part),
            pauses=metrics.counter("hookstream_delay_pauses_total",
                                   "Times a partition was paused (max_waiting_records)"
                                   ).labels(**level),
            waiting_family=waiting,
            dropped=metrics.counter("hookstream_delay_dead_letter_dropped_total",
                                    "Records given up that could not be written to the "
                                    "dead-letter topic even without their value (too large)"
                                    ).labels(**level),
            labels=part,
        )

    @property
    def committed(self) -> int | None:
        """The last position requested for commit (or committed by a transaction)."""
        return self._commit.position

    # -- lifecycle ---------------------------------------------------------------------
    async def on_start(self) -> None:
        if self.exactly_once:
            # Fence the previous owner before we learn our position (see module doc).
            self._txn = make_producer(
                self.settings.bootstrap, acks="all", enable_idempotence=True,
                transactional_id=self.settings.transactional_id(self.topic, self.partition),
                max_batch_size=BATCH_BYTES,
                client_id=f"hookstream-delay-{self.topic}-{self.partition}")
            await self._txn.start()
        self.peers.consumer.tell_system(Rewind(self.topic, self.partition, self.epoch))

    async def on_stop(self) -> None:
        self._m.waiting_family.remove(**self._m.labels)
        self._drains.resolve(self._consumer_position())
        txn, self._txn = self._txn, None
        if txn is not None:
            await txn.stop()

    # -- messages ----------------------------------------------------------------------
    async def handle(self, message: object) -> bool | None:
        if isinstance(message, Batch):
            return await self._on_batch(message)
        if isinstance(message, _Tick):
            await self._on_tick(message)
        elif isinstance(message, _Acked):
            self._on_acked(message)
        elif isinstance(message, _TxnDone):
            self._on_txn_done(message)
        elif isinstance(message, Assigned):
            self._on_assigned(message)
        elif isinstance(message, Drain):
            self._on_drain(message)
        elif isinstance(message, DrainDeadline):
            self._maybe_finish_drain()
        else:
            raise UnexpectedMessage(self.path, message)
        return None

    def _on_assigned(self, message: Assigned) -> None:
        if message.epoch != self.epoch or self.book is not None:
            return
        cfg = self.settings
        done = decode_done(message.metadata) if self.exactly_once else set()
        self.book = DelayBook(self.level, cfg.levels, dead_letter_topic=cfg.dead_letter_topic,
                              max_waiting=cfg.max_waiting, position=message.position,
                              now_ms=self.context.clock.wall_ms(), done=done)
        self._commit.position = message.position

    async def _on_batch(self, batch: Batch) -> bool:
        """Take a batch; the reply tells the consumer whether to pause us now."""
        book = self.book
        if book is None or self._drains.draining:
            return False  # for an older incarnation, or draining: the next owner rereads
        outputs = book.offer(batch.records, self.context.clock.wall_ms())
        await self._produce(outputs)
        self._after_change(book)
        return book.paused

    async def _on_tick(self, tick: _Tick) -> None:
        if tick.alarm == self._alarm_seq:
            self._alarm, self._alarm_at = None, None
        book = self.book
        if book is None or self._past_drain_deadline():
            self._maybe_finish_drain()  # forward nothing more: records wait for the next owner
            return
        outputs = book.advance(self.context.clock.wall_ms())
        await self._produce(outputs)
        self._after_change(book)
        self._maybe_finish_drain()

    def _after_change(self, book: DelayBook) -> None:
        self._m.waiting.set(book.waiting)
        self._arm(book)
        paused = book.flow()
        if paused:
            self._m.pauses.inc()
        if paused is not None:
            self.peers.consumer.tell_system(
                FlowControl(self.topic, self.partition, paused, self.epoch))

    # -- the alarm ---------------------------------------------------------------------
    def _arm(self, book: DelayBook) -> None:
        deadline = book.next_deadline()
        if deadline is None or (self._alarm_at is not None and self._alarm_at <= deadline):
            return
        if self._alarm is not None:
            self._alarm.cancel()
        self._alarm_seq += 1
        self._alarm_at = deadline
        self._alarm = self.spawn(self._sleep_until(deadline, self._alarm_seq),
                                 name=f"{self.path}:alarm")

    async def _sleep_until(self, wall_ms: int, seq: int) -> None:
        clock = self.context.clock
        while (remaining := wall_ms - clock.wall_ms()) > 0:
            await clock.sleep_ms(min(remaining, ALARM_RECHECK_MS))
        self.tell_system(_Tick(seq))

    # -- producing ---------------------------------------------------------------------
    async def _produce(self, outputs: list[Output]) -> None:
        if not outputs:
            return
        self._inflight += len(outputs)
        if self.exactly_once:
            self._txn_queue.extend(outputs)
            self._maybe_transact()
            return
        forwarding = self.peers.producer.actor_as(ForwardProducerActor)
        producer, ledger = forwarding.producer, forwarding.ledger
        flights = await self._forwarder.send(producer, outputs, ledger)
        self.spawn(self._await_acks(producer, flights, ledger), name=f"{self.path}:acks")

    async def _await_acks(self, producer: AIOKafkaProducer, flights: list[Flight],
                          ledger: DeadLetterLedger) -> None:
        done = await self._forwarder.settle(producer, flights, ledger)
        self.tell_system(_Acked(done, self.context.clock.wall_ms()))

    def _dead(self, out: Output, reason: str) -> Output:
        log.warning("%s: offset %d cannot go to %r (%s): dead-lettering it",
                    self.path, out.record.offset, out.topic, reason)
        return dead_letter(out.record, self.settings.dead_letter_topic, reason)

    def _on_acked(self, acked: _Acked) -> None:
        self._inflight -= len(acked.outputs)
        self._account(acked.outputs, acked.acked_ms)
        if self.book is None:
            return
        self.book.finish(out.record.offset for out in acked.outputs)
        self._request_commit()
        self._maybe_finish_drain()

    def _request_commit(self) -> None:
        position = self._commit.advance(self._consumer_position())
        if position is None:
            return
        # below the commit, nothing will be given up again: the ledger can forget it
        self.peers.producer.actor_as(ForwardProducerActor).ledger.forget_below(
            self.topic, self.partition, position)
        self._m.committed.set(position)
        self.peers.consumer.tell_system(
            CommitRequest(self.topic, self.partition, position, self.epoch))

    def _consumer_position(self) -> int | None:
        """What the consumer should commit: nothing for exactly-once (transactions do)."""
        if self.exactly_once or self.book is None:
            return None
        return self.book.committable()

    # -- exactly-once ------------------------------------------------------------------
    def _maybe_transact(self) -> None:
        if self._txn_busy or not self._txn_queue or self.book is None:
            return
        batch, self._txn_queue = self._txn_queue, []
        # Finished before the commit: if the transaction fails the actor crashes and its
        # successor starts from the last committed transaction, so nothing is skipped.
        self.book.finish(out.record.offset for out in batch)
        position = self.book.committable()
        assert position is not None  # the batch's own offsets were received
        commit = OffsetAndMetadata(position, encode_done(self.book.tracker.finished_above()))
        self._txn_busy = True
        self.spawn(self._transact(batch, commit), name=f"{self.path}:txn")

    async def _transact(self, batch: list[Output], commit: OffsetAndMetadata) -> None:
        producer = self._txn
        assert producer is not None
        tp = TopicPartition(self.topic, self.partition)
        async with producer.transaction():
            flights = await self._forwarder.send(producer, batch)
            await producer.send_offsets_to_transaction({tp: commit}, self.settings.group_id)
        await asyncio.gather(*(f.ack for f in flights))  # resolved: the commit flushed them
        outputs = [out for flight in flights for out in flight.outputs]
        self.tell_system(_TxnDone(outputs, commit.offset, self.context.clock.wall_ms()))

    def _on_txn_done(self, done: _TxnDone) -> None:
        self._txn_busy = False
        self._inflight -= len(done.outputs)
        self._account(done.outputs, done.committed_ms)
        self._commit.position = done.position
        self._m.committed.set(done.position)
        self._maybe_transact()
        self._maybe_finish_drain()

    # -- accounting --------------------------------------------------------------------
    def _account(self, outputs: Sequence[Output], now_ms: int) -> None:
        emit, m = self.context.emit, self._m
        for out in outputs:
            if out.kind == "forward":
                m.forwarded.inc()
                m.lateness.observe(out.lateness_ms or 0)
                emit(Event(type="delay_forwarded", ts_ms=now_ms, topic=self.topic,
                           partition=self.partition, offset=out.record.offset,
                           lateness_ms=float(out.lateness_ms or 0), reason=out.topic))
            elif out.kind in ("dead_letter", "dropped"):
                if out.kind == "dropped":
                    m.dropped.inc()
                    log.error("%s: offset %d %s", self.path, out.record.offset, out.reason)
                else:
                    m.dead.inc()
                emit(Event(type="dead_lettered", ts_ms=now_ms, topic=self.topic,
                           partition=self.partition, offset=out.record.offset,
                           reason=out.reason))
            else:
                m.cascaded.inc()

    # -- drain -------------------------------------------------------------------------
    def _on_drain(self, drain: Drain) -> None:
        # a revoke and a shutdown may both drain us: the first deadline counts, and every
        # waiter gets the final position
        if self._drains.join(drain.deadline_ms, drain.done):
            clock = self.context.clock
            self._drain_wall_deadline = (clock.wall_ms() + drain.deadline_ms
                                         - clock.monotonic_ms())
            self.schedule(drain.deadline_ms, DrainDeadline())
        self._maybe_finish_drain()

    def _past_drain_deadline(self) -> bool:
        deadline = self._drain_wall_deadline
        return deadline is not None and self.context.clock.wall_ms() >= deadline

    def _maybe_finish_drain(self) -> None:
        if not self._drains.pending or self._inflight or self._txn_busy:
            return
        deadline = self._drain_wall_deadline
        assert deadline is not None
        upcoming = self.book.next_deadline() if self.book is not None else None
        if upcoming is not None and upcoming < deadline and not self._past_drain_deadline():
            return  # something still falls due before the deadline: forward it first
        self._drains.resolve(self._consumer_position())

    def __repr__(self) -> str:
        book = self.book
        return (f"<DelayActor {self.topic}-{self.partition} level={self.level.name} "
                f"epoch={self.epoch} eos={self.exactly_once} "
                f"waiting={book.waiting if book else '-'} inflight={self._inflight} "
                f"committed={self.committed} paused={book.paused if book else '-'} "
                f"mailbox={len(self._mailbox)}/{self._mailbox.capacity}>")
