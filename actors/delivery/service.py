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

Library API: `await service.subscribe(consumer)`, `await service.unsubscribe(key)`; they
raise the errors of actors/delivery/errors.py (`DeliveryError` and its subclasses). The
admin API's routes (Queue-Over-Http) are in actors/delivery/routes.py.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from actors.delivery.consumer import ConsumerActor, ConsumerDeps, fetch_size
from actors.delivery.deadletter import DeadLetterActor
from actors.delivery.egress import EgressActor
from actors.delivery.errors import (
    DeliveryError,
    SubscriptionExists,
    SubscriptionNotFound,
    SubscriptionStartFailed,
    UnknownBroker,
)
from actors.delivery.outlet import OutletActor
from actors.delivery.routes import SubscriptionRoutes
from actors.delivery.store import SubscriptionStore
from actors.delivery.subscription import Consumer
from actors.shared.group_consumer import Wiring
from runtime.errors import ActorStartError, ConfigError
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


class DeliveryService:
    name = "delivery"

    def __init__(self) -> None:
        self.subscriptions: dict[str, Consumer] = {}
        self.outlets: dict[str, OutletFactory] = {}  # in-process subscriptions only
        self.problems: list[str] = []
        self._runtime: Runtime | None = None
        self._store: SubscriptionStore | None = None
        self._root: ChildRef | None = None
        self._lock = asyncio.Lock()  # one admin change at a time

    # -- lifecycle ---------------------------------------------------------------------
    async def start(self, runtime: Runtime) -> None:
        self._runtime = runtime
        self._store = SubscriptionStore(runtime.config.persistence.dir)
        self._root = await runtime.system.spawn(ChildSpec(
            "delivery", self._delivery_supervisor, shutdown_ms=SUBSCRIPTION_STOP_MS + 500))
        SubscriptionRoutes(self).add_to(runtime.admin.app)
        await self._restore()

    def _delivery_supervisor(self) -> Supervisor:
        # rebuilt after an escalation: it restarts every known subscription
        specs = [self._spec(c) for c in self.subscriptions.values()]
        return Supervisor("delivery", "one_for_one", intensity=10, period_ms=60_000,
                          children=specs)

    async def _restore(self) -> None:
        assert self._store is not None
        consumers, self.problems = await self._store.load_all()
        for consumer in consumers:
            try:
                await self.subscribe(consumer, persist=False)
                log.info("restored subscription %s", consumer.key)
            except DeliveryError as exc:
                self.problems.append(f"{consumer.key}: {exc}")
                log.error("could not restore subscription %s: %s", consumer.key, exc)

    async def stop(self) -> None:
        """Stop every subscription in parallel: each drains and commits."""
        if self._root is None:
            return
        sup = self._supervisor()
        await sup.stop_children([n for n in sup.children() if n in self.subscriptions])

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

        Raises `SubscriptionExists`, `UnknownBroker`, `SubscriptionStartFailed`, or
        `InvalidSubscription` for a name the store refuses.
        """
        async with self._lock:
            self._refuse_early(consumer, persist)
            if outlet is not None:
                self.outlets[consumer.key] = outlet
            try:
                await self._start_tree(consumer)
            except BaseException:
                self.outlets.pop(consumer.key, None)
                raise
            self.subscriptions[consumer.key] = consumer
            if persist:
                assert self._store is not None
                await self._store.save(consumer)

    def _refuse_early(self, consumer: Consumer, persist: bool) -> None:
        """What would fail later, checked before anything starts."""
        if consumer.key in self.subscriptions:
            raise SubscriptionExists("subscription already exists",
                                     f"{consumer.key}: unsubscribe it first")
        if persist:  # `<id>_<group.id>` may be too long for a file name though each part fits
            assert self._store is not None
            self._store.path(consumer.key)
        self._bootstrap(consumer)

    async def _start_tree(self, consumer: Consumer) -> None:
        try:
            await self._supervisor().start_child(self._spec(consumer))
        except ActorStartError as exc:
            raise SubscriptionStartFailed("subscription failed to start",
                                          str(exc.__cause__ or exc)) from exc

    async def unsubscribe(self, key: str) -> Consumer:
        """Stop subscription `key` (`<id>_<group.id>`): it drains and commits, then its
        file is deleted. Raises `SubscriptionNotFound`."""
        async with self._lock:
            consumer = self.subscriptions.get(key)
            if consumer is None:
                raise SubscriptionNotFound("subscription not found", key)
            sup = self._supervisor()
            if sup.has_child(key):
                await sup.stop_child(key)
            del self.subscriptions[key]
            if self.outlets.pop(key, None) is None:  # in-process ones were never stored
                assert self._store is not None
                await self._store.delete(key)
            return consumer

    def _bootstrap(self, consumer: Consumer) -> str:
        assert self._runtime is not None
        try:
            return self._runtime.bootstrap(consumer.broker)
        except ConfigError as exc:
            raise UnknownBroker("unknown broker", str(exc)) from None

    def _spec(self, consumer: Consumer) -> ChildSpec:
        return ChildSpec(consumer.key, lambda: self._subscription_tree(consumer),
                         shutdown_ms=SUBSCRIPTION_STOP_MS)

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
        deps = ConsumerDeps(ChildRef(sup, "egress"), deadletter, runtime.metrics)
        outlet = self.outlets.get(consumer.key) or (
            lambda name: EgressActor(name, consumer, consumer.broker, runtime.metrics))
        specs = [ChildSpec("egress", lambda: outlet("egress"))]
        if method.deadLetterTopic:
            topic = method.deadLetterTopic
            specs.append(ChildSpec("deadletter",
                                   lambda: DeadLetterActor("deadletter", bootstrap, topic)))
        specs.append(ChildSpec("partitions", lambda: Supervisor(
            "partitions", "one_for_one", intensity=10, period_ms=10_000),
            shutdown_ms=500))
        specs.append(ChildSpec(
            "consumer", lambda: ConsumerActor("consumer", consumer, wiring, deps),
            shutdown_ms=CONSUMER_STOP_MS, start_timeout_ms=15_000))
        return specs

    def __repr__(self) -> str:
        return f"<DeliveryService subscriptions={list(self.subscriptions)}>"

