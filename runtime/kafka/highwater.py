"""The high watermark of partitions nobody fetches right now (issue 25, item 3).

A consumer learns a partition's high watermark from its fetch responses only, and a
paused partition is not fetched: its lag froze at the value of the last fetch while the
log kept growing. ListOffsets ("latest") would answer, but the embedded broker gets it
wrong after multi-record batches (runtime/kafka/compat.py quirk 2). So the high watermark
is read the way the fetch itself reads it: a Fetch request for those partitions, from
the last offset known to exist, that waits for nothing (`min_bytes` 0; `max_wait_ms` 1,
as the embedded broker answers a wait of 0 with no partitions at all, compat.py quirk 10)
and asks for `PROBE_BYTES` per partition. Every fetch response carries the partition's
high watermark in its header; that is all we read. The records that come with it (at
most one batch: Kafka returns the first batch even when it is larger than the limit,
KIP-74) are dropped; the consumer's own position does not move.

One request per partition leader for all the partitions asked about: the cost of a
round does not grow with the number of subscriptions reading them.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Mapping

from aiokafka import TopicPartition
from aiokafka.client import AIOKafkaClient
from aiokafka.errors import KafkaError
from aiokafka.protocol.api import Response
from aiokafka.protocol.fetch import FetchRequest

from runtime.kafka.compat import PROBE_WAIT_MS

log = logging.getLogger(__name__)
PROBE_BYTES = 1
"""Bytes asked for per partition: the high watermark is in the header, the records are
not wanted."""
READ_UNCOMMITTED = 0
_NO_ERROR = 0


async def read_highwaters(client: AIOKafkaClient, starts: Mapping[TopicPartition, int],
                          ) -> dict[TopicPartition, int]:
    """The high watermark of each partition of `starts` (fetched from the offset given
    for it: one known to exist, such as the last high watermark seen). Partitions whose
    leader is unknown, or that answer with an error, are left out; so is every partition
    of a leader that could not be reached (the next round asks again)."""
    found: dict[TopicPartition, int] = {}
    for node, offsets in _by_leader(client, starts).items():
        try:
            response = await client.send(node, _probe(offsets))
        except KafkaError as exc:
            log.debug("reading high watermarks from node %s failed: %r", node, exc)
            continue
        found.update(_highwaters_of(response))
    return found


def _by_leader(client: AIOKafkaClient, starts: Mapping[TopicPartition, int],
               ) -> dict[int, dict[TopicPartition, int]]:
    nodes: dict[int, dict[TopicPartition, int]] = defaultdict(dict)
    for tp, offset in starts.items():
        leader = client.cluster.leader_for_partition(tp)
        if leader is not None and leader >= 0:
            nodes[leader][tp] = offset
    return nodes


def _probe(offsets: Mapping[TopicPartition, int]) -> FetchRequest:
    topics: dict[str, list[tuple[int, int, int]]] = defaultdict(list)
    for tp, offset in sorted(offsets.items()):
        topics[tp.topic].append((tp.partition, max(offset, 0), PROBE_BYTES))
    return FetchRequest(PROBE_WAIT_MS, 0, PROBE_BYTES * len(offsets), READ_UNCOMMITTED,
                        list(topics.items()))


def _highwaters_of(response: Response) -> dict[TopicPartition, int]:
    """Each partition's high watermark from a fetch response (every version starts a
    partition's answer with its number, error code and high watermark)."""
    found: dict[TopicPartition, int] = {}
    for topic, partitions in response.topics:
        for partition, error_code, highwater, *_rest in partitions:
            if error_code == _NO_ERROR and highwater >= 0:
                found[TopicPartition(topic, partition)] = int(highwater)
    return found
