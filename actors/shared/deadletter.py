"""One dead-letter header scheme, for every record hookstream gives up on.

A dead-lettered record keeps its key, value and headers (a fixed record can be replayed
as is) and gains, after them:

    dlt-reason      why it was given up (UTF-8 text)
    dlt-topic       the topic it was read from
    dlt-partition   its partition (ASCII decimal)
    dlt-offset      its offset (ASCII decimal)
    dlt-attempts    delivery attempts made (webhook delivery only)
    dlt-status      the last HTTP status, empty when there was none: a timeout or a
                    connection error (webhook delivery only)

The delay queue wrote its own names before: `delay-error`, `delay-source-topic`,
`delay-source-partition`, `delay-source-offset`. It writes them too, after the `dlt-*`
ones, for one release, so readers have time to move; `dead_letter_source` reads both.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from actors.shared.messages import Record

REASON = "dlt-reason"
TOPIC = "dlt-topic"
PARTITION = "dlt-partition"
OFFSET = "dlt-offset"
ATTEMPTS = "dlt-attempts"
STATUS = "dlt-status"

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
                        legacy_delay: bool = False) -> list[tuple[str, bytes]]:
    """`record`'s headers plus where it came from and why it was given up."""
    extra = [(REASON, reason), (TOPIC, record.topic), (PARTITION, str(record.partition)),
             (OFFSET, str(record.offset))]
    if attempts is not None:
        status = "" if attempts.status is None else str(attempts.status)
        extra += [(ATTEMPTS, str(attempts.count)), (STATUS, status)]
    if legacy_delay:
        extra += [(LEGACY_DELAY_REASON, reason), (LEGACY_DELAY_TOPIC, record.topic),
                  (LEGACY_DELAY_PARTITION, str(record.partition)),
                  (LEGACY_DELAY_OFFSET, str(record.offset))]
    return [*record.headers, *((name, value.encode()) for name, value in extra)]


@dataclass(frozen=True, slots=True)
class DeadLetterSource:
    """Where a dead-lettered record was read and why it was given up."""

    topic: str
    partition: int
    offset: int
    reason: str
    attempts: int | None = None
    status: int | None = None


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
                            _number(values.get(ATTEMPTS)), _number(values.get(STATUS)))


def _text(raw: bytes | None) -> str | None:
    return None if raw is None else raw.decode("utf-8", errors="replace")


def _number(raw: bytes | None) -> int | None:
    return int(raw) if raw is not None and raw.isdigit() else None
