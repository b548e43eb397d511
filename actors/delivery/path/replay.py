"""ReplayActor: delivers records again, through the subscription's own egress.

Sources: the subscription's dead-letter topic (`{"source": "deadLetter"}`, optionally
`from`/`to` record times and a `limit`), or a range of a topic partition (`{"source":
"topic", "topic", "partition", "fromOffset", "toOffset"}`, both offsets inclusive). A dead
letter is pushed with its original coordinates (read from its `dlt-*` headers), so the
`QOH-*` headers and the `webhook-id` are the original delivery's and receivers deduplicate;
every replayed push also carries `QOH-Replay: <replay id>`.

The replay reads with its own consumer group (`<group.id>.replay.<id>`) and commits after
each batch it finished, so a crash mid-replay resumes instead of starting over. Its end is
fixed when it starts: the high watermark of each partition at the first fetch (records
dead-lettered later are not part of it). A failed push is retried per the subscription's
policy (`delayOnErrorMs`, `retryBeforeCommit`), then counted as failed; it stays in the
dead-letter topic either way. A push meeting the origin's open circuit breaker waits for
its probe (no attempt is spent), as a replay usually follows an outage. A replay whose
every record failed ends `failed`; `reason` names the count and the last error.

Filters (issue 26): a replay pushes only the records that match the subscription's current
filter for their (original) topic, unless the request says `"applyFilter": false`; the
others are counted as `filtered` in its progress. `limit` counts pushed records.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Literal

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.structs import ConsumerRecord

from actors.delivery.document.filters import matches
from actors.delivery.document.replay import ReplayRange
from actors.delivery.document.settings import ReplaySettings
from actors.delivery.path.book import retry_backoff
from actors.shared.deadletter import dead_letter_source
from actors.shared.errors import UnexpectedMessage
from actors.shared.messages import Deliver, Delivered, Failed, Record
from runtime.host.journal import Event
from runtime.kafka import make_consumer
from runtime.kernel import Actor, Ref

log = logging.getLogger(__name__)
BATCH = 100
DLT_PREFIX = "dlt-"  # the dead-letter headers a replay leaves out


@dataclass(slots=True)
class ReplayProgress:
    """What `GET .../replay/{replayId}` shows; written by the replay actor only."""

    replay_id: str
    subscription: str
    source: str
    state: Literal["starting", "running", "done", "failed"] = "starting"
    total: int | None = None
    delivered: int = 0
    failed: int = 0
    filtered: int = 0
    reason: str = ""
    pending: dict[tuple[str, int, int], asyncio.Future[bool]] = field(default_factory=dict)

    def as_dict(self) -> dict[str, object]:
        return {"replayId": self.replay_id, "subscription": self.subscription,
                "source": self.source, "state": self.state, "total": self.total,
                "delivered": self.delivered, "failed": self.failed,
                "filtered": self.filtered, "reason": self.reason}


class ReplayActor(Actor):
    def __init__(self, name: str, settings: ReplaySettings, request: ReplayRange,
                 progress: ReplayProgress, bootstrap: str, egress: Ref,
                 client_settings: dict[str, object]) -> None:
        super().__init__(name)
        self.settings, self.request, self.progress = settings, request, progress
        self.bootstrap, self.egress = bootstrap, egress
        self.client_settings = client_settings
        self.backoff = retry_backoff(settings.retry)
        self.retries = settings.retry.retries
        self._kafka: AIOKafkaConsumer | None = None
        self._last_error = ""

    @property
    def topic(self) -> str:
        if self.request.source == "topic":
            assert self.request.topic is not None
            return self.request.topic
        topic = self.settings.dead_letter_topic
        assert topic is not None
        return topic

    async def on_start(self) -> None:
        group = f"{self.settings.group_id}.replay.{self.progress.replay_id}"
        self._kafka = make_consumer(self.bootstrap, group_id=group, enable_auto_commit=False,
                                    auto_offset_reset="earliest", **self.client_settings)
        await self._kafka.start()
        self.spawn(self._run(), name=f"{self.path}:run")

    async def on_stop(self) -> None:
        kafka, self._kafka = self._kafka, None
        if kafka is not None:
            await kafka.stop()

    async def handle(self, message: object) -> None:
        if isinstance(message, Delivered | Failed):
            if isinstance(message, Failed):
                self._last_error = message.failure.error
            done = self.progress.pending.pop(_coords(message.record), None)
            if done is not None and not done.done():
                done.set_result(isinstance(message, Delivered))
            return
        raise UnexpectedMessage(self.path, message)

    # -- the replay (an owned task) ----------------------------------------------------
    async def _run(self) -> None:
        """The replay, then the actor stops: its consumer closes with it (on_stop), and
        the supervisor forgets a transient child that ended normally (#25: finished
        replays kept their consumers and sockets open)."""
        try:
            await self._replay_all()
        finally:
            await self.stop()

    async def _replay_all(self) -> None:
        kafka, progress = self._kafka, self.progress
        assert kafka is not None
        try:
            ends = await self._assign(kafka)
            progress.state = "running"
            await self._replay(kafka, ends)
        except Exception as exc:  # the replay fails, visibly; the subscription runs on
            progress.state, progress.reason = "failed", repr(exc)
            log.error("%s: replay %s failed: %r", self.path, progress.replay_id, exc)
            return
        if progress.failed:
            progress.reason = (f"{progress.failed} of {progress.failed + progress.delivered}"
                               f" records failed; the last error: {self._last_error}")
        # a replay that delivered nothing of what it read did not do its job
        progress.state = "failed" if progress.failed and not progress.delivered else "done"
        log.log(logging.WARNING if progress.failed else logging.INFO,
                "%s: replay %s %s: %d delivered, %d failed", self.path, progress.replay_id,
                progress.state, progress.delivered, progress.failed)

    async def _assign(self, kafka: AIOKafkaConsumer) -> dict[TopicPartition, int]:
        """Assign the source partitions and seek where to start (the replay's own commit
        when it resumes); the ends are filled in at the first fetch."""
        request = self.request
        await kafka.topics()
        numbers = kafka.partitions_for_topic(self.topic) or set()
        if request.partition is not None:
            numbers = {request.partition} & numbers
        if not numbers:
            raise LookupError(f"no partition to replay in topic {self.topic!r}")
        tps = [TopicPartition(self.topic, n) for n in sorted(numbers)]
        kafka.assign(tps)
        for tp in tps:
            if await kafka.committed(tp) is not None:
                continue  # resuming
            if request.from_offset is not None:
                kafka.seek(tp, request.from_offset)
            else:
                await kafka.seek_to_beginning(tp)
        return {}

    async def _replay(self, kafka: AIOKafkaConsumer, ends: dict[TopicPartition, int]) -> None:
        request, progress = self.request, self.progress
        start, stop = request.from_ms, request.to_ms
        budget = request.limit
        while True:
            batches = await kafka.getmany(timeout_ms=500, max_records=BATCH)
            for tp in kafka.assignment():
                if tp not in ends and kafka.highwater(tp) is not None:
                    ends[tp] = kafka.highwater(tp)  # fixed at the first fetch
            chosen = self._matching([self._record(m) for tp, ms in batches.items() for m in ms
                                     if self._wanted(m, ends.get(tp), start, stop)])
            if budget is not None:
                chosen, budget = chosen[:budget], budget - len(chosen[:budget])
            await asyncio.gather(*(self._deliver(r) for r in chosen))
            if batches:
                await kafka.commit()
            if await self._finished(kafka, ends) or budget == 0:
                progress.total = progress.delivered + progress.failed
                return
            if not batches and request.source == "topic" and request.to_offset is None:
                return

    def _wanted(self, message: ConsumerRecord[bytes, bytes], end: int | None,
                start: int | None, stop: int | None) -> bool:
        request = self.request
        if end is not None and message.offset >= end:
            return False
        if request.from_offset is not None and message.offset < request.from_offset:
            return False  # a reset to the earliest offset reads from before the range
        if request.to_offset is not None and message.offset > request.to_offset:
            return False
        stamp = message.timestamp
        return (start is None or stamp >= start) and (stop is None or stamp <= stop)

    def _matching(self, records: list[Record]) -> list[Record]:
        """The records the subscription's filter lets through (all, with `applyFilter`
        false); the others are counted."""
        if not self.request.apply_filter:
            return records
        cursors, kept = self.settings.cursors, []
        for record in records:
            wanted = cursors(record.topic).filter
            if wanted is None or matches(wanted, record):
                kept.append(record)
        self.progress.filtered += len(records) - len(kept)
        return kept

    async def _finished(self, kafka: AIOKafkaConsumer, ends: dict[TopicPartition, int]
                        ) -> bool:
        """Every partition read up to its end (or past `toOffset`)."""
        tps = kafka.assignment()
        if len(ends) < len(tps):
            return False
        last = self.request.to_offset
        for tp in tps:
            stop = ends[tp] if last is None else min(ends[tp], last + 1)
            if await kafka.position(tp) < stop:
                return False
        return True

    async def _deliver(self, record: Record) -> None:
        progress, clock = self.progress, self.context.clock
        while True:
            record.attempt += 1
            done: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
            progress.pending[_coords(record)] = done
            await self.egress.tell(Deliver(record, 0, self))
            if await done:
                progress.delivered += 1
                self._journal(record, "delivered again")
                return
            if self.retries and record.attempt > self.retries:
                progress.failed += 1
                self._journal(record, f"failed after {record.attempt} attempts")
                return
            await clock.sleep_ms(self.backoff.delay_ms(record.attempt))

    def _record(self, message: ConsumerRecord[bytes, bytes]) -> Record:
        headers = tuple(message.headers or ())
        source = dead_letter_source(headers) if self.request.source == "deadLetter" else None
        now = self.context.clock.monotonic_ms()
        if source is None:
            return Record(message.topic, message.partition, message.offset, message.key,
                          message.value, headers, message.timestamp, now,
                          replay=self.progress.replay_id)
        original = tuple((k, v) for k, v in headers if not k.startswith(DLT_PREFIX))
        # the original timestamp, for the original webhook-id (signing.py); a dead letter
        # written before `dlt-timestamp-ms` existed has only its own
        stamp = message.timestamp if source.timestamp_ms is None else source.timestamp_ms
        return Record(source.topic, source.partition, source.offset, message.key,
                      message.value, original, stamp, now, replay=self.progress.replay_id)

    def _journal(self, record: Record, reason: str) -> None:
        self.context.emit(Event(
            type="replayed", ts_ms=self.context.clock.wall_ms(),
            subscription=self.progress.subscription, topic=record.topic,
            partition=record.partition, offset=record.offset, attempt=record.attempt,
            reason=f"{self.progress.replay_id}: {reason}"))


def _coords(record: Record) -> tuple[str, int, int]:
    return record.topic, record.partition, record.offset
