"""Batched pushes (`subscriptionMethod.batchSize` > 1): the pure parts.

One request carries up to `batchSize` records of one partition, body `application/json`:

    {"records": [{"topic", "partition", "offset", "key", "value", "timestamp", "headers"}]}

`key` and `value` are text when they are valid UTF-8, else base64 with `"keyEncoding":
"base64"` / `"valueEncoding": "base64"`; null when the record has none. `timestamp` is the
Kafka record timestamp in epoch ms. `headers` is a list of `{"key", "value"}` (Kafka
headers may repeat a name), a value not valid UTF-8 in base64 with `"valueEncoding"`.

A 2xx finishes every record of the batch; any failure fails every one of them (each is
retried or dead-lettered by its partition actor as if it had been pushed alone, and
retries due together are grouped again). Ordering is the partition actor's: a batch is
built from the records its window and lanes let start, so in `key` mode a batch holds
at most one record per lane and the next record of a key starts only once the batch
with the previous one finished (order within and across batches); in `partition` mode
one record is in flight at a time, so batches carry one record.

`PartitionQueues` groups what the egress accepted by partition, oldest partition first.
"""

from __future__ import annotations

import base64
from collections import deque
from collections.abc import Iterable
from typing import Generic, TypeVar

import msgspec

from actors.shared.messages import Record
from runtime.kernel.actor import Ref

BATCH_CONTENT_TYPE = "application/json"
Queued = tuple[Record, int, Ref, bool]
"""A record waiting for its batch: its epoch, who to answer, and whether it came alone
(a `Deliver`: a retry, or a replay, answered `Delivered`/`Failed` as it expects)."""
T = TypeVar("T")
_encoder = msgspec.json.Encoder()


def _text_or_base64(data: bytes) -> tuple[str, bool]:
    try:
        return data.decode(), False
    except UnicodeDecodeError:
        return base64.b64encode(data).decode(), True


def record_json(record: Record) -> dict[str, object]:
    """One record of a batch body (see the module docstring)."""
    out: dict[str, object] = {"topic": record.topic, "partition": record.partition,
                              "offset": record.offset, "timestamp": record.timestamp_ms}
    for name, data in (("key", record.key), ("value", record.value)):
        if data is None:
            out[name] = None
            continue
        out[name], encoded = _text_or_base64(data)
        if encoded:
            out[f"{name}Encoding"] = "base64"
    out["headers"] = [_header_json(name, value) for name, value in record.headers]
    return out


def _header_json(name: str, value: bytes) -> dict[str, str]:
    text, encoded = _text_or_base64(value)
    header = {"key": name, "value": text}
    if encoded:
        header["valueEncoding"] = "base64"
    return header


def batch_body(records: Iterable[Record]) -> bytes:
    return _encoder.encode({"records": [record_json(record) for record in records]})


class PartitionQueues(Generic[T]):
    """Items queued per partition key; `take` serves the partition whose queue became
    non-empty first (round robin), up to `limit` items of that one partition."""

    __slots__ = ("_order", "_queues", "_size")

    def __init__(self) -> None:
        self._queues: dict[tuple[str, int], deque[T]] = {}
        # made on first use: most outlets never batch, and an empty deque is 760 bytes
        self._order: deque[tuple[str, int]] | None = None
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def append(self, key: tuple[str, int], item: T) -> None:
        queue = self._queues.get(key)
        if queue is None:
            queue = self._queues[key] = deque()
            if self._order is None:
                self._order = deque()
            self._order.append(key)
        queue.append(item)
        self._size += 1

    def take(self, limit: int) -> list[T]:
        """Up to `limit` items of the oldest waiting partition, in arrival order."""
        order = self._order
        if not order:
            return []
        key = order.popleft()
        queue = self._queues[key]
        count = min(limit, len(queue))
        items = [queue.popleft() for _ in range(count)]
        if queue:
            order.append(key)
        else:
            del self._queues[key]
        self._size -= count
        return items

    def waiting(self, key: tuple[str, int]) -> int:
        queue = self._queues.get(key)
        return 0 if queue is None else len(queue)

    def take_more(self, key: tuple[str, int], limit: int) -> list[T]:
        """Up to `limit` more items of partition `key` (after a linger)."""
        queue = self._queues.get(key)
        if not queue:
            return []
        count = min(limit, len(queue))
        items = [queue.popleft() for _ in range(count)]
        if not queue:
            del self._queues[key]
            assert self._order is not None  # a queue was appended to
            self._order.remove(key)
        self._size -= count
        return items
