"""ConsumerActor: the `AIOKafkaConsumer` of a subscription with pinned `partitions[]`.

Subscriptions that the group assigns partitions to ride a shared member instead (one per
group, actors/delivery/path/member/); this actor keeps manual assignment.

The fetch loop, positions and commits are `GroupConsumerActor`'s; this class assigns
the subscription's partitions, builds its `PartitionActor`s and tells those of paused
partitions their high watermark (their lag grows while they wait).

Explicit `partitions[]` in the subscription use manual assignment (no group membership:
no rebalance ever reaches this actor), still committing to the group. A topic named
without partitions is read on all its partitions. A pattern cannot pin partitions, so
no pattern ever reaches this actor's client (the instance member matches patterns
itself with RE2).
"""

from __future__ import annotations

from dataclasses import dataclass

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
from aiokafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor

from actors.delivery.document.settings import CursorsOf, ReaderSettings
from actors.delivery.path.partition import STALL_AFTER_MS, PartitionActor, PartitionPeers
from actors.shared.group_consumer import (
    HIGHWATER_REFRESH_MS,
    ClientSettings,
    GroupConsumerActor,
    Wiring,
    child_name,
    group_client_settings,
)
from actors.shared.messages import Highwater
from runtime.host.metrics import Registry
from runtime.kafka import compat
from runtime.kafka.highwater import read_highwaters
from runtime.kernel import Ref, within

PATTERN_METADATA_MAX_AGE_MS = 3000
METADATA_MAX_AGE_MS = 60_000
SESSION_TIMEOUT_MS = 6_000
MIN_FETCH_RECORDS = 100
MAX_FETCH_RECORDS = 2000


@dataclass(slots=True)
class ConsumerDeps:
    """What a consumer actor needs from its subscription: refs that follow restarts."""

    egress: Ref
    deadletter: Ref | None
    metrics: Registry
    cursors: CursorsOf  # each topic's cursor settings, built once per topic
    stall_after_ms: int = STALL_AFTER_MS
    retrytopic: Ref | None = None  # with subscriptionMethod.retryTopics


def fetch_size(largest_buffer: int) -> int:
    """One fetch brings at most about one prefetch buffer (the largest of a subscription's
    topic entries, `document.settings.largest_buffer`): a partition is paused when its
    buffer is full, so it then holds less than twice its buffer."""
    return min(MAX_FETCH_RECORDS, max(largest_buffer, MIN_FETCH_RECORDS))


def subscription_client_settings(reader: ReaderSettings, client_id: str) -> ClientSettings:
    """The client settings a subscription asks for: its `properties` over our defaults."""
    settings = group_client_settings(reader.group_id, client_id,
                                     auto_offset_reset=reader.auto_offset_reset,
                                     session_timeout_ms=SESSION_TIMEOUT_MS)
    # a pattern picks up topics created later: refresh metadata often
    settings["metadata_max_age_ms"] = (PATTERN_METADATA_MAX_AGE_MS if reader.uses_pattern
                                       else METADATA_MAX_AGE_MS)
    settings.update(reader.client)
    return settings


def instance_client_settings(group_id: str, session_timeout_ms: int) -> ClientSettings:
    """The client settings of an instance member (actors/delivery/path/member/): it
    reads for every subscription, so none of their `properties` applies; each cursor
    starts at its own group's commit or `auto.offset.reset`. The member lists the
    cluster's topics for its patterns every `PATTERN_METADATA_MAX_AGE_MS` itself; the
    client's metadata (of the topics subscribed to) is refreshed as often, so that new
    partitions are found soon too."""
    settings = group_client_settings(group_id, "hookstream-instance",
                                     auto_offset_reset="earliest",
                                     session_timeout_ms=session_timeout_ms)
    settings["metadata_max_age_ms"] = PATTERN_METADATA_MAX_AGE_MS
    # sticky first (a failover moves only the dead instance's partitions, issue 32 item
    # 6); round robin too, so a group with an instance of an older version still agrees
    settings["partition_assignment_strategy"] = (StickyPartitionAssignor,
                                                 RoundRobinPartitionAssignor)
    return settings


class ConsumerActor(GroupConsumerActor):
    def __init__(self, name: str, reader: ReaderSettings, wiring: Wiring,
                 deps: ConsumerDeps) -> None:
        super().__init__(name, wiring, subscription=reader.subscription)
        self.reader = reader
        self.deps = deps
        self._highwater_due = 0
        self._told_highwater: dict[TopicPartition, int] = {}

    def client_settings(self) -> ClientSettings:
        reader = self.reader
        return subscription_client_settings(reader, f"hookstream-{reader.subscription}")

    async def subscribe(self, kafka: AIOKafkaConsumer) -> None:
        await kafka.topics()  # metadata, for topics listed without partitions
        tps = self._explicit_partitions(kafka)
        kafka.assign(list(tps))
        await self.assign(tps)

    def _explicit_partitions(self, kafka: AIOKafkaConsumer) -> set[TopicPartition]:
        tps: set[TopicPartition] = set()
        for topic, pinned in self.reader.topics.items():
            if pinned:
                tps.update(TopicPartition(topic, number) for number in pinned)
            else:
                known = kafka.partitions_for_topic(topic)
                if not known:
                    raise LookupError(f"topic {topic!r} not found on the broker")
                tps.update(TopicPartition(topic, p) for p in known)
        return tps

    def build_child(self, tp: TopicPartition, epoch: int) -> PartitionActor:
        peers = PartitionPeers(self, self.deps.egress, self.deps.deadletter,
                               self.deps.retrytopic)
        return PartitionActor(child_name(tp), self.deps.cursors(tp.topic), tp.topic,
                              tp.partition, epoch, peers, self.deps.metrics,
                              self.deps.stall_after_ms)

    # -- the high watermarks of paused partitions --------------------------------------
    async def apply_requests(self, kafka: AIOKafkaConsumer) -> None:
        await super().apply_requests(kafka)
        await self._refresh_paused_highwaters(kafka)

    async def _refresh_paused_highwaters(self, kafka: AIOKafkaConsumer) -> None:
        """Every `HIGHWATER_REFRESH_MS`: the high watermark of each paused partition (one
        request per leader, runtime/kafka/highwater.py), told to its actor when it moved."""
        now = self.context.clock.monotonic_ms()
        if now < self._highwater_due:
            return
        self._highwater_due = now + HIGHWATER_REFRESH_MS
        starts = {tp: hw for tp in kafka.paused()
                  if tp in self.owned and (hw := kafka.highwater(tp)) is not None}
        for tp, highwater in (await self._read_highwaters(kafka, starts)).items():
            if tp in self.owned and self._told_highwater.get(tp) != highwater:
                self._told_highwater[tp] = highwater
                self.partition_actor(tp).tell_system(Highwater(highwater))

    async def _read_highwaters(self, kafka: AIOKafkaConsumer,
                               starts: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        """The high watermarks of `starts`, within `HIGHWATER_REFRESH_MS` of the fetch
        loop's time: a broker that does not answer must not hold commits and flow control
        for a request timeout."""
        if not starts:
            return {}
        try:
            return await within(self.context.clock,
                                read_highwaters(compat.client_of(kafka), starts),
                                HIGHWATER_REFRESH_MS)
        except TimeoutError:
            return {}

    def forget(self, tp: TopicPartition) -> None:
        self._told_highwater.pop(tp, None)  # a later owner's actor hears it anew
