"""Messages of the delivery path. Small, typed, immutable where they travel far.

Those that travel once per record (a batch's hand-off, a push, its outcome) are msgspec
Structs: a frozen dataclass sets each field through `object.__setattr__`, about 0.5 us
for a four-field message against 0.05 us (issue 37: the CPU of a delivery)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import msgspec

from runtime.kernel.actor import Ref


@dataclass(frozen=True, slots=True)
class RetryInfo:
    """What a record carries once it failed with retry topics on (actors/delivery/
    retrytopic.py): the coordinates it was first read at (what its pushes, journal events
    and dead letter name), attempts made before this incarnation, when it first failed
    (epoch ms), and how many retry-topic delays it went through (0: not moved yet)."""

    topic: str
    partition: int
    offset: int
    attempts: int
    first_failure_ms: int
    stage: int = 0
    timestamp_ms: int = -1
    """The original record's timestamp (its `webhook-id` depends on it)."""


class Record(msgspec.Struct, gc=False):
    """One Kafka record as fetched. `fetched_ms` is monotonic (for added latency).

    A Struct, not a slotted dataclass (issue 37): one is made per fetched record and, at
    fan-out, per record and subscription (`clone`); a dataclass's `__init__` is Python
    code (0.6 us for these fields, msgspec's 0.1 us) and the collector tracked each
    record in flight. Untracked is safe: nothing a record holds refers back to it. Equal
    and shown as the dataclass was: every field but `memo`."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    timestamp_ms: int
    fetched_ms: int
    attempt: int = 0
    replay: str | None = None
    """The replay id when this push is a replay (the `QOH-Replay` header)."""
    retry: RetryInfo | None = None
    """Set on a record read back from a retry topic, or one that failed with retry topics
    on (actors/delivery/path/retrytopic.py)."""
    memo: dict[object, object] | None = None
    """Filter evaluation on this record (actors/delivery/document/filters.py): each distinct
    filter's result and the decoded JSON value; created by the first filter that looks.
    One slot, None for records no filter saw: a record may go to many subscriptions.
    Neither compared nor shown."""

    def _facts(self) -> tuple[object, ...]:
        return (self.topic, self.partition, self.offset, self.key, self.value, self.headers,
                self.timestamp_ms, self.fetched_ms, self.attempt, self.replay, self.retry)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Record):
            return NotImplemented
        return self._facts() == other._facts()

    def __repr__(self) -> str:
        return (f"Record(topic={self.topic!r}, partition={self.partition!r}, "
                f"offset={self.offset!r}, key={self.key!r}, value={self.value!r}, "
                f"headers={self.headers!r}, timestamp_ms={self.timestamp_ms!r}, "
                f"fetched_ms={self.fetched_ms!r}, attempt={self.attempt!r}, "
                f"replay={self.replay!r}, retry={self.retry!r})")

    def clone(self) -> Record:
        """A copy for another subscription's cursor (issue 24): the fetched facts and the
        filter memo are shared (each distinct filter is evaluated once per record, issue
        26), what a cursor changes (attempt, retry) starts afresh."""
        if self.memo is None:
            self.memo = {}  # created here so that every copy shares it
        return Record(self.topic, self.partition, self.offset, self.key, self.value,
                      self.headers, self.timestamp_ms, self.fetched_ms, memo=self.memo)

    def coordinates(self) -> tuple[str, int, int]:
        """Topic, partition and offset as pushed and journaled: the original ones for a
        record read back from a retry topic, else its own."""
        retry = self.retry
        if retry is not None and retry.stage:
            return retry.topic, retry.partition, retry.offset
        return self.topic, self.partition, self.offset

    def original_timestamp_ms(self) -> int:
        """The timestamp of the record as first read: its `webhook-id`'s last part."""
        retry = self.retry
        if retry is not None and retry.stage:
            return retry.timestamp_ms
        return self.timestamp_ms


class Batch(msgspec.Struct, frozen=True):
    """Consumer -> partition: newly fetched records of that partition, in offset order."""

    records: list[Record]
    highwater: int | None


@dataclass(frozen=True, slots=True)
class Highwater:
    """Consumer -> partition: the log's end, read while no batch comes (the partition's
    fetch is paused, or this partition actor is): its lag grows meanwhile (issue 25)."""

    highwater: int


class Deliver(msgspec.Struct, frozen=True):
    """Partition -> egress: push this record; the outcome goes back to `reply_to`."""

    record: Record
    epoch: int
    reply_to: Ref  # the partition actor


class Delivered(msgspec.Struct, frozen=True):
    """Egress -> partition: the endpoint answered 2xx."""

    record: Record
    epoch: int
    status: int
    latency_ms: float


class Failure(msgspec.Struct, frozen=True):
    """What a failed push got: non-2xx, timeout or connection error. One per request,
    shared by `Failed` (one record) and `BatchOutcome` (each record of a batch)."""

    status: int | None
    error: str
    latency_ms: float
    retry_after_ms: int | None = None
    give_up: bool = False
    """The receiver said so (`QOH-Action: dead-letter`, `runtime.DeadLetter`): no retry."""
    disable: bool = False
    """The endpoint answered 410 Gone: the subscription is disabled, the record is neither
    retried nor finished (it is delivered again after the operator resumes)."""
    local: bool = False
    """Not sent: the origin's circuit breaker was open. Counts as an attempt."""
    response: str | None = None
    """The start of the answer's body, secrets redacted: journaled with a dead letter."""


class Failed(msgspec.Struct, frozen=True):
    """Egress -> partition: pushing `record` failed; it may be retried."""

    record: Record
    epoch: int
    failure: Failure


class DeliverMany(msgspec.Struct, frozen=True):
    """Partition -> egress with `batchSize` > 1: push these records (one partition's) in
    batches; one message for all the records a dispatch starts."""

    records: list[Record]
    epoch: int
    reply_to: Ref


class BatchOutcome(msgspec.Struct, frozen=True):
    """Egress -> partition: one outcome for several records, handled each as if it came
    alone, then one dispatch: a batched request's answer, or the records of one cursor
    its single pushes delivered in one turn of the event loop (a burst: `failure` None).
    `failure` None is finished (2xx, or the receiver said skip)."""

    records: list[Record]
    epoch: int
    failure: Failure | None


@dataclass(frozen=True, slots=True)
class RetryDue:
    """Timer -> partition: time to try `record` again."""

    record: Record
    epoch: int


@dataclass(frozen=True, slots=True)
class DeadLettered:
    """Dead-letter produce finished (acknowledged) for `record`, given up for `reason`."""

    record: Record
    epoch: int
    reason: str = ""
    status: int | None = None  # the last attempt's, journaled with the dead letter
    response: str | None = None


class CommitTick(msgspec.Struct, eq=False, gc=False):
    """Timer -> partition: `autoCommitPeriodMs` elapsed. Made in C (a dataclass's
    generated `__init__` was a Python call per burst of a cursor, issue 37) and not
    tracked by the collector (it holds nothing: a plain class's instances were, one young
    object per cursor and burst for each young pass to walk); compared by identity."""


@dataclass(frozen=True, slots=True)
class FlowControl:
    """Partition -> consumer: pause (buffer full) or resume fetching this partition."""

    topic: str
    partition: int
    paused: bool
    epoch: int
    subscription: str = ""
    """The cursor's subscription, where one consumer serves several (issue 24)."""


class CommitRequest(msgspec.Struct, frozen=True, gc=False):
    """Partition -> consumer: commit `offset` (the next position) for this partition.
    A Struct: a cursor sends one or two per burst it finishes (issue 37, see above)."""

    topic: str
    partition: int
    offset: int
    epoch: int
    subscription: str = ""
    """The cursor's subscription, where one consumer serves several (issue 24)."""


@dataclass(frozen=True, slots=True)
class Rewind:
    """Partition actor -> consumer: seek my partition to its committed offset, then
    answer with `Assigned`. Sent by every new incarnation (first assignment or restart)."""

    topic: str
    partition: int
    epoch: int
    subscription: str = ""
    """The cursor's subscription, where one consumer serves several (issue 24)."""


@dataclass(frozen=True, slots=True)
class Assigned:
    """Consumer -> partition actor: fetching restarts at `position` (None: no commit yet).
    Batches that arrive before it were fetched for an older incarnation."""

    position: int | None
    epoch: int
    metadata: str = ""
    """The committed offset's metadata (exactly-once delay levels keep their finished
    offsets above the position there)."""
    pin: bool = True
    """With no position: commit where fetching starts, at the first batch (a later owner
    with nothing committed would not start there). False where it would: a group with
    nothing committed and `auto.offset.reset=earliest` starts at the log's start."""


@dataclass(frozen=True, slots=True)
class Drain:
    """Consumer -> partition actor (revoke, unsubscribe, shutdown): take no new work, finish
    what can finish before `deadline_ms` (monotonic), then resolve `done` with the position
    the consumer should commit (None: nothing for the consumer to commit)."""

    deadline_ms: int
    done: asyncio.Future[int | None]
    keep: bool = False
    """Hold, do not give up: the buffered records stay (a rebalance may give the partition
    back; `Resume` then carries on without fetching them again; issue 32, item 6)."""


@dataclass(frozen=True, slots=True)
class Resume:
    """Consumer -> partition actor: a drain that kept its records is over; carry on."""


@dataclass(frozen=True, slots=True)
class DrainDeadline:
    """Timer -> partition actor: the drain deadline passed."""


@dataclass(frozen=True, slots=True)
class StatusQuery:
    """Asked (`Actor.ask_nowait`) of an actor of a subscription's tree for the status API
    and readiness: the reply is the status struct its owner defines and builds in its
    handler (`PartitionStatus`, `MemberStatus`: actors/delivery/path/status.py;
    `OutletStatus`: actors/delivery/egress/status.py). `subscription`: asked of an actor
    that serves many (the instance member), whose part is wanted."""

    subscription: str | None = None
