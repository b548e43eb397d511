"""Non-blocking retries (issue 15): a record that used up its local retries is moved
aside through the delay queue to the subscription's retry topic, and its partition moves
on. `subscriptionMethod.retryTopics: {"topic": "orders.retry", "delaysMs": [1000, 60000]}`.

The path of a failing record:

1. Its first attempt and `retryBeforeCommit` local retries fail as usual (0: no local
   retry, since "retry forever" would never move anything aside).
2. It is written to the delay queue (`DelayProducer`, the config's `[[delay.levels]]`)
   aimed at the retry topic, due after `delaysMs[0]`, with the headers below. Once the
   broker acknowledged the write the record is finished in its partition, which commits
   past it and keeps delivering.
3. The subscription also consumes the retry topic. A record read back there is pushed
   with its original coordinates (`QOH-Topic`, `QOH-Partition`, `QOH-Message-Number`, and
   so the same `webhook-id`) and journaled under them. It gets one attempt per delay (as
   Spring Kafka's retry topics): on failure it moves to the next delay.
4. After the last delay's attempt fails it goes to the dead-letter topic (when there is
   none, it is journaled `dead_lettered` and skipped, as any give-up).

The state travels with the record, so it survives crashes and restarts:

    retry-topic, retry-partition, retry-offset   where it was first read
    retry-attempts      attempts made so far (ASCII decimal)
    retry-first-failure-ms   when its first attempt failed (epoch ms)
    retry-stage         delays taken so far, counting this one (1..len(delaysMs))

A crash between the delay-queue write and the commit writes it again (at least once: the
receiver may see it twice, with the same `webhook-id`); `RetryTopicActor` answers a
record moved aside twice by the same process with its first write (the dead-letter
ledger's scheme: both are a `SideTopicActor`, path/sidetopic.py).

Delays and levels: a delay fits when some `[[delay.levels]]` entry has `delay_ms` at most
the delay (the delay queue picks the largest such level; longer delays cascade). A
subscription with a delay that fits no level is refused, naming the level to add
(`check_levels`, actors/delivery/document/settings.py, with `with_retry_topic`: the
subscription as its readers see it).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from actors.delay.producer import DelayProducer
from actors.delivery.document.settings import RetryTopicSettings
from actors.delivery.path.sidetopic import SideTopicActor
from actors.shared.messages import Record, RetryInfo
from runtime.host.config import DelayLevel
from runtime.host.journal import Event
from runtime.host.metrics import Registry, Value
from runtime.kafka import create_topics
from runtime.kernel import Ref

TOPIC = "retry-topic"
PARTITION = "retry-partition"
OFFSET = "retry-offset"
ATTEMPTS = "retry-attempts"
FIRST_FAILURE = "retry-first-failure-ms"
STAGE = "retry-stage"
TIMESTAMP = "retry-timestamp-ms"  # the original record's: its webhook-id depends on it
HEADERS = frozenset({TOPIC, PARTITION, OFFSET, ATTEMPTS, FIRST_FAILURE, STAGE, TIMESTAMP})


# -- pure decisions -----------------------------------------------------------------------
def note_failure(record: Record, now_wall_ms: int) -> None:
    """Remember when a record first failed (the header travels from here on)."""
    if record.retry is None:
        record.retry = RetryInfo(record.topic, record.partition, record.offset, 0,
                                 now_wall_ms, timestamp_ms=record.timestamp_ms)


def moved_headers(record: Record) -> list[tuple[str, bytes]]:
    """The record's own headers (earlier retry-* ones replaced) and its retry state."""
    topic, partition, offset = record.coordinates()
    retry = record.retry
    first = retry.first_failure_ms if retry is not None else 0
    stage = (retry.stage if retry is not None else 0) + 1
    own = [(k, v) for k, v in record.headers if k not in HEADERS]
    extra = [(TOPIC, topic), (PARTITION, str(partition)), (OFFSET, str(offset)),
             (ATTEMPTS, str(record.attempt)), (FIRST_FAILURE, str(first)),
             (STAGE, str(stage)), (TIMESTAMP, str(record.original_timestamp_ms()))]
    return [*own, *((k, v.encode()) for k, v in extra)]


def read_retry(headers: Iterable[tuple[str, bytes | None]]) -> RetryInfo | None:
    """The retry state a record read back from the retry topic carries; None when the
    headers are missing or malformed (then it is delivered as a record of its own)."""
    values = {k: v for k, v in headers if k in HEADERS and v is not None}
    try:
        topic = values[TOPIC].decode()
        numbers = [int(values[name]) for name in (PARTITION, OFFSET, ATTEMPTS,
                                                  FIRST_FAILURE, STAGE)]
    except (KeyError, ValueError, UnicodeDecodeError):
        return None
    partition, offset, attempts, first, stage = numbers
    if not topic or min(numbers) < 0 or stage < 1:
        return None
    return RetryInfo(topic, partition, offset, attempts, first, stage,
                     _timestamp(values.get(TIMESTAMP)))


def _timestamp(raw: bytes | None) -> int:
    """`retry-timestamp-ms`, -1 when absent (moved before it was written) or malformed."""
    try:
        return int(raw) if raw is not None else -1
    except ValueError:
        return -1


# -- messages --------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class MoveAside:
    """Partition -> retry-topic actor: write `record` to the delay queue, due in
    `delay_ms`, aimed at the retry topic."""

    record: Record
    delay_ms: int
    reason: str
    epoch: int
    reply_to: Ref


@dataclass(frozen=True, slots=True)
class MovedAside:
    """Retry-topic actor -> partition: the write was acknowledged; finish the record."""

    record: Record
    delay_ms: int
    epoch: int


# -- the actor -------------------------------------------------------------------------
class RetryTopicActor(SideTopicActor[MoveAside]):
    """Owns the subscription's delay-queue producer (the rest is sidetopic.py's)."""

    request = MoveAside

    def __init__(self, name: str, bootstrap: str, levels: Sequence[DelayLevel],
                 retry: RetryTopicSettings, subscription: str, partitions: int = 3,
                 metrics: Registry | None = None) -> None:
        super().__init__(name, retry.topic, subscription)
        self._m_moved: Value | None = None
        if metrics is not None:
            self._m_moved = metrics.counter(
                "hookstream_retry_topic_moved_total",
                "Records moved to the retry topic through the delay queue (acknowledged)",
            ).labels(subscription=subscription)
        self.bootstrap = bootstrap
        self.partitions = partitions
        self.levels = list(levels)
        self.retry = retry
        self.moved = 0
        self._producer: DelayProducer | None = None

    async def on_start(self) -> None:
        # before the consumer starts (it subscribes to it): an existing topic is kept
        await create_topics(self.bootstrap, {self.topic: self.partitions})
        self._producer = DelayProducer(self.bootstrap, self.levels,
                                       clock=self.context.clock)
        await self._producer.start()

    async def on_stop(self) -> None:
        if self._producer is not None:
            await self._producer.stop()

    def answer(self, message: MoveAside) -> MovedAside:
        return MovedAside(message.record, message.delay_ms, message.epoch)

    async def write(self, message: MoveAside) -> None:
        producer, record = self._producer, message.record
        assert producer is not None
        headers = moved_headers(record)
        await self.until_written(record, lambda: producer.send(
            self.topic, record.value, key=record.key, headers=headers,
            delay_ms=message.delay_ms))
        self.moved += 1
        if self._m_moved is not None:
            self._m_moved.inc()

    def journal_failure(self, record: Record, reason: str) -> None:
        """Journaled under the record's original coordinates."""
        topic, partition, offset = record.coordinates()
        self.context.emit(Event(
            type="dead_letter_failed", ts_ms=self.context.clock.wall_ms(),
            subscription=self.subscription, topic=topic, partition=partition,
            offset=offset, attempt=record.attempt,
            reason=f"retry topic {self.topic}: {reason}"))

    def __repr__(self) -> str:
        return (f"<RetryTopicActor {self.path} topic={self.topic} "
                f"delays={list(self.retry.delays_ms)} moved={self.moved} {self.ledger!r}>")
