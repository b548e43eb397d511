"""Consumers that never make the broker create a topic.

aiokafka 0.14 sends every metadata request with `allow_auto_topic_creation = true`
(MetadataRequest v4 and later), and brokers with `auto.create.topics.enable` (Tansu,
Kafka's default) then create each topic a consumer merely names: a subscription listing
40,000 topics made 40,000 topics. The runtime creates the topics it owns on purpose
(`create_topics`), so its consumers ask for metadata without creation.

aiokafka builds the request inside `AIOKafkaClient._metadata_update`, with no option for
it. `forbid(client)` wraps that method of one client so that, while it runs, the request
it builds says `false`; every other client keeps aiokafka's behaviour.

A topic that is not there yet is then simply absent from the metadata, and aiokafka would
look again only after `metadata_max_age_ms` (a minute for named topics): while a topic the
client asks for is missing, or listed without partitions (a topic being created has no
leader yet), it looks again every `MISSING_TOPIC_RECHECK_MS`.

A group member should not subscribe to a topic that is missing: once the group has
assigned an empty set for it, the topic's later appearance only makes the member rejoin
with the same subscription, and Tansu then keeps the old (empty) assignment. `split`
says which of a member's topics exist; the missing ones are `watch`ed (kept in the
metadata requests, rechecked every 2 s) until they appear, and the member subscribes
anew with them: a changed subscription, which every broker rebalances.

While a topic is watched, aiokafka logs `ERROR Topic ... not found in cluster metadata` at
every recheck; the member says once, itself, that it waits for the topic (issue 27).
`MissingTopicQuiet` keeps those records, and only those of topics a `forbid`den client
asks for, out of the log: a producer naming a missing topic is still reported.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Awaitable, Callable, Iterable
from contextvars import ContextVar

import aiokafka.client
from aiokafka import AIOKafkaConsumer
from aiokafka.client import AIOKafkaClient
from aiokafka.cluster import ClusterMetadata
from aiokafka.protocol.metadata import MetadataRequest

MISSING_TOPIC_RECHECK_MS = 2000

_FORBIDDEN: ContextVar[bool] = ContextVar("topic_creation_forbidden", default=False)
_NOT_FOUND = "Topic %s not found in cluster metadata"  # aiokafka/cluster.py, its format


class MissingTopicQuiet(logging.Filter):
    """On aiokafka's cluster logger: drops "not found in cluster metadata" for topics that
    a client made by `forbid` asks for, and counts them (`held`)."""

    def __init__(self) -> None:
        super().__init__()
        self.clients: weakref.WeakSet[AIOKafkaClient] = weakref.WeakSet()
        self.held = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg != _NOT_FOUND or not record.args:
            return True
        topic = record.args[0] if isinstance(record.args, tuple) else None
        if not any(topic in client._topics for client in list(self.clients)):
            return True
        self.held += 1
        return False


QUIET = MissingTopicQuiet()


def _metadata_request(topics: list[str] | None = None,
                      allow_auto_topic_creation: bool | None = None) -> MetadataRequest:
    if allow_auto_topic_creation is None and _FORBIDDEN.get():
        allow_auto_topic_creation = False
    return MetadataRequest(topics, allow_auto_topic_creation)


def forbid(client: AIOKafkaClient) -> None:
    """Make `client`'s metadata requests never create topics."""
    aiokafka.client.MetadataRequest = _metadata_request
    QUIET.clients.add(client)
    cluster_log = logging.getLogger("aiokafka.cluster")
    if QUIET not in cluster_log.filters:
        cluster_log.addFilter(QUIET)
    update: Callable[[ClusterMetadata, Iterable[str] | None], Awaitable[bool]] = (
        client._metadata_update)
    max_age_ms = client._metadata_max_age_ms

    async def without_creation(cluster: ClusterMetadata, topics: Iterable[str] | None,
                               ) -> bool:
        token = _FORBIDDEN.set(True)
        try:
            return await update(cluster, topics)
        finally:
            _FORBIDDEN.reset(token)
            waiting = any(not client.cluster.partitions_for_topic(topic)
                          for topic in client._topics)
            client._metadata_max_age_ms = (min(max_age_ms, MISSING_TOPIC_RECHECK_MS)
                                           if waiting else max_age_ms)

    client._metadata_update = without_creation


def missing(consumer: AIOKafkaConsumer, topics: Iterable[str]) -> set[str]:
    """The `topics` this consumer's metadata does not list with partitions."""
    cluster = consumer._client.cluster
    return {topic for topic in topics if not cluster.partitions_for_topic(topic)}


def watch(consumer: AIOKafkaConsumer, topics: Iterable[str]) -> None:
    """Keep `topics` in this consumer's metadata requests without subscribing to them
    (call again after each subscribe: it replaces the list)."""
    for topic in topics:
        consumer._client.add_topic(topic)


async def split(consumer: AIOKafkaConsumer, topics: list[str]) -> tuple[list[str], set[str]]:
    """`topics` as (present, missing), from metadata asked for them now."""
    await asyncio.gather(*(consumer._client.add_topic(topic) for topic in topics))
    absent = missing(consumer, topics)
    return [topic for topic in topics if topic not in absent], absent
