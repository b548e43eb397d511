"""The pure parts of batched pushes: the JSON body and the per-partition queues."""

from __future__ import annotations

import base64
import json

import pytest

from actors.delivery.document.subscription import decode_consumer
from actors.delivery.egress.batching import PartitionQueues, batch_body, record_json
from actors.delivery.errors import InvalidSubscription
from actors.shared.messages import Record


def record(offset: int, key: bytes | None = b"k", value: bytes | None = b"v") -> Record:
    return Record("t", 3, offset, key, value, (("h", b"x"), ("bin", b"\xff")), 1700, 0)


def test_text_stays_text_and_other_bytes_become_base64() -> None:
    out = record_json(record(5, key=b"\xc3\x28", value="héllo".encode()))
    assert out["value"] == "héllo" and "valueEncoding" not in out
    assert out["keyEncoding"] == "base64"
    assert base64.b64decode(str(out["key"])) == b"\xc3\x28"
    assert out["headers"] == [{"key": "h", "value": "x"},
                              {"key": "bin", "value": "/w==", "valueEncoding": "base64"}]


def test_missing_key_and_value_are_null() -> None:
    out = record_json(record(1, key=None, value=None))
    assert out["key"] is None and out["value"] is None


def test_the_body_lists_records_in_the_order_given() -> None:
    body = json.loads(batch_body([record(1), record(2)]))
    assert [(r["topic"], r["partition"], r["offset"], r["timestamp"])
            for r in body["records"]] == [("t", 3, 1, 1700), ("t", 3, 2, 1700)]


def test_take_serves_one_partition_at_a_time_oldest_first() -> None:
    queues: PartitionQueues[int] = PartitionQueues()
    for i in range(5):
        queues.append(("a", 0), i)
    queues.append(("b", 0), 100)
    assert queues.take(3) == [0, 1, 2]
    assert queues.take(3) == [100]  # round robin: b waited since before a's rest
    assert queues.take(3) == [3, 4]
    assert queues.take(3) == [] and len(queues) == 0


def test_take_more_adds_to_a_lingering_batch_of_that_partition_only() -> None:
    queues: PartitionQueues[int] = PartitionQueues()
    queues.append(("a", 0), 1)
    assert queues.take(10) == [1]
    queues.append(("b", 0), 7)
    queues.append(("a", 0), 2)
    assert queues.take_more(("a", 0), 9) == [2]
    assert queues.waiting(("a", 0)) == 0 and len(queues) == 1
    assert queues.take(10) == [7]


def test_a_batch_needs_a_method_with_a_body() -> None:
    doc = {"id": "x", "group": {"id": "g"}, "broker": "Kafka", "topics": [{"name": "t"}],
           "subscriptionMethod": {"uri": "http://h/x", "method": "GET", "batchSize": 5}}
    with pytest.raises(InvalidSubscription, match="batchSize"):
        decode_consumer(doc)
