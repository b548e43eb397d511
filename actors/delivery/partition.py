"""PartitionActor: one per assigned partition of a subscription.

It owns the prefetch buffer and in-flight window (`Dispatcher`, by ordering mode), the
offset tracker, retry timers and the give-up path. It never touches Kafka: batches come
from the consumer actor, commits and pause/resume go back to it as requests.

Position. A new incarnation (first assignment or restart) asks the consumer actor to
rewind its partition to the committed offset (`Rewind`) and drops everything until the
consumer answers with `Assigned(position)`; batches fetched before the seek belong to
an older incarnation. Outcomes carry the epoch of the incarnation that dispatched them;
stale ones are ignored.

Commits. The commit position is the lowest unfinished offset received. It is requested
when nothing is in flight, every `autoCommitPeriodMs` (or every second when that is 0,
so a partition that is never idle still commits), and at drain (revoke, shutdown).
"""

from __future__ import annotations

import asyncio
import logging
import math
from dataclasses import dataclass
from typing import Any

from actors.delivery.deadletter import DeadLetter
from actors.delivery.lanes import Dispatcher
from actors.delivery.subscription import Consumer, TopicConfig
from actors.shared.messages import (
    Assigned,
    Batch,
    CommitRequest,
    CommitTick,
    DeadLettered,
    Deliver,
    Delivered,
    Drain,
    DrainDeadline,
    Failed,
    FlowControl,
    Record,
    RetryDue,
    Rewind,
)
from actors.shared.offsets import OffsetTracker
from runtime.host.journal import Event, EventType
from runtime.host.metrics import Registry
from runtime.kernel.actor import Actor
from runtime.kernel.backoff import Backoff

log = logging.getLogger(__name__)
IDLE_COMMIT_PERIOD_MS = 1000


@dataclass(slots=True)
class PartitionPeers:
    """Who a partition actor talks to; resolved through supervisors, so restarts are fine."""

    consumer: Any  # ChildRef or Actor of the consumer actor
    egress: Any
    deadletter: Any | None


class PartitionActor(Actor):
    mailbox_capacity = 1024

    def __init__(self, name: str, sub: Consumer, topic: str, partition: int, epoch: int,
                 peers: PartitionPeers, metrics: Registry) -> None:
        super().__init__(name)
        self.sub, self.topic, self.partition, self.epoch = sub, topic, partition, epoch
        self.sub_key = sub.key  # a property that formats: once, not per record
        self.peers = peers
        cfg: TopicConfig = sub.topic_config(topic)
        self.cfg = cfg
        window = _window(cfg)
        lanes = cfg.lanes or cfg.concurrencyFactor
        self.dispatcher: Dispatcher[Record] = Dispatcher(cfg.ordering, window, lanes,
                                                         _key_of)
        self.buffer_limit = buffer_limit(cfg)
        self.tracker: OffsetTracker | None = None
        method = sub.subscriptionMethod
        self.backoff = Backoff(
            method.delayOnErrorMs, method.backoffMultiplier,
            method.maxDelayOnErrorMs or (100 * method.delayOnErrorMs if
                                         method.backoffMultiplier > 1 else 0),
            method.jitter,
        )
        self.paused = False
        self.committed: int | None = None
        self.highwater: int | None = None
        self._drain: Drain | None = None
        self._drain_waiters: list[asyncio.Future[int | None]] = []
        self._bind_metrics(metrics)

    def _bind_metrics(self, metrics: Registry) -> None:
        labels = {"subscription": self.sub.key, "topic": self.topic,
                  "partition": str(self.partition)}
        self.m_delivered = metrics.counter(
            "hookstream_delivered_total", "Records delivered (2xx)").labels(**labels)
        self.m_failed = metrics.counter(
            "hookstream_failed_attempts_total", "Delivery attempts that failed").labels(**labels)
        self.m_retries = metrics.counter(
            "hookstream_retries_total", "Retries scheduled").labels(**labels)
        self.m_dead = metrics.counter(
            "hookstream_dead_lettered_total", "Records given up after retries").labels(**labels)
        self.m_inflight = metrics.gauge(
            "hookstream_inflight", "Records being delivered").labels(**labels)
        self.m_committed = metrics.gauge(
            "hookstream_committed_offset", "Last committed position").labels(**labels)
        self.m_lag = metrics.gauge(
            "hookstream_lag", "Fetch high watermark minus committed position").labels(**labels)

    # -- lifecycle ---------------------------------------------------------------------
    async def on_start(self) -> None:
        self.peers.consumer.tell_system(Rewind(self.topic, self.partition, self.epoch))
        period = self.cfg.autoCommitPeriodMs or IDLE_COMMIT_PERIOD_MS
        self.schedule(self.context.clock.monotonic_ms() + period, CommitTick())

    async def on_stop(self) -> None:
        self.m_inflight.set(0)
        self._resolve_drains(self._position())

    # -- messages ----------------------------------------------------------------------
    async def handle(self, message: Any) -> Any:
        if isinstance(message, Batch):
            return await self._on_batch(message)  # the consumer asks: am I paused now?
        if isinstance(message, Delivered):
            await self._on_delivered(message)
        elif isinstance(message, Failed):
            await self._on_failed(message)
        elif isinstance(message, RetryDue):
            await self._on_retry_due(message)
        elif isinstance(message, DeadLettered):
            await self._on_dead_lettered(message)
        elif isinstance(message, CommitTick):
            self._on_commit_tick()
        elif isinstance(message, Assigned):
            self._on_assigned(message)
        elif isinstance(message, Drain):
            self._on_drain(message)
        elif isinstance(message, DrainDeadline):
            self._finish_drain()
        else:
            raise TypeError(f"{self.path}: unexpected message {message!r}")

    def _on_assigned(self, message: Assigned) -> None:
        if message.epoch == self.epoch and self.tracker is None:
            self.tracker = OffsetTracker(message.position)
            self.committed = message.position

    async def _on_batch(self, batch: Batch) -> bool:
        tracker = self.tracker
        if tracker is None or self._drain is not None:
            return self.paused  # fetched for an older incarnation, or draining: refetched
        if batch.highwater is not None:
            self.highwater = batch.highwater
        emit, now, sub = self.context.emit, self.context.clock.wall_ms(), self.sub_key
        tracker = self._check_reset(tracker, batch.records[0].offset)
        last = tracker.last
        for record in batch.records:
            if last is not None and record.offset <= last:
                continue  # a refetch after a rewind overlapping what we hold
            tracker.add(record.offset)
            last = record.offset
            self.dispatcher.offer(record)
            emit(Event(type="fetched", ts_ms=now, subscription=sub, topic=self.topic,
                       partition=self.partition, offset=record.offset,
                       record_ts_ms=record.timestamp_ms))
        if self.committed is None:
            # the group has no position yet: pin where we started, so a later owner does
            # not reset past these records (auto.offset.reset=latest)
            self._request_commit()
        await self._pump()
        self._flow_control()
        return self.paused

    def _check_reset(self, tracker: OffsetTracker, first: int) -> OffsetTracker:
        """The committed position was past the log's end (topic truncated or recreated)
        and the consumer reset to an earlier offset: start over from there."""
        start = tracker.committable()
        if tracker.last is not None or start is None or first >= start:
            return tracker
        log.warning("%s: committed position %d is past the log; restarting at %d",
                    self.path, start, first)
        self.committed = None
        self.tracker = OffsetTracker(first)
        return self.tracker

    async def _pump(self) -> None:
        if self._drain is not None:
            return
        for record in self.dispatcher.ready():
            record.attempt = 1
            await self.peers.egress.tell(Deliver(record, self.epoch, self))
        self.m_inflight.set(self.dispatcher.inflight)

    def _flow_control(self) -> None:
        buffered = self.dispatcher.buffered
        if not self.paused and buffered >= self.buffer_limit:
            self.paused = True
        elif self.paused and buffered <= self.buffer_limit // 2:
            self.paused = False
        else:
            return
        self.peers.consumer.tell_system(
            FlowControl(self.topic, self.partition, self.paused, self.epoch))

    async def _on_delivered(self, outcome: Delivered) -> None:
        if outcome.epoch != self.epoch:
            return
        self.m_delivered.inc()
        await self._finish(outcome.record)

    async def _on_failed(self, outcome: Failed) -> None:
        if outcome.epoch != self.epoch:
            return
        self.m_failed.inc()
        record = outcome.record
        limit = self.sub.subscriptionMethod.retryBeforeCommit
        if limit and record.attempt > limit:
            await self._give_up(record, outcome)
            return
        delay = self.backoff.delay_ms(record.attempt, retry_after_ms=outcome.retry_after_ms)
        self.schedule(self.context.clock.monotonic_ms() + delay, RetryDue(record, self.epoch))
        self.m_retries.inc()
        self._journal("retry_scheduled", record, status=outcome.status,
                      reason=outcome.error, latency_ms=float(delay))

    async def _on_retry_due(self, due: RetryDue) -> None:
        if due.epoch != self.epoch:
            return
        due.record.attempt += 1
        await self.peers.egress.tell(Deliver(due.record, self.epoch, self))

    async def _give_up(self, record: Record, outcome: Failed) -> None:
        reason = f"gave up after {record.attempt} attempts: {outcome.error}"
        if self.peers.deadletter is None:
            log.warning("%s: offset %d %s; no deadLetterTopic, skipping it",
                        self.path, record.offset, reason)
            self._journal("dead_lettered", record, status=outcome.status,
                          reason=f"{reason}; no deadLetterTopic configured")
            self.m_dead.inc()
            await self._finish(record)
            return
        await self.peers.deadletter.tell(DeadLetter(record, reason, outcome.status,
                                                    self.epoch, self))

    async def _on_dead_lettered(self, message: DeadLettered) -> None:
        if message.epoch != self.epoch:
            return
        self.m_dead.inc()
        self._journal("dead_lettered", message.record,
                      reason=self.sub.subscriptionMethod.deadLetterTopic)
        await self._finish(message.record)

    async def _finish(self, record: Record) -> None:
        assert self.tracker is not None
        self.dispatcher.done(record)
        self.tracker.finish(record.offset)
        if self.tracker.pending() == 0:
            self._request_commit()
        if self._drain is not None:
            if self.dispatcher.inflight == 0:
                self._finish_drain()
            return
        await self._pump()
        self._flow_control()

    # -- commits -----------------------------------------------------------------------
    def _position(self) -> int | None:
        return self.tracker.committable() if self.tracker is not None else self.committed

    def _request_commit(self) -> None:
        position = self._position()
        if position is None or (self.committed is not None and position <= self.committed):
            return
        self.committed = position
        self.m_committed.set(position)
        if self.highwater is not None:
            self.m_lag.set(max(self.highwater - position, 0))
        self.peers.consumer.tell_system(
            CommitRequest(self.topic, self.partition, position, self.epoch))

    def _on_commit_tick(self) -> None:
        self._request_commit()
        period = self.cfg.autoCommitPeriodMs or IDLE_COMMIT_PERIOD_MS
        self.schedule(self.context.clock.monotonic_ms() + period, CommitTick())

    # -- drain (revoke, unsubscribe, shutdown) -----------------------------------------
    def _on_drain(self, drain: Drain) -> None:
        # a revoke and a shutdown may both drain us: every waiter gets the position
        self._drain_waiters.append(drain.done)
        if self._drain is not None:
            if self.dispatcher.inflight == 0:
                self._finish_drain()
            return
        self._drain = drain
        self.dispatcher.drop_buffered()
        if self.paused:
            self.paused = False
        if self.dispatcher.inflight == 0:
            self._finish_drain()
        else:
            self.schedule(drain.deadline_ms, DrainDeadline())

    def _finish_drain(self) -> None:
        position = self._position()
        self.committed = position
        if position is not None:
            self.m_committed.set(position)
        self._resolve_drains(position)

    def _resolve_drains(self, position: int | None) -> None:
        waiters, self._drain_waiters = self._drain_waiters, []
        for done in waiters:
            if not done.done():
                done.set_result(position)

    def _journal(self, kind: EventType, record: Record, **fields: Any) -> None:
        self.context.emit(Event(
            type=kind, ts_ms=self.context.clock.wall_ms(), subscription=self.sub_key,
            topic=self.topic, partition=self.partition, offset=record.offset,
            attempt=record.attempt, **fields))

    def __repr__(self) -> str:
        return (f"<PartitionActor {self.topic}-{self.partition} epoch={self.epoch} "
                f"inflight={self.dispatcher.inflight}/{self.dispatcher} "
                f"watermark={self._position()} paused={self.paused} "
                f"mailbox={len(self._mailbox)}/{self._mailbox.capacity}>")


def _window(cfg: TopicConfig) -> int:
    return 1 if cfg.ordering == "partition" else cfg.concurrencyFactor


def buffer_limit(cfg: TopicConfig) -> int:
    """Buffered records at which a partition asks to be paused (`loadFactor` x window)."""
    window = _window(cfg)
    return max(window, math.ceil(window * cfg.loadFactor))


def _key_of(record: Record) -> bytes | None:
    return record.key
