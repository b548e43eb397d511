"""Thin helpers around aiokafka: topic creation and client construction.

Every Kafka client of the runtime is built here, for two reasons: broker workarounds
(`runtime.kafka.compat`) are applied before a producer that needs them starts, and each
client connects with the TLS and SASL settings registered for its bootstrap address
(`runtime.kafka.security`), so callers pass nothing but the address.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Mapping

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.client import AIOKafkaClient
from aiokafka.errors import for_code

from runtime.kafka import compat, security, topic_creation

_TOPIC_ALREADY_EXISTS = 36
_TOPIC_NAME = re.compile(r"[A-Za-z0-9._\-]{1,249}")


def valid_topic(name: str) -> bool:
    """A name Kafka accepts for a topic (legal characters, length, not `.` or `..`)."""
    return bool(_TOPIC_NAME.fullmatch(name)) and name not in (".", "..")

_POLL_S = 0.05


async def create_topics(
    bootstrap: str,
    topics: Mapping[str, int],
    *,
    replication_factor: int = 1,
    timeout_s: float = 10.0,
    configs: Mapping[str, str] | None = None,
) -> None:
    """Create topics (name -> partitions) and wait until they are visible.

    A topic that already exists is fine, whatever its partition count.
    """
    admin = make_admin(bootstrap)
    await admin.start()
    try:
        new = [NewTopic(name, parts, replication_factor, topic_configs=dict(configs or {}))
               for name, parts in topics.items()]
        response = await admin.create_topics(new, timeout_ms=int(timeout_s * 1000))
        _raise_topic_errors(response.topic_errors)
    finally:
        await admin.close()
    for name in topics:
        await wait_for_topic(bootstrap, name, timeout_s=timeout_s)


def _raise_topic_errors(
        topic_errors: list[tuple[str, int] | tuple[str, int, str | None]]) -> None:
    """CreateTopics answers (topic, code) in v0, (topic, code, message) later."""
    for error in topic_errors:
        topic, code, message = error[0], error[1], error[2] if len(error) > 2 else None
        if code not in (0, _TOPIC_ALREADY_EXISTS):
            raise for_code(code)(f"creating topic {topic!r}: {message}")


async def wait_for_topic(
    bootstrap: str,
    topic: str,
    partitions: int | None = None,
    *,
    timeout_s: float = 10.0,
) -> int:
    """Wait until `topic` exists (with at least `partitions`); return its partition count.

    Never creates it: Tansu and many Kafkas auto-create topics named in metadata requests,
    so this lists all topics first and describes only a topic that is listed.
    """
    admin = make_admin(bootstrap)
    await admin.start()
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            count = await _partition_count(admin, topic)
            if count is not None and count >= (partitions or 1):
                return count
            if time.monotonic() > deadline:
                raise TimeoutError(f"topic {topic!r} not ready after {timeout_s}s")
            await asyncio.sleep(_POLL_S)
    finally:
        await admin.close()


async def _partition_count(admin: AIOKafkaAdminClient, topic: str) -> int | None:
    if topic not in await admin.list_topics():
        return None
    (described,) = await admin.describe_topics([topic])
    if described["error_code"] != 0:
        return None
    return len(described["partitions"])


def make_producer(bootstrap: str, **kwargs: object) -> AIOKafkaProducer:
    """An `AIOKafkaProducer` (not started); transactional/idempotent ones get compat fixes."""
    if kwargs.get("transactional_id") or kwargs.get("enable_idempotence"):
        compat.enable_init_producer_id_v3()
    return AIOKafkaProducer(bootstrap_servers=bootstrap, **_secured(bootstrap, kwargs))


def make_consumer(bootstrap: str, *topics: str, **kwargs: object) -> AIOKafkaConsumer:
    """An `AIOKafkaConsumer` (not started) subscribed to `topics` when given.

    Its metadata requests never ask the broker to create a topic (see `topic_creation`).
    """
    consumer = AIOKafkaConsumer(*topics, bootstrap_servers=bootstrap,
                                **_secured(bootstrap, kwargs))
    topic_creation.forbid(consumer._client)
    return consumer


def make_client(bootstrap: str, **kwargs: object) -> AIOKafkaClient:
    """A bare `AIOKafkaClient` (not started: `await client.bootstrap()`), whose metadata
    requests never create a topic."""
    client = AIOKafkaClient(bootstrap_servers=bootstrap, **_secured(bootstrap, kwargs))
    topic_creation.forbid(client)
    return client


def make_admin(bootstrap: str, **kwargs: object) -> AIOKafkaAdminClient:
    """An `AIOKafkaAdminClient` (not started)."""
    return AIOKafkaAdminClient(bootstrap_servers=bootstrap, **_secured(bootstrap, kwargs))


def _secured(bootstrap: str, kwargs: dict[str, object]) -> dict[str, object]:
    """The registered security settings of `bootstrap`, under what the caller passed (a
    test may connect in plaintext on purpose)."""
    return {**security.client_kwargs(bootstrap), **kwargs}


async def committed_offsets(consumer: AIOKafkaConsumer, tps: list[TopicPartition],
                            ) -> dict[TopicPartition, tuple[int | None, str]]:
    """`committed_offset` of several partitions in one request (a member that owns
    hundreds of partitions would otherwise ask once per partition)."""
    offsets = await compat.fetch_committed(consumer, tps)
    result: dict[TopicPartition, tuple[int | None, str]] = {}
    for tp in tps:
        found = offsets.get(tp)
        result[tp] = ((None, "") if found is None or found.offset < 0
                      else (found.offset, found.metadata or ""))
    return result


async def committed_offset(consumer: AIOKafkaConsumer,
                           tp: TopicPartition) -> tuple[int | None, str]:
    """The group's committed offset of `tp` and its metadata string.

    `AIOKafkaConsumer.committed()` drops the metadata, so this asks the group coordinator
    the same way it does (runtime/kafka/compat.py, `fetch_committed`).
    """
    offsets = await compat.fetch_committed(consumer, [tp])
    found = offsets.get(tp)
    if found is None or found.offset < 0:
        return None, ""
    return found.offset, found.metadata or ""
