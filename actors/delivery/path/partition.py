"""PartitionActor: one per assigned partition of a subscription.

It holds the partition's `PartitionBook` (actors/delivery/path/book.py: the prefetch buffer and
in-flight window, the offset tracker, pausing, commits, drains and retries, all decided
there) and performs what it decides: `Deliver` to the egress actor, `RetryDue` timers,
`WriteDeadLetter` to the dead-letter actor, `CommitRequest` and `FlowControl` to the consumer
actor, journal events and metrics. It never touches Kafka: batches come from the consumer
actor, commits and pause/resume go back to it as requests.

Position. A new incarnation (first assignment or restart) asks the consumer actor to
rewind its partition to the committed offset (`Rewind`) and drops everything until the
consumer answers with `Assigned(position)`; batches fetched before the seek belong to
an older incarnation. Outcomes carry the epoch of the incarnation that dispatched them;
stale ones are ignored.

Commits. The commit position is the lowest unfinished offset received. It is requested
when nothing is in flight, every commit period (`autoCommitPeriodMs`; every second when 0,
so a partition that is never idle still commits), and at drain (revoke, shutdown).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from actors.delivery.document.filters import matches
from actors.delivery.document.settings import CursorSettings
from actors.delivery.path.book import PartitionBook
from actors.delivery.path.deadletter import WriteDeadLetter
from actors.delivery.path.retrytopic import MoveAside, MovedAside, note_failure, read_retry
from actors.delivery.path.status import PartitionStatus
from actors.shared.errors import UnexpectedMessage
from actors.shared.messages import (
    Assigned,
    Batch,
    BatchOutcome,
    CommitRequest,
    CommitTick,
    DeadLettered,
    Deliver,
    Delivered,
    DeliverMany,
    Drain,
    DrainDeadline,
    Failed,
    Failure,
    FlowControl,
    Highwater,
    Record,
    Resume,
    RetryDue,
    Rewind,
    StatusQuery,
)
from runtime.host.journal import Event, EventType, offset_ranges
from runtime.host.logs import Throttle
from runtime.host.metrics import Counter, Labels, Registry, Value, label_key
from runtime.kernel import Actor, Ref
from runtime.kernel.clock import Alarm
from runtime.kernel.errors import MailboxFullError

log = logging.getLogger(__name__)
IDLE_COMMIT_PERIOD_MS = 1000
TICK_SLACK_MS = 50
"""A commit tick may ring this much after its period: the ticks due together share one
clock alarm (runtime/kernel/actor.py `SharedTimers`; issue 37: a cursor sets its tick for
every burst it gets and gives it up when the burst is done)."""
STALL_AFTER_MS = 60_000


@dataclass(slots=True)
class PartitionPeers:
    """Who a partition actor talks to; `ChildRef`s follow restarts."""

    consumer: Ref
    egress: Ref
    deadletter: Ref | None
    retrytopic: Ref | None = None


@dataclass(frozen=True, slots=True)
class PartitionTraits:
    """What a partition actor settles once, at start: one attribute (see `_bind_metrics`
    on why a partition actor keeps few)."""

    commit_period_ms: int
    stall_after_ms: int
    reads_retries: bool  # a partition of the subscription's retry topic
    batched: bool  # batches of more than one: records go to the egress as `DeliverMany`
    drain_cuts: Value  # the process's count of drains cut (`report_cut`)
    wanted: Callable[[Record], bool] | None = None  # the topic's filter (issue 26)


PARTITION_SERIES = (
    "hookstream_delivered_total", "hookstream_failed_attempts_total", "hookstream_retries_total",
    "hookstream_dead_lettered_total", "hookstream_inflight", "hookstream_committed_offset",
    "hookstream_lag", "hookstream_oldest_pending_seconds", "hookstream_filtered_total",
)
_FILTERED = PARTITION_SERIES.index("hookstream_filtered_total")


class PartitionActor(Actor):
    mailbox_capacity = 1024
    light = True  # woken a batch and an answer at a time, by the thousand (kernel turns)

    def __init__(self, name: str, settings: CursorSettings, topic: str, partition: int,
                 epoch: int, peers: PartitionPeers, metrics: Registry,
                 stall_after_ms: int = STALL_AFTER_MS) -> None:
        super().__init__(name)
        self.settings, self.topic, self.partition, self.epoch = settings, topic, partition, epoch
        self.sub_key = settings.subscription
        self.peers = peers
        self.book = PartitionBook.for_cursor(settings)
        wanted = settings.filter
        self.traits = PartitionTraits(settings.commit_period_ms, stall_after_ms,
                                      settings.reads_retries, settings.batch_size > 1,
                                      drain_cuts_of(metrics),
                                      None if wanted is None else partial(matches, wanted))
        self.retrying = 0  # records waiting for a retry timer
        self._give_ups = Throttle()
        self.last_error: str | None = None
        self._batching = False  # handling a BatchOutcome: dispatch once at the end
        # the next CommitTick and its alarm, while one is to come
        self._tick: tuple[CommitTick, Alarm] | None = None
        self._bind_metrics(metrics)

    def _bind_metrics(self, metrics: Registry) -> None:
        # One label key shared by the nine families, and one attribute for what `on_stop`
        # removes: with 30 instance attributes or more CPython stops sharing the class's
        # key table and every instance gets a dict of its own, 1.3 KiB more per partition
        # (bench/RESULTS.md, "Scale"; tests/unit/test_partition_footprint.py).
        key = label_key(subscription=self.sub_key, topic=self.topic, partition=self.partition)
        metrics.counter("hookstream_filtered_total", "Records the subscription's filter "
                        "left out (finished without a request)")
        self._series: tuple[list[Counter], Labels] = (
            [metrics.counter(name, "") if name.endswith("_total") else
             metrics.gauge(name, "") for name in PARTITION_SERIES], key)
        self.m_delivered = metrics.counter(
            "hookstream_delivered_total", "Records delivered (2xx)").child(key)
        self.m_failed = metrics.counter(
            "hookstream_failed_attempts_total", "Delivery attempts that failed").child(key)
        self.m_retries = metrics.counter(
            "hookstream_retries_total", "Retries scheduled").child(key)
        self.m_dead = metrics.counter(
            "hookstream_dead_lettered_total", "Records given up after retries").child(key)
        self.m_inflight = metrics.gauge(
            "hookstream_inflight", "Records being delivered").child(key)
        self.m_committed = metrics.gauge(
            "hookstream_committed_offset", "Last committed position").child(key)
        self.m_lag = metrics.gauge(
            "hookstream_lag", "Fetch high watermark minus committed position").child(key)
        self.m_oldest = metrics.gauge(
            "hookstream_oldest_pending_seconds",
            "Age of the oldest record not yet finished").child(key)
        self._filtered_series()  # created at 0, as the others; not an attribute (above)

    def _filtered_series(self) -> Value:
        families, key = self._series
        return families[_FILTERED].child(key)

    # -- lifecycle ---------------------------------------------------------------------
    async def on_start(self) -> None:
        self.peers.consumer.tell_system(
            Rewind(self.topic, self.partition, self.epoch, self.sub_key))
        self._schedule_commit_tick()

    async def on_stop(self) -> None:
        self.book.close()
        families, key = self._series
        for family in families:  # revoked or unsubscribed: its series go too
            family.discard(key)

    # -- messages ----------------------------------------------------------------------
    async def handle(self, message: object) -> bool | PartitionStatus | None:
        if isinstance(message, Batch):
            waiting = self._on_batch(message)  # not a coroutine: one a burst (issue 37)
            if waiting is not None:  # the outlet's mailbox is full: wait for room
                await self.peers.egress.tell(waiting)
            return self.book.paused  # the consumer asks: am I paused now?
        if isinstance(message, BatchOutcome):  # a burst's answers: the commonest next
            await self._on_batch_outcome(message)
        elif isinstance(message, Delivered):
            if (waiting := self._on_delivered(message)) is not None:
                await self.peers.egress.tell(waiting)
        elif isinstance(message, Failed):
            await self._on_failed(message)
        elif isinstance(message, RetryDue):
            await self._on_retry_due(message)
        elif isinstance(message, DeadLettered):
            await self._on_dead_lettered(message)
        elif isinstance(message, MovedAside):
            await self._on_moved_aside(message)
        elif isinstance(message, CommitTick):
            if self._tick is None or self._tick[0] is not message:
                return None  # rang as `_rest` gave it up: what it does is done
            self._tick = None
            self._commit(self.book.request_commit())
            self._check_health()
            if self.book.pending or self.book.draining:
                self._schedule_commit_tick()
            # else idle: no tick until records come (a thousand idle cursors would wake
            # a thousand times a second for nothing)
        elif isinstance(message, Highwater):
            lag = self.book.note_highwater(message.highwater)
            if lag is not None:
                self.m_lag.set(lag)
        elif isinstance(message, Assigned):
            if message.epoch == self.epoch:
                self.book.assign(message.position, pin=message.pin)
        elif isinstance(message, Drain):
            self._on_drain(message)
        elif isinstance(message, DrainDeadline):
            if self.book.draining:
                report_cut(self)
                self._finish_drain()
        elif isinstance(message, Resume):
            if self.book.resume() and (waiting := self._send()) is not None:
                await self.peers.egress.tell(waiting)
        elif isinstance(message, StatusQuery):
            return status_of(self)
        else:
            raise UnexpectedMessage(self.path, message)
        return None

    def _on_batch(self, batch: Batch) -> Deliver | DeliverMany | None:
        """Take a batch, start what the window lets start (`_send`'s return)."""
        book = self.book
        if not book.accepts_batches:
            return None  # fetched for an older incarnation, or draining: refetched
        restarted = book.restart_if_truncated(batch.records[0].offset)
        if restarted is not None:
            log.warning("%s: committed position %d is past the log; restarting at %d",
                        self.path, restarted, batch.records[0].offset)
        if self.traits.reads_retries:
            for record in batch.records:
                record.retry = read_retry(record.headers)
        now = self.context.clock.wall_ms()
        taken, filtered = book.take_wanted(batch.records, batch.highwater, self.traits.wanted)
        # read back from the retry topic: fetched once, at its origin
        fetched = [r.offset for r in taken if r.retry is None]
        if fetched:  # one event for the batch, its offsets as ranges (issue 35)
            many = len(fetched) > 1  # a single record's is the per-record shape, shorter
            self.context.emit(Event(
                type="fetched", ts_ms=now, subscription=self.sub_key, topic=self.topic,
                partition=self.partition, offset=fetched[0],
                count=len(fetched) if many else None,
                offsets=offset_ranges(fetched) if many else None))
        if filtered:
            self._filtered(taken, filtered, now)
        self._commit(book.pin())
        if self._tick is None:
            self._schedule_commit_tick()  # it was idle: ticks again while records wait
        lag = book.lag()
        if lag is not None:
            self.m_lag.value = lag  # `set()`, without the call
        return self._send()

    def _filtered(self, taken: list[Record], filtered: list[int], now: int) -> None:
        """The batch's records the filter left out, finished already: one journal event
        for all of them (the audit counts them accounted for), the counter, and a commit
        when nothing else is pending (a subscriber that wants none of a batch)."""
        self._filtered_series().inc(len(filtered))
        self.context.emit(Event(
            type="filtered", ts_ms=now, subscription=self.sub_key, topic=self.topic,
            partition=self.partition, offset=filtered[0], count=len(filtered),
            offsets=offset_ranges(filtered)))
        if self.book.pending == 0:
            self._commit(self.book.request_commit())

    def _send(self) -> Deliver | DeliverMany | None:
        """What the window lets start goes to the outlet in one message (issue 37: one a
        record was a turn of the outlet's mailbox each): `DeliverMany`, which a batching
        egress groups into requests; then fetching pauses or resumes as the buffer says.
        Not a coroutine (a cursor sends twice a burst): returns the message when the
        outlet's mailbox is full, for the caller to `tell` (it waits for room). With
        nothing buffered it only sets the in-flight gauge: the pause gate's last look (one
        follows every change of the buffer) saw it empty too (issue 37: a cursor's burst
        at fan-out ends so, and the dispatch was five calls for nothing)."""
        book, message = self.book, None
        dispatcher = book.dispatcher
        if not dispatcher.buffered:
            self.m_inflight.value = dispatcher.inflight  # `set()`, without the call
            return None
        records = book.dispatch()
        self.m_inflight.value = dispatcher.inflight
        if records:
            message = DeliverMany(records, self.epoch, self) if len(records) > 1 or \
                self.traits.batched else Deliver(records[0], self.epoch, self)
            try:  # the usual case without the coroutines of `tell` (issue 37)
                self.peers.egress.tell_nowait(message)
                message = None
            except MailboxFullError:
                pass  # returned: the caller waits for room
        if (paused := book.flow()) is not None:
            self.peers.consumer.tell_system(
                FlowControl(self.topic, self.partition, paused, self.epoch, self.sub_key))
        return message

    # -- outcomes ----------------------------------------------------------------------
    def _on_delivered(self, outcome: Delivered) -> Deliver | DeliverMany | None:
        """A record delivered alone; `_send`'s return (a call, not a coroutine: #37)."""
        if outcome.epoch != self.epoch:
            return None
        self.m_delivered.value += 1  # `inc()`, without the call
        if self._finished(outcome.record):  # `_finish`: never batching here
            return self._send()
        return None

    async def _on_batch_outcome(self, outcome: BatchOutcome) -> None:
        """A batch's answer: each record as if alone, but one dispatch for them all."""
        if outcome.epoch != self.epoch:
            return
        self._batching = True
        try:
            failure = outcome.failure
            if failure is None:
                self.m_delivered.inc(len(outcome.records))
                for record in outcome.records:
                    self._finished(record)
            else:
                for record in outcome.records:
                    await self._on_failed(Failed(record, outcome.epoch, failure))
        finally:
            self._batching = False
        if not self.book.draining and (waiting := self._send()) is not None:
            await self.peers.egress.tell(waiting)

    async def _on_failed(self, failed: Failed) -> None:
        if failed.epoch != self.epoch:
            return
        self.m_failed.inc()
        outcome = failed.failure
        self.last_error = outcome.error
        record, now = failed.record, self.context.clock.monotonic_ms()
        if outcome.disable:  # 410 Gone: the service disables the subscription
            self.book.halt(record)
            self.m_inflight.set(self.book.inflight)
            return
        book = self.book
        if book.retry_topics is not None:
            note_failure(record, self.context.clock.wall_ms())
        retry_at = book.retry_at(record, now, outcome.retry_after_ms, outcome.give_up)
        if retry_at is None:
            delay = book.move_aside_ms(record, outcome.give_up)
            if delay is not None and self.peers.retrytopic is not None:
                await self.peers.retrytopic.tell(MoveAside(record, delay, outcome.error,
                                                           self.epoch, self))
                return
            await self._give_up(record, outcome)
            return
        self.schedule(retry_at, RetryDue(record, self.epoch))
        self.retrying += 1
        self.m_retries.inc()
        self._journal("retry_scheduled", record, status=outcome.status,
                      reason=outcome.error, latency_ms=float(retry_at - now))

    async def _on_retry_due(self, due: RetryDue) -> None:
        if due.epoch != self.epoch:
            return
        self.retrying -= 1
        self.book.retrying(due.record)
        await self.peers.egress.tell(Deliver(due.record, self.epoch, self))

    def _log_give_up(self, record: Record, what: str, reason: str) -> None:
        """One line per give-up with where and why, at most 5 a minute per partition."""
        allowed, held = self._give_ups.allow(self.context.clock.monotonic_ms())
        if allowed:
            log.warning("%s %s-%d@%d %s: %s%s", self.sub_key, self.topic, self.partition,
                        record.offset, what, reason,
                        f" ({held} more give-ups not logged)" if held else "")

    async def _give_up(self, record: Record, outcome: Failure) -> None:
        reason = (f"the receiver gave it up: {outcome.error}" if outcome.give_up else
                  f"gave up after {record.attempt} attempts: {outcome.error}")
        if self.peers.deadletter is None:
            self._log_give_up(record, "skipped (no deadLetterTopic)", reason)
            self._journal("dead_lettered", record, status=outcome.status,
                          reason=f"{reason}; no deadLetterTopic configured",
                          response=outcome.response)
            self.m_dead.inc()
            await self._finish(record)
            return
        await self.peers.deadletter.tell(WriteDeadLetter(record, reason, outcome.status,
                                                         self.epoch, self, outcome.response))

    async def _on_dead_lettered(self, message: DeadLettered) -> None:
        if message.epoch != self.epoch:
            return
        topic = self.settings.dead_letter_topic
        self._log_give_up(message.record, "dead-lettered to", str(topic))
        self.m_dead.inc()
        self._journal("dead_lettered", message.record, status=message.status,
                      reason=f"{message.reason} (to {topic})", response=message.response)
        await self._finish(message.record)

    async def _on_moved_aside(self, message: MovedAside) -> None:
        if message.epoch != self.epoch:
            return
        record, retry = message.record, self.settings.retry_topics
        self.m_retries.inc()
        self._journal("retry_scheduled", record, latency_ms=float(message.delay_ms),
                      reason=f"moved to retry topic {retry.topic if retry else '?'}, next "
                             f"attempt in {message.delay_ms} ms")
        await self._finish(record)

    async def _finish(self, record: Record) -> None:
        # batching: `_on_batch_outcome` dispatches once for the whole batch
        if self._finished(record) and not self._batching and \
                (waiting := self._send()) is not None:
            await self.peers.egress.tell(waiting)  # waits for room

    def _finished(self, record: Record) -> bool:
        """`record` is done: its offset, a commit, the drain. True when more may be
        dispatched (not draining). Not a coroutine: a burst's records pass here one by
        one (issue 37)."""
        # every record passes here: decisions, mostly None, tested before performing them
        book = self.book
        position = book.finish(record)
        draining = book.draining
        if position is not None:  # nothing is pending now
            self._commit(position)
            if self._tick is not None and not draining:
                self._rest(position)
        if draining:
            if book.drained:
                self._finish_drain()
            return False
        return True

    # -- commits -----------------------------------------------------------------------
    def _commit(self, position: int | None) -> None:
        """Perform a commit decision of the book: tell the consumer, update the gauges."""
        if position is None:
            return
        self.m_committed.value = position  # `set()`, without the call (issue 37)
        highwater = self.book.highwater
        if highwater is not None:
            self.m_lag.value = max(highwater - position, 0)
        self.peers.consumer.tell_system(
            CommitRequest(self.topic, self.partition, position, self.epoch, self.sub_key))

    def _check_health(self) -> None:
        """Every commit tick: the oldest pending record's age, and the stall watchdog."""
        book, now = self.book, self.context.clock.monotonic_ms()
        oldest = book.oldest_pending_ms(now)
        self.m_oldest.set(0 if oldest is None else oldest / 1000)
        if book.watch(now, self.traits.stall_after_ms):
            log.warning("%s: stalled: commit position %s has not moved for %d s while "
                        "%d records wait (oldest %.1f s)", self.path, book.position(),
                        self.traits.stall_after_ms // 1000, book.pending, (oldest or 0) / 1000)
            self.context.emit(Event(
                type="stalled", ts_ms=self.context.clock.wall_ms(), subscription=self.sub_key,
                topic=self.topic, partition=self.partition, offset=book.position(),
                reason=f"commit position unchanged for {self.traits.stall_after_ms} ms"))

    def _schedule_commit_tick(self) -> None:
        period = self.traits.commit_period_ms or IDLE_COMMIT_PERIOD_MS
        tick = CommitTick()
        self._tick = tick, self.schedule(self.context.clock.monotonic_ms() + period, tick,
                                         slack_ms=TICK_SLACK_MS)

    def _rest(self, position: int) -> None:
        """Nothing is pending and the position is committed: no tick until records come
        again, and what it would find is set now (the oldest pending age, the stall
        watch). Every cursor that finished a burst was woken once more a second later for
        nothing: at 10,000 subscribers, a turn of each of 10,000 actors (issue 37)."""
        tick, self._tick = self._tick, None
        if tick is not None:
            tick[1].cancel()
        self.m_oldest.value = 0  # `_check_health` with nothing pending, in one call
        self.book.rest(self.context.clock.monotonic_ms(), position)

    # -- drain (revoke, unsubscribe, shutdown) -----------------------------------------
    def _on_drain(self, drain: Drain) -> None:
        deadline = self.book.drain(drain)
        if deadline is not None:
            self.schedule(deadline, DrainDeadline())
        elif self.book.drained:
            self._finish_drain()

    def _finish_drain(self) -> None:
        position = self.book.finish_drain()
        if position is not None:
            self.m_committed.set(position)

    def _journal(self, kind: EventType, record: Record, *, reason: str | None,
                 status: int | None = None, latency_ms: float | None = None,
                 response: str | None = None) -> None:
        topic, partition, offset = record.coordinates()  # a retry: its original ones
        self.context.emit(Event(
            type=kind, ts_ms=self.context.clock.wall_ms(), subscription=self.sub_key,
            topic=topic, partition=partition, offset=offset, attempt=record.attempt,
            status=status, latency_ms=latency_ms, reason=reason, response=response))

    def __repr__(self) -> str:
        book = self.book
        return (f"<PartitionActor {self.topic}-{self.partition} epoch={self.epoch} "
                f"inflight={book.inflight}/{book.dispatcher} "
                f"watermark={book.position()} paused={book.paused} "
                f"mailbox={len(self._mailbox)}/{self._mailbox.capacity}>")


def status_of(cursor: PartitionActor) -> PartitionStatus:
    """A cursor's answer to a `StatusQuery` (the status API, readiness), built by its own
    handler between two messages."""
    book, now = cursor.book, cursor.context.clock.monotonic_ms()
    stalled = book.stalled_since
    return PartitionStatus(
        topic=cursor.topic, partition=cursor.partition, committed=book.committed,
        highwater=book.highwater, lag=book.lag(), inflight=book.inflight,
        retrying=cursor.retrying, pending=book.pending,
        oldest_pending_ms=book.oldest_pending_ms(now), paused=book.paused,
        last_error=cursor.last_error, dead_lettered=int(cursor.m_dead.value),
        filtered=int(cursor._filtered_series().value),
        stalled_for_ms=None if stalled is None else now - stalled)


def report_cut(cursor: PartitionActor) -> None:
    """The drain's deadline passed with records in flight: the position handed over stays
    at the lowest of them, so the next owner pushes it, and what this one delivered above
    it, again. Logged and journaled (`drain_cut`): a stop or revoke that duplicates says
    where and why (a push slower than the drain: an endpoint answering late, a connection
    a full accept queue left half open)."""
    book, position = cursor.book, cursor.book.position()
    above = len(book.tracker.finished_above()) if book.tracker is not None else 0
    reason = (f"{book.inflight} in flight at the drain deadline; {above} finished above "
              f"position {position} go again")
    log.warning("%s: drain cut: %s", cursor.path, reason)
    cursor.traits.drain_cuts.inc()
    cursor.context.emit(Event(
        type="drain_cut", ts_ms=cursor.context.clock.wall_ms(), subscription=cursor.sub_key,
        topic=cursor.topic, partition=cursor.partition, offset=position, reason=reason))


def drain_cuts_of(metrics: Registry) -> Value:
    """The process-wide count of drains cut at their deadline: no labels, so an alert on
    its increase outlives the subscription (its own series go when it leaves)."""
    return metrics.counter(
        "hookstream_drain_cuts_total", "Drains (revoke, unsubscribe, stop) that reached "
        "their deadline with records in flight: those records and the ones finished above "
        "them are pushed again (the journal's drain_cut events say where)").child(())
