"""ConsumerActor: one per subscription, the only owner of its `AIOKafkaConsumer`.

Its fetch loop (a task it owns) alternates between applying what partition actors asked
for (rewinds, pause/resume, commits, batched into one commit call) and `getmany`, whose
batches it hands to the partition actors. Requests arrive as messages; the handler only
records them, so the fetch loop is the single place that calls the Kafka client.

Rebalance. aiokafka awaits the listener while the group rebalances: on revoke we drain
each revoked partition actor (in parallel, within `drain_ms`), commit their positions,
then stop them; on assignment we start a partition actor per new partition. Explicit
`partitions[]` in the subscription use manual assignment (no group membership), still
committing to the group. A topic `pattern` subscribes by regex; metadata is refreshed
every few seconds so that topics created later are picked up.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import KafkaError
from aiokafka.structs import OffsetAndMetadata

from actors.messages import Batch, CommitRequest, FlowControl, Record
from actors.partition import (
    Assigned,
    Drain,
    PartitionActor,
    PartitionPeers,
    Rewind,
    buffer_limit,
)
from actors.subscription import INT_PROPERTIES, Consumer
from runtime.actor import Actor
from runtime.errors import ActorDeadError
from runtime.journal import Event
from runtime.kafka import make_consumer
from runtime.metrics import Registry
from runtime.supervisor import ChildSpec, Supervisor

log = logging.getLogger(__name__)
PATTERN_METADATA_MAX_AGE_MS = 3000
MIN_FETCH_RECORDS = 100
POLL_MS = 100
# While a partition is paused its resume request waits for the poll to return: a long poll
# on the other partitions (or on none: all paused) would starve it for up to POLL_MS.
PAUSED_POLL_MS = 5


@dataclass(slots=True)
class ConsumerDeps:
    """What a consumer actor needs from its subscription: refs that follow restarts."""

    partitions: Any  # ChildRef to the partitions Supervisor
    egress: Any
    deadletter: Any | None
    metrics: Registry
    bootstrap: str
    drain_ms: int = 3000
    max_records: int = 2000
    epochs: dict[TopicPartition, int] = field(default_factory=dict)


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]  # aiokafka is untyped
    def __init__(self, owner: ConsumerActor) -> None:
        self.owner = owner

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        await self.owner.revoke(set(revoked))

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        await self.owner.assign(set(assigned))


class ConsumerActor(Actor):
    mailbox_capacity = 4096

    def __init__(self, name: str, sub: Consumer, deps: ConsumerDeps) -> None:
        super().__init__(name)
        self.sub = sub
        self.deps = deps
        self.kafka: AIOKafkaConsumer | None = None
        self.owned: set[TopicPartition] = set()
        self._rewinds: dict[TopicPartition, int] = {}
        self._flow: dict[TopicPartition, bool] = {}
        self._commits: dict[TopicPartition, int] = {}
        self._reset = sub.properties.get("auto.offset.reset", "earliest")
        # One fetch brings at most about one prefetch buffer: a partition is paused when
        # its buffer is full, so it then holds less than twice its buffer.
        largest_buffer = max(buffer_limit(t.config) for t in sub.topics)
        self._max_records = min(deps.max_records, max(largest_buffer, MIN_FETCH_RECORDS))

    # -- lifecycle ---------------------------------------------------------------------
    async def on_start(self) -> None:
        self.kafka = make_consumer(self.deps.bootstrap, **self._client_settings())
        await self.kafka.start()
        try:
            await self._subscribe(self.kafka)
        except BaseException:
            await self.kafka.stop()
            raise
        self.spawn(self._fetch_loop(), name=f"{self.path}:fetch")

    def _client_settings(self) -> dict[str, Any]:
        uses_pattern = any(t.pattern for t in self.sub.topics)
        settings: dict[str, Any] = {
            "group_id": self.sub.group_id,
            "client_id": f"hookstream-{self.sub.key}",
            "enable_auto_commit": False,
            "auto_offset_reset": self._reset,
            "metadata_max_age_ms": PATTERN_METADATA_MAX_AGE_MS if uses_pattern else 60_000,
            "max_partition_fetch_bytes": 4 * 1024 * 1024,
            "session_timeout_ms": 6_000,
            "heartbeat_interval_ms": 1_000,
            "max_poll_interval_ms": 300_000,
        }
        for name, value in self.sub.properties.items():
            if name in INT_PROPERTIES:
                settings[INT_PROPERTIES[name]] = int(value)
        return settings

    async def _subscribe(self, kafka: AIOKafkaConsumer) -> None:
        if any(t.partitions for t in self.sub.topics):
            tps = await self._explicit_partitions(kafka)
            kafka.assign(list(tps))
            await self.assign(tps)
            return
        listener = _Listener(self)
        if any(t.pattern for t in self.sub.topics):
            kafka.subscribe(pattern=_combined_pattern(self.sub), listener=listener)
        else:
            kafka.subscribe(topics=[t.name for t in self.sub.topics if t.name],
                            listener=listener)

    async def _explicit_partitions(self, kafka: AIOKafkaConsumer) -> set[TopicPartition]:
        tps: set[TopicPartition] = set()
        for spec in self.sub.topics:
            assert spec.name is not None  # validated: patterns cannot pin partitions
            if spec.partitions:
                tps.update(TopicPartition(spec.name, p.number) for p in spec.partitions)
            else:
                known = kafka.partitions_for_topic(spec.name) or set()
                tps.update(TopicPartition(spec.name, p) for p in known)
        return tps

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
            poll_ms = PAUSED_POLL_MS if kafka.paused() else POLL_MS
            batches = await kafka.getmany(timeout_ms=poll_ms, max_records=self._max_records)
            clock = self.context.clock
            for tp, messages in batches.items():
                if messages:
                    await self._hand_over(kafka, tp, messages, clock.monotonic_ms())

    async def _hand_over(self, kafka: AIOKafkaConsumer, tp: TopicPartition,
                         messages: list[Any], now_ms: int) -> None:
        records = [
            Record(m.topic, m.partition, m.offset, m.key, m.value, tuple(m.headers or ()),
                   m.timestamp, now_ms)
            for m in messages
        ]
        try:
            # ask, not tell: the reply says whether the partition's buffer is full, and the
            # pause takes effect before the next fetch. With tell this loop ran ahead of the
            # partition actors and handed them everything aiokafka had prefetched (a whole
            # backlog: memory, and a large heap for the garbage collector to walk).
            paused = await self._partition_actor(tp).ask(Batch(records, kafka.highwater(tp)))
        except ActorDeadError:
            return  # restarting: its next incarnation rewinds to the committed offset
        except Exception:  # the partition actor crashed with it; its supervisor restarts it
            return
        if paused is True and tp in self.owned:
            kafka.pause(tp)

    def _partition_actor(self, tp: TopicPartition) -> Actor:
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
        elif self._reset == "earliest":
            await kafka.seek_to_beginning(tp)
        kafka.resume(tp)
        with contextlib.suppress(ActorDeadError):  # died again: its successor asks anew
            await self._partition_actor(tp).tell(Assigned(committed, epoch))

    async def _commit(self, kafka: AIOKafkaConsumer, commits: dict[TopicPartition, int]) -> None:
        owned = {tp: off for tp, off in commits.items() if tp in self.owned}
        if not owned:
            return
        try:
            await kafka.commit({tp: OffsetAndMetadata(off, "") for tp, off in owned.items()})
        except KafkaError as exc:
            # a rebalance in progress: the next owner resumes from the last good commit
            log.warning("%s: commit failed (%r); records may be delivered again", self.path,
                        exc)
            return
        now = self.context.clock.wall_ms()
        for tp, offset in owned.items():
            self.context.emit(Event(type="committed", ts_ms=now, subscription=self.sub.key,
                                    topic=tp.topic, partition=tp.partition, offset=offset))

    # -- rebalance ---------------------------------------------------------------------
    async def assign(self, tps: set[TopicPartition]) -> None:
        sup: Supervisor = self.deps.partitions.actor
        for tp in sorted(tps):
            if tp in self.owned:
                continue
            self.owned.add(tp)
            await sup.start_child(ChildSpec(_child_name(tp), self._partition_factory(tp),
                                            restart="transient",
                                            shutdown_ms=self.deps.drain_ms + 1000))
            self._journal_partition("partition_assigned", tp)

    def _partition_factory(self, tp: TopicPartition) -> Any:
        def build() -> PartitionActor:
            epoch = self.deps.epochs.get(tp, 0) + 1
            self.deps.epochs[tp] = epoch
            peers = PartitionPeers(self, self.deps.egress, self.deps.deadletter)
            return PartitionActor(_child_name(tp), self.sub, tp.topic, tp.partition, epoch,
                                  peers, self.deps.metrics)

        return build

    async def revoke(self, tps: set[TopicPartition]) -> None:
        if self.kafka is not None:
            await self._revoke_with(self.kafka, tps)

    async def _revoke_with(self, kafka: AIOKafkaConsumer, tps: set[TopicPartition]) -> None:
        tps &= self.owned
        if not tps:
            return
        positions = await asyncio.gather(*(self._drain(tp) for tp in sorted(tps)))
        final = {tp: pos for tp, pos in zip(sorted(tps), positions, strict=True)
                 if pos is not None}
        await self._commit(kafka, final)
        sup: Supervisor = self.deps.partitions.actor
        for tp in sorted(tps):
            self.owned.discard(tp)
            self._commits.pop(tp, None)
            if sup.alive and sup.has_child(_child_name(tp)):
                await sup.stop_child(_child_name(tp))
            self._journal_partition("partition_revoked", tp)

    async def _drain(self, tp: TopicPartition) -> int | None:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[int | None] = loop.create_future()
        deadline = self.context.clock.monotonic_ms() + self.deps.drain_ms
        try:
            await self._partition_actor(tp).tell(Drain(deadline, done))
            return await asyncio.wait_for(done, self.deps.drain_ms / 1000 + 1)
        except (ActorDeadError, TimeoutError):
            return None  # nothing trustworthy to commit: the last commit stands

    def _journal_partition(self, kind: str, tp: TopicPartition) -> None:
        self.context.emit(Event(type=kind, ts_ms=self.context.clock.wall_ms(),
                                subscription=self.sub.key, topic=tp.topic,
                                partition=tp.partition, actor=self.path))

    def __repr__(self) -> str:
        return (f"<ConsumerActor {self.sub.key} owned={len(self.owned)} "
                f"pending_commits={len(self._commits)} mailbox={len(self._mailbox)}>")


def _child_name(tp: TopicPartition) -> str:
    return f"{tp.topic}-{tp.partition}"


def _combined_pattern(sub: Consumer) -> str:
    parts = [t.pattern if t.pattern else re.escape(t.name or "") for t in sub.topics]
    return "^(?:" + "|".join(f"(?:{p})" for p in parts) + ")$"
