"""DeadLetterActor: owns the subscription's dead-letter producer (acks=all, idempotent).

A record that used up its retries is produced to `deadLetterTopic` with its key, value
and headers, plus headers saying where it came from and why it was given up (`dlt-*`,
the scheme of actors/shared/deadletter.py, with the attempts and the last status). The
partition actor is told `DeadLettered` only after the broker acknowledged the write,
so the commit position never passes a record that is neither delivered nor safely
dead-lettered.

A failed write, by its cause (issue 13: a poison record never blocks forever):

- too large (`TOO_LARGE`, from the producer at once or from the broker): written again
  without its value (empty, with `dlt-value-dropped` and the reason); refused even so (its
  key or headers alone are too large): dropped. A dropped record is logged, journaled
  (`dead_letter_failed` with a reason starting "dropped:") and counted
  (`hookstream_dead_letter_dropped_total`), and the partition is told `DeadLettered`: it
  moves on, since no retry can ever make that record fit.
- anything else (broker unreachable, topic missing, not authorised): retried with a capped
  backoff, never dropped, logged and journaled (`dead_letter_failed`) each time. Those
  pass when the cluster or its configuration is fixed; meanwhile the partition's commit
  position waits at the record (the stall watchdog names it in `/readyz`).

Once per record (the ledger of sidetopic.py, the base it shares with the retry-topic
actor): a record given up again by a restarted partition actor gets the first write's
answer. The producer is idempotent as well, so its own retries of one send never write a
record twice either.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

from aiokafka import AIOKafkaProducer

from actors.delivery.path.sidetopic import SideTopicActor
from actors.shared.deadletter import (
    TOO_LARGE,
    Attempts,
    dead_letter_headers,
    dropped_reason,
    value_dropped_reason,
)
from actors.shared.messages import DeadLettered, Record
from runtime.host.metrics import Registry, Value
from runtime.kafka import make_producer
from runtime.kernel import Ref

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class WriteDeadLetter:
    """Partition -> dead-letter actor: write `record` to the dead-letter topic (not to be
    confused with `runtime.DeadLetter`, what an in-process handler raises to give up)."""

    record: Record
    reason: str
    status: int | None
    epoch: int
    reply_to: Ref  # the partition actor
    response: str | None = None  # the last answer's start, redacted: for the journal

    def headers(self, *, value_dropped: bool = False) -> list[tuple[str, bytes]]:
        """The record's headers plus the `dlt-*` ones (actors/shared/deadletter.py)."""
        record = self.record
        return dead_letter_headers(record, self.reason, Attempts(record.attempt, self.status),
                                   value_dropped=value_dropped)


class DeadLetterActor(SideTopicActor[WriteDeadLetter]):
    request = WriteDeadLetter

    def __init__(self, name: str, bootstrap: str, topic: str, *,
                 subscription: str | None = None, metrics: Registry | None = None) -> None:
        super().__init__(name, topic, subscription)
        self.bootstrap = bootstrap
        self.dropped = 0  # records not even written without their value (this incarnation)
        self._m_dropped: Value | None = None
        if metrics is not None:
            self._m_dropped = metrics.counter(
                "hookstream_dead_letter_dropped_total",
                "Records given up that could not be written to the dead-letter topic even "
                "without their value (too large): journaled and skipped",
            ).labels(subscription=subscription or "")
        self._producer: AIOKafkaProducer | None = None

    async def on_start(self) -> None:
        self._producer = make_producer(self.bootstrap, acks="all", enable_idempotence=True)
        await self._producer.start()

    async def on_stop(self) -> None:
        if self._producer is not None:
            await self._producer.stop()

    def answer(self, message: WriteDeadLetter) -> DeadLettered:
        return DeadLettered(message.record, message.epoch, message.reason, message.status,
                            message.response)

    async def write(self, message: WriteDeadLetter) -> None:
        record = message.record
        refused = await self._write(record, record.value, message.headers())
        if refused is not None and record.value:
            self.journal_failure(record, f"too large for {self.topic} ({refused!r}): "
                                 "writing it without its value")
            reason = value_dropped_reason(message.reason, refused)
            headers = replace(message, reason=reason).headers(value_dropped=True)
            refused = await self._write(record, b"", headers)
        if refused is not None:
            self._drop(record, refused)

    async def _write(self, record: Record, value: bytes | None,
                     headers: list[tuple[str, bytes]]) -> BaseException | None:
        """Write one form of a dead letter: None once acknowledged, the error when it is
        too large; every other error is retried until it passes."""
        producer = self._producer
        assert producer is not None
        try:
            await self.until_written(record, lambda: producer.send_and_wait(
                self.topic, value, key=record.key, headers=headers), final=TOO_LARGE)
        except TOO_LARGE as exc:
            refused: BaseException = exc  # aiokafka's errors are untyped
            return refused
        return None

    def _drop(self, record: Record, refused: BaseException) -> None:
        """The explicit rule for a record that cannot be dead-lettered at all (see the
        module docstring): journaled, counted, logged, and the partition moves on."""
        reason = dropped_reason(self.topic, refused)
        log.error("%s: %s-%d@%d %s", self.path, record.topic, record.partition,
                  record.offset, reason)
        self.journal_failure(record, reason)
        self.dropped += 1
        if self._m_dropped is not None:
            self._m_dropped.inc()

    def __repr__(self) -> str:
        return (f"<DeadLetterActor {self.path} topic={self.topic} tasks={len(self._tasks or ())} "
                f"{self.ledger!r} dropped={self.dropped}>")
