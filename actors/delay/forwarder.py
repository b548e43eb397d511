"""Forwarding for the delay queue: the shared at-least-once producer and batched produce.

`ForwardProducerActor` owns the acks=all (idempotent) producer that every at-least-once
delay actor forwards with. `Forwarder` produces a tick's outputs with as few calls as it
can and settles their acknowledgements; exactly-once delay actors use it too, on their
own transactional producer (actors/delay/actor.py).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from dataclasses import dataclass

from aiokafka import AIOKafkaProducer
from aiokafka.errors import (
    InvalidTopicError,
    KafkaError,
    KafkaTimeoutError,
    MessageSizeTooLargeError,
    RecordListTooLargeError,
    UnknownTopicOrPartitionError,
)
from aiokafka.partitioner import DefaultPartitioner
from aiokafka.structs import RecordMetadata

from actors.delay.book import Output
from actors.shared.errors import UnexpectedMessage
from runtime.kafka import make_producer
from runtime.kernel import Actor
from runtime.kernel.errors import ActorDeadError

_PARTITIONER = DefaultPartitioner()
BATCH_BYTES = 256 * 1024  # per produce batch; below Kafka's default 1 MB message limit
SMALL_FLUSH = 64  # up to this many records per target partition: send() each (see Forwarder)

# A forward refused for reasons that belong to that record and its target: dead-letter it.
RECORD_ERRORS: tuple[type[KafkaError], ...] = (
    InvalidTopicError, MessageSizeTooLargeError, RecordListTooLargeError,
    UnknownTopicOrPartitionError,
)
# Metadata for the target never came (a topic that does not exist and is not created).
# Only when asking for the target's partitions: a timed-out *ack* may be a broker outage,
# and then the dead-letter write fails as well, which crashes the actor (retried later).
TARGET_ERRORS: tuple[type[KafkaError], ...] = (*RECORD_ERRORS, KafkaTimeoutError)


# -- the shared at-least-once producer ------------------------------------------------------


class ForwardProducerActor(Actor):
    """Owns the acks=all producer that at-least-once delay actors forward with.

    Delay actors produce with it directly (a message per record would cost more than the
    send); an aiokafka producer is safe to share between the tasks of one event loop.
    """

    def __init__(self, name: str, bootstrap: str) -> None:
        super().__init__(name)
        self.bootstrap = bootstrap
        self._producer: AIOKafkaProducer | None = None

    @property
    def producer(self) -> AIOKafkaProducer:
        if self._producer is None:
            raise ActorDeadError(f"{self.path} has no running producer")
        return self._producer

    async def on_start(self) -> None:
        # idempotent: a retried produce never writes a record twice (into a level topic,
        # that would be a duplicate forward later, even on exactly-once levels)
        self._producer = make_producer(self.bootstrap, acks="all", linger_ms=0,
                                       max_batch_size=BATCH_BYTES, enable_idempotence=True,
                                       client_id="hookstream-delay-forward")
        await self._producer.start()

    async def on_stop(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            await producer.stop()

    async def handle(self, message: object) -> None:
        raise UnexpectedMessage(self.path, message)


# -- batched produce -----------------------------------------------------------------------


@dataclass(slots=True)
class Flight:
    """Outputs sent together, and the acknowledgement they wait for."""

    outputs: list[Output]
    ack: asyncio.Future[RecordMetadata]


class Forwarder:
    """Produces outputs with one `send_batch` per target partition and call, instead of a
    `send()` per record: the per-record future and accumulator work was the largest cost
    of forwarding. Keys are partitioned like `send()` does (Kafka's murmur2 default
    partitioner); records without a key share one random partition per call.

    Small flushes (a timer tick under steady load) still use `send()`: `send_batch` waits
    until the partition's previous batch left, which under load is a broker round trip
    during which the actor could forward nothing; `send()` joins the pending batch.

    `settle` awaits the acks. A batch refused for a record-level reason is retried one
    record at a time, and a record refused on its own is dead-lettered (`dead_letter`
    builds that output); any other error propagates and crashes the owner.
    """

    def __init__(self, dead_letter: Callable[[Output, str], Output]) -> None:
        self._dead_letter = dead_letter

    async def send(self, producer: AIOKafkaProducer, outputs: list[Output]) -> list[Flight]:
        groups = await self._group(producer, outputs)
        flights: list[Flight] = []
        for (topic, partition), members in groups.items():
            if len(members) <= SMALL_FLUSH:
                flights += [await self._send_one(producer, out, partition) for out in members]
                continue
            batch, taken = producer.create_batch(), list[Output]()
            for out in members:
                if batch.append(key=out.record.key, value=out.record.value, timestamp=None,
                                headers=out.headers) is None:
                    flights.append(Flight(taken, await producer.send_batch(
                        batch, topic, partition=partition)))
                    batch, taken = producer.create_batch(), list[Output]()
                    # a first record always fits, however large; the broker may refuse it
                    batch.append(key=out.record.key, value=out.record.value, timestamp=None,
                                 headers=out.headers)
                taken.append(out)
            flights.append(Flight(taken, await producer.send_batch(
                batch, topic, partition=partition)))
        return flights

    @staticmethod
    async def _send_one(producer: AIOKafkaProducer, out: Output, partition: int) -> Flight:
        ack = await producer.send(out.topic, out.record.value, key=out.record.key,
                                  partition=partition, headers=out.headers)
        return Flight([out], ack)

    async def _group(self, producer: AIOKafkaProducer, outputs: list[Output]
                     ) -> dict[tuple[str, int], list[Output]]:
        known: dict[str, list[int]] = {}
        missing: dict[str, KafkaError] = {}  # one metadata wait per missing topic, not each
        keyless: dict[str, int] = {}
        groups: dict[tuple[str, int], list[Output]] = {}
        for out in outputs:
            try:
                if out.topic in missing:
                    raise missing[out.topic]
                partitions = await _partitions(producer, out.topic, known)
            except TARGET_ERRORS as exc:
                if out.kind == "dead_letter" or not await _topic_absent(producer, out.topic):
                    raise  # the broker is unreachable, or the dead-letter topic is: crash,
                    # and the successor retries from the last commit
                missing[out.topic] = exc
                out = self._dead_letter(out, f"forward failed: {exc!r}")
                partitions = await _partitions(producer, out.topic, known)
            key = out.record.key
            if key is None:
                partition = keyless.setdefault(out.topic, random.choice(partitions))
            else:
                partition = _PARTITIONER(key, partitions, partitions)
            groups.setdefault((out.topic, partition), []).append(out)
        return groups

    async def settle(self, producer: AIOKafkaProducer, flights: list[Flight]) -> list[Output]:
        """Await every ack; return what was written (dead letters replace refused ones)."""
        results = await asyncio.gather(*(f.ack for f in flights), return_exceptions=True)
        done: list[Output] = []
        for flight, result in zip(flights, results, strict=True):
            if not isinstance(result, BaseException):
                done += flight.outputs
            elif isinstance(result, RECORD_ERRORS):
                done += await self._one_by_one(producer, flight.outputs)
            else:
                raise result  # the owner crashes; its successor rewinds to the commit
        return done

    async def _one_by_one(self, producer: AIOKafkaProducer, outputs: list[Output]
                          ) -> list[Output]:
        done: list[Output] = []
        for out in outputs:
            try:
                await producer.send_and_wait(out.topic, out.record.value, key=out.record.key,
                                             headers=out.headers)
            except RECORD_ERRORS as exc:
                if out.kind == "dead_letter" or (
                        isinstance(exc, UnknownTopicOrPartitionError)
                        and not await _topic_absent(producer, out.topic)):
                    raise
                out = self._dead_letter(out, f"forward failed: {exc!r}")
                await producer.send_and_wait(out.topic, out.record.value, key=out.record.key,
                                             headers=out.headers)
            done.append(out)
        return done


async def _topic_absent(producer: AIOKafkaProducer, topic: str) -> bool:
    """True only when the broker answered and the topic is not there: a metadata timeout
    or a broker outage is not a reason to dead-letter a record."""
    try:
        cluster = await producer.client.fetch_all_metadata()
    except KafkaError:
        return False
    return topic not in cluster.topics()


async def _partitions(producer: AIOKafkaProducer, topic: str,
                      known: dict[str, list[int]]) -> list[int]:
    partitions = known.get(topic)
    if partitions is None:
        partitions = known[topic] = sorted(await producer.partitions_for(topic))
    return partitions
