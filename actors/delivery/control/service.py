"""DeliveryControl: the delivery control plane's library API, a thin facade over asks to
the control actor (actors/delivery/control/actor.py).

Actors, under the runtime's root supervisor::

    delivery (one_for_one)     the subscriptions' trees (actors/delivery/control/trees.py)
    groups (one_for_one)       the instance members the subscriptions ride
    control                    the control actor: every change, one at a time

Library API: `await service.subscribe(consumer)`, `unsubscribe(key)`, `pause(key)`,
`resume(key)`, `update(key, consumer)`, `replay(key, request)`, `status_of(key)`,
`attempts_of(key, ...)`, `failures_of(key, limit)`; they raise the errors of
actors/delivery/errors.py (`DeliveryError` and its subclasses). A change goes to the
subscriptions' source (actors/delivery/control/source.py: the persistence folder, or in
cluster mode the subscriptions topic, from which every instance applies it); in-process
subscriptions (`Runtime.consume`) are the embedding program's and change here directly.
The admin API's routes are in actors/delivery/api/ and call this API;
actors/delivery/service.py adds them.

Subscriptions never vanish. Each has a `SubscriptionStatus` (actors/delivery/control/
status.py) that the control actor's registry keeps; the status readers here read what
the control actor published, and the status answers (`answer`, `status_of`,
`readiness`) add what the running actors answer when asked (actors/delivery/control/
live.py).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from actors.delivery.cluster.view import (
    ClusterStatusActor,
    ViewAsked,
    describe_cluster_route,
    snapshot_of,
)
from actors.delivery.control import commits
from actors.delivery.control.actor import ControlActor, Programmed
from actors.delivery.control.attempts_desk import AttemptsDesk
from actors.delivery.control.live import has_partitions, live, lives, member_problems, stalls
from actors.delivery.control.messages import (
    Gone,
    MembersLost,
    Replay,
    Subscribe,
    TreeExited,
    TreesLost,
    ask,
)
from actors.delivery.control.overview import Overview, Rows, measured, overview, refusals
from actors.delivery.control.overview import readiness as overview_readiness
from actors.delivery.control.registry import Limits, Published
from actors.delivery.control.source import ClusterTopic, Direct, LocalFiles, SubscriptionSource
from actors.delivery.control.status import (
    STOPPED,
    Live,
    RefusedCommit,
    SubscriptionAnswer,
    SubscriptionStatus,
)
from actors.delivery.control.trees import (
    SUBSCRIPTION_STOP_MS,
    Trees,
    Wires,
    instance_group,
)
from actors.delivery.document.replay import ReplayRequest
from actors.delivery.document.subscription import Consumer, redacted
from actors.delivery.egress.attempts import Coordinates
from actors.delivery.egress.guard import DEFAULT_DENY, DestinationGuard
from actors.delivery.egress.handler import HandlerDestination
from actors.delivery.egress.origin import Origins
from actors.delivery.errors import SubscriptionNotFound
from actors.delivery.path.replay import ReplayProgress
from runtime.errors import ActorDeadError, UsageError
from runtime.kernel.supervisor import ChildRef, ChildSpec, Supervisor

if TYPE_CHECKING:
    from runtime.host.app import Runtime

log = logging.getLogger(__name__)
CONTROL_START_MS = 600_000
"""The control actor restores every stored subscription before it reports ready."""
CONTROL_STOP_MS = 2 * SUBSCRIPTION_STOP_MS + 1000
"""Its stop: the members drain and commit, then the trees."""
OVERVIEW_FRESH_MS = 2000
"""An overview this young is answered again instead of gathered anew: any number of open
status pages and consoles cost one gathering per period."""
OVERVIEW_CPU_SHARE = 0.01
"""At most this share of a core for overviews: one that took 50 ms to gather (10,000
subscriptions) is kept 5 s, longer than `OVERVIEW_FRESH_MS`."""

__all__ = ["DeliveryControl"]


class DeliveryControl:
    name = "delivery"

    def __init__(self) -> None:
        self.guard = DestinationGuard()
        self._cluster: ChildRef | None = None  # [cluster] status_topic: the whole view
        self.source: SubscriptionSource | None = None
        self._direct = Direct()  # in-process subscriptions: never in the source
        self._programmed = Programmed()
        self._runtime: Runtime | None = None
        self._control: ChildRef | None = None
        self._delivery: ChildRef | None = None
        self._groups: ChildRef | None = None
        self.desk = AttemptsDesk()
        self.attempts = self.desk.rings  # written by the outlets (the trees set them)
        self.origins = Origins()  # the trees' own, from start
        self._overview: Overview | None = None
        self._rows = Rows()  # the overview's, each built again when it changed
        self._overview_fresh_ms = OVERVIEW_FRESH_MS
        self._accepted: commits.AcceptedReader | None = None  # from start to stop

    # -- lifecycle ---------------------------------------------------------------------
    async def start(self, runtime: Runtime) -> None:
        self._runtime = runtime
        self._accepted = commits.AcceptedReader(runtime.clock)
        runtime.listen("dead_lettered", self.desk.note_give_up)
        runtime.listen("retry_scheduled", self.desk.note_give_up)
        journal = runtime.config.journal
        self.desk.journal = Path(journal.dir) if journal.enabled else None
        egress, cluster = runtime.config.egress, runtime.config.cluster
        origins = self.origins = Origins(breaker=egress.circuit_breaker,
                                         max_connections=egress.origin_max_connections)
        self.guard = DestinationGuard(egress.allow_networks, egress.deny_networks
                                      if egress.deny_networks is not None else DEFAULT_DENY,
                                      egress.allow_references)
        source: SubscriptionSource = (ClusterTopic(runtime) if cluster.subscriptions_topic
                                      else LocalFiles(runtime.config.persistence.dir,
                                                      runtime.is_embedded))
        self.source = source
        self._delivery = await runtime.system.spawn(ChildSpec(
            "delivery", _delivery_supervisor, shutdown_ms=SUBSCRIPTION_STOP_MS + 500,
            on_exit=lambda error: self._tell(TreesLost(error))))
        self._groups = await runtime.system.spawn(ChildSpec(
            "groups", lambda: Supervisor("groups", "one_for_one", intensity=10,
                                         period_ms=60_000),
            shutdown_ms=SUBSCRIPTION_STOP_MS + 500,
            on_exit=lambda error: self._tell(MembersLost(error))))
        wires = Wires(self._delivery, self._groups,
                      gone=lambda key, reason: self._tell(Gone(key, reason)),
                      exited=lambda key, error: self._tell(TreeExited(key, error)))
        programmed, rings = self._programmed, self.attempts
        delivery = runtime.config.delivery
        limits = Limits(delivery.max_subscriptions, delivery.max_topics, delivery.max_patterns)

        def control() -> ControlActor:  # every incarnation anew, from the source
            return ControlActor("control", runtime,
                                Trees(runtime, wires, origins, self.guard, rings),
                                source, programmed, limits)

        self._control = await runtime.system.spawn(ChildSpec(
            "control", control, start_timeout_ms=CONTROL_START_MS,
            shutdown_ms=CONTROL_STOP_MS))
        if cluster.status_topic:
            describe_cluster_route(runtime.admin.app, runtime.admin.openapi,
                                   self._whole_cluster)
            self._cluster = await runtime.system.spawn(ChildSpec(
                "cluster-status", lambda: ClusterStatusActor(
                    "cluster-status", runtime, lambda: snapshot_of(self),
                    lambda: [p for p in [source.problem] if p]),
                start_timeout_ms=90_000, shutdown_ms=4000))

    def _tell(self, message: object) -> None:
        """From a supervisor's exit notice or an egress actor's 410: to the mailbox."""
        if self._control is not None:
            self._control.tell_system(message)

    async def stop(self) -> None:
        """Stop the control actor: every subscription drains and commits."""
        cluster, self._cluster = self._cluster, None
        if cluster is not None:  # publishes `stopped`: the others stop counting on us
            await cluster.parent().stop_child(cluster.name)
        control, self._control = self._control, None
        try:
            if control is not None:
                await control.parent().stop_child(control.name)
        finally:
            accepted, self._accepted = self._accepted, None
            if accepted is not None:
                await accepted.aclose()

    @property
    def runtime(self) -> Runtime:
        """The runtime this service started in (a `UsageError` before `start`)."""
        if self._runtime is None:
            raise UsageError("the delivery service is not started: add it to a Runtime "
                             "(`Runtime(config, services=[DeliveryService])`)")
        return self._runtime

    def instance_group(self) -> str:
        """The consumer group the runtime's instances share (`[delivery] instance_group`;
        by default derived from what instances of one deployment have in common)."""
        return instance_group(self.runtime.config)

    def _ref(self) -> ChildRef:
        if self._control is None:
            if self._runtime is not None:
                raise ActorDeadError("the delivery service stopped with its Runtime")
            raise UsageError("the delivery service is not running: start its Runtime")
        return self._control

    def _actor(self) -> ControlActor:
        return self._ref().actor_as(ControlActor)

    def _registry(self) -> Published | None:
        """What the control actor's registry published; None while it restarts."""
        try:
            return self._actor().registry.published
        except (ActorDeadError, UsageError):
            return None

    # -- what the control actor published (read-only) ------------------------------------
    @property
    def subscriptions(self) -> Mapping[str, Consumer]:
        registry = self._registry()
        return registry.consumers if registry is not None else {}

    @property
    def status(self) -> Mapping[str, SubscriptionStatus]:
        registry = self._registry()
        return registry.statuses if registry is not None else {}

    @property
    def handlers(self) -> Mapping[str, HandlerDestination]:
        """The in-process subscriptions' handlers, by key."""
        return self._programmed.handlers

    @property
    def problems(self) -> list[str]:
        """Stored subscriptions that could not be read at start."""
        try:
            return list(self._actor().problems)
        except (ActorDeadError, UsageError):
            return []

    @property
    def replays(self) -> Mapping[str, ReplayProgress]:
        try:
            return self._actor().desk.replays
        except (ActorDeadError, UsageError):
            return {}

    def in_process(self, key: str) -> bool:
        """True for a subscription an embedding program registered (read-only here)."""
        return key in self._programmed.handlers

    def tree(self, key: str) -> Supervisor:
        """The running supervisor of subscription `key` (for operators and chaos tests)."""
        assert self._delivery is not None
        actor = self._delivery.actor_as(Supervisor).child(key)
        assert isinstance(actor, Supervisor)
        return actor

    def _running_tree(self, key: str) -> Supervisor | None:
        try:
            return self.tree(key)
        except ActorDeadError:
            return None

    # -- changes: asks ---------------------------------------------------------------------
    def _source_for(self, key: str) -> SubscriptionSource | Direct:
        """Where a change of `key` goes: the source, unless the program owns `key`."""
        if self.in_process(key) or self.source is None:
            return self._direct
        return self.source

    async def subscribe(self, consumer: Consumer, *, persist: bool = True,
                        handler: HandlerDestination | None = None) -> None:
        """Start `consumer`'s actor tree and (with `persist`) keep it in the source for
        the next start. `handler`: an in-process subscription (its records go to a
        Python function), never persisted. In cluster mode the subscription is written to the
        subscriptions topic and every instance starts it; this returns once this
        instance applied it.

        Raises `SubscriptionExists`, `UnknownBroker`, `SubscriptionStartFailed`, or
        `InvalidSubscription` for a name the store refuses.
        """
        _pairs(consumer, handler)
        if handler is not None or not persist:
            await ask(self._ref(), Subscribe(consumer, persist=False, handler=handler))
            return
        await self._source_for(consumer.key).subscribe(self._ref(), consumer)

    async def unsubscribe(self, key: str) -> Consumer:
        """Stop subscription `key` (`Consumer.key`): it drains and commits, then it
        is removed from the source (in cluster mode: a tombstone stops it everywhere).
        Raises `SubscriptionNotFound`."""
        return await self._source_for(key).unsubscribe(self._ref(), key)

    async def update(self, key: str, consumer: Consumer) -> None:
        """Change a subscription in place: drain and commit, then start again with the new
        settings from the committed positions (nothing lost, nothing skipped). In cluster
        mode every instance does so. A `***` where GET showed a secret keeps the secret."""
        _pairs(consumer, None)
        await self._source_for(key).update(self._ref(), key, consumer)

    async def pause(self, key: str) -> None:
        """Stop fetching and delivering: in-flight pushes finish, positions are committed,
        the group membership goes (the partitions move to other instances, if any). Kept
        across restarts; in cluster mode it applies on every instance. Raises
        `SubscriptionNotFound`."""
        await self._source_for(key).pause(self._ref(), key)

    async def resume(self, key: str) -> None:
        """Start a paused (or disabled) subscription again from its committed positions."""
        await self._source_for(key).resume(self._ref(), key)

    async def replay(self, key: str, request: ReplayRequest) -> ReplayProgress:
        """Deliver records again through the subscription's egress (actors/delivery/path/
        replay.py); returns at once with the progress object the replay updates."""
        progress: ReplayProgress = await ask(self._ref(), Replay(key, request))
        return progress

    # -- attempts (issue 27) -------------------------------------------------------------
    async def attempts_of(self, key: str, coordinates: Coordinates | None = None,
                          webhook_id: str | None = None) -> dict[str, object]:
        """What happened to one record, named by coordinates or `webhook-id`."""
        self._known(key)
        return await self.desk.of_record(key, coordinates, webhook_id)

    async def failures_of(self, key: str, limit: int) -> dict[str, object]:
        """The latest `limit` failed attempts across the subscription's records."""
        self._known(key)
        return await self.desk.failures(key, limit)

    # -- status --------------------------------------------------------------------------
    async def cluster_view(self, key: str) -> dict[str, object] | None:
        """Subscription `key` on every instance (`[cluster] status_topic`), else None."""
        if self._cluster is None:
            return None
        view: dict[str, object] = await self._cluster.ask(ViewAsked(key))
        return view

    async def cluster_overview(self) -> dict[str, object] | None:
        """The cluster's instances and total lag (`[cluster] status_topic`), else None:
        the summary's part of the cluster view (its partition owners are per
        subscription)."""
        if self._cluster is None:
            return None
        view = await self._whole_cluster()
        return {"instances": view["instances"], "total_lag": view["total_lag"]}

    async def _whole_cluster(self) -> dict[str, object]:
        if self._cluster is None:
            raise UsageError("the cluster view runs with [cluster] status_topic only")
        view: dict[str, object] = await self._cluster.ask(ViewAsked())
        return view

    def _known(self, key: str) -> tuple[Consumer, SubscriptionStatus]:
        registry = self._registry()
        consumer = registry.consumers.get(key) if registry is not None else None
        if registry is None or consumer is None:
            raise SubscriptionNotFound("subscription not found", key)
        return consumer, registry.statuses[key]

    async def answer(self, key: str) -> SubscriptionAnswer:
        """The consumer (redacted) and its status: state, partitions, endpoint, counters
        (typed: actors/delivery/control/status.py), asked of its running actors
        (actors/delivery/control/live.py). Raises `SubscriptionNotFound`."""
        consumer, _ = self._known(key)
        tree = self._running_tree(key)
        shown = await live(tree, self.runtime.clock)
        error = shown.member.commit_error if shown.member is not None else None
        # what the member knows it was refused: there even when its rider answers late
        known = refusals(self.runtime.metrics).get(key, [])
        if known or (error and shown.partitions):  # asked for is not what Kafka holds
            shown = await self._as_accepted(consumer, shown, known, error or "")
        return self._answer(key, shown)

    async def _as_accepted(self, consumer: Consumer, shown: Live,
                           known: list[RefusedCommit], error: str) -> Live:
        """`shown` with the positions Kafka accepted (actors/delivery/control/commits.py);
        with the member's refusals and why Kafka was not read when it cannot be now."""
        reader = self._accepted
        if reader is None:
            raise UsageError("the delivery service is not running: start its Runtime")
        try:
            accepted = await reader.read(
                self.runtime.bootstrap(consumer.broker), consumer.group_id,
                commits.asked_of(shown, known))
        except Exception as exc:  # the status answers anyway
            log.warning("subscription %s: cannot read its accepted positions: %r",
                        consumer.key, exc)
            return commits.without_accepted(shown, known, error, commits.why_unavailable(exc))
        return commits.with_accepted(shown, accepted, error, known)

    async def answers(self) -> dict[str, SubscriptionAnswer]:
        """Every subscription's `answer`, its actors all asked at once."""
        trees = {key: self._running_tree(key) for key in list(self.status)}
        answers: dict[str, SubscriptionAnswer] = {}
        for key, shown in (await lives(trees, self.runtime.clock)).items():
            with contextlib.suppress(SubscriptionNotFound):  # unsubscribed meanwhile
                answers[key] = self._answer(key, shown)
        return answers

    def _answer(self, key: str, shown: Live) -> SubscriptionAnswer:
        consumer, status = self._known(key)
        running = self._running_tree(key) is not None
        return SubscriptionAnswer(consumer={**redacted(consumer)}, status=status.answer(
            shown, activity=self.desk.activity(key, self.runtime.clock) if running else None))

    async def status_of(self, key: str) -> dict[str, object]:
        """`answer(key)` as plain dicts and lists (the library's `status()`)."""
        shown: dict[str, object] = msgspec.to_builtins(await self.answer(key))
        return shown

    def overview(self) -> Overview:
        """Every subscription's row, the totals and the origins (actors/delivery/control/
        overview.py), gathered at most once per `OVERVIEW_FRESH_MS`, or less often when a
        gathering costs more than `OVERVIEW_CPU_SHARE` of that: callers meanwhile get the
        same one."""
        kept = self._overview
        if kept is not None and \
                self.runtime.clock.wall_ms() - kept.at < self._overview_fresh_ms:
            return kept
        began = time.process_time()
        gathered = self._gather()
        spent_ms = (time.process_time() - began) * 1000
        self._overview_fresh_ms = max(OVERVIEW_FRESH_MS, int(spent_ms / OVERVIEW_CPU_SHARE))
        return gathered

    def _gather(self) -> Overview:
        """Read, not asked (actors/delivery/control/overview.py says why and from where)."""
        registry = self._registry()
        if registry is None:
            raise ActorDeadError("the delivery control plane is restarting")
        clock, runtime = self.runtime.clock, self.runtime
        now_mono, now_wall = clock.monotonic_ms(), clock.wall_ms()
        origins = [origin.status(now_mono, now_wall) for origin in self.origins]
        rows = self._rows.gather(registry.consumers, registry.statuses,
                                 measured(runtime.metrics), origins,
                                 runtime.config.delivery.stall_after_ms,
                                 refusals(runtime.metrics))
        gathered = overview(now_wall, rows, origins)
        self._overview = gathered
        return gathered

    def overview_readiness(self, view: Overview) -> list[str]:
        """`readiness` read from an overview: no actor asked (the status page's badge)."""
        reasons = [f"cluster: {problem}" for problem in self._cluster_problems() if problem]
        return reasons + overview_readiness(view.rows,
                                            self.runtime.config.delivery.stall_after_ms)

    def summary(self) -> str:
        """For the runtime's stop line: subscriptions and what they delivered this run."""
        totals = {"2xx": 0.0, "other": 0.0}
        family = self.runtime.metrics.counter("hookstream_http_requests_total", "")
        for labels, value in family.children.items():
            totals["2xx" if ("code", "2xx") in labels else "other"] += value.value
        return (f"{len(self.subscriptions)} subscriptions, {int(totals['2xx'])} records "
                f"delivered, {int(totals['other'])} failed attempts")

    async def readiness(self) -> list[str]:
        """Why the delivery service is not ready: each subscription that is not running
        (paused is fine), runs without any partition yet, or has a stalled partition."""
        if self._registry() is None:
            return ["the delivery control plane is restarting"]
        reasons = [f"cluster: {problem}" for problem in self._cluster_problems() if problem]
        watched: dict[str, Supervisor] = {}
        for key, status in sorted(self.status.items()):
            if status.state in STOPPED:  # on purpose; `disabled` shows in the status API
                continue
            tree = self._running_tree(key)
            if status.state != "running":
                reasons.append(f"subscription {key} is {status.state}"
                               + (f": {status.reason}" if status.reason else ""))
            elif tree is None or not has_partitions(tree):
                reasons.append(f"subscription {key} has no partitions assigned yet")
            else:
                watched[key] = tree
        stall_after_ms = self.runtime.config.delivery.stall_after_ms
        reasons += await stalls(watched, self.runtime.clock, stall_after_ms)
        if self._groups is not None:
            with contextlib.suppress(ActorDeadError, UsageError):
                reasons += await member_problems(self._groups.actor_as(Supervisor),
                                                 self.runtime.clock)
        return reasons

    def _cluster_problems(self) -> list[str | None]:
        """Why the cluster topics this instance follows (subscriptions, status) are not
        read yet (the broker was away at boot: #25)."""
        problems = [self.source.problem if self.source is not None else None]
        if self._cluster is not None:
            with contextlib.suppress(ActorDeadError, UsageError):
                problems.append(self._cluster.actor_as(ClusterStatusActor).problem)
        return problems

    def __repr__(self) -> str:
        states = {k: s.state for k, s in self.status.items()}
        return f"<DeliveryService {states}>"


def _pairs(consumer: Consumer, handler: HandlerDestination | None) -> None:
    """A document that names a handler comes with that handler, and only such a one."""
    if (consumer.http is None) != (handler is not None):
        raise UsageError(
            f"{consumer.key}: an in-process subscription's document (subscriptionMethod "
            "type 'handler') goes with its handler: subscribe it with Runtime.consume"
            if handler is None else
            f"{consumer.key}: a handler goes with a document whose subscriptionMethod is "
            "of type 'handler' (Runtime.consume builds it)")


def _delivery_supervisor() -> Supervisor:
    # empty, also when rebuilt after an escalation: the control actor restarts the trees
    return Supervisor("delivery", "one_for_one", intensity=10, period_ms=60_000)
