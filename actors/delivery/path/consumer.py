"""ConsumerActor: the `AIOKafkaConsumer` of a subscription with pinned `partitions[]`.

Subscriptions that the group assigns partitions to ride a shared member instead (one per
group, actors/delivery/path/member.py); this actor keeps manual assignment.

The fetch loop, positions, commits and rebalance handling are `GroupConsumerActor`'s;
this class says how a subscription subscribes and builds its `PartitionActor`s.

Explicit `partitions[]` in the subscription use manual assignment (no group membership),
still committing to the group. A pattern cannot pin partitions, so no pattern ever
reaches this actor's client (the instance member matches patterns itself with RE2).
"""

from __future__ import annotations

from dataclasses import dataclass

from aiokafka import AIOKafkaConsumer, TopicPartition

from actors.delivery.document.settings import CursorsOf, largest_buffer
from actors.delivery.document.subscription import INT_PROPERTIES, Consumer
from actors.delivery.path.partition import STALL_AFTER_MS, PartitionActor, PartitionPeers
from actors.shared.group_consumer import (
    ClientSettings,
    GroupConsumerActor,
    Wiring,
    child_name,
    group_client_settings,
)
from runtime.host.metrics import Registry
from runtime.kernel import Ref

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


def fetch_size(sub: Consumer) -> int:
    """One fetch brings at most about one prefetch buffer: a partition is paused when its
    buffer is full, so it then holds less than twice its buffer."""
    return min(MAX_FETCH_RECORDS, max(largest_buffer(sub), MIN_FETCH_RECORDS))


def subscription_client_settings(sub: Consumer, client_id: str) -> ClientSettings:
    """The client settings a subscription asks for: its `properties` over our defaults.
    Subscriptions of one group whose settings are equal share a group member
    (actors/delivery/path/member.py)."""
    uses_pattern = any(t.pattern for t in sub.topics)
    settings = group_client_settings(sub.group_id, client_id,
                                     auto_offset_reset=sub.properties.get(
                                         "auto.offset.reset", "earliest"),
                                     session_timeout_ms=SESSION_TIMEOUT_MS)
    # a pattern picks up topics created later: refresh metadata often
    settings["metadata_max_age_ms"] = (PATTERN_METADATA_MAX_AGE_MS if uses_pattern
                                       else METADATA_MAX_AGE_MS)
    for name, value in sub.properties.items():
        if name in INT_PROPERTIES:
            settings[INT_PROPERTIES[name]] = int(value)
    return settings


def instance_client_settings(group_id: str, session_timeout_ms: int) -> ClientSettings:
    """The client settings of an instance member (actors/delivery/path/member.py): it
    reads for every subscription, so none of their `properties` applies; each cursor
    starts at its own group's commit or `auto.offset.reset`. The member lists the
    cluster's topics for its patterns every `PATTERN_METADATA_MAX_AGE_MS` itself; the
    client's metadata (of the topics subscribed to) is refreshed as often, so that new
    partitions are found soon too."""
    settings = group_client_settings(group_id, "hookstream-instance",
                                     auto_offset_reset="earliest",
                                     session_timeout_ms=session_timeout_ms)
    settings["metadata_max_age_ms"] = PATTERN_METADATA_MAX_AGE_MS
    return settings


class ConsumerActor(GroupConsumerActor):
    def __init__(self, name: str, sub: Consumer, wiring: Wiring, deps: ConsumerDeps) -> None:
        super().__init__(name, wiring)
        self.sub = sub
        self.deps = deps
        self._reset = sub.properties.get("auto.offset.reset", "earliest")

    def tracks_highwater(self) -> bool:
        return True

    def client_settings(self) -> ClientSettings:
        return subscription_client_settings(self.sub, f"hookstream-{self.sub.key}")

    async def subscribe(self, kafka: AIOKafkaConsumer) -> None:
        if any(t.partitions for t in self.sub.topics):
            await kafka.topics()  # metadata, for topics listed without partitions
            tps = self._explicit_partitions(kafka)
            kafka.assign(list(tps))
            await self.assign(tps)
        else:
            kafka.subscribe(topics=[t.name for t in self.sub.topics if t.name],
                            listener=self.listener)

    def _explicit_partitions(self, kafka: AIOKafkaConsumer) -> set[TopicPartition]:
        tps: set[TopicPartition] = set()
        for spec in self.sub.topics:
            assert spec.name is not None  # validated: patterns cannot pin partitions
            if spec.partitions:
                tps.update(TopicPartition(spec.name, p.number) for p in spec.partitions)
            else:
                known = kafka.partitions_for_topic(spec.name)
                if not known:
                    raise LookupError(f"topic {spec.name!r} not found on the broker")
                tps.update(TopicPartition(spec.name, p) for p in known)
        return tps

    def build_child(self, tp: TopicPartition, epoch: int) -> PartitionActor:
        peers = PartitionPeers(self, self.deps.egress, self.deps.deadletter,
                               self.deps.retrytopic)
        return PartitionActor(child_name(tp), self.deps.cursors(tp.topic), tp.topic,
                              tp.partition, epoch, peers, self.deps.metrics,
                              self.deps.stall_after_ms)

    def reset_to_beginning(self) -> bool:
        return self._reset == "earliest"

    def journal_subscription(self) -> str | None:
        return self.sub.key

