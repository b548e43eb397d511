"""DeliveryService: subscriptions as supervised actor trees, and the library API to add
and remove them.

Tree, under the runtime's root supervisor::

    delivery (one_for_one)
    └── <id>_<group.id> (one_for_all)          one per subscription
        ├── egress                             HTTP pushes to the endpoint
        ├── deadletter                         only with a deadLetterTopic
        ├── partitions (one_for_one)           one PartitionActor per assigned partition
        └── consumer                           the AIOKafkaConsumer

`one_for_all` because everything below a subscription shares the consumer's positions:
when any part dies the subscription restarts from the committed offsets. Children stop
in reverse, so the consumer drains its partitions and commits before anything else goes.

Library API: `await service.subscribe(consumer)`, `unsubscribe(key)`, `pause(key)`,
`resume(key)`, `update(key, consumer)`, `status_of(key)`; they raise the errors of
actors/delivery/errors.py (`DeliveryError` and its subclasses). The admin API's routes are
in actors/delivery/api/subscriptions.py (Queue-Over-Http) and
actors/delivery/api/control.py (status, pause, resume, update); actors/delivery/service.py
adds them.

Subscriptions never vanish. Each has a `SubscriptionStatus` (actors/delivery/control/status.py).
Subscription trees are `temporary` children of `delivery`: a tree that cannot start (at
boot, broker down) or dies past its own restart budget is not restarted by the supervisor
(whose budget would escalate and take the process down) but by the keeper, a task this
service owns that retries with capped backoff, forever, until unsubscribe. The keeper also
notices trees that disappeared (the `delivery` supervisor itself restarted) and restores
them.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Final

import msgspec

from actors.delivery.cluster.log import DISABLED_PREFIX, PAUSED_PREFIX, SubscriptionLog
from actors.delivery.cluster.view import ClusterStatus, snapshot_of
from actors.delivery.control import attempts
from actors.delivery.control.status import SubscriptionStatus
from actors.delivery.document.patterns import matches
from actors.delivery.document.secrets import kept_secrets
from actors.delivery.document.store import SubscriptionStore, encode
from actors.delivery.document.subscription import (
    CircuitBreakerSettings,
    Consumer,
    decode_consumer,
    redact_uri,
    redacted,
)
from actors.delivery.egress.attempts import AttemptRing, Coordinates, GiveUp, GiveUpKind
from actors.delivery.egress.guard import DEFAULT_DENY, DestinationGuard
from actors.delivery.egress.http import EgressActor
from actors.delivery.egress.origin import BreakerSettings, Origin, Origins
from actors.delivery.egress.outlet import OutletActor
from actors.delivery.errors import (
    DeliveryError,
    InvalidSubscription,
    SubscriptionExists,
    SubscriptionNotFound,
    SubscriptionStartFailed,
    UnknownBroker,
)
from actors.delivery.path.consumer import (
    ConsumerActor,
    ConsumerDeps,
    fetch_size,
    instance_client_settings,
)
from actors.delivery.path.deadletter import DeadLetterActor
from actors.delivery.path.member import InstanceMemberActor, RiderActor
from actors.delivery.path.partition import PartitionActor
from actors.delivery.path.replay import ReplayActor, ReplayProgress, ReplayRequest
from actors.delivery.path.retrytopic import RetryTopicActor, check_levels, with_retry_topic
from actors.delivery.path.roster import Rider, Roster, conflict
from actors.shared.group_consumer import GroupConsumerActor, Wiring
from runtime.errors import ActorStartError, ConfigError, UsageError
from runtime.host.files import atomic_write
from runtime.host.journal import Event
from runtime.kernel.supervisor import ChildRef, ChildSpec, Supervisor

if TYPE_CHECKING:
    from runtime.host.app import Runtime

log = logging.getLogger(__name__)
OutletFactory = Callable[[str], OutletActor]
"""Builds a subscription's outlet actor (given its name): the HTTP `EgressActor` unless an
embedding program gives its own (`Runtime.consume`'s in-process handlers)."""
DRAIN_MS = 2500
"""On revoke, unsubscribe and shutdown: how long in-flight pushes may take to finish."""
# The consumer drains (DRAIN_MS + 1 s of margin), then the rest stop quickly; a parent's
# deadline covers its children's so nothing is cancelled while still stopping properly.
CONSUMER_STOP_MS = DRAIN_MS + 1000
SUBSCRIPTION_STOP_MS = CONSUMER_STOP_MS + 1000
KEEP_TICK_MS = 250
RECENT_ATTEMPTS = 10  # per subscription in its status (the status page's table)
RESTORE_BATCH = 16
"""Stored subscriptions started at once on restore."""
PAUSED_FILE = "paused.list"  # not *.json: those are subscriptions
DISABLED_FILE = "disabled.list"  # key -> reason: subscriptions a 410 Gone disabled
STOPPED: Final = ("paused", "disabled")
"""States in which a subscription has no actors on purpose (resume starts it again)."""



def with_ring(outlet: OutletActor, ring: AttemptRing) -> OutletActor:
    """The outlet, writing its attempts into the subscription's ring."""
    outlet.attempts = ring
    return outlet


def restored_note(consumers: list[Consumer], directory: Path, runtime: Runtime) -> str:
    """What a restart kept (issue 27): the subscriptions in `directory` survive it, but an
    embedded broker keeps nothing, so theirs start from empty topics."""
    note = f"restored {len(consumers)} subscription(s) from {directory}"
    embedded = sorted({c.broker for c in consumers if runtime.is_embedded(c.broker)})
    if not embedded:
        return note
    return (f"{note}; the embedded broker {', '.join(map(repr, embedded))} started empty "
            f"(records, topics and committed positions are gone): they wait for their "
            f"topics; remove {directory} to start without them")

class DeliveryControl:
    name = "delivery"

    def __init__(self) -> None:
        self.subscriptions: dict[str, Consumer] = {}
        self.outlets: dict[str, OutletFactory] = {}  # in-process subscriptions only
        self.status: dict[str, SubscriptionStatus] = {}
        self.replays: dict[str, ReplayProgress] = {}
        self._cluster_paused: set[str] = set()
        self._cluster_disabled: dict[str, str] = {}  # key -> why (410 Gone)
        self.origins = Origins()  # shared by every subscription that pushes to an origin
        self.guard = DestinationGuard()
        self._log: SubscriptionLog | None = None  # cluster mode: the subscriptions topic
        self.cluster: ClusterStatus | None = None  # [cluster] status_topic: the whole view
        self.problems: list[str] = []
        self.attempts: dict[str, AttemptRing] = {}  # by subscription key: the attempts API
        self._runtime: Runtime | None = None
        self._store: SubscriptionStore | None = None
        self._root: ChildRef | None = None
        self._keeper: asyncio.Task[None] | None = None
        self._groups: ChildRef | None = None  # the shared group members (issue 17)
        self.rosters: dict[str, Roster] = {}  # by member name; they outlive the members
        self._member_wirings: dict[str, Wiring] = {}
        self._restoring = False
        self._lock = asyncio.Lock()  # one change at a time (admin API, keeper)
        self._disabling: set[asyncio.Task[None]] = set()  # 410 Gone: owned, awaited on stop

    # -- lifecycle ---------------------------------------------------------------------
    async def start(self, runtime: Runtime) -> None:
        self._runtime = runtime
        runtime.listen("dead_lettered", self._note_give_up)
        runtime.listen("retry_scheduled", self._note_give_up)
        egress = runtime.config.egress
        self.origins = Origins(breaker=egress.circuit_breaker,
                               max_connections=egress.origin_max_connections)
        self.guard = DestinationGuard(egress.allow_networks, egress.deny_networks
                                      if egress.deny_networks is not None else DEFAULT_DENY,
                                      egress.allow_references)
        self._store = SubscriptionStore(runtime.config.persistence.dir)
        self._root = await runtime.system.spawn(ChildSpec(
            "delivery", self._delivery_supervisor, shutdown_ms=SUBSCRIPTION_STOP_MS + 500))
        self._groups = await runtime.system.spawn(ChildSpec(
            "groups", lambda: Supervisor("groups", "one_for_one", intensity=10,
                                         period_ms=60_000),
            shutdown_ms=SUBSCRIPTION_STOP_MS + 500))
        cluster = runtime.config.cluster
        if cluster.subscriptions_topic:
            self._store = None
            broker = cluster.broker or runtime.config.brokers[0].name
            self._log = SubscriptionLog(
                runtime.bootstrap(broker), cluster.subscriptions_topic, self._apply,
                replication_factor=cluster.replication_factor,
                client_settings=runtime.consumer_settings(broker))
            # every subscription applied before we are ready; with the broker away at
            # boot, the log keeps trying and /readyz says why (as the keeper does for
            # subscriptions stored in files)
            await self._log.start_or_retry(runtime.clock)
        else:
            await self._restore()
        if cluster.status_topic:
            self.cluster = ClusterStatus(runtime, lambda: snapshot_of(self))
            await self.cluster.start()
        self._keeper = asyncio.get_running_loop().create_task(self._keep(), name="keeper")

    @staticmethod
    def _delivery_supervisor() -> Supervisor:
        # empty, also when rebuilt after an escalation: the keeper restores the trees
        return Supervisor("delivery", "one_for_one", intensity=10, period_ms=60_000)

    async def _restore(self) -> None:
        """Every stored subscription is listed again, whether or not it can start now."""
        assert self._store is not None
        consumers, self.problems = await self._store.load_all()
        if consumers:
            log.info("%s", restored_note(consumers, self._store.directory, self.runtime))
        paused = await asyncio.to_thread(self._load_paused)
        disabled = await asyncio.to_thread(self._load_disabled)
        self._restoring = True
        try:
            await self._restore_all(consumers, paused, disabled)
        finally:
            self._restoring = False
            for roster in self.rosters.values():
                roster.held = False  # each member subscribes once, to the whole union

    async def _restore_all(self, consumers: list[Consumer], paused: set[str],
                           disabled: dict[str, str]) -> None:
        startable: list[Consumer] = []
        for consumer in consumers:
            key = consumer.key
            self.subscriptions[key] = consumer
            self.status[key] = SubscriptionStatus("starting", self._now())
            if key in disabled:
                self.status[key].move("disabled", self._now(), disabled[key])
                log.warning("subscription %s restored disabled: %s", key, disabled[key])
                continue
            if key in paused:
                self.status[key].move("paused", self._now(), "paused before the restart")
                log.info("subscription %s restored paused", key)
                continue
            startable.append(consumer)
        # a few at a time: each new group member's client start is mostly waiting for
        # the broker (500 separate groups took 18-25 s one by one)
        for first in range(0, len(startable), RESTORE_BATCH):
            async with self._lock:
                await self._start_together(startable[first:first + RESTORE_BATCH], "restored")

    async def stop(self) -> None:
        """Stop the keeper, then every subscription in parallel: each drains and commits."""
        cluster, self.cluster = self.cluster, None
        if cluster is not None:
            await cluster.stop()  # publishes `stopped`: the others stop counting on us
        keeper, self._keeper = self._keeper, None
        if keeper is not None:
            keeper.cancel()
            await asyncio.gather(keeper, return_exceptions=True)
        if self._disabling:
            await asyncio.gather(*self._disabling, return_exceptions=True)
        subscription_log, self._log = self._log, None
        if subscription_log is not None:
            await subscription_log.stop()  # no more changes applied while we stop
        if self._root is None:
            return
        sup = self._supervisor()
        for key in sup.children():
            if key in self.status:
                self.status[key].move("stopping", self._now())
        # the shared members first: each drains and commits every partition of its group
        # and leaves the group once, instead of re-subscribing as each rider leaves
        if self._groups is not None:
            groups = self._groups.actor_as(Supervisor)
            await groups.stop_children(groups.children())
        await sup.stop_children([n for n in sup.children() if n in self.subscriptions])

    @property
    def runtime(self) -> Runtime:
        """The runtime this service started in (a `UsageError` before `start`)."""
        if self._runtime is None:
            raise UsageError("the delivery service is not started: add it to a Runtime "
                             "(`Runtime(config, services=[DeliveryService])`)")
        return self._runtime

    def _supervisor(self) -> Supervisor:
        assert self._root is not None
        actor = self._root.actor
        assert isinstance(actor, Supervisor)
        return actor

    def tree(self, key: str) -> Supervisor:
        """The running supervisor of subscription `key` (for operators and chaos tests)."""
        actor = self._supervisor().child(key)
        assert isinstance(actor, Supervisor)
        return actor

    # -- subscriptions -----------------------------------------------------------------
    async def subscribe(self, consumer: Consumer, *, persist: bool = True,
                        outlet: OutletFactory | None = None) -> None:
        """Start `consumer`'s actor tree and (with `persist`) store it for the next start.
        `outlet` replaces the HTTP egress (in-process subscriptions, never persisted).
        In cluster mode the subscription is written to the subscriptions topic and every
        instance starts it; this returns once this instance applied it.

        Raises `SubscriptionExists`, `UnknownBroker`, `SubscriptionStartFailed`, or
        `InvalidSubscription` for a name the store refuses.
        """
        if self._log is not None and outlet is None and persist:
            self._refuse_early(consumer, persist=False)
            await self._log.write(consumer.key, encode(consumer))
            if consumer.key not in self.subscriptions:  # written, but could not be applied
                raise SubscriptionStartFailed("subscription not applied",
                                              f"{consumer.key}: see this instance's log")
            return
        async with self._lock:
            self._refuse_early(consumer, persist)
            key = consumer.key
            if outlet is not None:
                self.outlets[key] = outlet
            self.status[key] = SubscriptionStatus("starting", self._now(),
                                                  in_process=outlet is not None)
            try:
                await self._start_tree(consumer)
            except BaseException:
                self.outlets.pop(key, None)
                del self.status[key]
                raise
            self.status[key].move("running", self._now())
            self.subscriptions[key] = consumer
            self.runtime.keep_long_lived()
            log.info("subscribed %s: %s", key, _summary(consumer))
            if persist and self._store is not None:
                await self._store.save(consumer)

    def _refuse_early(self, consumer: Consumer, persist: bool) -> None:
        """What would fail later, checked before anything starts."""
        if consumer.key in self.subscriptions:
            raise SubscriptionExists("subscription already exists",
                                     f"{consumer.key}: unsubscribe it first")
        if persist and self._store is not None:
            self._store.path(consumer.key)  # `<id>_<group.id>` may be too long for a file
        self._bootstrap(consumer)
        self._check_retry_topics(consumer)
        self._refuse_shared_topic(consumer)
        self._refuse_own_topics(consumer)

    def _check_retry_topics(self, consumer: Consumer) -> str | None:
        """With `retryTopics`: the delay queue's bootstrap, after checking that its delays
        fit the config's levels and that the delay queue runs on the subscription's broker
        (it forwards to the retry topic, which the subscription consumes). Raises
        `InvalidSubscription` naming what is missing."""
        retry = consumer.subscriptionMethod.retryTopics
        if retry is None:
            return None
        assert self._runtime is not None
        delay = self._runtime.config.delay
        check_levels(retry, delay.levels)
        delay_broker = delay.broker or self._runtime.config.brokers[0].name
        if delay_broker != consumer.broker:
            raise InvalidSubscription(
                "invalid subscriptionMethod.retryTopics",
                f"the delay queue runs on broker {delay_broker!r}, the subscription reads "
                f"{consumer.broker!r}: retry topics need them to be the same")
        return self._runtime.bootstrap(delay_broker)

    def own_topics(self) -> set[str]:
        """The runtime's own topics: the cluster's subscriptions and status topics (they
        hold every subscription's document, secrets included) and the delay levels'."""
        config = self.runtime.config
        cluster = config.cluster
        own = {t for level in config.delay.levels for t in level.topics}
        return own | {t for t in (cluster.subscriptions_topic, cluster.status_topic) if t}

    def _refuse_own_topics(self, consumer: Consumer) -> None:
        """No subscription reads the runtime's own topics (#25: subscribing to the
        subscriptions topic pushed every subscription's secrets to the caller)."""
        own = self.own_topics()
        for i, topic in enumerate(consumer.topics):
            hit = topic.name if topic.name in own else next(
                (t for t in sorted(own) if topic.pattern and matches(topic.pattern, t)), None)
            if hit is not None:
                raise InvalidSubscription(f"invalid topics[{i}]", f"{hit} is one of the "
                                          "runtime's own topics, not a source to subscribe to")

    def _refuse_shared_topic(self, consumer: Consumer) -> None:
        """Two subscriptions of one group may not consume one topic: Kafka would split its
        partitions between them (actors/delivery/path/roster.py says how overlap is decided)."""
        found = conflict(consumer, self.subscriptions.values())
        if found is not None:
            other, topic = found
            raise InvalidSubscription(
                "topic already consumed in this group",
                f"{topic} is consumed by subscription {other.key} of group "
                f"{consumer.group_id}: use another group.id or unsubscribe {other.key}")

    async def _start_tree(self, consumer: Consumer) -> None:
        try:
            if _rides(consumer):
                await self._ensure_member(consumer)
            await self._supervisor().start_child(self._spec(consumer))
        except ActorStartError as exc:
            await self._release_member(consumer)
            raise _start_failure(exc) from exc

    # -- shared group members (actors/delivery/path/member.py) ---------------------------------
    def _member_name(self, consumer: Consumer) -> str:
        """One instance member per broker: every subscription of that broker reads
        through it (issue 24)."""
        return f"instance:{consumer.broker}"

    def instance_group(self) -> str:
        """The consumer group the runtime's instances share (`[delivery] instance_group`;
        by default derived from what instances of one deployment have in common: the
        cluster's subscriptions topic, else the persistence folder)."""
        config = self.runtime.config
        if config.delivery.instance_group:
            return config.delivery.instance_group
        shared = config.cluster.subscriptions_topic or str(
            Path(config.persistence.dir).resolve())
        return "hookstream-instances-" + hashlib.sha256(shared.encode()).hexdigest()[:12]

    def _groups_supervisor(self) -> Supervisor:
        assert self._groups is not None
        return self._groups.actor_as(Supervisor)

    def _member_ref(self, consumer: Consumer) -> ChildRef:
        return ChildRef(self._groups_supervisor(), self._member_name(consumer))

    async def _ensure_member(self, consumer: Consumer) -> None:
        spec = self._member_spec(consumer)
        if spec is not None:
            await self._groups_supervisor().start_child(spec)
            log.info("group member %s started", spec.name)

    def _member_spec(self, consumer: Consumer) -> ChildSpec | None:
        """The spec of `consumer`'s group member, None when it runs already."""
        assert self._runtime is not None
        name, groups = self._member_name(consumer), self._groups_supervisor()
        if groups.has_child(name):
            return None
        roster = self.rosters.setdefault(name, Roster(self.instance_group()))
        roster.held = self._restoring
        runtime = self._runtime
        wiring = self._member_wirings.setdefault(name, Wiring(
            ChildRef(groups, name), self._bootstrap(consumer), DRAIN_MS, fetch_size(consumer),
            runtime.consumer_settings(consumer.broker)))
        settings = instance_client_settings(roster.group_id)
        return ChildSpec(
            name, lambda: InstanceMemberActor(name, roster, wiring, settings, runtime.metrics,
                                              runtime.keep_long_lived),
            shutdown_ms=CONSUMER_STOP_MS, start_timeout_ms=15_000)

    async def _release_member(self, consumer: Consumer) -> None:
        """Stop a member no subscription rides any more (it leaves the group)."""
        name = self._member_name(consumer)
        roster = self.rosters.get(name)
        if not _rides(consumer) or roster is None or len(roster) > 0:
            return
        groups = self._groups_supervisor()
        if groups.has_child(name):
            await groups.stop_child(name)
            log.info("group member %s stopped: no subscription rides it", name)
        if not roster.riders:
            del self.rosters[name]
            self._member_wirings.pop(name, None)

    async def _try_start(self, consumer: Consumer, what: str) -> bool:
        """Start a listed subscription's tree (lock held); on failure, schedule a retry."""
        try:
            await self._start_tree(consumer)
        except (SubscriptionStartFailed, UnknownBroker) as exc:
            self._start_failed(consumer, exc)
            return False
        self._started(consumer, what)
        return True

    async def _start_together(self, consumers: list[Consumer], what: str) -> None:
        """`_try_start` for several listed subscriptions at once (lock held): first the
        group members they need, then their trees, each step in parallel."""
        failed = await self._start_members(consumers)
        ready = [c for c in consumers if c.key not in failed]
        errors = await self._supervisor().start_children([self._spec(c) for c in ready])
        for consumer, error in zip(ready, errors, strict=True):
            if error is None:
                self._started(consumer, what)
                continue
            await self._release_member(consumer)
            failed[consumer.key] = _start_failure(error)
        for key, exc in failed.items():
            self._start_failed(self.subscriptions[key], exc)

    async def _start_members(self, consumers: list[Consumer]) -> dict[str, DeliveryError]:
        """Start the members `consumers` ride that do not run yet, in parallel; the
        subscriptions whose member could not start, with the reason."""
        specs: dict[str, ChildSpec] = {}
        failed: dict[str, DeliveryError] = {}
        for consumer in filter(_rides, consumers):
            try:
                spec = self._member_spec(consumer)
            except UnknownBroker as exc:
                failed[consumer.key] = exc
                continue
            if spec is not None:
                specs[spec.name] = spec
        errors = await self._groups_supervisor().start_children(list(specs.values()))
        broken = {name: error for name, error in zip(specs, errors, strict=True) if error}
        for consumer in filter(_rides, consumers):
            error = broken.get(self._member_name(consumer))
            if error is not None:
                failed[consumer.key] = _start_failure(error)
                await self._release_member(consumer)
        return failed

    def _started(self, consumer: Consumer, what: str) -> None:
        self.status[consumer.key].move("running", self._now())
        self.runtime.keep_long_lived()
        log.info("subscription %s %s", consumer.key, what)

    def _start_failed(self, consumer: Consumer, exc: DeliveryError) -> None:
        status = self.status[consumer.key]
        delay = status.failed(self._now(), exc.details or exc.reason,
                              self._broker_down(consumer))
        log.warning("subscription %s %s: %s; retrying in %.1f s", consumer.key, status.state,
                    status.reason, delay / 1000)

    def _tree_exited(self, key: str, error: BaseException | None) -> None:
        """A subscription tree ended by itself (crashed past its restart budget)."""
        status, consumer = self.status.get(key), self.subscriptions.get(key)
        if status is None or consumer is None or status.state in (*STOPPED, "stopping"):
            return
        delay = status.failed(self._now(), f"its actors crashed: {error!r}",
                              self._broker_down(consumer))
        log.error("subscription %s %s: %s; restarting in %.1f s", key, status.state,
                  status.reason, delay / 1000)

    # -- cluster mode: what the subscriptions topic says -----------------------------------
    async def _apply(self, key: str, value: bytes | None) -> None:
        """One record of the subscriptions topic, on every instance, in topic order."""
        if key.startswith(PAUSED_PREFIX):
            target = key.removeprefix(PAUSED_PREFIX)
            (self._cluster_paused.add if value else self._cluster_paused.discard)(target)
            if target in self.subscriptions:
                await (self._pause_local(target) if value else self._resume_local(target))
        elif key.startswith(DISABLED_PREFIX):
            await self._apply_disabled(key.removeprefix(DISABLED_PREFIX), value)
        elif value is None:
            if key in self.subscriptions:
                await self._unsubscribe_local(key)
        else:
            consumer = decode_consumer(value)
            if key not in self.subscriptions:
                await self._adopt(consumer)
            elif consumer != self.subscriptions[key]:
                await self._update_local(key, consumer)

    async def _apply_disabled(self, key: str, reason: bytes | None) -> None:
        if reason is None:
            self._cluster_disabled.pop(key, None)
            if key in self.subscriptions and self.status[key].state == "disabled":
                await self._resume_local(key)
            return
        self._cluster_disabled[key] = reason.decode(errors="replace")
        if key in self.subscriptions:
            await self._disable_local(key, self._cluster_disabled[key])

    async def _adopt(self, consumer: Consumer) -> None:
        """A subscription this instance learns of: listed at once, started (or retried by
        the keeper), or paused when the topic says so."""
        key = consumer.key
        async with self._lock:
            self.subscriptions[key] = consumer
            self.status[key] = SubscriptionStatus("starting", self._now())
            if key in self._cluster_disabled:
                self.status[key].move("disabled", self._now(), self._cluster_disabled[key])
                return
            if key in self._cluster_paused:
                self.status[key].move("paused", self._now(), "paused in the cluster")
                return
            await self._try_start(consumer, "started (from the subscriptions topic)")

    # -- the keeper ----------------------------------------------------------------------
    async def _keep(self) -> None:
        assert self._runtime is not None
        clock = self._runtime.clock
        while True:
            await clock.sleep_ms(KEEP_TICK_MS)
            await self._reconcile()

    async def _reconcile(self) -> None:
        now = self._now()
        sup = self._supervisor()
        for key, status in list(self.status.items()):
            if status.state == "running" and not sup.has_child(key) and not self._lock.locked():
                status.failed(now, "its actors stopped unexpectedly",
                              self._broker_down(self.subscriptions[key]))
            if status.due(now):
                async with self._lock:
                    consumer = self.subscriptions.get(key)
                    if consumer is not None and status.due(self._now()):
                        await self._try_start(consumer, "recovered")

    def _broker_down(self, consumer: Consumer) -> bool:
        assert self._runtime is not None
        return consumer.broker in self._runtime.probe.problems

    def _now(self) -> int:
        return self._runtime.clock.wall_ms() if self._runtime is not None else 0

    # -- pause, resume, update ------------------------------------------------------------
    def _known(self, key: str) -> Consumer:
        consumer = self.subscriptions.get(key)
        if consumer is None:
            raise SubscriptionNotFound("subscription not found", key)
        return consumer

    async def pause(self, key: str) -> None:
        """Stop fetching and delivering: in-flight pushes finish, positions are committed,
        the group membership goes (the partitions move to other instances, if any). Kept
        across restarts; in cluster mode it applies on every instance. Raises
        `SubscriptionNotFound`."""
        if self._log is not None and key not in self.outlets:
            self._known(key)
            await self._log.write(PAUSED_PREFIX + key, b"true")
            return
        await self._pause_local(key)

    async def _pause_local(self, key: str) -> None:
        async with self._lock:
            self._known(key)
            status = self.status[key]
            if status.state == "paused":
                return
            await self._stop_tree(key)
            status.move("paused", self._now(), "paused by request")
            await self._save_paused()
            log.info("subscription %s paused", key)

    async def resume(self, key: str) -> None:
        """Start a paused subscription again from its committed positions."""
        if self._log is not None and key not in self.outlets:
            self._known(key)
            if key in self._cluster_disabled:
                await self._log.write(DISABLED_PREFIX + key, None)
            await self._log.write(PAUSED_PREFIX + key, None)
            return
        await self._resume_local(key)

    async def _resume_local(self, key: str) -> None:
        async with self._lock:
            consumer = self._known(key)
            if self.status[key].state not in STOPPED:
                return
            self.status[key].move("starting", self._now())
            await self._save_paused()
            await self._try_start(consumer, "resumed")

    # -- 410 Gone: disabled until the operator resumes -----------------------------------
    def _gone(self, key: str, reason: str) -> None:
        """An egress actor saw 410 Gone (called on the event loop, from its worker)."""
        task = asyncio.get_running_loop().create_task(self._disable(key, reason),
                                                      name=f"disable {key}")
        self._disabling.add(task)
        task.add_done_callback(self._disabling.discard)

    async def _disable(self, key: str, reason: str) -> None:
        """Stop the subscription's tree like a pause (in-flight pushes finish, positions
        are committed; the record that got the 410 stays uncommitted) and keep it
        `disabled`, across restarts too, until `resume`. In cluster mode every instance
        does so, and one started later too."""
        if not await self._disable_local(key, reason):
            return
        log.warning("subscription %s disabled: %s; POST .../resume starts it again",
                    key, reason)
        assert self._runtime is not None
        self._runtime.journal.emit(Event(type="subscription_disabled", ts_ms=self._now(),
                                         subscription=key, status=410, reason=reason))
        if self._log is not None and key not in self.outlets:
            await self._log.write(DISABLED_PREFIX + key, reason.encode())

    async def _disable_local(self, key: str, reason: str) -> bool:
        """False when `key` was not running (nothing to disable)."""
        async with self._lock:
            status = self.status.get(key)
            if status is None or status.state != "running":
                return False
            await self._stop_tree(key)
            status.move("disabled", self._now(), reason)
            await self._save_paused()
        return True

    async def update(self, key: str, consumer: Consumer) -> None:
        """Change a subscription in place: drain and commit, then start again with the new
        settings from the committed positions (nothing lost, nothing skipped). In cluster
        mode every instance does so. A `***` where GET showed a secret keeps the secret."""
        consumer = kept_secrets(consumer, self._known(key))
        if consumer.key != key:
            raise InvalidSubscription("id and group.id cannot change",
                                      f"{key} would become {consumer.key}")
        if key in self.outlets:
            raise InvalidSubscription("in-process subscription",
                                      "its program owns it: stop and consume again")
        self._bootstrap(consumer)
        self._check_retry_topics(consumer)
        self._refuse_shared_topic(consumer)
        self._refuse_own_topics(consumer)
        if self._log is not None:
            await self._log.write(key, encode(consumer))
            return
        await self._update_local(key, consumer)

    async def _update_local(self, key: str, consumer: Consumer) -> None:
        async with self._lock:
            old = self._known(key)
            status = self.status[key]
            restart = status.state not in STOPPED
            roster = self._hold_member(old, consumer) if restart else None
            try:
                await self._stop_tree(key, keep_member=roster is not None)
                self.subscriptions[key] = consumer
                self._settle_origin(old.subscriptionMethod.uri)  # it may push elsewhere now
                if self._store is not None:
                    await self._store.save(consumer)
                log.info("subscription %s updated: %s (was %s)", key, _summary(consumer),
                         _summary(old))
                if restart:
                    status.move("starting", self._now())
                    await self._try_start(consumer, "restarted with its new settings")
            finally:
                if roster is not None:
                    roster.held = False  # the member re-subscribes once, if at all
                    await self._release_member(consumer)  # nobody rides if the start failed

    def _hold_member(self, old: Consumer, new: Consumer) -> Roster | None:
        """When the updated subscription stays on its member: the roster, held so the
        member sees the leave and the join as one change (one rebalance, or none when the
        topics stay), and kept running even when nobody else rides it."""
        if not (_rides(old) and _rides(new)):
            return None
        name = self._member_name(old)
        roster = self.rosters.get(name)
        if roster is None or name != self._member_name(new):
            return None
        roster.held = True
        return roster

    async def _stop_tree(self, key: str, *, keep_member: bool = False) -> None:
        sup = self._supervisor()
        if sup.has_child(key):
            self.status[key].move("stopping", self._now())
            await sup.stop_child(key)
        consumer = self.subscriptions.get(key)
        if consumer is not None and not keep_member:
            await self._release_member(consumer)

    def _load_paused(self) -> set[str]:
        assert self._runtime is not None
        path = Path(self._runtime.config.persistence.dir) / PAUSED_FILE
        try:
            return set(msgspec.json.decode(path.read_bytes(), type=list[str]))
        except FileNotFoundError:
            return set()
        except (OSError, msgspec.DecodeError, msgspec.ValidationError) as exc:
            log.error("ignoring unreadable %s: %s", path, exc)
            return set()

    def _load_disabled(self) -> dict[str, str]:
        assert self._runtime is not None
        path = Path(self._runtime.config.persistence.dir) / DISABLED_FILE
        try:
            return msgspec.json.decode(path.read_bytes(), type=dict[str, str])
        except FileNotFoundError:
            return {}
        except (OSError, msgspec.DecodeError, msgspec.ValidationError) as exc:
            log.error("ignoring unreadable %s: %s", path, exc)
            return {}

    async def _save_paused(self) -> None:
        """The paused and the disabled subscriptions, for the next start."""
        if self._store is None:
            return  # cluster mode: pauses live in the subscriptions topic
        assert self._runtime is not None
        folder = Path(self._runtime.config.persistence.dir)
        paused = sorted(k for k, s in self.status.items()
                        if s.state == "paused" and k not in self.outlets)
        disabled = {k: s.reason for k, s in sorted(self.status.items())
                    if s.state == "disabled" and k not in self.outlets}
        await asyncio.to_thread(atomic_write, folder / PAUSED_FILE, msgspec.json.encode(paused))
        await asyncio.to_thread(atomic_write, folder / DISABLED_FILE,
                                msgspec.json.encode(disabled))

    # -- in-process handlers (`Runtime.consume`, actors/delivery/service.py) -----------
    def in_process(self, key: str) -> bool:
        """True for a subscription an embedding program registered (read-only here)."""
        return key in self.outlets

    # -- replay ------------------------------------------------------------------------
    async def replay(self, key: str, request: ReplayRequest) -> ReplayProgress:
        """Deliver records again through the subscription's egress (actors/delivery/
        replay.py); returns at once with the progress object the replay updates."""
        consumer = self._known(key)
        if request.source == "deadLetter" and not consumer.subscriptionMethod.deadLetterTopic:
            raise InvalidSubscription("nothing to replay", f"{key} has no deadLetterTopic")
        if request.source == "topic" and (request.topic is None or request.partition is None):
            raise InvalidSubscription("invalid replay", "source 'topic' needs topic and partition")
        if request.source == "topic":
            self._check_replay_topic(consumer, request.topic or "")
        if self.status[key].state != "running" or not self._supervisor().has_child(key):
            raise SubscriptionStartFailed("subscription is not running",
                                          f"{key} is {self.status[key].state}: resume it first")
        assert self._runtime is not None
        rid = uuid.uuid4().hex[:12]
        progress = self.replays[rid] = ReplayProgress(rid, key, request.source)
        tree, bootstrap = self.tree(key), self._bootstrap(consumer)
        settings = self._runtime.consumer_settings(consumer.broker)
        egress = ChildRef(tree, "egress")
        await tree.start_child(ChildSpec(
            f"replay-{rid}", lambda: ReplayActor(f"replay-{rid}", consumer, request, progress,
                                                 bootstrap, egress, settings),
            restart="transient"))
        log.info("subscription %s: replay %s of %s started", key, rid, request.source)
        return progress

    def _check_replay_topic(self, consumer: Consumer, topic: str) -> None:
        """A replay reads the subscription's own sources only: its topics (named or
        matching its patterns), its dead-letter topic and its retry topic; never the
        runtime's own topics (#25)."""
        method = consumer.subscriptionMethod
        retry = method.retryTopics.topic if method.retryTopics is not None else None
        ours = topic in {t.name for t in consumer.topics} | {method.deadLetterTopic, retry} \
            or any(t.pattern and matches(t.pattern, topic) for t in consumer.topics)
        if topic in self.own_topics() or not ours:
            raise InvalidSubscription("invalid replay request", f"{topic!r} is not a topic "
                                      f"of {consumer.key}: a replay reads its topics, its "
                                      "deadLetterTopic or its retry topic")

    # -- attempts (issue 27) -------------------------------------------------------------
    def _note_give_up(self, event: Event) -> None:
        """The partition path's give-ups, into the subscription's ring (it owns no other
        way to tell us: actors/delivery/path is not ours to change)."""
        ring = self.attempts.get(event.subscription or "")
        if ring is None or event.topic is None or event.partition is None \
                or event.offset is None:
            return
        kind: GiveUpKind = ("dead_lettered" if event.type == "dead_lettered"
                            else "retry_scheduled")
        ring.give_up((event.topic, event.partition, event.offset),
                     GiveUp(event.ts_ms, kind, event.reason))

    def _scan(self, key: str) -> attempts.Scan:
        journal = self.runtime.config.journal
        return attempts.Scan(Path(journal.dir) if journal.enabled else None, key)

    async def attempts_of(self, key: str, coordinates: Coordinates | None = None,
                          webhook_id: str | None = None) -> dict[str, object]:
        """What happened to one record, named by coordinates or `webhook-id`."""
        self._known(key)
        ring, scan = self.attempts.get(key), self._scan(key)
        stamp: int | None = None
        if coordinates is None:
            assert webhook_id is not None
            coordinates = ring.find(webhook_id) if ring is not None else None
            if coordinates is None:
                found = await asyncio.to_thread(attempts.find_webhook_id, self._scan(key),
                                                webhook_id)
                if found is None:
                    return {"record": {"webhookId": webhook_id}, "state": "unknown",
                            "attempts": [], "reason": "no record with this webhook-id in "
                            "memory nor in the journal scanned"}
                coordinates, stamp = found
        return await asyncio.to_thread(attempts.lookup_record, ring, scan, coordinates, stamp)

    async def failures_of(self, key: str, limit: int) -> dict[str, object]:
        """The latest `limit` failed attempts across the subscription's records."""
        self._known(key)
        return await asyncio.to_thread(attempts.lookup_failures, self.attempts.get(key),
                                       self._scan(key), limit)

    # -- status ------------------------------------------------------------------------
    def status_of(self, key: str) -> dict[str, object]:
        """The consumer (redacted) and its status: state, partitions, endpoint, counters."""
        consumer = self._known(key)
        return {"consumer": redacted(consumer),
                "status": {**self.status[key].as_dict(), **self._live(key)}}

    def _live(self, key: str) -> dict[str, object]:
        sup = self._supervisor()
        if not sup.has_child(key):
            return {"partitions": [], "endpoint": None, "counters": None, "member": None}
        tree = self.tree(key)
        partitions: list[dict[str, object]] = []
        if tree.has_child("partitions"):
            parts = tree.child("partitions")
            assert isinstance(parts, Supervisor)
            partitions = [a.status() for n in parts.children()
                          if isinstance(a := parts.child(n), PartitionActor)]
        outlet = tree.child("egress") if tree.has_child("egress") else None
        endpoint = outlet.health.as_dict() if isinstance(outlet, OutletActor) else None
        if endpoint is not None and isinstance(outlet, EgressActor):
            clock = outlet.context.clock
            endpoint["origin"] = outlet.origin.as_dict(  # breaker, throttle, rate
                clock.monotonic_ms(), clock.wall_ms())
        counters: dict[str, object] | None = None
        if isinstance(outlet, OutletActor):
            dead = sum(int(str(p["dead_lettered"])) for p in partitions)
            filtered = sum(int(str(p["filtered"])) for p in partitions)
            counters = {**outlet.counters(), "dead_lettered": dead, "filtered": filtered}
        return {"partitions": sorted(partitions, key=lambda p: (str(p["topic"]),
                                                                 str(p["partition"]))),
                "endpoint": endpoint, "counters": counters, "member": self._member_of(key),
                "activity": self._activity(key)}

    def _activity(self, key: str) -> dict[str, object] | None:
        """The status page's charts and attempts table (actors/delivery/egress/attempts.py)."""
        ring = self.attempts.get(key)
        if ring is None:
            return None
        recent = [{"record": {"topic": a.topic, "partition": a.partition, "offset": a.offset},
                   **a.as_dict()} for a in ring.recent(RECENT_ATTEMPTS)]
        return {"recent_attempts": recent, "series": ring.series.as_dict(self._now())}

    def _member_of(self, key: str) -> dict[str, object] | None:
        """The shared group member the subscription rides on (None: its own consumer)."""
        tree = self.tree(key)
        rider = tree.child("consumer") if tree.has_child("consumer") else None
        member = rider.shared_member() if isinstance(rider, RiderActor) else None
        return member.describe(key) if member is not None else None

    def summary(self) -> str:
        """For the runtime's stop line: subscriptions and what they delivered this run."""
        assert self._runtime is not None
        totals = {"2xx": 0.0, "other": 0.0}
        family = self._runtime.metrics.counter("hookstream_http_requests_total", "")
        for labels, value in family.children.items():
            totals["2xx" if ("code", "2xx") in labels else "other"] += value.value
        return (f"{len(self.subscriptions)} subscriptions, {int(totals['2xx'])} records "
                f"delivered, {int(totals['other'])} failed attempts")

    def readiness(self) -> list[str]:
        """Why the delivery service is not ready: each subscription that is not running
        (paused is fine) or runs without any partition yet."""
        reasons = [f"cluster: {log_.problem}" for log_ in self._logs() if log_.problem]
        for key, status in sorted(self.status.items()):
            if status.state in STOPPED:  # on purpose; `disabled` shows in the status API
                continue
            if status.state != "running":
                reasons.append(f"subscription {key} is {status.state}"
                               + (f": {status.reason}" if status.reason else ""))
            elif not self._has_partitions(key):
                reasons.append(f"subscription {key} has no partitions assigned yet")
            else:
                reasons += self._stalls(key)
        return reasons

    def _logs(self) -> list[SubscriptionLog]:
        """The cluster topics this instance follows (subscriptions, status)."""
        logs = [self._log] if self._log is not None else []
        return logs + ([self.cluster.log] if self.cluster is not None else [])

    def _stalls(self, key: str) -> list[str]:
        parts = self.tree(key).child("partitions") if self.tree(key).has_child(
            "partitions") else None
        if not isinstance(parts, Supervisor):
            return []
        stalled = [a for n in parts.children()
                   if isinstance(a := parts.child(n), PartitionActor)
                   and a.book.stalled_since is not None]
        return [f"subscription {key} partition {a.topic}-{a.partition} stalled: commit "
                f"position {a.book.position()} has not moved for over "
                f"{a.traits.stall_after_ms // 1000} s" for a in stalled]

    def _has_partitions(self, key: str) -> bool:
        sup = self._supervisor()
        if not sup.has_child(key):
            return False
        tree = self.tree(key)
        consumer = tree.child("consumer") if tree.has_child("consumer") else None
        return isinstance(consumer, GroupConsumerActor | RiderActor) and bool(consumer.owned)

    async def unsubscribe(self, key: str) -> Consumer:
        """Stop subscription `key` (`<id>_<group.id>`): it drains and commits, then its
        file is deleted (in cluster mode: a tombstone stops it everywhere). Raises
        `SubscriptionNotFound`."""
        if self._log is not None and key not in self.outlets:
            consumer = self._known(key)
            if self.status[key].state == "paused":
                await self._log.write(PAUSED_PREFIX + key, None)
            if key in self._cluster_disabled:
                await self._log.write(DISABLED_PREFIX + key, None)
            await self._log.write(key, None)
            return consumer
        return await self._unsubscribe_local(key)

    async def _unsubscribe_local(self, key: str) -> Consumer:
        async with self._lock:
            consumer = self.subscriptions.get(key)
            if consumer is None:
                raise SubscriptionNotFound("subscription not found", key)
            await self._stop_tree(key)
            self.runtime.release_long_lived()
            del self.subscriptions[key]
            del self.status[key]
            self.attempts.pop(key, None)
            if self.outlets.pop(key, None) is None:
                self._settle_origin(consumer.subscriptionMethod.uri)
                if self._store is not None:
                    await self._store.delete(key)  # in-process ones were never stored
                    await self._save_paused()
            self._forget_metrics(key)
            log.info("unsubscribed %s", key)
            return consumer

    def _forget_metrics(self, key: str) -> None:
        assert self._runtime is not None
        self._runtime.metrics.forget(subscription=key)

    def _bootstrap(self, consumer: Consumer) -> str:
        assert self._runtime is not None
        try:
            return self._runtime.bootstrap(consumer.broker)
        except ConfigError as exc:
            raise UnknownBroker("unknown broker", str(exc)) from None

    def _spec(self, consumer: Consumer) -> ChildSpec:
        key = consumer.key
        return ChildSpec(key, lambda: self._subscription_tree(consumer), restart="temporary",
                         shutdown_ms=SUBSCRIPTION_STOP_MS,
                         on_exit=lambda error: self._tree_exited(key, error))

    def _subscription_tree(self, consumer: Consumer) -> Supervisor:
        return Supervisor(consumer.key, "one_for_all", intensity=5, period_ms=30_000,
                          children=lambda sup: self._subscription_children(consumer, sup))

    def _subscription_children(self, consumer: Consumer, sup: Supervisor) -> list[ChildSpec]:
        assert self._runtime is not None
        runtime, method = self._runtime, consumer.subscriptionMethod
        bootstrap = self._bootstrap(consumer)
        deadletter = ChildRef(sup, "deadletter") if method.deadLetterTopic else None
        wiring = Wiring(ChildRef(sup, "partitions"), bootstrap, DRAIN_MS, fetch_size(consumer),
                        runtime.consumer_settings(consumer.broker))
        retry_bootstrap = self._check_retry_topics(consumer)
        retrytopic = ChildRef(sup, "retrytopic") if retry_bootstrap else None
        deps = ConsumerDeps(ChildRef(sup, "egress"), deadletter, runtime.metrics,
                            runtime.config.delivery.stall_after_ms, retrytopic)
        origin = self._configure_origin(consumer)
        outlet = self.outlets.get(consumer.key) or (
            lambda name: EgressActor(name, consumer, consumer.broker, runtime.metrics,
                                     self.guard, origin, self._gone))
        ring = self.attempts.setdefault(consumer.key, AttemptRing())
        specs = [ChildSpec("egress", lambda: with_ring(outlet("egress"), ring))]
        if method.deadLetterTopic:
            topic = method.deadLetterTopic
            specs.append(ChildSpec("deadletter",
                                   lambda: DeadLetterActor(
                                       "deadletter", bootstrap, topic,
                                       subscription=consumer.key, metrics=runtime.metrics)))
        retry, delay = method.retryTopics, runtime.config.delay
        if retry is not None and retry_bootstrap is not None:
            specs.append(ChildSpec("retrytopic", lambda: RetryTopicActor(
                "retrytopic", retry_bootstrap, delay.levels, retry, consumer.key,
                delay.partitions, runtime.metrics), start_timeout_ms=15_000))
        specs.append(ChildSpec("partitions", lambda: Supervisor(
            "partitions", "one_for_one", intensity=10, period_ms=10_000),
            shutdown_ms=500))
        specs.append(self._consumer_spec(with_retry_topic(consumer), wiring, deps))
        return specs

    def _configure_origin(self, consumer: Consumer) -> Origin:
        """The origin `consumer` pushes to, with the strictest rate limit and breaker
        settings among the subscriptions that push there (this one included)."""
        return self._settle_origin(consumer.subscriptionMethod.uri, consumer)

    def _settle_origin(self, uri: str, joining: Consumer | None = None) -> Origin:
        """The origin of `uri`, set to the strictest settings of the subscriptions that
        push there now (and `joining`): one that leaves takes its limits with it."""
        origin = self.origins.get(uri)
        skip = joining.key if joining is not None else None
        methods = [c.subscriptionMethod for k, c in self.subscriptions.items()
                   if k != skip and k not in self.outlets
                   and self.origins.get(c.subscriptionMethod.uri) is origin]
        if joining is not None:
            methods.append(joining.subscriptionMethod)
        origin.configure((m.rateLimitPerSecond for m in methods),
                         (_breaker_settings(m.circuitBreaker) for m in methods))
        return origin

    def _consumer_spec(self, consumer: Consumer, wiring: Wiring,
                       deps: ConsumerDeps) -> ChildSpec:
        """The subscription's seat on its group's shared member, or its own consumer for
        pinned partitions (manual assignment: no group membership to share)."""
        if not _rides(consumer):
            return ChildSpec("consumer", lambda: ConsumerActor("consumer", consumer, wiring,
                                                               deps),
                             shutdown_ms=CONSUMER_STOP_MS, start_timeout_ms=15_000)
        member, rider = self._member_ref(consumer), Rider(consumer, wiring.partitions, deps)
        roster = self.rosters[self._member_name(consumer)]
        return ChildSpec("consumer", lambda: RiderActor("consumer", rider, member, roster,
                                                        DRAIN_MS),
                         shutdown_ms=CONSUMER_STOP_MS, start_timeout_ms=15_000)

    def __repr__(self) -> str:
        states = {k: s.state for k, s in self.status.items()}
        return f"<DeliveryService {states}>"


def _start_failure(error: ActorStartError) -> SubscriptionStartFailed:
    """What the API says when a subscription's actors could not start: the first cause."""
    return SubscriptionStartFailed("subscription failed to start",
                                   str(error.__cause__ or error))


def _rides(consumer: Consumer) -> bool:
    """Whether the group assigns the subscription's partitions (then it rides a shared
    member); pinned partitions keep their own consumer."""
    return not any(t.partitions for t in consumer.topics)


def _summary(consumer: Consumer) -> str:
    topics = ", ".join(t.name or f"/{t.pattern}/" for t in consumer.topics)
    method = consumer.subscriptionMethod
    return f"{topics} -> {method.method} {redact_uri(method.uri)}"



def _breaker_settings(given: CircuitBreakerSettings | None) -> BreakerSettings:
    if given is None:
        return BreakerSettings()
    return BreakerSettings(given.failureRatio, given.minRequests, given.openMs)
