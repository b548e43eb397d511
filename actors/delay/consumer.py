"""DelayConsumerActor: the only owner of the `AIOKafkaConsumer` that reads the level topics.

One per runtime instance, in the delay queue's consumer group (`delay.group_id`): Kafka
spreads the level-topic partitions over the instances, and moves a dead instance's
partitions to the others, which resume from the committed offsets. The fetch loop,
positions and commits are `GroupConsumerActor`'s (the same as the pinned-partition
consumer's), the rebalance listener `RebalancingConsumerActor`'s; this class subscribes
to the level topics and builds `DelayActor`s. Exactly-once levels commit their offsets
in their own transactions, never here.

Reads are `read_committed`: cascades out of exactly-once levels are transactional writes
to level topics, and an aborted one must not be forwarded.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from aiokafka import AIOKafkaConsumer, TopicPartition

from actors.delay.actor import DelayActor, DelayPeers, DelaySettings
from actors.shared.group_consumer import (
    ClientSettings,
    Wiring,
    child_name,
    group_client_settings,
)
from actors.shared.rebalance import RebalancingConsumerActor
from runtime.host.metrics import Registry
from runtime.kernel import ChildRef

MAX_RECORDS = 2000
SESSION_TIMEOUT_MS = 10_000


@dataclass(slots=True)
class DelayConsumerDeps:
    producer: ChildRef
    """The ForwardProducerActor."""
    settings: DelaySettings
    metrics: Registry
    client: ClientSettings = field(default_factory=dict)
    """Consumer setting overrides (`[delay] session_timeout_ms`, tests)."""


def delay_wiring(partitions: ChildRef, settings: DelaySettings,
                 broker_settings: ClientSettings) -> Wiring:
    # A partition pauses at max_waiting, before the next fetch; fetches stay below it too,
    # so a wheel holds less than 2 x max_waiting.
    return Wiring(partitions, settings.bootstrap, settings.drain_ms,
                  min(MAX_RECORDS, settings.max_waiting), broker_settings)


class DelayConsumerActor(RebalancingConsumerActor):
    def __init__(self, name: str, wiring: Wiring, deps: DelayConsumerDeps) -> None:
        super().__init__(name, wiring)
        self.deps = deps
        self.settings = deps.settings
        self._eos_topics = frozenset(t for lv in self.settings.levels if lv.exactly_once
                                     for t in lv.topics)

    def client_settings(self) -> ClientSettings:
        settings = group_client_settings(self.settings.group_id, "hookstream-delay",
                                         auto_offset_reset="earliest",
                                         session_timeout_ms=SESSION_TIMEOUT_MS)
        settings["isolation_level"] = "read_committed"  # see the module docstring
        return {**settings, **self.deps.client}

    async def subscribe(self, kafka: AIOKafkaConsumer) -> None:
        topics = [t for level in self.settings.levels for t in level.topics]
        kafka.subscribe(topics=topics, listener=self.listener)

    def build_child(self, tp: TopicPartition, epoch: int) -> DelayActor:
        peers = DelayPeers(self, self.deps.producer)
        return DelayActor(child_name(tp), tp.topic, tp.partition, epoch, self.settings, peers,
                          self.deps.metrics)

    async def commit(self, kafka: AIOKafkaConsumer, commits: dict[TopicPartition, int]) -> None:
        # an exactly-once level's actor asks for none; kept out all the same
        await super().commit(kafka, {tp: offset for tp, offset in commits.items()
                                     if tp.topic not in self._eos_topics})
