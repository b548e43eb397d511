"""SharedMemberActor: one Kafka group member per (instance, broker, group) for every
subscription of that group; RiderActor: a subscription's seat on it (issue 17).

With one consumer per subscription, N subscriptions sharing a `group.id` are N members of
one group: every subscribe, unsubscribe, pause or restart rebalances all of them, and a
rebalance costs O(N). Here the subscriptions of a group share one `AIOKafkaConsumer`
subscribed to the union of their topics and patterns; the records of a topic go to the
partition actors of the subscription that owns it (`Roster.owner_of`). Commits stay under
the group's id, so a subscription keeps its positions when it moves to this layout.

Tree::

    groups (one_for_one)                      under the runtime's root
    └── <broker>/<group.id>/<settings>        SharedMemberActor (a GroupConsumerActor)
    delivery
    └── <id>_<group.id>
        ├── egress, deadletter, partitions    as before: partition actors live here
        └── consumer                          RiderActor: joins on start, leaves on stop

Subscriptions of one group whose client settings differ (`properties`: auto.offset.reset,
session timeout, ...) ride different members: still members of one group, each with its
own topics, which Kafka assigns correctly.

Changes go through the member's fetch loop, the one place that calls the client: a join
bumps the roster's version and the loop subscribes once to the new union (joins that
arrive together cost one rebalance); a leave first drains and commits that subscription's
partitions and stops their actors, answers the rider, then re-subscribes. When the union
did not change (an update that keeps its topics, a leave whose topics another pattern
still claims) the member does not re-subscribe: the partitions it holds without an actor
get one under their new owner, which rewinds to the committed position: no rebalance.

The roster lives in the delivery service, not in the member: a restarted member finds its
riders again. A rider whose member is not running leaves the roster itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass

from aiokafka import AIOKafkaConsumer, TopicPartition

from actors.delivery.path.consumer import fetch_size
from actors.delivery.path.partition import PartitionActor, PartitionPeers
from actors.delivery.path.roster import Rider, Roster
from actors.shared.errors import UnexpectedMessage
from actors.shared.group_consumer import (
    POLL_MS,
    ClientSettings,
    GroupConsumerActor,
    Wiring,
    child_name,
)
from runtime.errors import ActorDeadError
from runtime.host.metrics import Registry
from runtime.kafka import topic_creation
from runtime.kernel import Actor, ChildRef, Supervisor, within

log = logging.getLogger(__name__)
LEAVE_GRACE_MS = 2000
"""How long a rider waits for its member beyond the drain deadline before leaving alone."""


@dataclass(slots=True)
class Join:
    rider: Rider


@dataclass(slots=True)
class Leave:
    key: str
    done: asyncio.Future[None]


class SharedMemberActor(GroupConsumerActor):
    def __init__(self, name: str, roster: Roster, wiring: Wiring, settings: ClientSettings,
                 metrics: Registry) -> None:
        super().__init__(name, wiring)
        self.roster = roster
        self.settings = settings
        self._subscribed: int | None = None  # the roster version subscribed with
        self._target: tuple[str, ...] | str | None = None  # the topics or pattern it was
        self._listening = False  # subscribed to at least one topic or pattern
        self._missing: set[str] = set()  # named topics not on the broker yet (watched)
        self._leaves: list[Leave] = []
        self._warned: set[str] = set()
        self.rebalances = 0
        labels = {"group": roster.group_id, "member": name}
        self.m_generation = metrics.gauge(
            "hookstream_group_generation", "Generation of the shared group member").labels(**labels)
        self.m_assigned = metrics.gauge(
            "hookstream_group_assigned_partitions",
            "Partitions assigned to the shared group member").labels(**labels)
        self.m_riders = metrics.gauge(
            "hookstream_group_subscriptions",
            "Subscriptions riding the shared group member").labels(**labels)
        self.m_rebalances = metrics.counter(
            "hookstream_group_rebalances_total",
            "Assignments the shared group member received").labels(**labels)

    def client_settings(self) -> ClientSettings:
        return self.settings

    async def subscribe(self, kafka: AIOKafkaConsumer) -> None:
        # a previous incarnation's partition actors (it crashed): their positions are
        # committed or not; the new assignment rewinds to what is
        for rider in list(self.roster.riders.values()):
            with contextlib.suppress(ActorDeadError):
                sup = rider.partitions.actor_as(Supervisor)
                if sup.children():
                    await sup.stop_children(sup.children())
        if not self.roster.held:
            await self._resubscribe(kafka)

    # -- messages ----------------------------------------------------------------------
    async def handle(self, message: object) -> None:
        if isinstance(message, Join):
            self.roster.join(message.rider)  # the fetch loop subscribes anew
        elif isinstance(message, Leave):
            self._leaves.append(message)
        else:
            await super().handle(message)

    # -- the fetch loop ----------------------------------------------------------------
    async def _apply_requests(self, kafka: AIOKafkaConsumer) -> None:
        leaves, self._leaves = self._leaves, []
        for leave in leaves:
            await self._leave(kafka, leave)
        await super()._apply_requests(kafka)
        if self.roster.held:
            return
        changed = self._subscribed != self.roster.version
        if changed and self._target == _target_of(self.roster):
            await self._reroute(kafka)
        elif changed or self._appeared(kafka):
            # drain and commit first: once subscribed anew, aiokafka forgets the assignment
            # until the rejoin, and a commit in the revoke callback then fails ("No
            # partitions assigned"): the positions reached would be delivered again
            await self._revoke_with(kafka, set(self.owned))
            await self._resubscribe(kafka)

    def _appeared(self, kafka: AIOKafkaConsumer) -> bool:
        """A watched topic now exists."""
        return bool(self._missing) and topic_creation.missing(kafka, self._missing) != self._missing

    async def _reroute(self, kafka: AIOKafkaConsumer) -> None:
        """The riders changed, the union did not: the assigned partitions without an actor
        (their subscription left) get one under their owner now; no rebalance."""
        self._noted()
        orphans = {tp for tp in kafka.assignment() - self.owned if self._routable(tp)}
        await super().assign(orphans)
        if orphans:
            kafka.resume(*orphans)  # `_leave` paused them
        log.info("%s: %d subscriptions on the same topics (roster version %d): %d "
                 "partitions handed over without a rebalance", self.path, len(self.roster),
                 self.roster.version, len(orphans))

    async def _poll(self, kafka: AIOKafkaConsumer) -> None:
        if self._listening:
            await super()._poll(kafka)
        else:  # not subscribed: getmany would wait for an assignment, and joins with it
            await self.context.clock.sleep_ms(POLL_MS)

    async def _leave(self, kafka: AIOKafkaConsumer, leave: Leave) -> None:
        """Drain and commit what the leaving subscription holds; then it is gone."""
        theirs = {tp for tp in self.owned if self._owner_key(tp) == leave.key}
        if theirs:
            kafka.pause(*theirs)  # until the re-subscription takes them away
        try:
            await self._revoke_with(kafka, theirs)
        finally:
            self.roster.leave(leave.key)
            if not leave.done.done():
                leave.done.set_result(None)

    async def _resubscribe(self, kafka: AIOKafkaConsumer) -> None:
        """Subscribe to the roster's union; named topics not on the broker yet are
        watched instead, and joined when they appear (runtime/kafka/topic_creation.py)."""
        roster = self.roster
        self._noted()
        self._target = _target_of(roster)
        listened, self._listening, self._missing = self._listening, False, set()
        if not roster.riders:
            _unsubscribe(kafka, listened)
            return
        if roster.uses_pattern():
            kafka.subscribe(pattern=roster.pattern(), listener=self.listener)
            self._listening = True
        else:
            present, self._missing = await topic_creation.split(kafka, roster.topics())
            if present:
                kafka.subscribe(topics=present, listener=self.listener)
                self._listening = True
            else:
                _unsubscribe(kafka, listened)
            topic_creation.watch(kafka, self._missing)
        if self._missing:
            log.warning("%s: waiting for topics that do not exist yet: %s", self.path,
                        ", ".join(sorted(self._missing)))
        log.info("%s: subscribed for %d subscriptions (roster version %d)", self.path,
                 len(roster), roster.version)

    def _noted(self) -> None:
        """The roster's version is taken into account: its size and fetch size apply."""
        roster = self.roster
        self._subscribed = roster.version
        self.m_riders.set(len(roster))
        if roster.riders:
            self.wiring.max_records = max(fetch_size(r.sub) for r in roster.riders.values())

    # -- routing -----------------------------------------------------------------------
    def _owner_key(self, tp: TopicPartition) -> str | None:
        rider = self.roster.owner_of(tp.topic)
        return rider.sub.key if rider is not None else None

    def partitions_of(self, tp: TopicPartition) -> Supervisor:
        rider = self.roster.owner_of(tp.topic)
        if rider is None:
            raise ActorDeadError(f"{self.path}: no subscription owns {tp.topic}")
        return rider.partitions.actor_as(Supervisor)

    def subscription_of(self, tp: TopicPartition) -> str | None:
        return self._owner_key(tp)

    def build_child(self, tp: TopicPartition, epoch: int) -> PartitionActor:
        rider = self.roster.owner_of(tp.topic)
        assert rider is not None  # assign() starts actors only for owned topics
        deps = rider.deps
        peers = PartitionPeers(self, deps.egress, deps.deadletter, deps.retrytopic)
        return PartitionActor(child_name(tp), rider.sub, tp.topic, tp.partition, epoch, peers,
                              deps.metrics, deps.stall_after_ms)

    def reset_to_beginning(self) -> bool:
        return self.settings.get("auto_offset_reset", "earliest") == "earliest"

    # -- rebalance ---------------------------------------------------------------------
    async def assign(self, tps: set[TopicPartition]) -> None:
        self.rebalances += 1
        self.m_rebalances.inc()
        kafka = self.kafka
        if kafka is not None:
            self.m_generation.set(self.generation())
            self.m_assigned.set(len(tps))
        owned = {tp for tp in tps if self._routable(tp)}
        await super().assign(owned)

    def _routable(self, tp: TopicPartition) -> bool:
        claimants = self.roster.claimants(tp.topic)
        if len(claimants) > 1 and tp.topic not in self._warned:
            self._warned.add(tp.topic)
            log.warning("%s: topic %s matches subscriptions %s; it goes to %s (the first)",
                        self.path, tp.topic, ", ".join(claimants), claimants[0])
        if not claimants:
            return False
        rider = self.roster.riders[claimants[0]]
        with contextlib.suppress(ActorDeadError):
            return rider.partitions.actor_as(Supervisor).alive
        return False

    # -- status ------------------------------------------------------------------------
    def generation(self) -> int:
        coordinator = getattr(self.kafka, "_coordinator", None)
        generation = getattr(coordinator, "generation", None)
        return int(generation) if generation is not None else -1

    def member_id(self) -> str:
        coordinator = getattr(self.kafka, "_coordinator", None)
        return str(getattr(coordinator, "member_id", "") or "")

    def describe(self, key: str | None = None) -> dict[str, object]:
        """The member a subscription rides on: group, member id, generation, partitions
        (with `key`: that subscription's; `groupPartitions`: every partition assigned)."""
        mine = sorted(self.owned if key is None else
                      {tp for tp in self.owned if self._owner_key(tp) == key})
        return {"group": self.roster.group_id, "member": self.name,
                "memberId": self.member_id(), "generation": self.generation(),
                "subscriptions": len(self.roster), "rebalances": self.rebalances,
                "assigned": [child_name(tp) for tp in mine],
                "waitingForTopics": sorted(self._missing),
                "groupPartitions": len(self.owned)}

    def __repr__(self) -> str:
        return (f"<SharedMemberActor {self.path} riders={len(self.roster)} "
                f"owned={len(self.owned)} generation={self.generation()} "
                f"mailbox={len(self._mailbox)}>")


class RiderActor(Actor):
    """A subscription's seat on its group's member: the `consumer` of its tree."""

    def __init__(self, name: str, rider: Rider, member: ChildRef, roster: Roster,
                 leave_ms: int) -> None:
        super().__init__(name)
        self.rider = rider
        self.member = member
        self.roster = roster
        self.leave_ms = leave_ms

    async def on_start(self) -> None:
        await self.member.ask(Join(self.rider))

    async def on_stop(self) -> None:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        try:
            await self.member.tell(Leave(self.rider.sub.key, done))
            await within(self.context.clock, done, self.leave_ms + LEAVE_GRACE_MS)
        except (ActorDeadError, TimeoutError):
            # no member runs to drain us: its last commits stand
            self.roster.leave(self.rider.sub.key)

    async def handle(self, message: object) -> None:
        raise UnexpectedMessage(self.path, message)

    def shared_member(self) -> SharedMemberActor | None:
        with contextlib.suppress(ActorDeadError):
            actor = self.member.actor
            return actor if isinstance(actor, SharedMemberActor) else None
        return None

    @property
    def owned(self) -> set[TopicPartition]:
        member = self.shared_member()
        if member is None:
            return set()
        key = self.rider.sub.key
        return {tp for tp in member.owned if member.subscription_of(tp) == key}

    def __repr__(self) -> str:
        return f"<RiderActor {self.path} {self.rider.sub.key} on {self.member.name}>"


def _target_of(roster: Roster) -> tuple[str, ...] | str:
    """What a member of `roster` subscribes to: one pattern, or the topic names."""
    return roster.pattern() if roster.uses_pattern() else tuple(roster.topics())


def _unsubscribe(kafka: AIOKafkaConsumer, listened: bool) -> None:
    """Unsubscribe, unless never subscribed: aiokafka's unsubscribe asks the broker for the
    metadata of every topic (no topic tracked means all), which a new member with no rider
    yet did for nothing."""
    if listened:
        kafka.unsubscribe()
