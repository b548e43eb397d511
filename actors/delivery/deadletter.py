"""DeadLetterActor: owns the subscription's dead-letter producer (acks=all).

A record that used up its retries is produced to `deadLetterTopic` with its key, value
and headers, plus headers saying where it came from and why it was given up (`dlt-*`,
the scheme of actors/shared/deadletter.py, with the attempts and the last status). The
partition actor is told `DeadLettered` only after the broker acknowledged the write,
so the commit position never passes a record that is neither delivered nor safely
dead-lettered. A failed produce is retried with a capped backoff, never dropped; every
failure is logged and journaled (`dead_letter_failed`), since a record that can never be
written (too large for the topic) holds its partition's commits until someone acts.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from aiokafka import AIOKafkaProducer

from actors.shared.deadletter import Attempts, dead_letter_headers
from actors.shared.errors import UnexpectedMessage
from actors.shared.messages import DeadLettered, Record
from runtime.host.journal import Event
from runtime.kafka import make_producer
from runtime.kernel import Actor, Ref

log = logging.getLogger(__name__)
RETRY_FIRST_MS = 100
RETRY_CAP_MS = 5000


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """Partition -> dead-letter actor: produce `record` to the dead-letter topic."""

    record: Record
    reason: str
    status: int | None
    epoch: int
    reply_to: Ref  # the partition actor

    def headers(self) -> list[tuple[str, bytes]]:
        """The record's headers plus the `dlt-*` ones (actors/shared/deadletter.py)."""
        record = self.record
        return dead_letter_headers(record, self.reason, Attempts(record.attempt, self.status))


class DeadLetterActor(Actor):
    mailbox_capacity = 1024

    def __init__(self, name: str, bootstrap: str, topic: str) -> None:
        super().__init__(name)
        self.bootstrap = bootstrap
        self.topic = topic
        self._producer: AIOKafkaProducer | None = None

    async def on_start(self) -> None:
        self._producer = make_producer(self.bootstrap, acks="all")
        await self._producer.start()

    async def on_stop(self) -> None:
        if self._producer is not None:
            await self._producer.stop()

    async def handle(self, message: object) -> None:
        if not isinstance(message, DeadLetter):
            raise UnexpectedMessage(self.path, message)
        self.spawn(self._produce(message), name=f"{self.path}:dlt")

    async def _produce(self, message: DeadLetter) -> None:
        assert self._producer is not None
        record, delay_ms = message.record, RETRY_FIRST_MS
        while True:
            try:
                await self._producer.send_and_wait(
                    self.topic, record.value, key=record.key, headers=message.headers())
                break
            except Exception as exc:  # never dropped: retried, loudly, until it is written
                log.error("%s: dead-letter produce of %s-%d@%d failed (%r); retrying in "
                          "%.1fs", self.path, record.topic, record.partition, record.offset,
                          exc, delay_ms / 1000)
                self.context.emit(Event(
                    type="dead_letter_failed", ts_ms=self.context.clock.wall_ms(),
                    topic=record.topic, partition=record.partition, offset=record.offset,
                    reason=repr(exc)))
                await self.context.clock.sleep_ms(delay_ms)
                delay_ms = min(delay_ms * 2, RETRY_CAP_MS)
        message.reply_to.tell_system(DeadLettered(record, message.epoch))

    def __repr__(self) -> str:
        return f"<DeadLetterActor {self.path} topic={self.topic} tasks={len(self._tasks)}>"
