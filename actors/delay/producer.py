"""DelayProducer: put records on the delay queue, with or without the runtime.

    levels = [DelayLevel(name="1s", delay_ms=1000, topics=["delay.1s"]),
              DelayLevel(name="1m", delay_ms=60_000, topics=["delay.1m"])]
    async with DelayProducer("127.0.0.1:9092", levels) as delay:
        await delay.send("orders.timeout", b"order-17", key=b"17", delay_ms=90_000)

The record goes to a topic of the largest level whose delay_ms <= the requested delay,
with `delay-target` and an absolute `delay-due-ms` (epoch ms), so the delay actors of any
runtime instance forward it when due, cascading through larger levels if needed. A delay
of 0, a due time in the past, or a delay shorter than the smallest level goes to the
smallest level too (not straight to the target): one path for every record, and its
lateness is one hop through Kafka (a few ms), not the level's delay, because the due time
travels with the record.

`runtime.delay.send(...)` is this same call on the runtime's own producer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from aiokafka import AIOKafkaProducer
from aiokafka.structs import RecordMetadata

from actors.delay.book import ROUTING_HEADERS, fitting_level, pick_topic, routing_headers
from runtime.errors import UsageError
from runtime.host.config import DelayLevel
from runtime.kafka import make_producer, valid_topic
from runtime.kernel.clock import Clock, RealClock

UserHeaders = Sequence[tuple[str, bytes]] | None


class DelayProducer:
    """An acks=all producer that routes records into the delay levels. Start it (or use
    `async with`) before `send`; `stop()` is idempotent."""

    def __init__(self, bootstrap: str, levels: Sequence[DelayLevel], *,
                 clock: Clock | None = None, **producer_kwargs: object) -> None:
        if not levels:
            raise UsageError("DelayProducer needs at least one DelayLevel "
                             "(the [[delay.levels]] of the runtime that forwards them)")
        self.bootstrap = bootstrap
        self.levels = sorted(levels, key=lambda level: level.delay_ms)
        self.clock = clock or RealClock()
        self._level_topics = frozenset(t for level in levels for t in level.topics)
        self._settings = {"acks": "all", "enable_idempotence": True, **producer_kwargs}
        self._producer: AIOKafkaProducer | None = None
        self._sequence = 0
        self._sent = 0

    async def start(self) -> None:
        if self._producer is not None:
            raise UsageError("DelayProducer.start() called twice")
        producer = make_producer(self.bootstrap, **self._settings)
        await producer.start()
        self._producer = producer

    async def stop(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            await producer.stop()

    async def __aenter__(self) -> DelayProducer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- sending -----------------------------------------------------------------------
    async def send(self, target: str, value: bytes | None, key: bytes | None = None,
                   headers: UserHeaders = None, delay_ms: int | None = None,
                   due_ms: int | None = None) -> RecordMetadata:
        """Deliver `value` to `target` after `delay_ms` (or at epoch ms `due_ms`).

        Returns once the level topic acknowledged the record (acks=all).
        """
        ack = await self.submit(target, value, key, headers, delay_ms, due_ms)
        return await ack

    async def submit(self, target: str, value: bytes | None, key: bytes | None = None,
                     headers: UserHeaders = None, delay_ms: int | None = None,
                     due_ms: int | None = None) -> asyncio.Future[RecordMetadata]:
        """Like `send`, but return as soon as the record is queued; await the returned
        future for the acknowledgement (many records in flight: high throughput)."""
        if self._producer is None:
            raise UsageError("DelayProducer is not started: use `async with DelayProducer"
                             "(...) as delay:` or `await delay.start()`")
        topic, all_headers = self.route(target, key, headers, delay_ms, due_ms)
        self._sent += 1
        future: asyncio.Future[RecordMetadata] = await self._producer.send(
            topic, value, key=key, headers=all_headers)
        return future

    def route(self, target: str, key: bytes | None, headers: UserHeaders,
              delay_ms: int | None, due_ms: int | None) -> tuple[str, list[tuple[str, bytes]]]:
        """The level topic and headers for a record (no I/O; raises `UsageError`)."""
        due = self._due_ms(delay_ms, due_ms)
        self._check(target, headers)
        level = fitting_level(due - self.clock.wall_ms(), self.levels)
        self._sequence += 1
        topic = pick_topic(level, key, self._sequence)
        return topic, [*(headers or ()), *routing_headers(target, due)]

    def _due_ms(self, delay_ms: int | None, due_ms: int | None) -> int:
        if (delay_ms is None) == (due_ms is None):
            raise UsageError("pass exactly one of delay_ms= (relative) or due_ms= "
                             "(absolute epoch ms)")
        if delay_ms is not None:
            if delay_ms < 0:
                raise UsageError(f"delay_ms must be >= 0, got {delay_ms}")
            return self.clock.wall_ms() + delay_ms
        assert due_ms is not None
        if due_ms < 0:
            raise UsageError(f"due_ms must be an epoch time in ms (>= 0), got {due_ms}")
        return due_ms

    def _check(self, target: str, headers: UserHeaders) -> None:
        if not valid_topic(target):
            raise UsageError(f"target {target!r} is not a valid Kafka topic name")
        if target in self._level_topics:
            raise UsageError(f"target {target!r} is a delay level topic; pass the topic the "
                             "record should finally reach")
        for name, _ in headers or ():
            if name in ROUTING_HEADERS:
                raise UsageError(f"header {name!r} is set by the delay queue; use target=, "
                                 "delay_ms= or due_ms= instead")

    def __repr__(self) -> str:
        state = "started" if self._producer is not None else "stopped"
        return (f"<DelayProducer {state} levels={[lv.name for lv in self.levels]} "
                f"sent={self._sent}>")
