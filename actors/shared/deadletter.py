"""One dead-letter header scheme, for every record hookstream gives up on.

A dead-lettered record keeps its key, value and headers (a fixed record can be replayed
as is) and gains, after them:

    dlt-reason      why it was given up (UTF-8 text)
    dlt-topic       the topic it was read from
    dlt-partition   its partition (ASCII decimal)
    dlt-offset      its offset (ASCII decimal)
    dlt-timestamp-ms    its timestamp (epoch ms, ASCII decimal): a replay pushes it with
                    the `webhook-id` its first pushes had
    dlt-attempts    delivery attempts made (webhook delivery only)
    dlt-status      the last HTTP status, empty when there was none: a timeout or a
                    connection error (webhook delivery only)
    dlt-value-dropped   only on a dead letter written without its value (an empty one)
                    because the record was too large to write with it: the size of the
                    value that was dropped, in bytes (ASCII decimal)

The delay queue wrote its own names before: `delay-error`, `delay-source-topic`,
`delay-source-partition`, `delay-source-offset`. It writes them too, after the `dlt-*`
ones, for one release, so readers have time to move; `dead_letter_source` reads both.

Poison records (issue 13). A record too large for the producer or the broker is written
to the dead-letter topic without its value (an empty value, never null: a null value with
a key is a tombstone in a compacted topic, and aiokafka refuses a record with neither),
marked `dlt-value-dropped`, the reason saying why. One refused even then (its key or
headers alone are too large) is dropped: journaled, counted and logged, and its partition
moves on. Only size refusals (`TOO_LARGE`) take this path: any other failed dead-letter
write is retried, since an outage or a missing topic passes and dropping would lose data
that could still be written.

Once per record (`DeadLetterLedger`): a partition actor that restarts while (or after) its
record's dead letter is written gives the record up again; the ledger answers with the
first write instead of writing it twice.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, TypeVar

from aiokafka.errors import MessageSizeTooLargeError, RecordListTooLargeError

from actors.shared.messages import Record

REASON = "dlt-reason"
TOPIC = "dlt-topic"
PARTITION = "dlt-partition"
OFFSET = "dlt-offset"
ATTEMPTS = "dlt-attempts"
STATUS = "dlt-status"
VALUE_DROPPED = "dlt-value-dropped"
TIMESTAMP = "dlt-timestamp-ms"
REASON_LIMIT: Final = 1000  # characters of a reason we compose (exception texts can be long)

TOO_LARGE: Final = (MessageSizeTooLargeError, RecordListTooLargeError)
"""What the producer (at once, from `send`) or the broker (in the acknowledgement) answers
for a record too large to write: the errors that belong to the record itself."""

LEGACY_DELAY_REASON = "delay-error"
LEGACY_DELAY_TOPIC = "delay-source-topic"
LEGACY_DELAY_PARTITION = "delay-source-partition"
LEGACY_DELAY_OFFSET = "delay-source-offset"

# (reason, topic, partition, offset) in each scheme, the current one first
_SCHEMES = (
    (REASON, TOPIC, PARTITION, OFFSET),
    (LEGACY_DELAY_REASON, LEGACY_DELAY_TOPIC, LEGACY_DELAY_PARTITION, LEGACY_DELAY_OFFSET),
)


@dataclass(frozen=True, slots=True)
class Attempts:
    """What webhook delivery knows about a record it gives up: how often it tried, and the
    last HTTP status (None: no response)."""

    count: int
    status: int | None


def dead_letter_headers(record: Record, reason: str, attempts: Attempts | None = None, *,
                        legacy_delay: bool = False, value_dropped: bool = False
                        ) -> list[tuple[str, bytes]]:
    """`record`'s headers plus where it came from and why it was given up (and, with
    `value_dropped`, the size of the value left out)."""
    topic, partition, offset = record.coordinates()  # a retry-topic record: the original
    extra = [(REASON, reason), (TOPIC, topic), (PARTITION, str(partition)),
             (OFFSET, str(offset)), (TIMESTAMP, str(record.original_timestamp_ms()))]
    if attempts is not None:
        status = "" if attempts.status is None else str(attempts.status)
        extra += [(ATTEMPTS, str(attempts.count)), (STATUS, status)]
    if value_dropped:
        extra.append((VALUE_DROPPED, str(len(record.value or b""))))
    if legacy_delay:
        extra += [(LEGACY_DELAY_REASON, reason), (LEGACY_DELAY_TOPIC, topic),
                  (LEGACY_DELAY_PARTITION, str(partition)),
                  (LEGACY_DELAY_OFFSET, str(offset))]
    return [*record.headers, *((name, value.encode()) for name, value in extra)]


def value_dropped_reason(reason: str, refused: BaseException) -> str:
    """The reason written on a dead letter that goes without its value."""
    return f"{reason}; value dropped: too large to write ({refused!r})"[:REASON_LIMIT]


def dropped_reason(topic: str, refused: BaseException) -> str:
    """The reason journaled for a record dropped because even its value-less dead letter
    was refused."""
    return (f"dropped: not written to {topic}, too large even without its value "
            f"({refused!r}); its partition moved on")[:REASON_LIMIT]


@dataclass(frozen=True, slots=True)
class DeadLetterSource:
    """Where a dead-lettered record was read and why it was given up."""

    topic: str
    partition: int
    offset: int
    reason: str
    attempts: int | None = None
    status: int | None = None
    timestamp_ms: int | None = None


def dead_letter_source(headers: Iterable[tuple[str, bytes | None]]) -> DeadLetterSource | None:
    """The source a dead letter names, in either scheme (`dlt-*` first, then the delay
    queue's legacy names); None when it names none. Of a repeated header the last counts:
    ours come after the record's own (which may be a replayed dead letter's)."""
    values = {name: value for name, value in headers if value is not None}
    for reason, topic, partition, offset in _SCHEMES:
        source = _source(values, reason, topic, partition, offset)
        if source is not None:
            return source
    return None


def _source(values: dict[str, bytes], reason: str, topic: str, partition: str,
            offset: str) -> DeadLetterSource | None:
    name = _text(values.get(topic))
    number, position = _number(values.get(partition)), _number(values.get(offset))
    if not name or number is None or position is None:
        return None
    return DeadLetterSource(name, number, position, _text(values.get(reason)) or "",
                            _number(values.get(ATTEMPTS)), _number(values.get(STATUS)),
                            _number(values.get(TIMESTAMP)))


def _text(raw: bytes | None) -> str | None:
    return None if raw is None else raw.decode("utf-8", errors="replace")


def _number(raw: bytes | None) -> int | None:
    return int(raw) if raw is not None and raw.isdigit() else None


# -- once per record ------------------------------------------------------------------------

T = TypeVar("T")
LedgerKey = tuple[str, int, int, int]
LEDGER_CAPACITY: Final = 10_000


def ledger_key(record: Record) -> LedgerKey:
    """A record's identity: where it was read, and its timestamp, so that a record written
    at the same offset after the topic was recreated is not taken for an older one."""
    return record.topic, record.partition, record.offset, record.timestamp_ms


class WriteAbandoned(RuntimeError):
    """The first write of a dead letter ended without an answer (its producer stopped):
    whether it was written is unknown, so it is written again."""


class DeadLetterLedger:
    """The records whose dead letter this process wrote, or is writing: a record is
    dead-lettered once, even when the partition actor that gave it up restarts meanwhile
    and its successor, which starts again from the committed offset, gives it up again.

    Why here and not in the partition actor: a restarted partition actor is a new object
    (its state comes back from Kafka, never from the dead one, and the committed offset
    cannot say "dead-lettered above me"), but the actor that writes dead letters (the
    subscription's dead-letter actor, the delay queue's producer actor) outlives it, and
    sees every give-up of the partition. So the write is made idempotent per record
    there: the successor's give-up joins the first write, or is answered at once.

    Bounded: at most `capacity` records, the oldest forgotten first (`forget_below` drops
    what a commit has passed). Forgetting is safe: a record the ledger no longer knows is
    written again (a duplicate, never a loss). A write that fails is forgotten at once, so
    the record is written again by whoever gives it up next.
    """

    def __init__(self, capacity: int = LEDGER_CAPACITY) -> None:
        self.capacity = capacity
        self._entries: OrderedDict[LedgerKey, asyncio.Future[None]] = OrderedDict()
        self._by_partition: dict[tuple[str, int], set[LedgerKey]] = {}

    def find(self, record: Record) -> asyncio.Future[None] | None:
        """The first write of `record`'s dead letter (done: written), or None."""
        return self._entries.get(ledger_key(record))

    def track(self, record: Record, write: asyncio.Future[T]) -> asyncio.Future[None]:
        """`record`'s dead letter is being written; `write` resolves once the broker
        acknowledged it. Returns the ledger's entry: it resolves when `write` does, or
        fails like it (then the record is forgotten). Await it through `asyncio.shield`:
        whoever gave the record up may be cancelled, the write goes on."""
        key = ledger_key(record)
        entry: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry.add_done_callback(_retrieve)
        self._remember(key, entry)
        write.add_done_callback(lambda done: self._settle(key, entry, done))
        return entry

    def written(self, record: Record) -> asyncio.Future[None]:
        """`record`'s dead letter was written (acknowledged) just now."""
        entry: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry.set_result(None)
        self._remember(ledger_key(record), entry)
        return entry

    def forget_below(self, topic: str, partition: int, position: int) -> None:
        """A commit passed `position`: those records will never be given up again here.
        Costs the records remembered for this partition (dead letters above its commit)."""
        keys = self._by_partition.get((topic, partition))
        if keys:
            for key in [key for key in keys if key[2] < position]:
                self._forget(key)

    def _remember(self, key: LedgerKey, entry: asyncio.Future[None]) -> None:
        self._entries[key] = entry
        self._entries.move_to_end(key)
        self._by_partition.setdefault((key[0], key[1]), set()).add(key)
        while len(self._entries) > self.capacity:
            self._forget(next(iter(self._entries)))

    def _forget(self, key: LedgerKey) -> None:
        del self._entries[key]
        keys = self._by_partition[(key[0], key[1])]
        keys.discard(key)
        if not keys:
            del self._by_partition[(key[0], key[1])]

    def _settle(self, key: LedgerKey, entry: asyncio.Future[None],
                write: asyncio.Future[T]) -> None:
        if entry.done():
            return
        error = WriteAbandoned("the dead-letter write was abandoned") if write.cancelled() \
            else write.exception()
        if error is None:
            entry.set_result(None)
            return
        if self._entries.get(key) is entry:
            self._forget(key)
        entry.set_exception(error)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        pending = sum(1 for entry in self._entries.values() if not entry.done())
        return f"<DeadLetterLedger {len(self._entries)}/{self.capacity} writing={pending}>"


def _retrieve(entry: asyncio.Future[None]) -> None:
    """A failed entry nobody awaited is not an unretrieved error: its write's owner
    reported it already."""
    if not entry.cancelled():
        entry.exception()
