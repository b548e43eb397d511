"""DelayService: the Kafka-native delay queue as a supervised actor tree.

Tree, under the runtime's root supervisor::

    delay (one_for_all)
    ├── producer        ForwardProducerActor: the shared acks=all forward producer
    ├── partitions      Supervisor (one_for_one): one DelayActor per level-topic partition
    └── consumer        DelayConsumerActor: the AIOKafkaConsumer of the level topics

`one_for_all` because the actors share the consumer's positions and the producer: when
one of the three dies, the queue restarts from the committed offsets. Children stop in
reverse, so the consumer drains its delay actors and commits while the producer still
runs. A single delay actor that crashes is restarted alone by `partitions`.

Start creates the level topics (`delay.partitions` partitions each, an existing topic is
fine) and the dead-letter topic, then the tree, and opens the producer behind
`runtime.delay.send(...)`. Without `[[delay.levels]]` it starts nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from aiokafka.structs import RecordMetadata

from actors.delay.actor import DelaySettings
from actors.delay.consumer import DelayConsumerActor, DelayConsumerDeps, delay_wiring
from actors.delay.forwarder import ForwardProducerActor
from actors.delay.levels import add_levels_route
from actors.delay.producer import DelayProducer
from runtime.errors import UsageError
from runtime.host.config import DelayConfig
from runtime.kafka import create_topics
from runtime.kernel.supervisor import ChildRef, ChildSpec, Supervisor

if TYPE_CHECKING:
    from runtime.host.app import Runtime

log = logging.getLogger(__name__)


class DelayService:
    name = "delay"

    def __init__(self, *, drain_ms: int | None = None,
                 consumer_settings: Mapping[str, object] | None = None) -> None:
        """`drain_ms` and `consumer_settings` (AIOKafkaConsumer settings) override what
        `[delay]` configures (`drain_ms`, `session_timeout_ms`)."""
        self._drain_override = drain_ms
        # How long a revoked or stopping partition keeps forwarding what falls due (records
        # due later stay uncommitted for the next owner): `[delay] drain_ms` unless given.
        self.drain_ms = 0
        self.consumer_settings = dict(consumer_settings or {})
        self.settings: DelaySettings | None = None
        self._runtime: Runtime | None = None
        self._producer: DelayProducer | None = None
        self._root: ChildRef | None = None
        self._broker = ""

    # -- lifecycle ---------------------------------------------------------------------
    async def start(self, runtime: Runtime) -> None:
        cfg = runtime.config.delay
        self._runtime = runtime
        if not cfg.levels:
            log.info("no [[delay.levels]] configured: the delay queue is off")
            return
        add_levels_route(runtime.admin.app, cfg.levels, runtime.metrics)
        broker = self._broker = cfg.broker or runtime.config.brokers[0].name
        self.drain_ms = cfg.drain_ms if self._drain_override is None else self._drain_override
        self.consumer_settings = {
            "session_timeout_ms": cfg.session_timeout_ms,
            "heartbeat_interval_ms": max(cfg.session_timeout_ms // 6, 100),
            **self.consumer_settings,
        }
        settings = self.settings = _settings(cfg, runtime.bootstrap(broker), self.drain_ms)
        await create_topics(settings.bootstrap, _topics(cfg))
        try:
            self._producer = DelayProducer(settings.bootstrap, cfg.levels, clock=runtime.clock)
            await self._producer.start()
            self._root = await runtime.system.spawn(ChildSpec(
                "delay", self._tree, shutdown_ms=self.drain_ms + 6000))
        except BaseException:
            await self.stop()
            raise
        log.info("delay queue: levels %s, group %s",
                 ", ".join(f"{lv.name}={lv.delay_ms}ms" for lv in cfg.levels),
                 settings.group_id)

    def _tree(self) -> Supervisor:
        return Supervisor("delay", "one_for_all", intensity=5, period_ms=30_000,
                          children=self._children)

    def _children(self, sup: Supervisor) -> list[ChildSpec]:
        assert self._runtime is not None and self.settings is not None
        settings = self.settings
        wiring = delay_wiring(ChildRef(sup, "partitions"), settings,
                              self._runtime.consumer_settings(self._broker))
        deps = DelayConsumerDeps(ChildRef(sup, "producer"), settings, self._runtime.metrics,
                                 self.consumer_settings)
        return [
            ChildSpec("producer", lambda: ForwardProducerActor("producer", settings.bootstrap)),
            ChildSpec("partitions", lambda: Supervisor("partitions", "one_for_one",
                                                       intensity=10, period_ms=10_000),
                      shutdown_ms=self.drain_ms + 3000),
            ChildSpec("consumer", lambda: DelayConsumerActor("consumer", wiring, deps),
                      shutdown_ms=self.drain_ms + 4000),
        ]

    async def stop(self) -> None:
        """Drain and commit (consumer first), then close the send producer. Idempotent."""
        root, self._root = self._root, None
        try:
            if root is not None and self._runtime is not None:
                system_root = self._runtime.system.root
                if system_root.alive and system_root.has_child(root.name):
                    await system_root.stop_child(root.name)
        finally:  # even when the shutdown deadline cancels us: flush what send() queued
            producer, self._producer = self._producer, None
            if producer is not None:
                await producer.stop()

    # -- the library call --------------------------------------------------------------
    async def send(self, target: str, value: bytes | None, key: bytes | None = None,
                   headers: Sequence[tuple[str, bytes]] | None = None,
                   delay_ms: int | None = None, due_ms: int | None = None) -> RecordMetadata:
        """Deliver `value` to topic `target` after `delay_ms` (or at epoch ms `due_ms`);
        returns when the level topic acknowledged it. See `DelayProducer.send`."""
        if self._producer is None:
            raise UsageError(
                "the delay queue is not running: add [[delay.levels]] (name, delay_ms, "
                "topics) to the config" if self.settings is None else
                "the delay queue is stopped")
        return await self._producer.send(target, value, key, headers, delay_ms, due_ms)

    # -- introspection -----------------------------------------------------------------
    def assignment(self) -> set[tuple[str, int]]:
        """The level-topic partitions this instance forwards right now."""
        consumer = self._consumer()
        return {(tp.topic, tp.partition) for tp in consumer.owned} if consumer else set()

    def _consumer(self) -> DelayConsumerActor | None:
        if self._root is None:
            return None
        sup = self._root.actor
        if not isinstance(sup, Supervisor) or not sup.has_child("consumer"):
            return None
        consumer = sup.child("consumer")
        return consumer if isinstance(consumer, DelayConsumerActor) else None

    def __repr__(self) -> str:
        levels = [lv.name for lv in self.settings.levels] if self.settings else []
        return f"<DelayService levels={levels} assignment={sorted(self.assignment())}>"


def _settings(cfg: DelayConfig, bootstrap: str, drain_ms: int) -> DelaySettings:
    return DelaySettings(bootstrap=bootstrap, group_id=cfg.group_id, levels=tuple(cfg.levels),
                         dead_letter_topic=cfg.dead_letter_topic,
                         max_waiting=cfg.max_waiting_records, drain_ms=drain_ms)


def _topics(cfg: DelayConfig) -> dict[str, int]:
    topics = {t: cfg.partitions for level in cfg.levels for t in level.topics}
    topics.setdefault(cfg.dead_letter_topic, cfg.partitions)
    return topics
