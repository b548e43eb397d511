"""The Consumer JSON of the admin API (Queue-Over-Http compatible), decoded and validated.

Field names follow Queue-Over-Http exactly (`group.id`, `concurrencyFactor`, ...).
Additions are optional with defaults; the names `ordering`, `lanes`, `deadLetterTopic`,
`timeoutMs` and `signingSecret` are part of the contract, the rest are ours.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

# re-exported: it lived here first, and callers still import it from here
from actors.delivery.errors import InvalidSubscription as InvalidSubscription
from actors.delivery.signing import signing_key
from runtime.kafka import valid_topic

Ordering = Literal["none", "partition", "key"]
HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._\-]{0,199}$")
BODYLESS_METHODS = frozenset({"GET", "DELETE", "HEAD", "OPTIONS"})
# Kafka consumer properties a subscription may set, mapped to aiokafka's names.
INT_PROPERTIES = {
    "session.timeout.ms": "session_timeout_ms",
    "heartbeat.interval.ms": "heartbeat_interval_ms",
    "max.poll.interval.ms": "max_poll_interval_ms",
    "metadata.max.age.ms": "metadata_max_age_ms",
    "max.partition.fetch.bytes": "max_partition_fetch_bytes",
    "fetch.max.wait.ms": "fetch_max_wait_ms",
}
PROPERTY_RANGES = {
    "session.timeout.ms": (1_000, 3_600_000),
    "heartbeat.interval.ms": (100, 600_000),
    "max.poll.interval.ms": (1_000, 86_400_000),
    "metadata.max.age.ms": (100, 86_400_000),
    "max.partition.fetch.bytes": (1024, 1 << 30),
    "fetch.max.wait.ms": (1, 60_000),
}


class _Json(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    pass


class PartitionSpec(_Json, forbid_unknown_fields=True, frozen=True, kw_only=True):
    number: Annotated[int, Meta(ge=0)]


class TopicConfig(_Json, forbid_unknown_fields=True, frozen=True, kw_only=True):
    concurrencyFactor: Annotated[int, Meta(ge=1, le=10_000)] = 1
    autoCommitPeriodMs: Annotated[int, Meta(ge=0)] = 0
    ordering: Ordering = "none"
    lanes: Annotated[int, Meta(ge=0, le=10_000)] = 0
    """Key mode parallelism; 0 means `concurrencyFactor` lanes."""
    loadFactor: Annotated[float, Meta(ge=1.0, le=100.0)] = 2.0
    """Prefetch buffer as a multiple of the window; above it the partition is paused."""


class TopicSpec(_Json, forbid_unknown_fields=True, frozen=True, kw_only=True):
    name: str | None = None
    pattern: str | None = None
    partitions: list[PartitionSpec] | None = None
    config: TopicConfig = TopicConfig()


class SubscriptionMethod(_Json, forbid_unknown_fields=True, frozen=True, kw_only=True):
    uri: Annotated[str, Meta(min_length=1)]
    type: Literal["http"] = "http"
    method: str = "POST"
    queryParamKey: str | None = None
    charset: str = "utf-8"
    additionalHeaders: dict[str, str] = {}
    delayOnErrorMs: Annotated[int, Meta(ge=0)] = 1000
    retryBeforeCommit: Annotated[int, Meta(ge=0)] = 0
    deadLetterTopic: str | None = None
    timeoutMs: Annotated[int, Meta(ge=1)] = 30_000
    signingSecret: str | None = None
    backoffMultiplier: Annotated[float, Meta(ge=1.0, le=100.0)] = 1.0
    maxDelayOnErrorMs: Annotated[int, Meta(ge=0)] = 0
    """Cap for exponential backoff; 0 means 100 x delayOnErrorMs."""
    jitter: Annotated[float, Meta(ge=0.0, le=1.0)] = 0.0
    connectTimeoutMs: Annotated[int, Meta(ge=1)] = 5_000
    maxConnections: Annotated[int, Meta(ge=0, le=10_000)] = 0
    """HTTP pool size for this endpoint; 0 sizes it to the subscription's concurrency."""


class Consumer(_Json, forbid_unknown_fields=True, frozen=True, kw_only=True):
    id: Annotated[str, Meta(min_length=1)]
    group_id: Annotated[str, Meta(min_length=1)] = msgspec.field(name="group.id")
    broker: Annotated[str, Meta(min_length=1)]
    topics: Annotated[list[TopicSpec], Meta(min_length=1)]
    subscriptionMethod: SubscriptionMethod
    properties: dict[str, str] = {}
    """Kafka consumer settings: `auto.offset.reset` (earliest|latest) and INT_PROPERTIES."""

    @property
    def key(self) -> str:
        """`<id>_<group.id>`: the `QOH-Consumer` header and the persistence name."""
        return f"{self.id}_{self.group_id}"

    def topic_config(self, topic: str) -> TopicConfig:
        for spec in self.topics:
            if spec.name == topic:
                return spec.config
        for spec in self.topics:
            if spec.pattern is not None and re.fullmatch(spec.pattern, topic):
                return spec.config
        return self.topics[0].config

    @property
    def window(self) -> int:
        """Largest in-flight window over the topics: sizes the HTTP pool."""
        return max(t.config.concurrencyFactor for t in self.topics)


def decode_consumer(body: bytes | dict[str, Any]) -> Consumer:
    """Decode and validate a Consumer JSON; raises `InvalidSubscription` naming the field."""
    try:
        if isinstance(body, bytes | bytearray):
            consumer = msgspec.json.decode(body, type=Consumer)
        else:
            consumer = msgspec.convert(body, Consumer)
    except msgspec.ValidationError as exc:
        raise InvalidSubscription("invalid subscription", str(exc)) from None
    except msgspec.DecodeError as exc:
        raise InvalidSubscription("malformed JSON", str(exc)) from None
    validate(consumer)
    return consumer


def validate(consumer: Consumer) -> None:
    for field, value in (("id", consumer.id), ("group.id", consumer.group_id)):
        if not SAFE_ID.match(value):
            raise InvalidSubscription(
                f"invalid {field}", f"{value!r}: use letters, digits, '.', '_' or '-' "
                "(at most 200, not starting with a dot)")
    for i, topic in enumerate(consumer.topics):
        _validate_topic(i, topic)
    if any(t.partitions for t in consumer.topics) and any(t.pattern for t in consumer.topics):
        raise InvalidSubscription("invalid topics", "explicit partitions and patterns "
                                  "cannot be mixed in one subscription")
    _validate_method(consumer.subscriptionMethod)
    _validate_properties(consumer.properties)


def _validate_topic(i: int, topic: TopicSpec) -> None:
    where = f"topics[{i}]"
    if (topic.name is None) == (topic.pattern is None):
        raise InvalidSubscription(f"invalid {where}", "give exactly one of 'name' or 'pattern'")
    if topic.pattern is not None:
        if topic.partitions:
            raise InvalidSubscription(f"invalid {where}", "'partitions' needs a topic 'name'")
        try:
            re.compile(topic.pattern)
        except re.error as exc:
            raise InvalidSubscription(f"invalid {where}.pattern", str(exc)) from None
    numbers = [p.number for p in topic.partitions or []]
    if len(set(numbers)) != len(numbers):
        raise InvalidSubscription(f"invalid {where}.partitions", "duplicate partition numbers")


def _validate_properties(properties: dict[str, str]) -> None:
    for name, value in properties.items():
        if name == "auto.offset.reset":
            if value not in ("earliest", "latest"):
                raise InvalidSubscription("invalid properties.auto.offset.reset",
                                          f"{value!r}: use 'earliest' or 'latest'")
        elif name not in INT_PROPERTIES:
            known = ", ".join(["auto.offset.reset", *INT_PROPERTIES])
            raise InvalidSubscription(f"unknown property {name!r}", f"supported: {known}")
        elif not (value.isascii() and value.isdecimal()) or not (
                PROPERTY_RANGES[name][0] <= int(value) <= PROPERTY_RANGES[name][1]):
            low, high = PROPERTY_RANGES[name]
            raise InvalidSubscription(f"invalid properties.{name}",
                                      f"{value!r}: expected a whole number in {low}..{high}")


def _validate_method(method: SubscriptionMethod) -> None:
    if not re.match(r"^https?://[^/\s]+", method.uri):
        raise InvalidSubscription("invalid subscriptionMethod.uri",
                                  f"{method.uri!r} is not an http(s) URL")
    if method.method.upper() not in {"POST", "PUT", "PATCH", "GET", "DELETE"}:
        raise InvalidSubscription("invalid subscriptionMethod.method", method.method)
    if 0 < method.maxDelayOnErrorMs < method.delayOnErrorMs:
        raise InvalidSubscription("invalid subscriptionMethod.maxDelayOnErrorMs",
                                  "must be 0 (no cap) or at least delayOnErrorMs")
    if method.deadLetterTopic is not None and not valid_topic(method.deadLetterTopic):
        raise InvalidSubscription("invalid subscriptionMethod.deadLetterTopic",
                                  f"{method.deadLetterTopic!r} is not a Kafka topic name")
    try:
        "".encode(method.charset)
    except LookupError:
        raise InvalidSubscription("invalid subscriptionMethod.charset", method.charset) from None
    for name, value in method.additionalHeaders.items():
        if not HEADER_NAME.match(name) or "\r" in value or "\n" in value:
            raise InvalidSubscription("invalid subscriptionMethod.additionalHeaders",
                                      f"{name!r}: header names are tokens; no CR/LF in values")
    if method.signingSecret is not None:
        try:
            signing_key(method.signingSecret)
        except ValueError as exc:
            raise InvalidSubscription("invalid subscriptionMethod.signingSecret",
                                      str(exc)) from None


def redacted(consumer: Consumer) -> dict[str, Any]:
    """The Consumer as `GET` shows it: header values and the signing secret hidden."""
    data: dict[str, Any] = msgspec.to_builtins(consumer)
    method = data["subscriptionMethod"]
    method["additionalHeaders"] = {k: "***" for k in method.get("additionalHeaders", {})}
    if method.get("signingSecret"):
        method["signingSecret"] = "***"
    return data
