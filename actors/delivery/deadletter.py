"""DeadLetterActor: owns the subscription's dead-letter producer (acks=all).

A record that used up its retries is produced to `deadLetterTopic` with its key, value
and headers, plus headers saying where it came from and why it was given up. The
partition actor is told `DeadLettered` only after the broker acknowledged the write,
so the commit position never passes a record that is neither delivered nor safely
dead-lettered. A failed produce is retried with a capped backoff, never dropped; every
failure is logged and journaled (`dead_letter_failed`), since a record that can never be
written (too large for the topic) holds its partition's commits until someone acts.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaProducer

from actors.shared.messages import DeadLettered, Record
from runtime.host.journal import Event
from runtime.kafka import make_producer
from runtime.kernel.actor import Actor

log = logging.getLogger(__name__)
RETRY_CAP_S = 5.0


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """Partition -> dead-letter actor: produce `record` to the dead-letter topic."""

    record: Record
    reason: str
    status: int | None
    epoch: int
    reply_to: Actor


def dead_letter_headers(message: DeadLetter) -> list[tuple[str, bytes]]:
    record = message.record
    extra = {
        "dlt-reason": message.reason,
        "dlt-topic": record.topic,
        "dlt-partition": str(record.partition),
        "dlt-offset": str(record.offset),
        "dlt-attempts": str(record.attempt),
        "dlt-status": "" if message.status is None else str(message.status),
    }
    return [*record.headers, *((k, v.encode()) for k, v in extra.items())]


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

    async def handle(self, message: Any) -> None:
        if not isinstance(message, DeadLetter):
            raise TypeError(f"{self.path}: unexpected message {message!r}")
        self.spawn(self._produce(message), name=f"{self.path}:dlt")

    async def _produce(self, message: DeadLetter) -> None:
        assert self._producer is not None
        record, delay = message.record, 0.1
        while True:
            try:
                await self._producer.send_and_wait(
                    self.topic, record.value, key=record.key,
                    headers=dead_letter_headers(message))
                break
            except Exception as exc:  # never dropped: retried, loudly, until it is written
                log.error("%s: dead-letter produce of %s-%d@%d failed (%r); retrying in "
                          "%.1fs", self.path, record.topic, record.partition, record.offset,
                          exc, delay)
                self.context.emit(Event(
                    type="dead_letter_failed", ts_ms=self.context.clock.wall_ms(),
                    topic=record.topic, partition=record.partition, offset=record.offset,
                    reason=repr(exc)))
                await asyncio.sleep(delay)
                delay = min(delay * 2, RETRY_CAP_S)
        message.reply_to.tell_system(DeadLettered(record, message.epoch))

    def __repr__(self) -> str:
        return f"<DeadLetterActor {self.path} topic={self.topic} tasks={len(self._tasks)}>"
