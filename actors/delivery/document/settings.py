"""The subscription document decoded into the settings each actor takes (issue 23 item 5).

The `Consumer` (subscription.py) is the wire document: the admin API, the store and the
cluster's subscriptions topic keep it. Actors do not read it: when a subscription's tree
starts, the control plane (control/trees.py) turns it into small frozen settings with
Python's names, one kind per part, with the functions here:

- `CursorSettings`: a cursor of one topic (`PartitionActor` and its `PartitionBook`):
  window, prefetch, ordering, lanes, commit period, retry policy, side topics, filter;
- `EgressSettings`: the HTTP egress (request, signing, TLS, pool, batches);
- `ReplaySettings`: a replay;
- `ReaderSettings`: a subscription's own Kafka consumer (pinned partitions);
- `RiderSettings`: a subscription riding the instance member (its topics and patterns,
  group, offset reset, fetch wait and size);
- `RetryPolicy`, `RetryTopicSettings`: what the cursor, the replay and the retry-topic
  writer share.

Built once per tree start (cursor settings once per topic, `CursorCatalog`), never per
record. Here too: `with_retry_topic` (the subscription as its readers see it: the retry
topic read too) and `check_levels` (retry delays against the delay levels).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Final

import msgspec

from actors.delivery.document.filters import Filter
from actors.delivery.document.subscription import (
    INT_PROPERTIES,
    Consumer,
    Method,
    Ordering,
    RetryTopics,
    TlsSettings,
    TopicConfig,
    TopicSpec,
)
from actors.delivery.errors import InvalidSubscription
from runtime.errors import UsageError
from runtime.host.config import DelayLevel

MIN_POOL: Final = 10
MAX_POOL: Final = 1000
POOL_PER_WINDOW: Final = 4
DEFAULT_QUERY_KEY: Final = "message"
"""Queue-Over-Http's default `queryParamKey`."""


class _Settings(msgspec.Struct, frozen=True, kw_only=True):
    pass


class RetryPolicy(_Settings, frozen=True, kw_only=True):
    """A failed push is retried after `delay_ms`, grown by `backoff_multiplier` up to
    `max_delay_ms` (0: no cap given), with `jitter`; `retries` N > 0 gives N retries after
    the first attempt, 0 retries forever (`retryBeforeCommit`)."""

    delay_ms: int = 1000
    backoff_multiplier: float = 1.0
    max_delay_ms: int = 0
    jitter: float = 0.0
    retries: int = 0


class RetryTopicSettings(_Settings, frozen=True, kw_only=True):
    """Non-blocking retries through the delay queue (`retryTopics`)."""

    topic: str
    delays_ms: tuple[int, ...]


class CursorSettings(_Settings, frozen=True, kw_only=True):
    """A subscription's cursor on one topic: `PartitionActor` and `PartitionBook`."""

    subscription: str
    """The subscription's key: journal events and metric labels."""
    ordering: Ordering = "none"
    concurrency: int = 1
    lanes: int = 0
    """Key mode parallelism; 0: `concurrency` lanes."""
    load_factor: float = 2.0
    commit_period_ms: int = 0
    """0: commit when idle and every second (partition.py)."""
    batch_size: int = 1
    retry: RetryPolicy = RetryPolicy()
    dead_letter_topic: str | None = None
    retry_topics: RetryTopicSettings | None = None
    filter: Filter | None = None
    reads_retries: bool = False
    """The cursor reads the subscription's retry topic."""

    @property
    def window(self) -> int:
        """Records in flight at most: one in `partition` order, else `concurrency`."""
        return 1 if self.ordering == "partition" else self.concurrency

    @property
    def buffer_limit(self) -> int:
        """Buffered records at which a cursor asks to be paused (load factor x window)."""
        size = self.window
        return max(size, math.ceil(size * self.load_factor))


class TlsFiles(_Settings, frozen=True, kw_only=True):
    """PEM files toward an https endpoint (tls.py reads them)."""

    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None


class EgressSettings(_Settings, frozen=True, kw_only=True):
    """What the HTTP egress pushes with. Header values and the signing secret may still be
    `${env:}`/`${file:}` references: the egress resolves them when it starts (secrets.py)."""

    subscription: str
    """The subscription's key: journal events, metric labels, the 410 callback."""
    consumer_header: str
    """`QOH-Consumer`: `<id>_<group.id>`."""
    broker: str
    uri: str
    method: str = "POST"
    """Upper case."""
    query_param_key: str = DEFAULT_QUERY_KEY
    charset: str = "utf-8"
    headers: dict[str, str] = {}
    timeout_ms: int = 30_000
    connect_timeout_ms: int = 5_000
    signing_secret: str | None = None
    tls: TlsFiles | None = None
    pool: int = MIN_POOL
    batch_size: int = 1
    batch_linger_ms: int = 0
    fail_fast: bool = False
    """Retries are bounded (`retryBeforeCommit` > 0, or retry topics): attempts while the
    origin's breaker is open fail at once (origin.py)."""


class ReaderSettings(_Settings, frozen=True, kw_only=True):
    """A subscription's own Kafka consumer (`ConsumerActor`, for pinned partitions)."""

    subscription: str
    group_id: str
    topics: dict[str, tuple[int, ...]]
    """Topic -> its pinned partitions; none: every partition of it."""
    uses_pattern: bool = False
    auto_offset_reset: str = "earliest"
    client: dict[str, int] = {}
    """aiokafka settings from the subscription's `properties` (INT_PROPERTIES)."""

    @property
    def pinned(self) -> bool:
        return any(self.topics.values())


class RiderSettings(_Settings, frozen=True, kw_only=True):
    """A subscription riding its instance member (path/member/, path/roster.py)."""

    key: str
    """The subscription's key: its seat and its cursors' journal events."""
    group_id: str
    """Where its positions are committed (no membership)."""
    topics: tuple[str, ...] = ()
    """The topics it names (its retry topic among them)."""
    patterns: tuple[str, ...] = ()
    """The regexes of its pattern topics (RE2, full match)."""
    auto_offset_reset: str = "earliest"
    """Where a cursor starts with nothing committed: `earliest` or `latest`."""
    fetch_wait_ms: int | None = None
    """`fetch.max.wait.ms` if the subscription sets it (the member fetches with the
    shortest its riders ask for)."""
    largest_buffer: int = 1
    """The largest prefetch buffer of its topic entries (sizes the member's fetch)."""


# -- from the document --------------------------------------------------------------------
def retry_policy(method: Method) -> RetryPolicy:
    return RetryPolicy(delay_ms=method.delayOnErrorMs,
                       backoff_multiplier=method.backoffMultiplier,
                       max_delay_ms=method.maxDelayOnErrorMs, jitter=method.jitter,
                       retries=method.retryBeforeCommit)


def retry_topic_settings(retry: RetryTopics) -> RetryTopicSettings:
    return RetryTopicSettings(topic=retry.topic, delays_ms=tuple(retry.delaysMs))


def check_levels(retry: RetryTopics, levels: Sequence[DelayLevel]) -> None:
    """Every delay must fit a delay level; raises `InvalidSubscription` naming the level
    to add (the admin API's 400, a restored subscription's start failure)."""
    smallest = min(levels, key=lambda level: level.delay_ms) if levels else None
    for i, delay in enumerate(retry.delaysMs):
        if smallest is None:
            raise InvalidSubscription(
                f"invalid subscriptionMethod.retryTopics.delaysMs[{i}]",
                f"{delay} ms: no [[delay.levels]] configured; add a level with "
                f"delay_ms <= {delay}")
        if smallest.delay_ms > delay:
            raise InvalidSubscription(
                f"invalid subscriptionMethod.retryTopics.delaysMs[{i}]",
                f"{delay} ms fits no delay level (the smallest is {smallest.name!r}, "
                f"{smallest.delay_ms} ms); add a [[delay.levels]] with delay_ms <= {delay}")


def with_retry_topic(consumer: Consumer) -> Consumer:
    """The subscription as its consumer actor sees it: the retry topic is consumed too,
    with the first topic's settings (a pinned-partition subscription gets all of its
    partitions)."""
    retry = consumer.subscriptionMethod.retryTopics
    if retry is None:
        return consumer
    spec = TopicSpec(name=retry.topic, config=consumer.topics[0].config)
    return Consumer(id=consumer.id, group=consumer.group, broker=consumer.broker,
                    topics=[*consumer.topics, spec],
                    subscriptionMethod=consumer.subscriptionMethod,
                    properties=consumer.properties)


def cursor_of(config: TopicConfig, method: Method, subscription: str = "",
              wanted: Filter | None = None, reads_retries: bool = False) -> CursorSettings:
    """A cursor's settings from a topic entry's `config` and the subscription's method."""
    retry = method.retryTopics
    return CursorSettings(
        subscription=subscription, ordering=config.ordering,
        concurrency=config.concurrencyFactor, lanes=config.lanes,
        load_factor=config.loadFactor, commit_period_ms=config.autoCommitPeriodMs,
        batch_size=method.batchSize, retry=retry_policy(method),
        dead_letter_topic=method.deadLetterTopic,
        retry_topics=None if retry is None else retry_topic_settings(retry), filter=wanted,
        reads_retries=reads_retries)


def cursor_settings(consumer: Consumer, topic: str) -> CursorSettings:
    """The settings of `consumer`'s cursor on `topic`: the entry that names or matches it
    (else the first: the retry topic, read with the first topic's settings)."""
    method = consumer.subscriptionMethod
    retry = method.retryTopics
    return cursor_of(consumer.topic_config(topic), method, consumer.key,
                     consumer.topic_filter(topic),
                     retry is not None and topic == retry.topic)


@dataclass(slots=True)
class CursorCatalog:
    """A subscription's cursor settings by topic, each built once (a subscription starts a
    cursor per partition: they share one settings object). A memo, not shared state: the
    tree's supervisors call it from their own tasks, and every call for a topic answers
    the same value."""

    consumer: Consumer
    _made: dict[str, CursorSettings] = field(default_factory=dict)

    def __call__(self, topic: str) -> CursorSettings:
        made = self._made.get(topic)
        if made is None:
            made = self._made[topic] = cursor_settings(self.consumer, topic)
        return made


CursorsOf = Callable[[str], CursorSettings]
"""A topic's cursor settings (a `CursorCatalog`)."""


@dataclass(frozen=True, slots=True)
class ReplaySettings:
    """A replay (path/replay.py): its group's name, the retry policy, the dead-letter
    topic it may read, and each topic's filter."""

    group_id: str
    retry: RetryPolicy
    dead_letter_topic: str | None
    cursors: CursorsOf


REPLAY_RETRIES: Final = 10
"""A replay's retries of one record when its subscription retries forever
(`retryBeforeCommit` 0): a replay to a dead endpoint ended never (#34)."""


def replay_settings(consumer: Consumer) -> ReplaySettings:
    method = consumer.subscriptionMethod
    policy = retry_policy(method)
    if not policy.retries:  # the record is in Kafka still: a replay may give it up
        policy = msgspec.structs.replace(policy, retries=REPLAY_RETRIES)
    return ReplaySettings(consumer.group_id, policy, method.deadLetterTopic,
                          CursorCatalog(consumer))


def reader_settings(consumer: Consumer) -> ReaderSettings:
    """Pattern topics are left out of `topics`: they never pin partitions, and a reader
    is for pinned partitions (the instance member matches patterns itself)."""
    properties = consumer.properties
    return ReaderSettings(
        subscription=consumer.key, group_id=consumer.group_id,
        topics={t.name: tuple(p.number for p in t.partitions or ())
                for t in consumer.topics if t.name is not None},
        uses_pattern=any(t.pattern for t in consumer.topics),
        auto_offset_reset=properties.get("auto.offset.reset", "earliest"),
        client={INT_PROPERTIES[name]: int(value) for name, value in properties.items()
                if name in INT_PROPERTIES})


def rider_settings(consumer: Consumer) -> RiderSettings:
    """`consumer` as it rides the instance member: pass what it reads, the retry topic
    included (`with_retry_topic`)."""
    properties, topics = consumer.properties, consumer.topics
    wait = properties.get("fetch.max.wait.ms")
    return RiderSettings(
        key=consumer.key, group_id=consumer.group_id,
        topics=tuple(t.name for t in topics if t.name and not t.pattern),
        patterns=tuple(t.pattern for t in topics if t.pattern),
        auto_offset_reset=properties.get("auto.offset.reset", "earliest"),
        fetch_wait_ms=None if wait is None else int(wait),
        largest_buffer=largest_buffer(consumer))


def largest_buffer(consumer: Consumer) -> int:
    """The largest prefetch buffer of the subscription's topic entries."""
    method = consumer.subscriptionMethod
    return max(cursor_of(t.config, method).buffer_limit for t in consumer.topics)


def pool_size(consumer: Consumer) -> int:
    """`maxConnections`, else four windows clamped to 10..1000 (egress/http.py says why)."""
    configured = consumer.subscriptionMethod.maxConnections
    if configured:
        return configured
    return min(max(consumer.window * POOL_PER_WINDOW, MIN_POOL), MAX_POOL)


def tls_files(tls: TlsSettings | None) -> TlsFiles | None:
    if tls is None:
        return None
    return TlsFiles(ca_file=tls.caFile, cert_file=tls.certFile, key_file=tls.keyFile)


def egress_settings(consumer: Consumer) -> EgressSettings:
    """The HTTP egress's settings (`UsageError` for an in-process subscription: its
    outlet is its handler)."""
    method = consumer.http
    if method is None:
        raise UsageError(f"{consumer.key} is an in-process subscription: it has no HTTP "
                         "egress")
    return EgressSettings(
        subscription=consumer.key, consumer_header=consumer.joined, broker=consumer.broker,
        uri=method.uri, method=method.method.upper(),
        query_param_key=method.queryParamKey or DEFAULT_QUERY_KEY, charset=method.charset,
        headers=dict(method.additionalHeaders), timeout_ms=method.timeoutMs,
        connect_timeout_ms=method.connectTimeoutMs, signing_secret=method.signingSecret,
        tls=tls_files(method.tls), pool=pool_size(consumer), batch_size=method.batchSize,
        batch_linger_ms=method.batchLingerMs,
        fail_fast=method.retryBeforeCommit > 0 or method.retryTopics is not None)
