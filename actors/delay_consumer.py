"""DelayConsumerActor: the only owner of the `AIOKafkaConsumer` that reads the level topics.

One per runtime instance, in the delay queue's consumer group (`delay.group_id`): Kafka
spreads the level-topic partitions over the instances, and moves a dead instance's
partitions to the others, which resume from the committed offsets. Same shape as the
delivery path's `ConsumerActor`: its fetch loop (an owned task) applies what delay actors
asked for (rewinds, pause/resume, commits batched into one call), then `getmany`, and
hands each partition's records to its `DelayActor`.

Rebalance. On revoke each revoked partition's actor drains (in parallel, within
`drain_ms`), the consumer commits the at-least-once positions, then stops the actors; on
assignment it starts a `DelayActor` per new partition. Exactly-once levels commit their
offsets in their own transactions, never here.

Reads are `read_committed`: cascades out of exactly-once levels are transactional writes
to level topics, and an aborted one must not be forwarded.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import KafkaError
from aiokafka.structs import OffsetAndMetadata

from actors.delay import Assigned, DelayActor, DelayPeers, DelaySettings, Drain, Rewind
from actors.messages import Batch, CommitRequest, FlowControl, Record
from runtime.actor import Actor
from runtime.errors import ActorDeadError
from runtime.journal import Event
from runtime.kafka import make_consumer
from runtime.metrics import Registry
from runtime.supervisor import ChildSpec, Supervisor

log = logging.getLogger(__name__)
MAX_RECORDS = 2000


@dataclass(slots=True)
class DelayConsumerDeps:
    partitions: Any  # ChildRef to the Supervisor of the delay actors
    producer: Any  # ChildRef to the ForwardProducerActor
    settings: DelaySettings
    metrics: Registry
    client: dict[str, Any] = field(default_factory=dict)  # consumer setting overrides
    epochs: dict[TopicPartition, int] = field(default_factory=dict)


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]  # aiokafka is untyped
    def __init__(self, owner: DelayConsumerActor) -> None:
        self.owner = owner

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        await self.owner.revoke(set(revoked))

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        await self.owner.assign(set(assigned))


class DelayConsumerActor(Actor):
    mailbox_capacity = 4096

    def __init__(self, name: str, deps: DelayConsumerDeps) -> None:
        super().__init__(name)
        self.deps = deps
        self.settings = deps.settings
        self.kafka: AIOKafkaConsumer | None = None
        self.owned: set[TopicPartition] = set()
        self._eos_topics = frozenset(t for lv in self.settings.levels if lv.exactly_once
                                     for t in lv.topics)
        self._rewinds: dict[TopicPartition, int] = {}
        self._flow: dict[TopicPartition, bool] = {}
        self._commits: dict[TopicPartition, int] = {}
        # A partition pauses at max_waiting, before the next fetch (see `_hand_over`);
        # fetches stay below it too, so a wheel holds less than 2 x max_waiting.
        self._max_records = min(MAX_RECORDS, self.settings.max_waiting)

    # -- lifecycle ---------------------------------------------------------------------
    async def on_start(self) -> None:
        topics = [t for level in self.settings.levels for t in level.topics]
        self.kafka = make_consumer(self.settings.bootstrap, **self._client_settings())
        await self.kafka.start()
        self.kafka.subscribe(topics=topics, listener=_Listener(self))
        self.spawn(self._fetch_loop(), name=f"{self.path}:fetch")

    def _client_settings(self) -> dict[str, Any]:
        return {
            "group_id": self.settings.group_id,
            "client_id": "hookstream-delay",
            "enable_auto_commit": False,
            "auto_offset_reset": "earliest",
            "isolation_level": "read_committed",
            "max_partition_fetch_bytes": 4 * 1024 * 1024,
            "session_timeout_ms": 10_000,
            "heartbeat_interval_ms": 1_000,
            "max_poll_interval_ms": 300_000,
            **self.deps.client,
        }

    async def on_stop(self) -> None:
        # the fetch task is already cancelled: drain and commit what is ours, then leave
        kafka, self.kafka = self.kafka, None
        if kafka is None:
            return
        try:
            await self._revoke_with(kafka, set(self.owned))
        finally:
            await kafka.stop()

    # -- messages ----------------------------------------------------------------------
    async def handle(self, message: Any) -> None:
        if isinstance(message, CommitRequest):
            tp = TopicPartition(message.topic, message.partition)
            if tp in self.owned and self.deps.epochs.get(tp) == message.epoch:
                self._commits[tp] = message.offset
        elif isinstance(message, FlowControl):
            self._flow[TopicPartition(message.topic, message.partition)] = message.paused
        elif isinstance(message, Rewind):
            self._rewinds[TopicPartition(message.topic, message.partition)] = message.epoch
        else:
            raise TypeError(f"{self.path}: unexpected message {message!r}")

    # -- the fetch loop ----------------------------------------------------------------
    async def _fetch_loop(self) -> None:
        kafka = self.kafka
        assert kafka is not None
        while True:
            await self._apply_requests(kafka)
            batches = await kafka.getmany(timeout_ms=100, max_records=self._max_records)
            now = self.context.clock.monotonic_ms()
            for tp, messages in batches.items():
                if messages:
                    await self._hand_over(kafka, tp, messages, now)

    async def _hand_over(self, kafka: AIOKafkaConsumer, tp: TopicPartition,
                         messages: list[Any], now_ms: int) -> None:
        records = [
            Record(m.topic, m.partition, m.offset, m.key, m.value, tuple(m.headers or ()),
                   m.timestamp, now_ms)
            for m in messages
        ]
        try:
            # ask, not tell: the reply says whether the partition is full, and the pause
            # takes effect before the next fetch, so memory stays bounded.
            paused = await self._actor(tp).ask(Batch(records, kafka.highwater(tp)))
        except ActorDeadError:
            return  # restarting: its next incarnation rewinds to the committed offset
        except Exception:  # the actor crashed with it; its supervisor restarts it
            return
        if paused and tp in self.owned:
            kafka.pause(tp)

    def _actor(self, tp: TopicPartition) -> Actor:
        sup: Supervisor = self.deps.partitions.actor
        return sup.child(_child_name(tp))

    async def _apply_requests(self, kafka: AIOKafkaConsumer) -> None:
        rewinds, self._rewinds = self._rewinds, {}
        for tp, epoch in rewinds.items():
            await self._rewind(kafka, tp, epoch)
        flow, self._flow = self._flow, {}
        for tp, paused in flow.items():
            if tp in self.owned:
                (kafka.pause if paused else kafka.resume)(tp)
        commits, self._commits = self._commits, {}
        if commits:
            await self._commit(kafka, commits)

    async def _rewind(self, kafka: AIOKafkaConsumer, tp: TopicPartition, epoch: int) -> None:
        if tp not in self.owned or self.deps.epochs.get(tp) != epoch:
            return
        committed = await kafka.committed(tp)
        if committed is not None:
            kafka.seek(tp, committed)
        else:
            await kafka.seek_to_beginning(tp)
        kafka.resume(tp)
        with contextlib.suppress(ActorDeadError):  # died again already: its successor asks
            await self._actor(tp).tell(Assigned(committed, epoch))

    async def _commit(self, kafka: AIOKafkaConsumer,
                      commits: dict[TopicPartition, int]) -> None:
        owned = {tp: off for tp, off in commits.items()
                 if tp in self.owned and tp.topic not in self._eos_topics}
        if not owned:
            return
        try:
            await kafka.commit({tp: OffsetAndMetadata(off, "") for tp, off in owned.items()})
        except KafkaError as exc:
            # a rebalance in progress: the next owner resumes from the last good commit
            log.warning("%s: commit failed (%r); records may be forwarded again", self.path,
                        exc)

    # -- rebalance ---------------------------------------------------------------------
    async def assign(self, tps: set[TopicPartition]) -> None:
        sup: Supervisor = self.deps.partitions.actor
        for tp in sorted(tps):
            if tp in self.owned:
                continue
            self.owned.add(tp)
            await sup.start_child(ChildSpec(_child_name(tp), self._actor_factory(tp),
                                            restart="transient",
                                            shutdown_ms=self.settings.drain_ms + 2000))
            self._journal_partition("partition_assigned", tp)

    def _actor_factory(self, tp: TopicPartition) -> Any:
        def build() -> DelayActor:
            epoch = self.deps.epochs.get(tp, 0) + 1
            self.deps.epochs[tp] = epoch
            peers = DelayPeers(self, self.deps.producer)
            return DelayActor(_child_name(tp), tp.topic, tp.partition, epoch, self.settings,
                              peers, self.deps.metrics)

        return build

    async def revoke(self, tps: set[TopicPartition]) -> None:
        if self.kafka is not None:
            await self._revoke_with(self.kafka, tps)

    async def _revoke_with(self, kafka: AIOKafkaConsumer, tps: set[TopicPartition]) -> None:
        tps &= self.owned
        if not tps:
            return
        ordered = sorted(tps)
        positions = await asyncio.gather(*(self._drain(tp) for tp in ordered))
        final = {tp: pos for tp, pos in zip(ordered, positions, strict=True) if pos is not None}
        await self._commit(kafka, final)
        sup: Supervisor = self.deps.partitions.actor
        for tp in ordered:
            self.owned.discard(tp)
            self._commits.pop(tp, None)
            if sup.alive and sup.has_child(_child_name(tp)):
                await sup.stop_child(_child_name(tp))
            self._journal_partition("partition_revoked", tp)

    async def _drain(self, tp: TopicPartition) -> int | None:
        done: asyncio.Future[int | None] = asyncio.get_running_loop().create_future()
        drain_ms = self.settings.drain_ms
        deadline = self.context.clock.monotonic_ms() + drain_ms
        try:
            await self._actor(tp).tell(Drain(deadline, done))
            return await asyncio.wait_for(done, drain_ms / 1000 + 1)
        except (ActorDeadError, TimeoutError):
            return None  # nothing trustworthy to commit: the last commit stands

    def _journal_partition(self, kind: str, tp: TopicPartition) -> None:
        self.context.emit(Event(type=kind, ts_ms=self.context.clock.wall_ms(),
                                topic=tp.topic, partition=tp.partition, actor=self.path))

    def __repr__(self) -> str:
        return (f"<DelayConsumerActor group={self.settings.group_id} owned={len(self.owned)} "
                f"pending_commits={len(self._commits)} mailbox={len(self._mailbox)}>")


def _child_name(tp: TopicPartition) -> str:
    return f"{tp.topic}-{tp.partition}"
