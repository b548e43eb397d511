"""The control plane as an actor: every change to the subscriptions is a message, and
its mailbox serialises them (OTP's gen_server, Kafka Connect's herder): subscribe,
unsubscribe, update, pause, resume, disable on 410 Gone, replay, a record of the cluster's
subscriptions topic, and the exit of a subscription's tree.

The decisions are the registry's (actors/delivery/control/registry.py, pure); this actor
performs them with `Trees` (actors/delivery/control/trees.py) and keeps them in its
source (actors/delivery/control/source.py: the files, or the subscriptions topic). A
tree that could not start, or ended by itself, is started again by a timer message
(`Retry`) after the kernel's restart backoff; nothing polls.

Start means ready: `on_start` restores every stored subscription (a few at a time) or,
in cluster mode, reads the subscriptions topic to its end, and only then reports ready.
The topic's follower is a task this actor owns: a failure of it crashes the actor, and
its supervisor restarts it, which reads everything again. A restarted incarnation first
stops the trees an earlier one left, so that what runs is what the source says.
In-process subscriptions are the embedding program's: their documents and handlers live
in `Programmed`, which the facade owns and every incarnation starts again.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field
from typing import Any, Protocol

from actors.delivery.cluster.log import RETRY
from actors.delivery.control.admission import Admission
from actors.delivery.control.joining import Joining
from actors.delivery.control.leaving import Leaving
from actors.delivery.control.messages import (
    Check,
    Gone,
    Listed,
    Marks,
    MembersLost,
    PauseSubscription,
    Pending,
    Publish,
    Record,
    Refused,
    Replay,
    ResumeSubscription,
    Subscribe,
    TreeExited,
    TreesLost,
    TreesStarted,
    TreesStopped,
    Unsaved,
    Unsubscribe,
    Update,
)
from actors.delivery.control.registry import (
    Adopt,
    Change,
    Disable,
    Limits,
    Remove,
    Replace,
    Retry,
    SubscriptionRegistry,
)
from actors.delivery.control.registry import Pause as PauseChange
from actors.delivery.control.registry import Resume as ResumeChange
from actors.delivery.control.replays import ReplayDesk
from actors.delivery.control.restore import restore
from actors.delivery.control.saves import Saves
from actors.delivery.control.source import SubscriptionSource
from actors.delivery.control.trees import Plant
from actors.delivery.document.subscription import Consumer, summary
from actors.delivery.egress.handler import HandlerDestination
from actors.delivery.errors import (
    DeliveryError,
    SubscriptionStartFailed,
    UnknownBroker,
)
from runtime.errors import ActorDeadError, UsageError
from runtime.host.journal import Event
from runtime.kernel.actor import Actor
from runtime.kernel.backoff import RestartBackoff
from runtime.kernel.clock import Clock

log = logging.getLogger(__name__)
MEMBER_RETRY_MS = 1000
"""How soon members that could not be started again are tried again."""


class Journal(Protocol):
    def emit(self, event: Event) -> None: ...


class Metrics(Protocol):
    def forget(self, **labels: str) -> None: ...


class Host(Protocol):
    """What the control actor uses of the runtime (`runtime.host.app.Runtime` is one)."""

    @property
    def clock(self) -> Clock: ...

    @property
    def journal(self) -> Journal: ...

    @property
    def metrics(self) -> Metrics: ...


@dataclass(slots=True)
class Programmed:
    """The in-process subscriptions an embedding program registered (`Runtime.consume`):
    never stored, so they outlive an incarnation of the control actor here."""

    consumers: dict[str, Consumer] = field(default_factory=dict)
    handlers: dict[str, HandlerDestination] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class _Reach:
    """Timer: try to open the source again (its broker was away)."""


class ControlActor(Actor):
    mailbox_capacity = 1024
    paced = False
    """The control plane answers while the journal holds the data path back (it emits a
    few events per request; held, subscribes waited seconds behind 10,000 trees' starts)."""

    def __init__(self, name: str, runtime: Host, trees: Plant, source: SubscriptionSource,
                 programmed: Programmed, limits: Limits | None = None) -> None:
        super().__init__(name)
        self.runtime, self.trees, self.source = runtime, trees, source
        self.programmed = programmed
        self.registry = SubscriptionRegistry(runtime.clock, limits)
        self.admission = Admission(self.registry, trees, source)
        self.desk = ReplayDesk(self.registry, trees)
        self.problems: list[str] = []
        self._reaching = RestartBackoff(RETRY)  # opening the source, while it fails
        self.leaving = Leaving(self, trees.stop_trees, trees.release_member, self._forget,
                               lambda key: self.registry.known(key).consumer)
        self.saves = Saves(self, source)  # the files, written off the mailbox
        self.joining = Joining(self, trees, self.registry, self.saves,  # trees started
                               programmed.consumers)  # off the mailbox
        trees.handlers = programmed.handlers

    # -- lifecycle -----------------------------------------------------------------------
    async def on_start(self) -> None:
        left = await self.trees.stop_leftovers()  # an earlier incarnation crashed: what
        if left:  # runs is what the source says, never what the dead actor had
            log.warning("%s: stopped %d subscription trees an earlier incarnation left",
                        self.path, left)
        await self._reach()

    async def _reach(self) -> None:
        """Open the source and restore what it holds, then follow it. A source that
        cannot be read yet (cluster mode with the broker away at boot) is tried again on
        a timer message (`_Reach`) after `RETRY`'s backoff; meanwhile the source's
        `problem` says why (readiness) and its changes are refused (503), and the
        in-process subscriptions run."""
        self.trees.restoring = True
        try:
            try:
                stored = await self.source.open(self._on_record)
            except Exception as exc:  # the broker is away (or refuses us)
                delay = self._reaching.failed()
                if not self.source.failed(exc, self._reaching.failures):
                    raise
                self.schedule(self.runtime.clock.monotonic_ms() + delay, _Reach())
                await self._restore_programmed()
                return
            self._reaching.succeeded()
            self.problems = stored.problems
            self.registry.marked_paused |= stored.paused
            self.registry.marked_disabled.update(stored.disabled)
            await self._restore(stored.consumers)
            await self._restore_programmed()
        finally:
            self.trees.restoring = False
            await self.trees.release_holds()
        self.spawn(self.source.follow(self._follow_one), name=f"{self.path}:follower")

    async def _restore(self, consumers: list[Consumer]) -> None:
        await restore(consumers, self.registry, self.admission.refusal, self._start_together)

    async def _restore_programmed(self) -> None:
        for key, consumer in list(self.programmed.consumers.items()):
            if key not in self.registry:
                self.registry.add(consumer, in_process=True)
                await self._try_start(consumer, "started again")

    async def on_stop(self) -> None:
        """Every subscription stops in parallel: each drains and commits."""
        await self.source.close()  # no more changes applied while we stop
        for key in self.registry:
            if self.trees.has_tree(key):
                self.registry.move(key, "stopping")
        with contextlib.suppress(ActorDeadError):  # the supervisors went: their children too
            await self.trees.stop_all(list(self.registry))
        self.leaving.abandon()
        self.joining.abandon()

    # -- messages ------------------------------------------------------------------------
    async def handle(self, message: object) -> object:
        """A refusal (`DeliveryError`) is the asker's answer, not this actor's crash."""
        try:
            return await self._handle(message)
        except DeliveryError as exc:
            return Refused(exc)

    async def _handle(self, message: object) -> Any:
        key = _changed_key(message)
        if key is not None and self.leaving.leaving(key):
            return self.leaving.after(key, message)  # as if queued behind the leave
        key = key or _ended_key(message)
        if key is not None and self.joining.joining(key):
            return self.joining.after(key, message)  # as if queued behind the start
        if isinstance(message, Retry):
            return await self._retry(message)
        if isinstance(message, Subscribe):
            return await self._subscribe(message)
        if isinstance(message, Unsubscribe):
            return self._unsubscribe_soon(message.key)
        if isinstance(message, TreesStopped):
            return await self.leaving.stopped(message.keys)
        if isinstance(message, TreesStarted):
            return await self.joining.started(message.starting)
        if isinstance(message, Unsaved):
            return self._unsaved(message.key)
        if isinstance(message, Update):
            consumer = self.admission.kept(message.key, message.consumer)
            self.admission.refuse_update(message.key, consumer)
            return await self._update(message.key, consumer)
        if isinstance(message, PauseSubscription):
            return await self._pause(message.key, "paused by request")
        if isinstance(message, ResumeSubscription):
            return await self._resume(message.key, "resumed")
        if isinstance(message, Gone):
            return await self._gone(message.key, message.reason)
        if isinstance(message, TreeExited):
            return self._tree_exited(message.key, f"its actors crashed: {message.error!r}")
        if isinstance(message, TreesLost):
            return self._trees_lost()
        if isinstance(message, MembersLost):
            return await self._members_lost()
        if isinstance(message, Record):
            return await self._on_record(message.key, message.value)
        return await self._answer(message)

    async def _answer(self, message: object) -> Any:
        if isinstance(message, Publish):
            return self.spawn_answer(self.source.publish(message.records),
                                     name=f"{self.path}:publish")
        if isinstance(message, Check):
            return self.admission.check(message)
        if isinstance(message, _Reach):
            return await self._reach()
        if isinstance(message, Listed):
            return message.key in self.registry
        if isinstance(message, Marks):
            return self.registry.marks(message.key)
        if isinstance(message, Replay):
            return await self.desk.start(message)
        raise UsageError(f"{self.path}: unknown message {message!r}")

    async def _follow_one(self, key: str, value: bytes | None) -> None:
        """The follower (an owned task) hands each record to the mailbox."""
        answer = await self.ask(Record(key, value))
        if isinstance(answer, Refused):
            raise answer.error  # the log names the record it could not apply

    # -- subscribe and unsubscribe -------------------------------------------------------
    async def _subscribe(self, message: Subscribe) -> Pending:
        """List the subscription and start writing its file; its tree starts beside the
        mailbox with the others asked meanwhile (actors/delivery/control/joining.py)."""
        consumer, key = message.consumer, message.consumer.key
        self.admission.refuse_new(consumer, message.persist)
        if message.handler is not None:
            self.trees.handlers[key] = message.handler
        self.registry.add(consumer, in_process=message.handler is not None)
        saved = self.saves.save(consumer) if message.persist else None
        return self.joining.ask(consumer, saved)

    def _unsaved(self, key: str) -> None:
        if key in self.registry and not self.leaving.leaving(key):
            log.error("subscription %s could not be stored: it stops", key)
            self._unsubscribe_soon(key)

    def _unsubscribe_soon(self, key: str) -> Pending:
        """Stop the tree with the others asked meanwhile (actors/delivery/control/
        leaving.py), then forget the subscription; the answer is the consumer it was."""
        consumer = self.registry.known(key).consumer

        def begin() -> None:
            if self.trees.has_tree(key):
                self.registry.move(key, "stopping")
            self.trees.unseat(consumer)

        return self.leaving.ask(key, begin)

    async def _unsubscribe(self, key: str) -> Consumer:
        """Stop the tree (it drains and commits), then forget the subscription."""
        consumer = self.registry.known(key).consumer
        await self._stop_tree(consumer)
        await self._forget(consumer)
        return consumer

    async def _forget(self, *consumers: Consumer) -> None:
        stored = [consumer.key for consumer in consumers if self._drop(consumer)]
        await self.saves.forget(stored, self.registry)  # in-process ones were never stored
        for consumer in consumers:
            log.info("unsubscribed %s", consumer.key)

    def _drop(self, consumer: Consumer) -> bool:
        """Forget `consumer` here; whether it was stored (not in-process)."""
        key = consumer.key
        self.trees.forget(key)
        self.registry.remove(key)
        self.desk.forget(key)
        self.programmed.consumers.pop(key, None)
        self.runtime.metrics.forget(subscription=key)
        if self.trees.handlers.pop(key, None) is not None:
            return False
        if consumer.http is not None:
            self.trees.settle_origin(consumer.http.uri, leaving=key)
        return True

    async def _stop_tree(self, consumer: Consumer, *, keep_member: bool = False) -> None:
        if self.trees.has_tree(consumer.key):
            self.registry.move(consumer.key, "stopping")
        await self.trees.stop(consumer, keep_member=keep_member)

    # -- starting, and retrying on a timer -----------------------------------------------
    async def _try_start(self, consumer: Consumer, what: str) -> bool:
        """Start a listed subscription's tree; on failure, schedule a retry."""
        try:
            await self.trees.start(consumer)
        except (SubscriptionStartFailed, UnknownBroker) as exc:
            self._start_failed(consumer, exc)
            return False
        self._started(consumer, what)
        return True

    async def _start_together(self, consumers: list[Consumer], what: str) -> set[str]:
        """Start them; the keys of those that failed (a retry is scheduled for each).
        Each start is a DEBUG line (the caller logs a summary)."""
        failed = await self.trees.start_together(consumers)
        for consumer in consumers:
            error = failed.get(consumer.key)
            if error is None:
                self._started(consumer, what, quiet=True)
            else:
                self._start_failed(consumer, error)
        return set(failed)

    def _started(self, consumer: Consumer, what: str, *, quiet: bool = False) -> None:
        self.registry.started(consumer.key)
        log.log(logging.DEBUG if quiet else logging.INFO, "subscription %s %s",
                consumer.key, what)

    def _start_failed(self, consumer: Consumer, exc: DeliveryError) -> None:
        retry = self.registry.start_failed(consumer.key, exc.details or exc.reason,
                                           self.trees.broker_down(consumer))
        self._schedule(retry, "retrying")

    def _schedule(self, retry: Retry, what: str) -> None:
        status = self.registry.known(retry.key).status
        log.warning("subscription %s %s: %s; %s in %.1f s", retry.key, status.state,
                    status.reason, what, retry.delay_ms / 1000)
        self.schedule(retry.at_ms, retry)

    async def _retry(self, retry: Retry) -> None:
        consumer = self.registry.due(retry)
        if consumer is not None:
            await self._try_start(consumer, "recovered")

    def _tree_exited(self, key: str, reason: str) -> None:
        """A tree ended by itself: restart it after the backoff (unless meant to stop)."""
        entry = self.registry.get(key)
        if entry is None or self.trees.has_tree(key):
            return  # unsubscribed meanwhile, or already started again
        retry = self.registry.exited(key, reason, self.trees.broker_down(entry.consumer))
        if retry is not None:
            self._schedule(retry, "restarting")

    async def _members_lost(self) -> None:
        """The members went with their supervisor: each is built again (with the riders
        the control plane records) for the trees that still run; if one cannot start now
        (the broker away), all are tried again on a timer: nothing else may come to."""
        started = [await self.trees.restore_member(entry.consumer) for key in list(self.registry)
                   if (entry := self.registry.get(key)) is not None and self.trees.has_tree(key)]
        if not all(started):
            self.schedule(self.runtime.clock.monotonic_ms() + MEMBER_RETRY_MS, MembersLost(None))

    def _trees_lost(self) -> None:
        """The `delivery` supervisor went past its budget and is restarted empty: every
        tree that ran is started again after its backoff."""
        for key in list(self.registry):
            self._tree_exited(key, "its actors stopped unexpectedly")

    # -- pause, resume, update, 410 Gone -------------------------------------------------
    async def _pause(self, key: str, reason: str) -> None:
        """Stop fetching and delivering: in-flight pushes finish, positions are
        committed, the group membership goes."""
        consumer = self.registry.known(key).consumer
        if not self.registry.wants_pause(key):
            return
        await self._stop_tree(consumer)
        self.registry.move(key, "paused", reason)
        await self.saves.keep_flags(self.registry)
        log.info("subscription %s paused", key)

    async def _resume(self, key: str, what: str) -> None:
        consumer = self.registry.known(key).consumer
        if not self.registry.wants_resume(key):
            return
        self.registry.move(key, "starting")
        await self.saves.keep_flags(self.registry)
        await self._try_start(consumer, what)

    async def _gone(self, key: str, reason: str) -> None:
        """Stop the subscription's tree like a pause (in-flight pushes finish, positions
        are committed; the record that got the 410 stays uncommitted) and keep it
        `disabled`, across restarts too, until `resume`. In cluster mode every instance
        does so, and one started later too."""
        if not await self._disable(key, reason):
            return
        log.warning("subscription %s disabled: %s; POST .../resume starts it again",
                    key, reason)
        self.runtime.journal.emit(Event(type="subscription_disabled",
                                        ts_ms=self.runtime.clock.wall_ms(),
                                        subscription=key, status=410, reason=reason))
        if not self.registry.in_process(key):
            self.spawn(self._tell_disabled(key, reason), name=f"{self.path}:disabled")

    async def _tell_disabled(self, key: str, reason: str) -> None:
        try:
            await self.source.disabled(key, reason)
        except Exception as exc:  # disabled here; the others learn it at their next 410
            log.error("subscription %s: cannot record its disabling: %r", key, exc)

    async def _disable(self, key: str, reason: str) -> bool:
        """False when `key` was not running (nothing to disable)."""
        if not self.registry.wants_disable(key):
            return False
        await self._stop_tree(self.registry.known(key).consumer)
        self.registry.move(key, "disabled", reason)
        await self.saves.keep_flags(self.registry)
        return True

    async def _update(self, key: str, consumer: Consumer) -> None:
        """Drain and commit, then start again with the new settings from the committed
        positions (nothing lost, nothing skipped)."""
        old = self.registry.known(key).consumer
        restart = self.registry.runs(key)
        held = await self.trees.hold_member(old, consumer) if restart else False
        try:
            await self._stop_tree(old, keep_member=held)
            self.registry.replace(key, consumer)
            # it may push elsewhere: its new tree joins its origin when it starts
            if old.http is not None:
                self.trees.settle_origin(old.http.uri, leaving=key)
            await self.saves.written(key)
            await self.source.save(consumer)
            log.info("subscription %s updated: %s (was %s)", key, summary(consumer),
                     summary(old))
            if restart:
                self.registry.move(key, "starting")
                await self._try_start(consumer, "restarted with its new settings")
        finally:
            if held:  # the member re-subscribes once, if at all
                await self.trees.release_hold(consumer)

    # -- cluster mode: what the subscriptions topic says -----------------------------------
    async def _on_record(self, key: str, value: bytes | None) -> None:
        """One record of the subscriptions topic, in topic order (during `on_start`'s
        catch-up called directly, later through the mailbox)."""
        change = self.registry.change_of(key, value)
        if change is not None:
            await self._perform(change)

    async def _perform(self, change: Change) -> None:
        if isinstance(change, Adopt):
            await self._adopt(change.consumer)
        elif isinstance(change, Replace):
            await self._replace(change.consumer)
        elif isinstance(change, Remove):
            await self._unsubscribe(change.key)
        elif isinstance(change, PauseChange):
            await self._pause(change.key, "paused by request")
        elif isinstance(change, ResumeChange):
            await self._resume(change.key, "resumed")
        elif isinstance(change, Disable):
            await self._disable(change.key, change.reason)

    async def _adopt(self, consumer: Consumer) -> None:
        """A subscription this instance learns of: listed at once, started (or retried
        on a timer), paused when the topic says so, or refused when it fails a check."""
        if self.registry.add(consumer, paused_reason="paused in the cluster",
                             refused=self.admission.refusal(consumer)):
            await self._try_start(consumer, "started (from the subscriptions topic)")

    async def _replace(self, consumer: Consumer) -> None:
        """A new version of a subscription from the topic: applied like a PUT, unless it
        fails a check (then its tree stops and it stays listed, refused)."""
        refused = self.admission.refusal(consumer)
        if not refused:
            await self._update(consumer.key, consumer)
            return
        old = self.registry.known(consumer.key).consumer
        await self._stop_tree(old)
        if old.http is not None:
            self.trees.settle_origin(old.http.uri, leaving=consumer.key)
        self.registry.replace(consumer.key, consumer)
        self.registry.move(consumer.key, "refused", refused)

    def __repr__(self) -> str:
        return (f"<ControlActor {self.path} {self.state} {len(self.registry)} subscriptions "
                f"mailbox={len(self._mailbox)}/{self._mailbox.capacity}>")


def _ended_key(message: object) -> str | None:
    """The subscription an unsubscribe, a 410 Gone or a failed write of its file is about
    (None: none of these)."""
    if isinstance(message, Unsubscribe | Gone | Unsaved):
        return message.key
    return None


def _changed_key(message: object) -> str | None:
    """The subscription a change asked of the mailbox is about (None: not a change)."""
    if isinstance(message, Subscribe):
        return message.consumer.key
    if isinstance(message, Update | PauseSubscription | ResumeSubscription | Replay):
        return message.key
    return None
