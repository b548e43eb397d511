"""Forwarding for the delay queue: the shared at-least-once producer and batched produce.

`ForwardProducerActor` owns the acks=all (idempotent) producer that every at-least-once
delay actor forwards with, and the ledger of their dead letters. `Forwarder` produces a
tick's outputs with as few calls as it can and settles their acknowledgements;
exactly-once delay actors use it too, on their own transactional producer
(actors/delay/actor.py).

Poison records (issue 13). A record refused for itself is dead-lettered; one too large to
write (`MessageSizeTooLargeError` straight from `send`, or from the broker) goes to the
dead-letter topic without its value, and, refused even so, is dropped: journaled and
counted by the delay actor, and its offset finished (actors/shared/deadletter.py has the
rule). None of it crashes the delay actor, whose successor would meet the same record.

Once per record. The ledger (`DeadLetterLedger`) lives in the producer actor, which
outlives a crashed delay actor: its successor starts again from the committed position,
which waits below records still waiting in the wheel, and gives up again the records its
predecessor already dead-lettered (or is dead-lettering: the send is in the producer
when the predecessor dies). Instead of a second write it joins the first. Exactly-once
levels need no ledger: an aborted transaction took its dead letters with it.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from aiokafka import AIOKafkaProducer
from aiokafka.errors import (
    InvalidTopicError,
    KafkaError,
    KafkaTimeoutError,
    UnknownTopicOrPartitionError,
)
from aiokafka.partitioner import DefaultPartitioner

from actors.delay.book import Output, smaller
from actors.shared.deadletter import TOO_LARGE, DeadLetterLedger
from actors.shared.errors import UnexpectedMessage
from runtime.kafka import make_producer
from runtime.kernel import Actor
from runtime.kernel.errors import ActorDeadError

T = TypeVar("T")
_PARTITIONER = DefaultPartitioner()
BATCH_BYTES = 256 * 1024  # per produce batch; below Kafka's default 1 MB message limit
SMALL_FLUSH = 64  # up to this many records per target partition: send() each (see Forwarder)

# A forward refused for reasons that belong to that record and its target: dead-letter it.
RECORD_ERRORS: tuple[type[KafkaError], ...] = (
    InvalidTopicError, *TOO_LARGE, UnknownTopicOrPartitionError,
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
        self.ledger = DeadLetterLedger()  # shared by the delay actors: see the module doc
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
    """Outputs sent together, and the acknowledgement they wait for. A `shared` one (a
    dead letter in the ledger) is awaited through `asyncio.shield`: if its delay actor is
    cancelled meanwhile, the write goes on and its successor learns how it ended."""

    outputs: list[Output]
    ack: Awaitable[object]
    shared: bool = False


def _done() -> asyncio.Future[None]:
    future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    future.set_result(None)
    return future


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
    builds that output), or written smaller, or dropped, when too large (`book.smaller`);
    any other error propagates and crashes the owner.

    With a `ledger` (at-least-once levels), a dead letter already written or being written
    for the same record is not sent again: its flight waits for the first write.
    """

    def __init__(self, dead_letter: Callable[[Output, str], Output]) -> None:
        self._dead_letter = dead_letter

    async def send(self, producer: AIOKafkaProducer, outputs: list[Output],
                   ledger: DeadLetterLedger | None = None) -> list[Flight]:
        flights: list[Flight] = []
        groups = await self._group(producer, outputs, ledger, flights)
        for (topic, partition), members in groups.items():
            if len(members) <= SMALL_FLUSH:
                flights += [await self._send_one(producer, out, partition, ledger)
                            for out in members]
                continue
            batch, taken = producer.create_batch(), list[Output]()
            for out in members:
                if batch.append(key=out.record.key, value=out.value, timestamp=None,
                                headers=out.headers) is None:
                    flights.append(_batch_flight(taken, await producer.send_batch(
                        batch, topic, partition=partition), ledger))
                    batch, taken = producer.create_batch(), list[Output]()
                    # a first record always fits, however large; the broker may refuse it
                    batch.append(key=out.record.key, value=out.value, timestamp=None,
                                 headers=out.headers)
                taken.append(out)
            flights.append(_batch_flight(taken, await producer.send_batch(
                batch, topic, partition=partition), ledger))
        return flights

    async def _send_one(self, producer: AIOKafkaProducer, out: Output, partition: int | None,
                        ledger: DeadLetterLedger | None) -> Flight:
        while True:
            try:
                ack = await producer.send(out.topic, out.value, key=out.record.key,
                                          partition=partition, headers=out.headers)
            except TOO_LARGE as exc:  # the producer refused it at once: over its size limit
                out, partition = self._refused(out, exc), None
                if out.kind == "dropped":
                    return Flight([out], _done())
                earlier = _earlier(out, ledger)
                if earlier is not None:
                    return earlier
                continue
            if ledger is not None and out.kind == "dead_letter":
                return Flight([out], ledger.track(out.record, ack), shared=True)
            return Flight([out], ack)

    def _refused(self, out: Output, refused: BaseException) -> Output:
        """What to write instead of `out`, refused for itself: its dead letter, or a
        smaller form of that dead letter (`dropped`: nothing to write)."""
        if out.kind != "dead_letter":
            return self._dead_letter(out, f"forward failed: {refused!r}")
        smaller_form = smaller(out, refused)
        assert smaller_form is not None  # a dropped output is never sent
        return smaller_form

    async def _group(self, producer: AIOKafkaProducer, outputs: list[Output],
                     ledger: DeadLetterLedger | None, flights: list[Flight]
                     ) -> dict[tuple[str, int], list[Output]]:
        """Outputs by target partition; dead letters the ledger knows go to `flights`."""
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
            earlier = _earlier(out, ledger)
            if earlier is not None:
                flights.append(earlier)
                continue
            key = out.record.key
            if key is None:
                partition = keyless.setdefault(out.topic, random.choice(partitions))
            else:
                partition = _PARTITIONER(key, partitions, partitions)
            groups.setdefault((out.topic, partition), []).append(out)
        return groups

    async def settle(self, producer: AIOKafkaProducer, flights: list[Flight],
                     ledger: DeadLetterLedger | None = None) -> list[Output]:
        """Await every ack; return what was written (dead letters replace refused ones)."""
        results = await asyncio.gather(
            *(asyncio.shield(f.ack) if f.shared else f.ack for f in flights),
            return_exceptions=True)
        done: list[Output] = []
        for flight, result in zip(flights, results, strict=True):
            if not isinstance(result, BaseException):
                done += flight.outputs
            elif isinstance(result, RECORD_ERRORS):
                done += await self._one_by_one(producer, flight.outputs, ledger)
            else:
                raise result  # the owner crashes; its successor rewinds to the commit
        return done

    async def _one_by_one(self, producer: AIOKafkaProducer, outputs: list[Output],
                          ledger: DeadLetterLedger | None) -> list[Output]:
        done: list[Output] = []
        for out in outputs:
            while out.kind != "dropped":
                try:
                    await producer.send_and_wait(out.topic, out.value, key=out.record.key,
                                                 headers=out.headers)
                except RECORD_ERRORS as exc:
                    if (out.kind == "dead_letter" and not isinstance(exc, TOO_LARGE)) or (
                            isinstance(exc, UnknownTopicOrPartitionError)
                            and not await _topic_absent(producer, out.topic)):
                        raise
                    out = self._refused(out, exc)
                    continue
                if ledger is not None and out.kind == "dead_letter":
                    ledger.written(out.record)
                break
            done.append(out)
        return done


def _earlier(out: Output, ledger: DeadLetterLedger | None) -> Flight | None:
    """The flight of a dead letter written (or being written) for this record before."""
    if ledger is None or out.kind != "dead_letter":
        return None
    entry = ledger.find(out.record)
    return None if entry is None else Flight([out], entry, shared=True)


def _batch_flight(outputs: list[Output], ack: asyncio.Future[T],
                  ledger: DeadLetterLedger | None) -> Flight:
    if ledger is None:
        return Flight(outputs, ack)
    dead = [out for out in outputs if out.kind == "dead_letter"]
    for out in dead:
        ledger.track(out.record, ack)
    return Flight(outputs, ack, shared=bool(dead))


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
