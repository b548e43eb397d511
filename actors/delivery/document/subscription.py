"""The Consumer JSON of the admin API (Queue-Over-Http compatible): decoded, validated,
and written back out.

The document, as Queue-Over-Http's clients send it (issue 9)::

    {"id": "svc-1", "group": {"id": "svc", "name": "NO_NAME"}, "broker": "Kafka",
     "topics": [{"name": "test", "pattern": false, "partitions": [{"number": "0"}],
                 "config": {"concurrencyFactor": 1, "autoCommitPeriodMs": 0}}],
     "subscriptionMethod": {"type": "http", "uri": "http://host/path", "method": "POST",
                            "queryParamKey": "message", "charset": "UTF-8",
                            "additionalHeaders": {}, "delayOnErrorMs": 0,
                            "retryBeforeCommit": 0}}

`group.name` defaults to "NO_NAME"; `pattern: true` makes `name` a regex (see
actors/delivery/document/patterns.py for the subset accepted); `partitions[].number` is a string
or an integer; `charset` names are case-insensitive. Deprecated for one release, and still
accepted: the flat key `"group.id": "svc"` instead of `group`, and `{"pattern": "regex"}`
instead of `{"name": "regex", "pattern": true}`. Additions are optional with defaults.
Unknown fields are refused (a misspelt `concurrencyFactr` must not silently become 1).

An in-process subscription (`Runtime.consume`) pushes to no URL: its `subscriptionMethod`
is a `HandlerMethod`, `{"type": "handler", "handler": "module.qualname", ...}` with the
retry, dead-letter and timeout settings only. The admin API shows such documents and
refuses them (`decode_consumer`); only `decode_handler_consumer` takes them.

The model used inside (`Consumer`) is not quite the wire format: a pattern topic has
`pattern` (the regex) and no `name`, partition numbers are ints.
`document(consumer)` writes the Queue-Over-Http shape back (the admin API's answers, with
`redact=True`; the store's files, without).

Identity: the pair (`id`, `group.id`). `Consumer.key` is its one string (the actor, file
and metrics name: actors/delivery/document/identity.py), `Consumer.joined` is
`<id>_<group.id>`, the `QOH-Consumer` header, which (`k`, `a_b`) and (`k_a`, `b`) share.

Every check runs here, before anything starts (issue 13), and each error names its field:
`decode_consumer` raises `InvalidSubscription(reason="invalid <field>", details=why)`.
"""

from __future__ import annotations

import codecs
import re
import urllib.parse
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Final, Literal

import msgspec
import yarl
from msgspec import Meta

from actors.delivery.document.filters import Filter, decode_filter, filter_document
from actors.delivery.document.identity import legacy_name, subscription_key
from actors.delivery.document.patterns import (
    MAX_PATTERN_CHARS,
    Node,
    PatternRejected,
    check_combined,
    check_pattern,
    matches,
)
from actors.delivery.document.signing import MAX_SECRETS, secrets_of, signing_key

# re-exported: it lived here first, and callers still import it from here
from actors.delivery.errors import InvalidSubscription as InvalidSubscription
from runtime.host.config import _path_of
from runtime.host.jsonbody import JSONObject, JsonRejected, check_value, load_json
from runtime.host.references import is_reference
from runtime.kafka import valid_topic

Ordering = Literal["none", "partition", "key"]
NO_NAME: Final = "NO_NAME"
"""Queue-Over-Http's default `group.name`."""
ID_CHARS: Final = r"[A-Za-z0-9][A-Za-z0-9._-]*"
SAFE_ID: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._\-]{0,199}")
"""`id`, `group.id`, and `<id>_<group.id>` as a whole: use with `fullmatch` (`match` with
`$` would let a trailing newline through)."""
HEADER_NAME: Final = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
CHARSET: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:+-]*")
_CONTROL: Final = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_CONTROL_BUT_TAB: Final = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]")
BODYLESS_METHODS: Final = frozenset({"GET", "DELETE", "HEAD", "OPTIONS"})
METHODS: Final = frozenset({"POST", "PUT", "PATCH", "GET", "DELETE"})
MAX_NAME: Final = 200
MAX_TOPICS: Final = 100
MAX_PARTITIONS: Final = 10_000
MAX_PARTITION_NUMBER: Final = 2**31 - 1
MAX_URI: Final = 4096
MAX_HEADERS: Final = 50
MAX_HEADER_VALUE: Final = 8192
MAX_SECRET: Final = 1024
REDACTED: Final = "***"
"""What GET shows in place of a secret (a PUT of it keeps the stored secret)."""
MAX_PATH: Final = 4096
MAX_MS: Final = 86_400_000
"""One day: the longest delay, period or timeout a subscription may ask for."""
MAX_BATCH: Final = 10_000
MAX_LINGER_MS: Final = 60_000
# Kafka consumer properties a subscription may set, mapped to aiokafka's names.
INT_PROPERTIES: Final = {
    "session.timeout.ms": "session_timeout_ms",
    "heartbeat.interval.ms": "heartbeat_interval_ms",
    "max.poll.interval.ms": "max_poll_interval_ms",
    "metadata.max.age.ms": "metadata_max_age_ms",
    "max.partition.fetch.bytes": "max_partition_fetch_bytes",
    "fetch.max.wait.ms": "fetch_max_wait_ms",
}
PROPERTY_RANGES: Final = {
    "session.timeout.ms": (1_000, 3_600_000),
    "heartbeat.interval.ms": (100, 600_000),
    "max.poll.interval.ms": (1_000, 86_400_000),
    "metadata.max.age.ms": (100, 86_400_000),
    "max.partition.fetch.bytes": (1024, 1 << 30),
    "fetch.max.wait.ms": (1, 60_000),
}

Id = Annotated[str, Meta(min_length=1, max_length=MAX_NAME, pattern=f"^{ID_CHARS}$")]
Text = Annotated[str, Meta(max_length=MAX_NAME)]
Ms = Annotated[int, Meta(ge=0, le=MAX_MS)]
Retries = Annotated[int, Meta(ge=0, le=1_000_000)]
TopicName = Annotated[str, Meta(min_length=1, max_length=249)]
TimeoutMs = Annotated[int, Meta(ge=1, le=3_600_000)]
Multiplier = Annotated[float, Meta(ge=1.0, le=100.0)]
Fraction = Annotated[float, Meta(ge=0.0, le=1.0)]


class _Json(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    pass


# -- shared by the wire format and the model -------------------------------------------
class Group(_Json, forbid_unknown_fields=True, frozen=True, kw_only=True):
    id: Id
    name: Text = NO_NAME
    """Queue-Over-Http: "not used anywhere but list info"."""


class TopicConfig(_Json, forbid_unknown_fields=True, frozen=True, kw_only=True):
    concurrencyFactor: Annotated[int, Meta(ge=1, le=10_000)] = 1
    autoCommitPeriodMs: Ms = 0
    ordering: Ordering = "none"
    lanes: Annotated[int, Meta(ge=0, le=10_000)] = 0
    """Key mode parallelism; 0 means `concurrencyFactor` lanes."""
    loadFactor: Annotated[float, Meta(ge=1.0, le=100.0)] = 2.0
    """Prefetch buffer as a multiple of the window; above it the partition is paused."""


FilePath = Annotated[str, Meta(min_length=1, max_length=MAX_PATH)]


class TlsSettings(_Json, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """`subscriptionMethod.tls`: TLS toward an https endpoint (actors/delivery/document/tls.py).
    Absolute paths of PEM files, read by each instance when the subscription starts."""

    caFile: Annotated[FilePath, Meta(description="PEM CA certificate(s) trusted in addition "
                                 "to the system's trust store")] | None = None
    certFile: Annotated[FilePath, Meta(description="PEM client certificate (mutual TLS); may "
                                   "also hold the key")] | None = None
    keyFile: Annotated[FilePath, Meta(description="the client certificate's unencrypted PEM "
                                  "private key, when not in certFile")] | None = None


class CircuitBreakerSettings(_Json, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """`subscriptionMethod.circuitBreaker`: the origin's breaker (actors/delivery/egress/origin.py);
    among the subscriptions of one origin the strictest values apply."""

    failureRatio: Annotated[float, Meta(gt=0.0, le=1.0)] = 0.5
    minRequests: Annotated[int, Meta(ge=1, le=1_000_000)] = 20
    openMs: Annotated[int, Meta(ge=1, le=MAX_MS)] = 10_000


class RetryTopics(_Json, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """`subscriptionMethod.retryTopics`: non-blocking retries through the delay queue
    (actors/delivery/path/retrytopic.py)."""

    topic: Annotated[str, Meta(min_length=1, max_length=249)]
    delaysMs: Annotated[list[Annotated[int, Meta(ge=0, le=MAX_MS)]],
                        Meta(min_length=1, max_length=20)]


class SubscriptionMethod(_Json, forbid_unknown_fields=True, frozen=True, kw_only=True):
    uri: Annotated[str, Meta(min_length=1, max_length=MAX_URI,
                             pattern=r"^[Hh][Tt][Tt][Pp][Ss]?://[^/\s?#]+")]
    type: Literal["http"] = "http"
    method: Annotated[str, Meta(min_length=1, max_length=16)] = "POST"
    queryParamKey: Annotated[str, Meta(min_length=1, max_length=MAX_NAME)] | None = None
    charset: Annotated[str, Meta(min_length=1, max_length=40,
                                 pattern=f"^{CHARSET.pattern}$")] = "utf-8"
    additionalHeaders: Annotated[dict[str, Annotated[str, Meta(max_length=MAX_HEADER_VALUE)]],
                                 Meta(max_length=MAX_HEADERS, description=(
                                     "sent on every push; a value may be a reference, "
                                     "${env:NAME} or ${file:/path}, resolved by each "
                                     "instance"))] = {}
    delayOnErrorMs: Ms = 1000
    retryBeforeCommit: Retries = 0
    deadLetterTopic: TopicName | None = None
    timeoutMs: TimeoutMs = 30_000
    signingSecret: Annotated[str, Meta(
        min_length=1, max_length=MAX_SECRET, description=(
            "Standard Webhooks secret(s): whsec_<base64> or plain, several separated by "
            "spaces (rotation: one signature each); each may be a reference, ${env:NAME} "
            "or ${file:/path}"))] | None = None
    backoffMultiplier: Multiplier = 1.0
    maxDelayOnErrorMs: Ms = 0
    """Cap for exponential backoff; 0 means 100 x delayOnErrorMs."""
    jitter: Fraction = 0.0
    connectTimeoutMs: Annotated[int, Meta(ge=1, le=600_000)] = 5_000
    maxConnections: Annotated[int, Meta(ge=0, le=10_000)] = 0
    """HTTP pool size for this endpoint; 0 sizes it to the subscription's concurrency."""
    tls: TlsSettings | None = None
    """Extra CA and client certificate for an https `uri` (its schema: `TlsSettings`)."""
    rateLimitPerSecond: Annotated[float, Meta(gt=0.0, le=1_000_000.0)] | None = None
    """Requests per second to the endpoint's origin (token bucket shared by the origin's
    subscriptions; the strictest setting applies). None: no limit."""
    circuitBreaker: CircuitBreakerSettings | None = None
    """The origin's circuit breaker settings; None: the defaults."""
    retryTopics: RetryTopics | None = None
    """After the local retries, move a failing record aside through the delay queue."""
    batchSize: Annotated[int, Meta(ge=1, le=MAX_BATCH)] = 1
    """Records of one partition per request (actors/delivery/egress/batching.py); 1: one record,
    its value as the body (the Queue-Over-Http request)."""
    batchLingerMs: Annotated[int, Meta(ge=0, le=MAX_LINGER_MS)] = 0
    """How long a batch that is not full waits for more records of its partition."""


class HandlerMethod(_Json, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """The `subscriptionMethod` of an in-process subscription (`Runtime.consume`): its
    records go to an async Python function of the program, named by `handler`
    (`module.qualname`), not to a URL. It has the retry, dead-letter and timeout settings
    of an HTTP `subscriptionMethod` and none of its HTTP ones. The admin API shows it and
    refuses to take it (`decode_handler_consumer` reads it)."""

    type: Literal["handler"] = "handler"
    handler: Annotated[str, Meta(min_length=1, max_length=MAX_URI)]
    delayOnErrorMs: Ms = 1000
    retryBeforeCommit: Retries = 0
    deadLetterTopic: TopicName | None = None
    timeoutMs: TimeoutMs = 30_000
    backoffMultiplier: Multiplier = 1.0
    maxDelayOnErrorMs: Ms = 0
    jitter: Fraction = 0.0

    # What the delivery path reads of either method (not fields: a handler has no retry
    # topic, takes records one at a time, and its pool is sized by the window).
    retryTopics: ClassVar[None] = None
    batchSize: ClassVar[int] = 1
    maxConnections: ClassVar[int] = 0


Method = SubscriptionMethod | HandlerMethod
"""An outlet is either an HTTP endpoint or an in-process handler."""


# -- the wire format: what clients send (both forms) -----------------------------------
class PartitionDocument(_Json, forbid_unknown_fields=True, frozen=True, kw_only=True):
    number: (Annotated[int, Meta(ge=0, le=MAX_PARTITION_NUMBER)]
             | Annotated[str, Meta(pattern=r"^[0-9]{1,10}$")])


class TopicDocument(_Json, forbid_unknown_fields=True, frozen=True, kw_only=True):
    name: Annotated[str, Meta(min_length=1, max_length=MAX_PATTERN_CHARS)] | None = None
    pattern: bool | Annotated[str, Meta(min_length=1, max_length=MAX_PATTERN_CHARS)] | None = None
    """A boolean (Queue-Over-Http: `name` is the regex), or the deprecated regex itself."""
    partitions: Annotated[list[PartitionDocument], Meta(max_length=MAX_PARTITIONS)] | None = None
    config: TopicConfig = TopicConfig()
    filter: dict[str, Any] | None = None
    """Which records of the topic to deliver (actors/delivery/document/filters.py)."""


class _Document(_Json, forbid_unknown_fields=True, frozen=True, kw_only=True):
    id: Id
    group: Group | None = None
    group_id: Id | None = msgspec.field(default=None, name="group.id")
    """Deprecated: the flat form of `group.id`."""
    broker: Annotated[str, Meta(min_length=1, max_length=MAX_NAME, pattern=r"^[A-Za-z0-9._-]+$")]
    topics: Annotated[list[TopicDocument], Meta(min_length=1, max_length=MAX_TOPICS)]
    properties: Annotated[dict[str, Annotated[str, Meta(max_length=64)]],
                          Meta(max_length=len(INT_PROPERTIES) + 1)] = {}


class ConsumerDocument(_Document, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """The Consumer JSON of the admin API, the store and the subscriptions topic."""

    subscriptionMethod: SubscriptionMethod


class HandlerConsumerDocument(_Document, forbid_unknown_fields=True, frozen=True,
                              kw_only=True):
    """An in-process subscription's document (`Runtime.consume`): its method names a
    handler. Shown by the admin API, never posted to it nor stored."""

    subscriptionMethod: HandlerMethod


# -- the model ---------------------------------------------------------------------------
class PartitionSpec(_Json, forbid_unknown_fields=True, frozen=True, kw_only=True):
    number: Annotated[int, Meta(ge=0, le=MAX_PARTITION_NUMBER)]


class TopicSpec(_Json, forbid_unknown_fields=True, frozen=True, kw_only=True):
    name: str | None = None
    """The topic; None for a pattern topic."""
    pattern: str | None = None
    """The regex of a pattern topic."""
    partitions: list[PartitionSpec] | None = None
    """Pinned partitions; None: the group assigns them."""
    config: TopicConfig = TopicConfig()
    filter: Filter | None = None
    """Only records that match are delivered; None: every record."""


class Consumer(_Json, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """A subscription. Files and answers are its `document(...)`, decoded by
    `decode_consumer` (or `decode_handler_consumer`): msgspec cannot decode the model
    itself, whose `subscriptionMethod` is one of two untagged structs (a tag would put
    `type` first in every HTTP document and make it required in the schema)."""

    id: str
    group: Group
    broker: str
    topics: list[TopicSpec]
    subscriptionMethod: Method
    properties: dict[str, str] = {}
    """Kafka consumer settings: `auto.offset.reset` (earliest|latest) and INT_PROPERTIES."""

    @property
    def http(self) -> SubscriptionMethod | None:
        """The HTTP endpoint's settings; None for an in-process subscription (a handler)."""
        method = self.subscriptionMethod
        return method if isinstance(method, SubscriptionMethod) else None

    @property
    def group_id(self) -> str:
        return self.group.id

    @property
    def key(self) -> str:
        """The pair as one string, unique per pair: the persistence, actor and metrics
        name (`subscription_key`)."""
        return subscription_key(self.id, self.group_id)

    @property
    def joined(self) -> str:
        """`<id>_<group.id>`: the `QOH-Consumer` header; two pairs may share it."""
        return legacy_name(self.id, self.group_id)

    def same(self, sub_id: str, group_id: str) -> bool:
        """True when this is subscription (`sub_id`, `group_id`), not just one whose key
        looks the same."""
        return (self.id, self.group_id) == (sub_id, group_id)

    def topic_spec(self, topic: str) -> TopicSpec:
        """The entry of `topics` that `topic` is read for: by name, else by pattern."""
        for spec in self.topics:
            if spec.name == topic:
                return spec
        for spec in self.topics:
            if spec.pattern is not None and matches(spec.pattern, topic):
                return spec
        return self.topics[0]

    def topic_config(self, topic: str) -> TopicConfig:
        return self.topic_spec(topic).config

    def topic_filter(self, topic: str) -> Filter | None:
        """The filter of the entry that names or matches `topic`; None when it has none or
        no entry reads `topic` (the retry topic: its records passed at their origin)."""
        spec = self.topic_spec(topic)
        if spec.name == topic or (spec.pattern is not None and matches(spec.pattern, topic)):
            return spec.filter
        return None

    @property
    def window(self) -> int:
        """Largest in-flight window over the topics: sizes the HTTP pool."""
        return max(t.config.concurrencyFactor for t in self.topics)


# -- decoding ------------------------------------------------------------------------------
def decode_consumer(body: bytes | Mapping[str, object]) -> Consumer:
    """Decode and validate a Consumer JSON (either form); raises `InvalidSubscription`
    naming the field."""
    return _decode(body, ConsumerDocument)


def decode_handler_consumer(body: Mapping[str, object]) -> Consumer:
    """`decode_consumer` of an in-process subscription's document (`HandlerMethod`)."""
    return _decode(body, HandlerConsumerDocument)


def _decode(body: bytes | Mapping[str, object],
            kind: type[ConsumerDocument | HandlerConsumerDocument]) -> Consumer:
    try:
        raw = load_json(body) if isinstance(body, bytes | bytearray) else dict(body)
    except JsonRejected as exc:
        raise InvalidSubscription(exc.reason, exc.details) from None
    except (TypeError, ValueError):
        raise InvalidSubscription("invalid subscription", "expected a JSON object") from None
    if kind is ConsumerDocument:
        _refuse_handler(raw)
    try:
        doc = msgspec.convert(raw, kind)  # first: it bounds every size, in C
        check_value(raw)
    except msgspec.ValidationError as exc:
        raise InvalidSubscription(*_field_error(str(exc))) from None
    except JsonRejected as exc:
        raise InvalidSubscription(exc.reason, exc.details) from None
    _check_text(raw, "")
    consumer = _model(doc)
    validate(consumer)
    return consumer


def _refuse_handler(raw: object) -> None:
    """A handler is a Python function: only the program that owns it subscribes it."""
    method = raw.get("subscriptionMethod") if isinstance(raw, dict) else None
    if isinstance(method, dict) and method.get("type") == "handler":
        raise InvalidSubscription("invalid subscriptionMethod.type", (
            "'handler': an in-process subscription's handler is a Python function, "
            "subscribed by its program with Runtime.consume; this API takes 'http'"))


def _field_error(message: str) -> tuple[str, str]:
    """msgspec's `... - at `$.a[0].b`` as ("invalid a[0].b", "..."), split the way the
    config's errors are."""
    path, text = _path_of(message)
    return (f"invalid {path}" if path else "invalid subscription"), text


def _check_text(value: object, path: str) -> None:
    """No control characters in any string of the document (a tab in a header value is
    the one exception HTTP allows); NUL and bad UTF-8 were refused by `check_value`."""
    if isinstance(value, dict):
        for key, item in value.items():
            inner = f"{path}.{key}" if path else str(key)
            _check_chars(str(key), inner, allow_tab=False)
            _check_text(item, inner)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _check_text(item, f"{path}[{i}]")
    elif isinstance(value, str):
        _check_chars(value, path, allow_tab=".additionalHeaders." in path)


def _check_chars(text: str, path: str, *, allow_tab: bool) -> None:
    found = (_CONTROL_BUT_TAB if allow_tab else _CONTROL).search(text)
    if found is not None:
        raise InvalidSubscription(f"invalid {path}",
                                  f"control character {found.group()!r} is not allowed")


def _model(doc: ConsumerDocument | HandlerConsumerDocument) -> Consumer:
    if doc.group is not None and doc.group_id is not None:
        raise InvalidSubscription("invalid group", "give 'group' (an object) or the "
                                  "deprecated 'group.id', not both")
    if doc.group is None and doc.group_id is None:
        raise InvalidSubscription("invalid group", "missing: give \"group\": {\"id\": ...}")
    return Consumer(id=doc.id, group=doc.group or Group(id=doc.group_id or ""), broker=doc.broker,
                    topics=[_topic(i, t) for i, t in enumerate(doc.topics)],
                    subscriptionMethod=doc.subscriptionMethod, properties=doc.properties)


def _topic(i: int, topic: TopicDocument) -> TopicSpec:
    where = f"topics[{i}]"
    name: str | None
    pattern: str | None
    if isinstance(topic.pattern, str):  # deprecated: {"pattern": "regex"}
        if topic.name is not None:
            raise InvalidSubscription(f"invalid {where}", "give 'name' with \"pattern\": "
                                      "true (or the deprecated \"pattern\": \"<regex>\")")
        name, pattern = None, topic.pattern
    elif topic.name is None:
        raise InvalidSubscription(f"invalid {where}.name", "missing")
    else:
        name, pattern = (None, topic.name) if topic.pattern else (topic.name, None)
    partitions = [PartitionSpec(number=_partition(f"{where}.partitions[{j}]", p.number))
                  for j, p in enumerate(topic.partitions or [])]
    return TopicSpec(name=name, pattern=pattern, partitions=partitions or None,
                     config=topic.config, filter=decode_filter(topic.filter, f"{where}.filter"))


def _partition(where: str, number: int | str) -> int:
    value = int(number)
    if value > MAX_PARTITION_NUMBER:
        raise InvalidSubscription(f"invalid {where}.number",
                                  f"{number!r}: at most {MAX_PARTITION_NUMBER}")
    return value


# -- validation ------------------------------------------------------------------------------
def validate(consumer: Consumer) -> None:
    """Every rule a decoded Consumer must meet; what passes here never fails later for
    being malformed (a topic may still be missing on the broker: that is a 503)."""
    for field, value in (("id", consumer.id), ("group.id", consumer.group_id)):
        if not SAFE_ID.fullmatch(value):
            raise InvalidSubscription(
                f"invalid {field}", f"{value!r}: use letters, digits, '.', '_' or '-' "
                f"(at most {MAX_NAME}, starting with a letter or digit)")
    if not SAFE_ID.fullmatch(consumer.joined):
        raise InvalidSubscription("invalid subscription name", f"{consumer.joined!r}: id and "
                                  f"group.id together are at most {MAX_NAME - 1} characters")
    _validate_topics(consumer.topics)
    _validate_method(consumer.subscriptionMethod)
    retry_topic_clash(consumer)
    _validate_properties(consumer.properties)


def _validate_topics(topics: list[TopicSpec]) -> None:
    names: set[str] = set()
    for i, topic in enumerate(topics):
        where = f"topics[{i}]"
        if topic.name is not None:
            if not valid_topic(topic.name):
                raise InvalidSubscription(f"invalid {where}.name", f"{topic.name!r} is not a "
                                          "Kafka topic name (letters, digits, '.', '_', '-'; "
                                          "at most 249)")
            if topic.name in names:
                raise InvalidSubscription(f"invalid {where}.name", f"{topic.name!r} is "
                                          "listed twice")
            names.add(topic.name)
        elif topic.partitions:
            raise InvalidSubscription(f"invalid {where}", "a pattern topic cannot pin "
                                      "partitions")
        numbers = [p.number for p in topic.partitions or []]
        if len(set(numbers)) != len(numbers):
            raise InvalidSubscription(f"invalid {where}.partitions",
                                      "duplicate partition numbers")
    if any(t.pattern is not None for t in topics) and any(t.partitions for t in topics):
        raise InvalidSubscription("invalid topics", "explicit partitions and patterns "
                                  "cannot be mixed in one subscription")
    _validate_patterns(topics)


def _validate_patterns(topics: list[TopicSpec]) -> None:
    trees: list[Node] = []
    for i, topic in enumerate(topics):
        if topic.pattern is not None:
            try:
                trees.append(check_pattern(topic.pattern))
            except PatternRejected as exc:
                raise InvalidSubscription(f"invalid topics[{i}].pattern", str(exc)) from None
    if trees:
        try:
            check_combined(trees, [t.name for t in topics if t.name is not None])
        except PatternRejected as exc:
            raise InvalidSubscription("invalid topics", f"the patterns together: {exc}"
                                      ) from None


def _validate_properties(properties: dict[str, str]) -> None:
    for name, value in properties.items():
        if name == "auto.offset.reset":
            if value not in ("earliest", "latest"):
                raise InvalidSubscription("invalid properties.auto.offset.reset",
                                          f"{value!r}: use 'earliest' or 'latest'")
        elif name not in INT_PROPERTIES:
            known = ", ".join(["auto.offset.reset", *INT_PROPERTIES])
            raise InvalidSubscription(f"invalid properties.{name}",
                                      f"unknown property; supported: {known}")
        elif not (value.isascii() and value.isdecimal()) or not (
                PROPERTY_RANGES[name][0] <= int(value) <= PROPERTY_RANGES[name][1]):
            low, high = PROPERTY_RANGES[name]
            raise InvalidSubscription(f"invalid properties.{name}",
                                      f"{value!r}: expected a whole number in {low}..{high}")


def _validate_method(method: Method) -> None:
    if 0 < method.maxDelayOnErrorMs < method.delayOnErrorMs:
        raise InvalidSubscription("invalid subscriptionMethod.maxDelayOnErrorMs",
                                  "must be 0 (no cap) or at least delayOnErrorMs")
    if method.deadLetterTopic is not None and not valid_topic(method.deadLetterTopic):
        raise InvalidSubscription("invalid subscriptionMethod.deadLetterTopic",
                                  f"{method.deadLetterTopic!r} is not a Kafka topic name")
    if isinstance(method, SubscriptionMethod):
        _validate_http(method)


def _validate_http(method: SubscriptionMethod) -> None:
    _validate_uri(method.uri)
    if method.method.upper() not in METHODS:
        raise InvalidSubscription("invalid subscriptionMethod.method",
                                  f"{method.method!r}: use one of {', '.join(sorted(METHODS))}")
    _validate_retry_topics(method)
    _validate_charset(method.charset)
    _validate_headers(method.additionalHeaders)
    if method.batchSize > 1 and method.method.upper() in BODYLESS_METHODS:
        raise InvalidSubscription("invalid subscriptionMethod.batchSize",
                                  f"{method.method.upper()} has no body: batches need "
                                  "POST, PUT or PATCH")
    if method.signingSecret is not None:
        _validate_secret(method.signingSecret)
    if method.tls is not None:
        _validate_tls(method.uri, method.tls)


def _validate_secret(secret: str) -> None:
    """Plain secrets are checked here; references when they are resolved
    (actors/delivery/document/secrets.py)."""
    field = "invalid subscriptionMethod.signingSecret"
    parts = secrets_of(secret)
    if not parts:
        raise InvalidSubscription(field, "signingSecret is empty")
    if len(parts) > MAX_SECRETS:
        raise InvalidSubscription(field, f"at most {MAX_SECRETS} secrets (space-separated), "
                                  f"got {len(parts)}")
    for i, part in enumerate(parts):
        _validate_reference_syntax(field, part)
        if is_reference(part):
            continue
        try:
            signing_key(part)
        except ValueError as exc:
            raise InvalidSubscription(field, f"secret {i + 1} of {len(parts)}: {exc}"
                                      if len(parts) > 1 else str(exc)) from None


def _validate_reference_syntax(field: str, value: str) -> None:
    """A value written like a reference must be one (a typo must not become a literal
    secret), and a file reference must be absolute (instances differ in working
    directory)."""
    if not (value.startswith("${") and value.endswith("}")):
        return
    if not is_reference(value):
        raise InvalidSubscription(field, f"{value!r} is not a reference: use ${{env:NAME}} "
                                  "or ${file:/absolute/path}")
    if value.startswith("${file:") and not value.startswith("${file:/"):
        raise InvalidSubscription(field, f"{value}: a file reference needs an absolute path")


def _validate_tls(uri: str, tls: TlsSettings) -> None:
    """The shape of `tls`; the files are read and matched when the subscription starts and
    at subscribe time (actors/delivery/document/tls.py)."""
    if not uri.lower().startswith("https://"):
        raise InvalidSubscription("invalid subscriptionMethod.tls",
                                  "only for an https uri")
    if tls.keyFile is not None and tls.certFile is None:
        raise InvalidSubscription("invalid subscriptionMethod.tls.keyFile",
                                  "given without certFile")
    for name in ("caFile", "certFile", "keyFile"):
        path = getattr(tls, name)
        if path is not None and not path.startswith("/"):
            raise InvalidSubscription(f"invalid subscriptionMethod.tls.{name}",
                                      f"{path!r}: use an absolute path")


def _validate_retry_topics(method: SubscriptionMethod) -> None:
    retry = method.retryTopics
    if retry is None:
        return
    if not valid_topic(retry.topic):
        raise InvalidSubscription("invalid subscriptionMethod.retryTopics.topic",
                                  f"{retry.topic!r} is not a Kafka topic name")
    if retry.topic == method.deadLetterTopic:
        raise InvalidSubscription("invalid subscriptionMethod.retryTopics.topic",
                                  "must differ from deadLetterTopic")


def retry_topic_clash(consumer: Consumer) -> None:
    """The retry topic is consumed next to the subscription's topics: it must not be one
    of them (nor match one of its patterns), or a record would be delivered twice."""
    retry = consumer.subscriptionMethod.retryTopics
    if retry is None:
        return
    for i, spec in enumerate(consumer.topics):
        if retry.topic == spec.name or (spec.pattern is not None
                                        and matches(spec.pattern, retry.topic)):
            raise InvalidSubscription("invalid subscriptionMethod.retryTopics.topic",
                                      f"{retry.topic!r} is also topics[{i}]")


def _validate_uri(uri: str) -> None:
    why = _uri_problem(uri)
    if why:
        raise InvalidSubscription("invalid subscriptionMethod.uri", f"{redact_uri(uri)!r} {why}")


def _uri_problem(uri: str) -> str:
    if not re.match(r"https?://[^/\s?#]+", uri, re.IGNORECASE) or any(c.isspace() for c in uri):
        return "is not an http(s) URL"
    try:
        parts = urllib.parse.urlsplit(uri)
        parts.port  # noqa: B018  (raises ValueError for a port out of range)
        yarl.URL(uri)  # what the egress will send to: it must take it
    except ValueError as exc:
        return f"is not a valid URL ({exc})"
    return "" if parts.hostname else "has no host"


def _validate_charset(charset: str) -> None:
    try:
        if not CHARSET.fullmatch(charset):
            raise LookupError(charset)
        codecs.lookup(charset)
        "".encode(charset)  # refuses codecs that are not text encodings (base64, rot13)
    except LookupError:
        raise InvalidSubscription("invalid subscriptionMethod.charset",
                                  f"{charset!r} is not a known text encoding") from None


_RESERVED_PREFIXES: Final = ("qoh-", "webhook-", "proxy-")
RESERVED_HEADERS: Final = frozenset({
    "content-length", "transfer-encoding", "host", "connection", "upgrade", "te", "trailer",
    "keep-alive",
})
"""Framing and hop-by-hop headers: set by the HTTP client, never by a subscription (a
`Content-Length: 0` would send the request without its body)."""


def reserved_header(name: str) -> bool:
    lowered = name.strip().lower()
    return lowered in RESERVED_HEADERS or lowered.startswith(_RESERVED_PREFIXES)


def _validate_headers(headers: dict[str, str]) -> None:
    seen: set[str] = set()
    for name, value in headers.items():
        field = f"invalid subscriptionMethod.additionalHeaders.{name}"
        if not HEADER_NAME.fullmatch(name) or len(name) > MAX_NAME:
            raise InvalidSubscription(field, f"{name!r} is not a header name (a token of "
                                      f"letters, digits and !#$%&'*+.^_`|~-, at most {MAX_NAME})")
        if reserved_header(name):
            raise InvalidSubscription(field, f"{name!r} is set by the HTTP client or by "
                                      "hookstream (framing, hop-by-hop, QOH-*, webhook-*, "
                                      "Proxy-*); it cannot be added")
        if name.lower() in seen:
            raise InvalidSubscription(field, "given twice (header names are case-insensitive)")
        seen.add(name.lower())
        if value != value.strip(" \t"):
            raise InvalidSubscription(field, "no spaces or tabs around a header value")
        _validate_reference_syntax(field, value)


# -- writing it back -------------------------------------------------------------------------
def document(consumer: Consumer, *, redact: bool) -> JSONObject:
    """The Queue-Over-Http shape of `consumer`: nested `group`, `pattern` a boolean with the
    regex in `name`, partition numbers as strings. With `redact`, as the admin API shows
    it: header values and the signing secret `***` unless they are references (which name
    where a secret is, and are shown), and the URI's user-info and query values hidden
    (`redact_uri`)."""
    wire = consumer.subscriptionMethod
    method: JSONObject = msgspec.to_builtins(wire)
    if method.get("tls") is None:
        method.pop("tls", None)  # absent, as before the field existed
    if redact and isinstance(wire, SubscriptionMethod):  # a handler's holds no secret
        method["uri"] = redact_uri(wire.uri)
        method["additionalHeaders"] = {k: v if is_reference(v) else REDACTED
                                       for k, v in wire.additionalHeaders.items()}
        if wire.signingSecret:
            method["signingSecret"] = " ".join(
                p if is_reference(p) else REDACTED for p in secrets_of(wire.signingSecret))
    return {
        "id": consumer.id,
        "group": msgspec.to_builtins(consumer.group),
        "broker": consumer.broker,
        "topics": [_topic_document(t) for t in consumer.topics],
        "subscriptionMethod": method,
        "properties": dict(consumer.properties),
    }


def _topic_document(topic: TopicSpec) -> JSONObject:
    out: JSONObject = {
        "name": topic.pattern if topic.pattern is not None else topic.name,
        "pattern": topic.pattern is not None,
        "partitions": [{"number": str(p.number)} for p in topic.partitions or []],
        "config": msgspec.to_builtins(topic.config),
    }
    if topic.filter is not None:  # absent without one, as before filters existed
        out["filter"] = filter_document(topic.filter)
    return out


def redacted(consumer: Consumer) -> JSONObject:
    """The Consumer as the admin API shows it (`document(consumer, redact=True)`)."""
    return document(consumer, redact=True)


def redact_uri(uri: str) -> str:
    """`uri` fit to show: user-info becomes `***@`, every query value `***`, a fragment
    `#***`. Scheme, host, port and path stay (a secret in a path is not recognised)."""
    try:
        parts = urllib.parse.urlsplit(uri)
    except ValueError:
        scheme, sep, _ = uri.partition("://")
        return f"{scheme}://***" if sep and scheme.isalpha() else "***"
    netloc = parts.netloc
    if "@" in netloc:
        netloc = "***@" + netloc.rpartition("@")[2]
    query = "&".join(redact_pair(pair) for pair in parts.query.split("&")) if parts.query else ""
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, query,
                                    "***" if parts.fragment else ""))


def redact_pair(pair: str) -> str:
    name, sep, _ = pair.partition("=")
    return f"{name}=***" if sep else "***"


def summary(consumer: Consumer) -> str:
    """A subscription in a log line: its topics and where its records go."""
    topics = ", ".join(t.name or f"/{t.pattern}/" for t in consumer.topics)
    method = consumer.subscriptionMethod
    if isinstance(method, HandlerMethod):
        return f"{topics} -> handler {method.handler}"
    return f"{topics} -> {method.method} {redact_uri(method.uri)}"
