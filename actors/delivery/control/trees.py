"""The actor trees of subscriptions, built and started for the control actor.

Tree, under the runtime's root supervisor::

    delivery (one_for_one)
    └── <id>_<group.id> (one_for_all)          one per subscription
        ├── egress                             HTTP pushes to the endpoint
        ├── deadletter                         only with a deadLetterTopic
        ├── retrytopic                         only with retryTopics
        ├── partitions (one_for_one)           partition actors of pinned partitions
        └── consumer                           its seat on the instance member (or its
                                               own consumer for pinned partitions)
    groups (one_for_one)
    └── instance:<broker>                      one instance member per broker

`one_for_all` because everything below a subscription shares the consumer's positions:
when any part dies the subscription restarts from the committed offsets. Children stop
in reverse, so the consumer drains its partitions and commits before anything else goes.

Subscription trees are `temporary` children of `delivery`: a tree that cannot start or
dies past its own restart budget is not restarted by the supervisor (whose budget would
escalate and take the process down) but by the control actor, which the tree's exit
reaches as a message (`exited`) and which retries on a timer.

`Trees` is used by the control actor only, on its task: it performs, the registry
decides.

Members and their riders. Each instance member owns its roster (riders join and leave by
message, actors/delivery/path/member/). `Trees` keeps the control plane's own record of
which subscriptions ride which member (`riders`): a member stops when nobody rides it
any more, and a member built again (after a crash, by its supervisor) starts with a copy
of that record and held while a restore or an update holds it. A subscription's seat is
recorded when its tree is built (`prepare`, on the control actor's task: a tree is built
there before its supervisor starts it, beside the mailbox for subscribes, and
subscription trees are `temporary`, built once) and dropped before its tree stops, so a
member rebuilt meanwhile never gets a leaving rider; a seat whose tree did not start is
told to leave (a `Leave` names its seat, so a newer seat of the same subscription is
never dropped by an older one's leave).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field as default
from pathlib import Path
from typing import TYPE_CHECKING, Final, Protocol

from actors.delivery.control.origin_users import Limits, OriginUsers
from actors.delivery.document.patterns import matches
from actors.delivery.document.replay import ReplayRequest, replay_range
from actors.delivery.document.settings import (
    CursorCatalog,
    check_levels,
    egress_settings,
    largest_buffer,
    reader_settings,
    replay_settings,
    retry_topic_settings,
    rider_settings,
    with_retry_topic,
)
from actors.delivery.document.subscription import CircuitBreakerSettings, Consumer
from actors.delivery.egress.attempts import AttemptRing
from actors.delivery.egress.guard import DestinationGuard
from actors.delivery.egress.handler import HandlerDestination
from actors.delivery.egress.http import EgressActor, GoneCallback
from actors.delivery.egress.origin import BreakerSettings, Origin, Origins
from actors.delivery.egress.outlet import OutletActor
from actors.delivery.errors import (
    DeliveryError,
    InvalidSubscription,
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
from actors.delivery.path.member import Hold, InstanceMemberActor, Leave, Release, RiderActor
from actors.delivery.path.replay import ReplayActor, ReplayProgress
from actors.delivery.path.retrytopic import RetryTopicActor
from actors.delivery.path.roster import Rider
from actors.shared.group_consumer import ClientSettings, Wiring
from actors.shared.idle_pace import IdlePace
from runtime.errors import ActorDeadError, ActorStartError, ConfigError
from runtime.kernel.supervisor import ChildRef, ChildSpec, Supervisor

if TYPE_CHECKING:
    from runtime.host.app import Runtime
    from runtime.host.config import Config

log = logging.getLogger(__name__)
OutletFactory = Callable[[str], OutletActor]
"""Builds a subscription's outlet actor (given its name): the HTTP `EgressActor`, or a
`HandlerActor` for an in-process subscription (`Runtime.consume`)."""
Exited = Callable[[str, BaseException | None], None]
"""Told when a subscription's tree ended by itself: (key, its error)."""
DRAIN_MS = 2500
"""On revoke, unsubscribe and shutdown: how long in-flight pushes may take to finish."""
# The consumer drains (DRAIN_MS + 1 s of margin), then the rest stop quickly; a parent's
# deadline covers its children's so nothing is cancelled while still stopping properly.
CONSUMER_STOP_MS = DRAIN_MS + 1000
SUBSCRIPTION_STOP_MS = CONSUMER_STOP_MS + 1000


class Plant(Protocol):
    """What the control actor does to actor trees; `Trees` is the real one (a unit test
    gives its own, to drive the control actor's timing on a FakeClock)."""

    handlers: dict[str, HandlerDestination]
    restoring: bool

    def has_tree(self, key: str) -> bool: ...

    def bootstrap(self, consumer: Consumer) -> str: ...

    def check_retry_topics(self, consumer: Consumer) -> str | None: ...

    def broker_down(self, consumer: Consumer) -> bool: ...

    async def start(self, consumer: Consumer) -> None: ...

    async def restore_member(self, consumer: Consumer) -> bool: ...

    async def start_together(self, consumers: list[Consumer]) -> dict[str, DeliveryError]: ...

    def prepare(self, consumers: list[Consumer]) -> Starting: ...

    async def launch(self, starting: Starting) -> None: ...

    async def settle(self, starting: Starting) -> dict[str, DeliveryError]: ...

    async def stop(self, consumer: Consumer, *, keep_member: bool = False) -> None: ...

    async def stop_all(self, keys: list[str]) -> None: ...

    async def stop_trees(self, keys: list[str]) -> None: ...

    def unseat(self, consumer: Consumer) -> Rider | None: ...

    async def release_member(self, consumer: Consumer) -> None: ...

    async def stop_leftovers(self) -> int: ...

    async def start_replay(self, consumer: Consumer, request: ReplayRequest,
                           progress: ReplayProgress) -> None: ...

    def settle_origin(self, uri: str, joining: Consumer | None = None,
                      leaving: str | None = None) -> object: ...

    def replaying(self, key: str) -> set[str]: ...

    def own_topics(self) -> set[str]: ...

    def forget(self, key: str) -> None: ...

    async def hold_member(self, old: Consumer, new: Consumer) -> bool: ...

    async def release_hold(self, consumer: Consumer) -> None: ...

    async def release_holds(self) -> None: ...


@dataclass(slots=True)
class Starting:
    """Trees on their way up: built on the control actor's task (`Trees.prepare`),
    started by asks of the supervisors (`Trees.launch`, which may run beside the
    mailbox: actors/delivery/control/joining.py), settled on its task (`Trees.settle`)."""

    consumers: list[Consumer]
    members: list[ChildSpec] = default(default_factory=list)  # to start first
    trees: dict[str, ChildSpec] = default(default_factory=dict)  # by key: built
    failed: dict[str, DeliveryError] = default(default_factory=dict)  # by key: why not


@dataclass(slots=True)
class Wires:
    """Where the trees hang and whom they report to."""

    delivery: ChildRef  # the `delivery` supervisor
    groups: ChildRef  # the `groups` supervisor
    gone: GoneCallback  # an endpoint answered 410 Gone
    exited: Exited
    pace: IdlePace = default(default_factory=IdlePace)  # this runtime's consumers' idle pace


class Trees:
    def __init__(self, runtime: Runtime, wires: Wires, origins: Origins,
                 guard: DestinationGuard, attempts: dict[str, AttemptRing] | None = None,
                 ) -> None:
        self.runtime, self.wires = runtime, wires
        self.origins, self.guard = origins, guard
        # by subscription key: the attempts API's rings (the facade's: they outlive us)
        self.attempts: dict[str, AttemptRing] = attempts if attempts is not None else {}
        self.handlers: dict[str, HandlerDestination] = {}  # in-process subscriptions
        # member name -> the subscriptions riding it (key -> seat), in the order their
        # trees were built: the control plane's record, not the members' rosters
        self.riders: dict[str, dict[str, Rider]] = {}
        self._held: set[str] = set()  # members an update holds
        self._member_wirings: dict[str, Wiring] = {}
        self._starting_members: set[str] = set()  # members a `Starting` starts
        self.restoring = False  # members hold their subscribe until the restore is done
        self.origin_users = OriginUsers()

    # -- supervisors -------------------------------------------------------------------
    def supervisor(self) -> Supervisor:
        return self.wires.delivery.actor_as(Supervisor)

    def groups(self) -> Supervisor:
        return self.wires.groups.actor_as(Supervisor)

    def has_tree(self, key: str) -> bool:
        try:
            return self.supervisor().has_child(key)
        except ActorDeadError:  # the delivery supervisor is restarting
            return False

    def tree(self, key: str) -> Supervisor:
        actor = self.supervisor().child(key)
        assert isinstance(actor, Supervisor)
        return actor

    # -- checks before anything starts --------------------------------------------------
    def bootstrap(self, consumer: Consumer) -> str:
        try:
            return self.runtime.bootstrap(consumer.broker)
        except ConfigError as exc:
            raise UnknownBroker("unknown broker", str(exc)) from None

    def check_retry_topics(self, consumer: Consumer) -> str | None:
        return check_retry_topics(self.runtime, consumer)

    def own_topics(self) -> set[str]:
        return own_topics(self.runtime.config)

    def broker_down(self, consumer: Consumer) -> bool:
        return consumer.broker in self.runtime.probe.problems

    def forget(self, key: str) -> None:
        """Subscription `key` is gone (unsubscribed): its attempts ring goes, and what its
        actors held goes back to the garbage collector."""
        self.runtime.release_long_lived()
        self.attempts.pop(key, None)

    # -- start and stop ------------------------------------------------------------------
    async def start(self, consumer: Consumer) -> None:
        """Start one tree (and the member it rides); `SubscriptionStartFailed` if not."""
        failed = await self.start_together([consumer])
        if consumer.key in failed:
            raise failed[consumer.key]

    async def start_together(self, consumers: list[Consumer]) -> dict[str, DeliveryError]:
        """Start several trees at once: first the members they need, then the trees, each
        step in parallel. The subscriptions that could not start, with the reason."""
        starting = self.prepare(consumers)
        await self.launch(starting)
        return await self.settle(starting)

    def prepare(self, consumers: list[Consumer]) -> Starting:
        """Build the trees of `consumers` and the members they need that do not run yet,
        on the control actor's task: building records the seats. `launch` then only asks
        the supervisors, so it may run beside the mailbox."""
        starting = Starting(consumers)
        members: dict[str, ChildSpec] = {}
        for consumer in consumers:
            try:
                member = self._member_spec(consumer) if rides(consumer) else None
                starting.trees[consumer.key] = self.spec(consumer)
            except DeliveryError as exc:
                starting.failed[consumer.key] = exc
                continue
            except ActorStartError as exc:
                starting.failed[consumer.key] = start_failure(exc)
                continue
            if member is not None:
                members[member.name] = member
        starting.members = list(members.values())
        self._starting_members.update(members)
        return starting

    async def launch(self, starting: Starting) -> None:
        """Start what `prepare` built (`launch`): it may run beside the control actor."""
        await launch(starting, self.wires.groups, self.wires.delivery)

    async def settle(self, starting: Starting) -> dict[str, DeliveryError]:
        """On the control actor's task, once `launch` is done: the seats of the trees that
        did not start go (and their member, when nobody rides it). Those, with why."""
        self._starting_members.difference_update(spec.name for spec in starting.members)
        for consumer in starting.consumers:
            if consumer.key in starting.failed:
                await self.release_member(consumer)
        if len(starting.failed) < len(starting.consumers):
            self.runtime.keep_long_lived()
        return starting.failed

    async def stop(self, consumer: Consumer, *, keep_member: bool = False) -> None:
        """Stop `consumer`'s tree (it drains and commits), and the member when nobody
        rides it any more (unless `keep_member`)."""
        self.unseat(consumer)  # first: a member rebuilt meanwhile does not get it
        if self.has_tree(consumer.key):
            await self.supervisor().stop_child(consumer.key)
        if not keep_member:
            await self.release_member(consumer)

    async def stop_trees(self, keys: list[str]) -> None:
        """Stop these subscriptions' trees in parallel (each drains and commits); their
        seats were taken off their members' record first (`unseat`)."""
        sup = self.supervisor()
        await sup.stop_children([key for key in keys if sup.has_child(key)])

    async def stop_all(self, keys: list[str]) -> None:
        """Shutdown: the shared members first (each drains and commits every partition of
        its group and leaves the group once, instead of re-subscribing as each rider
        leaves), then the trees in parallel."""
        groups = self.groups()
        await groups.stop_children(groups.children())
        sup = self.supervisor()
        wanted = set(keys)
        await sup.stop_children([n for n in sup.children() if n in wanted])

    async def stop_leftovers(self) -> int:
        """Stop every tree and member (what a crashed control actor left); how many
        trees there were."""
        sup, groups = self.supervisor(), self.groups()
        trees = sup.children()
        await groups.stop_children(groups.children())
        await sup.stop_children(trees)
        # a start a crashed incarnation's launch asked before its end is answered before
        # these stops (one mailbox): what it started is there now, and goes too
        late = [name for name in sup.children() if name not in trees]
        await groups.stop_children(groups.children())
        await sup.stop_children(late)
        self.riders.clear()
        self._held.clear()
        self._starting_members.clear()  # the launches of a crashed incarnation ended
        return len(trees) + len(late)

    async def start_replay(self, consumer: Consumer, request: ReplayRequest,
                           progress: ReplayProgress) -> None:
        """A replay actor in the subscription's tree, pushing through its egress."""
        tree, bootstrap = self.tree(consumer.key), self.bootstrap(consumer)
        settings = self.runtime.consumer_settings(consumer.broker)
        egress, name = ChildRef(tree, "egress"), f"{REPLAY_PREFIX}{progress.replay_id}"
        await tree.start_child(ChildSpec(
            name, lambda: ReplayActor(name, replay_settings(consumer), replay_range(request),
                                      progress, bootstrap, egress, settings),
            restart="transient"))

    def replaying(self, key: str) -> set[str]:
        """The ids of `key`'s replays whose actors run (an ended replay's actor is gone:
        path/replay.py)."""
        try:
            children = self.tree(key).children()
        except ActorDeadError:  # not running
            return set()
        return {n.removeprefix(REPLAY_PREFIX) for n in children if n.startswith(REPLAY_PREFIX)}

    def spec(self, consumer: Consumer) -> ChildSpec:
        """The spec of `consumer`'s tree, built now (on the control actor's task: building
        seats it on its member); `ActorStartError` when it cannot be built. The tree is
        `temporary`: its supervisor calls the factory once."""
        key, exited = consumer.key, self.wires.exited
        try:
            tree = self._subscription_tree(consumer)
        except Exception as exc:  # a bad config slice, say: the tree cannot start
            raise ActorStartError(f"{key} failed to build: {exc!r}") from exc
        return ChildSpec(key, lambda: tree, restart="temporary",
                         shutdown_ms=SUBSCRIPTION_STOP_MS,
                         on_exit=lambda error: exited(key, error))

    def _subscription_tree(self, consumer: Consumer) -> Supervisor:
        return Supervisor(consumer.key, "one_for_all", intensity=5, period_ms=30_000,
                          children=lambda sup: self._subscription_children(consumer, sup),
                          # at once, unless the retry topic must exist before the consumer
                          start_together=consumer.subscriptionMethod.retryTopics is None)

    def _subscription_children(self, consumer: Consumer, sup: Supervisor) -> list[ChildSpec]:
        runtime, method = self.runtime, consumer.subscriptionMethod
        bootstrap = self.bootstrap(consumer)
        deadletter = ChildRef(sup, "deadletter") if method.deadLetterTopic else None
        wiring = Wiring(ChildRef(sup, "partitions"), bootstrap, DRAIN_MS,
                        fetch_size(largest_buffer(consumer)),
                        runtime.consumer_settings(consumer.broker), pace=self.wires.pace)
        retry_bootstrap = self.check_retry_topics(consumer)
        retrytopic = ChildRef(sup, "retrytopic") if retry_bootstrap else None
        reads = with_retry_topic(consumer)
        deps = ConsumerDeps(ChildRef(sup, "egress"), deadletter, runtime.metrics,
                            CursorCatalog(reads), runtime.config.delivery.stall_after_ms,
                            retrytopic)
        outlet = self._outlet(consumer)
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
            moved = retry_topic_settings(retry)
            specs.append(ChildSpec("retrytopic", lambda: RetryTopicActor(
                "retrytopic", retry_bootstrap, delay.levels, moved, consumer.key,
                delay.partitions, runtime.metrics), start_timeout_ms=15_000))
        specs.append(ChildSpec("partitions", lambda: Supervisor(
            "partitions", "one_for_one", intensity=10, period_ms=10_000),
            shutdown_ms=CONSUMER_STOP_MS))  # drained by then; 500 ms was short at scale
        specs.append(self._consumer_spec(reads, wiring, deps))
        return specs

    def _outlet(self, consumer: Consumer) -> OutletFactory:
        """An in-process subscription's handler, else the HTTP egress of its origin."""
        metrics, handler = self.runtime.metrics, self.handlers.get(consumer.key)
        if handler is not None:
            return lambda name: handler.outlet(name, consumer.key, metrics)
        settings = egress_settings(consumer)  # a handler's method without its handler: refused
        origin = self.settle_origin(settings.uri, consumer)
        guard, gone = self.guard, self.wires.gone
        transport = self.runtime.config.egress.transport  # this runtime's, not the process's
        return lambda name: EgressActor(name, settings, metrics, guard, origin, gone,
                                        transport)

    def settle_origin(self, uri: str, joining: Consumer | None = None,
                      leaving: str | None = None) -> Origin:
        """The origin of `uri`, set to the strictest settings of the subscriptions that
        push there now: `joining` starts pushing there, `leaving` (a key) stopped
        pushing wherever it did and takes its limits with it."""
        origin = self.origins.get(uri)
        if leaving is not None:
            self.origin_users.leave(leaving)
        method = joining.http if joining is not None else None
        if joining is not None and method is not None:
            self.origin_users.join(joining.key, origin, Limits(
                method.rateLimitPerSecond, _breaker_settings(method.circuitBreaker)))
        limits = self.origin_users.limits(origin)
        origin.configure((lim.rate for lim in limits), (lim.breaker for lim in limits))
        return origin

    def _consumer_spec(self, consumer: Consumer, wiring: Wiring,
                       deps: ConsumerDeps) -> ChildSpec:
        """The subscription's seat on its group's shared member, or its own consumer for
        pinned partitions (manual assignment: no group membership to share)."""
        if not rides(consumer):
            reader = reader_settings(consumer)
            return ChildSpec("consumer", lambda: ConsumerActor("consumer", reader, wiring,
                                                               deps),
                             shutdown_ms=CONSUMER_STOP_MS, start_timeout_ms=15_000)
        name = member_name(consumer)
        member = ChildRef(self.wires.groups, name)  # follows the groups supervisor too
        rider = Rider(rider_settings(consumer), wiring.partitions, deps)
        self._seat(name, rider)
        return ChildSpec("consumer", lambda: RiderActor("consumer", rider, member, DRAIN_MS),
                         shutdown_ms=CONSUMER_STOP_MS, start_timeout_ms=15_000)

    def _seat(self, name: str, rider: Rider) -> None:
        """Record that `rider` rides member `name` (last: in the order of joining)."""
        seats = self.riders.setdefault(name, {})
        key = rider.settings.key
        seats.pop(key, None)
        seats[key] = rider

    def unseat(self, consumer: Consumer) -> Rider | None:
        """`consumer` rides no member any more (its tree stops, or did not start): its
        seat, if it had one."""
        if not rides(consumer):
            return None
        return self.riders.get(member_name(consumer), {}).pop(consumer.key, None)

    # -- shared instance members (actors/delivery/path/member/) ----------------------
    async def restore_member(self, consumer: Consumer) -> bool:
        """Start `consumer`'s member again if it is gone (its supervisor was restarted
        empty); False (and a warning) when it could not start."""
        if not rides(consumer):
            return True
        try:
            await self._ensure_member(consumer)
        except (ActorStartError, ActorDeadError, DeliveryError) as exc:  # or starting
            log.warning("group member %s could not start again: %r", member_name(consumer), exc)
            return False
        return True

    async def _ensure_member(self, consumer: Consumer) -> None:
        spec = self._member_spec(consumer)
        if spec is not None:
            await self.groups().start_child(spec)
            log.info("group member %s started", spec.name)

    def _member_spec(self, consumer: Consumer) -> ChildSpec | None:
        """The spec of `consumer`'s member, None when it runs already."""
        name, groups = member_name(consumer), self.groups()
        if groups.has_child(name):
            return None
        if name in self._starting_members:  # by a start beside the mailbox: tried again
            raise SubscriptionStartFailed("subscription failed to start",
                                          f"its group member {name} is starting")
        self.riders.setdefault(name, {})
        runtime, group = self.runtime, instance_group(self.runtime.config)
        wiring = self._member_wirings.setdefault(name, Wiring(
            ChildRef(self.wires.groups, name), self.bootstrap(consumer), DRAIN_MS,
            fetch_size(largest_buffer(consumer)),
            runtime.consumer_settings(consumer.broker), pace=self.wires.pace))
        settings = instance_client_settings(group, runtime.config.delivery.session_timeout_ms)
        return ChildSpec(name, lambda: self._member(name, group, wiring, settings),
                         shutdown_ms=CONSUMER_STOP_MS, start_timeout_ms=15_000)

    def _member(self, name: str, group: str, wiring: Wiring,
                settings: ClientSettings) -> InstanceMemberActor:
        """A member, first or rebuilt by its supervisor after a crash: it starts with a
        copy of the riders recorded here, held while a restore or an update holds it."""
        runtime = self.runtime
        return InstanceMemberActor(name, group, list(self.riders.get(name, {}).values()),
                                   wiring, settings, runtime.metrics, runtime.keep_long_lived,
                                   held=self.restoring or name in self._held,
                                   settle_ms=runtime.config.delivery.settle_ms)

    async def release_member(self, consumer: Consumer) -> None:
        """`consumer` rides no member now (its tree stopped or did not start): stop its
        member when no subscription rides it any more (it leaves the group)."""
        seat = self.unseat(consumer)
        if seat is not None:  # its tree did not start: the member may have the seat
            # still (its rider joined, or the member was rebuilt with it): it leaves too
            done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            await self._tell_member(member_name(consumer), Leave(seat, done))
        await self._stop_idle_member(consumer)

    async def _stop_idle_member(self, consumer: Consumer) -> None:
        """Stop `consumer`'s member if the record says nobody rides it."""
        name = member_name(consumer)
        if not rides(consumer) or name not in self.riders or self.riders[name]:
            return
        try:
            groups = self.groups()
        except ActorDeadError:  # the groups supervisor is restarting: its members went
            groups = None
        if groups is not None and groups.has_child(name):
            await groups.stop_child(name)
            log.info("group member %s stopped: no subscription rides it", name)
        self.riders.pop(name, None)
        self._member_wirings.pop(name, None)
        self._held.discard(name)

    async def hold_member(self, old: Consumer, new: Consumer) -> bool:
        """When the updated subscription stays on its member: hold the member, so it
        sees the leave and the join as one change (one rebalance, or none when the topics
        stay); `release_hold` ends it. False: nothing held."""
        name = member_name(old)
        if not (rides(old) and rides(new)) or name not in self.riders \
                or name != member_name(new):
            return False
        self._held.add(name)  # first: a member rebuilt meanwhile starts held
        await self._tell_member(name, Hold())
        return True

    async def release_hold(self, consumer: Consumer) -> None:
        """The update is done: the member subscribes once, if at all; it stops when
        nobody rides it (the new start failed)."""
        name = member_name(consumer)
        self._held.discard(name)  # first: a member rebuilt meanwhile starts released
        await self._tell_member(name, Release())
        await self._stop_idle_member(consumer)

    async def release_holds(self) -> None:
        """The restore is done (`restoring` is False): each member subscribes once, to
        the whole union."""
        for name in [n for n in self.riders if n not in self._held]:
            await self._tell_member(name, Release())

    async def _tell_member(self, name: str, message: Hold | Release | Leave) -> None:
        """Tell a running member (one being rebuilt reads the record instead); `tell`,
        not `ask`: it lands before any later `Leave` or `Join` of a rider, and a member
        that is starting need not be waited for."""
        with contextlib.suppress(ActorDeadError):
            await self.groups().child(name).tell(message)

    def __repr__(self) -> str:
        return f"<Trees members={sorted(self.riders)}>"


REPLAY_PREFIX: Final = "replay-"
"""A replay actor's name in its subscription's tree: the prefix and the replay id."""


def instance_group(config: Config) -> str:
    """The consumer group the runtime's instances share (`[delivery] instance_group`; by
    default derived from what instances of one deployment have in common: the cluster's
    subscriptions topic, else the persistence folder)."""
    if config.delivery.instance_group:
        return config.delivery.instance_group
    shared = config.cluster.subscriptions_topic or str(Path(config.persistence.dir).resolve())
    return "hookstream-instances-" + hashlib.sha256(shared.encode()).hexdigest()[:12]


def with_ring(outlet: OutletActor, ring: AttemptRing) -> OutletActor:
    """The outlet, writing its attempts into the subscription's ring."""
    outlet.attempts = ring
    return outlet


def refuse_own_topics(consumer: Consumer, own: set[str]) -> None:
    """No subscription reads the runtime's own topics (#25: subscribing to the
    subscriptions topic pushed every subscription's secrets to the caller), nor writes
    them (#34: a dead-letter or retry topic of `hookstream.subscriptions` let an endpoint
    answering `QOH-Action: dead-letter` pause and delete another tenant's subscription)."""
    for i, topic in enumerate(consumer.topics):
        hit = topic.name if topic.name in own else next(
            (t for t in sorted(own) if topic.pattern and matches(topic.pattern, t)), None)
        if hit is not None:
            raise InvalidSubscription(f"invalid topics[{i}]", f"{hit} is one of the "
                                      "runtime's own topics, not a source to subscribe to")
    for field, written in written_topics(consumer).items():
        if written in own:
            raise InvalidSubscription(f"invalid subscriptionMethod.{field}", f"{written} is "
                                      "one of the runtime's own topics, not a topic to write "
                                      "records to")


def written_topics(consumer: Consumer) -> dict[str, str]:
    """The topics a subscription writes records to, by the field that names them."""
    method = consumer.subscriptionMethod
    written = {"deadLetterTopic": method.deadLetterTopic,
               "retryTopics.topic": (method.retryTopics.topic
                                     if method.retryTopics is not None else None)}
    return {field: topic for field, topic in written.items() if topic}


def check_replay_topic(consumer: Consumer, topic: str, own: set[str]) -> None:
    """A replay reads the subscription's own sources only: its topics (named or matching
    its patterns), its dead-letter topic and its retry topic; never the runtime's own
    topics (#25)."""
    ours = topic in {t.name for t in consumer.topics} | set(written_topics(consumer).values()) \
        or any(t.pattern and matches(t.pattern, topic) for t in consumer.topics)
    if topic in own or not ours:
        raise InvalidSubscription("invalid replay request", f"{topic!r} is not a topic "
                                  f"of {consumer.key}: a replay reads its topics, its "
                                  "deadLetterTopic or its retry topic")


def member_name(consumer: Consumer) -> str:
    """One instance member per broker: every subscription of that broker reads through
    it (issue 24)."""
    return f"instance:{consumer.broker}"


def rides(consumer: Consumer) -> bool:
    """Whether the group assigns the subscription's partitions (then it rides a shared
    member); pinned partitions keep their own consumer."""
    return not any(t.partitions for t in consumer.topics)


def start_failure(error: Exception) -> SubscriptionStartFailed:
    """What the API says when a subscription's actors could not start: the first cause."""
    return SubscriptionStartFailed("subscription failed to start",
                                   str(error.__cause__ or error))


def _breaker_settings(given: CircuitBreakerSettings | None) -> BreakerSettings:
    if given is None:
        return BreakerSettings()
    return BreakerSettings(given.failureRatio, given.minRequests, given.openMs)


async def _start_all(parent: ChildRef, specs: list[ChildSpec]) -> dict[str, ActorStartError]:
    """Start `specs` under `parent` (a supervisor's handle) in parallel; by name, those
    that failed (all of them while the supervisor restarts)."""
    if not specs:
        return {}
    try:
        errors = await parent.actor_as(Supervisor).start_children(specs)
    except ActorDeadError as exc:
        errors = [ActorStartError(str(exc))] * len(specs)
    return {spec.name: error for spec, error in zip(specs, errors, strict=True) if error}


async def launch(starting: Starting, groups: ChildRef, delivery: ChildRef) -> None:
    """Start what `Trees.prepare` built: the members (under `groups`), then the trees
    whose member runs (under `delivery`), each step in parallel; failures go into
    `starting.failed`. It asks the supervisors and writes no state of the control actor's:
    it may run on a task beside it."""
    broken = await _start_all(groups, starting.members)
    for member in starting.members:
        if member.name not in broken:
            log.info("group member %s started", member.name)
    ready: dict[str, ChildSpec] = {}
    for consumer in starting.consumers:
        spec = starting.trees.get(consumer.key)
        error = broken.get(member_name(consumer)) if rides(consumer) else None
        if error is not None:
            starting.failed[consumer.key] = start_failure(error)
        elif spec is not None:
            ready[consumer.key] = spec
    errors = await _start_all(delivery, list(ready.values()))
    starting.failed.update((key, start_failure(error)) for key, error in errors.items())


def check_retry_topics(runtime: Runtime, consumer: Consumer) -> str | None:
    """With `retryTopics`: the delay queue's bootstrap, after checking that its delays fit
    the config's levels and that the delay queue runs on the subscription's broker (it
    forwards to the retry topic, which the subscription consumes). Raises
    `InvalidSubscription` naming what is missing."""
    retry = consumer.subscriptionMethod.retryTopics
    if retry is None:
        return None
    delay = runtime.config.delay
    check_levels(retry, delay.levels)
    delay_broker = delay.broker or runtime.config.brokers[0].name
    if delay_broker != consumer.broker:
        raise InvalidSubscription(
            "invalid subscriptionMethod.retryTopics",
            f"the delay queue runs on broker {delay_broker!r}, the subscription reads "
            f"{consumer.broker!r}: retry topics need them to be the same")
    return runtime.bootstrap(delay_broker)


def own_topics(config: Config) -> set[str]:
    """The runtime's own topics: the cluster's subscriptions and status topics (they hold
    every subscription's document, secrets included) and the delay levels'."""
    cluster = config.cluster
    own = {t for level in config.delay.levels for t in level.topics}
    return own | {t for t in (cluster.subscriptions_topic, cluster.status_topic) if t}
