"""OTP-style supervisors.

A `Supervisor` is itself an actor. It starts children from `ChildSpec`s in order (each
`start_child` returns when the child is ready) and stops them in reverse. With
`start_together` its first children start at once instead, for children that only
message one another (a message to one not started yet waits in its mailbox): each start
is a loop cycle or two, and a subscription's tree of five took ten one after another. When a child
exits it applies the restart type (`permanent` always, `transient` only after a crash,
`temporary` never) and the strategy:

- `one_for_one`: restart the child alone;
- `one_for_all`: stop every other child (in reverse), then restart all in order;
- `rest_for_one`: stop the children started after it (in reverse), restart those and it.

Every restart is charged to a `RestartBudget` (`intensity` within `period_ms`). Past it
the supervisor stops its children and crashes with `RestartBudgetExceeded`, which is
how the failure escalates to its own parent. A restart always builds a new actor from
the spec's factory: state is recovered from Kafka, never from the dead object.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from runtime.kernel.actor import Actor, ActorContext, Lifecycle, LifecycleKind
from runtime.kernel.backoff import RESTART_BACKOFF
from runtime.kernel.budget import RestartBudget
from runtime.kernel.clock import Clock, finished_within
from runtime.kernel.errors import ActorDeadError, ActorStartError, RestartBudgetExceeded, UsageError

log = logging.getLogger(__name__)
A = TypeVar("A", bound=Actor)

Restart = Literal["permanent", "transient", "temporary"]
Strategy = Literal["one_for_one", "one_for_all", "rest_for_one"]


@dataclass(frozen=True, slots=True)
class ChildSpec:
    name: str
    factory: Callable[[], Actor]
    restart: Restart = "permanent"
    shutdown_ms: int = 5000
    start_timeout_ms: int = 30_000
    """A child not ready by then is cancelled and counts as failed to start, so one
    unreachable dependency cannot block its supervisor (and its other children)."""
    on_exit: Callable[[BaseException | None], None] | None = None
    """Told how a child ended (None: it stopped), before the restart decision: a monitor
    for whoever owns the child's purpose (e.g. a service that retries on its own terms)."""


@dataclass(slots=True)
class _Child:
    spec: ChildSpec
    actor: Actor
    task: asyncio.Task[None]
    supervisor: Supervisor
    restarts: int = 0

    def exited(self, task: asyncio.Task[None]) -> None:
        """The child's task is done: its supervisor hears it (the task's done callback,
        a bound method: smaller than a closure, ten thousand subscriptions have fifty
        thousand)."""
        error = None if task.cancelled() else task.exception()
        self.supervisor.tell_system(_Exited(self.spec.name, self.actor, error))


@dataclass(frozen=True, slots=True)
class _Exited:
    name: str
    actor: Actor
    error: BaseException | None


@dataclass(frozen=True, slots=True)
class _StartChild:
    spec: ChildSpec


@dataclass(frozen=True, slots=True)
class _StartChildren:
    specs: tuple[ChildSpec, ...]


@dataclass(frozen=True, slots=True)
class _StopChildren:
    names: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class _RetryRestart:
    """Timer: start again the specs whose restart failed."""

    specs: tuple[tuple[ChildSpec, int], ...]


RETRY_CAP_MS = RESTART_BACKOFF.cap_ms


@dataclass(slots=True)
class ChildRef:
    """A stable handle on a supervised child: it follows restarts. Its supervisor given
    as a `ChildRef` too, it follows that supervisor's restarts as well (a supervisor
    restarted by its parent is a new actor: a handle on the old one found no child)."""

    supervisor: Supervisor | ChildRef
    name: str
    _last: weakref.ref[Actor] | None = field(default=None, compare=False, repr=False)
    """The incarnation found last: while it runs (and is not stopping) it is still the
    current one (a supervisor replaces a child only after it ended), so a tell needs no
    look-up through the supervisors (issue 37: a cursor tells its egress and its member
    through a ChildRef at every burst). Weak: a ref never keeps an ended actor alive."""

    def parent(self) -> Supervisor:
        """The supervisor's current incarnation (`ActorDeadError`: none runs)."""
        supervisor = self.supervisor
        if isinstance(supervisor, ChildRef):
            return supervisor.actor_as(Supervisor)
        return supervisor

    @property
    def actor(self) -> Actor:
        last = self._last() if self._last is not None else None
        if last is not None and last._state == "running" and not last._stopping:
            return last
        actor = self.parent().child(self.name)
        self._last = weakref.ref(actor)
        return actor

    def actor_as(self, kind: type[A]) -> A:
        """The current incarnation, checked to be a `kind` (typed access to its state)."""
        actor = self.actor
        if not isinstance(actor, kind):
            raise UsageError(f"{actor.path} is a {type(actor).__name__}, not a {kind.__name__}")
        return actor

    async def tell(self, message: object) -> None:
        await self.actor.tell(message)

    def tell_nowait(self, message: object) -> None:
        self.actor.tell_nowait(message)

    def tell_system(self, message: object) -> None:
        """Bypass the mailbox bound; dropped when no incarnation runs (as for an actor)."""
        try:
            actor = self.actor
        except ActorDeadError:
            return
        actor.tell_system(message)

    async def ask(self, message: object, timeout_s: float | None = None) -> Any:
        return await self.actor.ask(message, timeout_s)

    def ask_nowait(self, message: object) -> asyncio.Future[Any]:
        """`Actor.ask_nowait` of the current incarnation (`ActorDeadError`: none runs)."""
        return self.actor.ask_nowait(message)


class Supervisor(Actor):
    mailbox_capacity = 1024
    paced = False  # its exit notices restart whoever drains the emit sink

    def __init__(
        self,
        name: str,
        strategy: Strategy = "one_for_one",
        intensity: int = 3,
        period_ms: int = 5000,
        children: list[ChildSpec] | Callable[[Supervisor], list[ChildSpec]] | None = None,
        *,
        start_together: bool = False,
    ) -> None:
        super().__init__(name)
        self.strategy = strategy
        self.start_together = start_together
        self.budget = RestartBudget(intensity, period_ms)
        # a callable builds specs that hold ChildRefs to this very supervisor
        self._initial = children(self) if callable(children) else list(children or [])
        self._children: dict[str, _Child] = {}
        self._retrying: set[str] = set()  # restarts that failed and wait for a retry
        self._aside: dict[str, tuple[asyncio.Future[None], _Child]] = {}
        """Children stopped on request, whose stops run beside the mailbox."""

    # -- public API (safe to call from other actors) ---------------------------------
    async def start_child(self, spec: ChildSpec) -> ChildRef:
        """Start a child and return once it is ready; a start error is raised here
        (and only here: a child that cannot start does not crash its supervisor)."""
        error = await self.ask(_StartChild(spec))
        if isinstance(error, ActorStartError):
            raise error
        return ChildRef(self, spec.name)

    async def start_children(self, specs: list[ChildSpec]) -> list[ActorStartError | None]:
        """Start several children in parallel (distinct names) and return once each is
        ready or failed: per spec, its start error or None. A failed one is not running;
        the others are."""
        errors: list[ActorStartError | None] = await self.ask(_StartChildren(tuple(specs)))
        return errors

    async def stop_child(self, name: str) -> None:
        """Stop a child gracefully and forget it (it is not restarted)."""
        await self.stop_children([name])

    async def stop_children(self, names: list[str]) -> None:
        """Stop several children in parallel, each within its shutdown deadline. The
        stops run beside the supervisor's mailbox (a tree draining for seconds held every
        other start and stop of its siblings); a child of the same name starts once its
        predecessor stopped. An asker that gives up does not cut the stops short."""
        stopping: asyncio.Future[None] = await self.ask(_StopChildren(tuple(names)))
        await asyncio.shield(stopping)

    def child(self, name: str) -> Actor:
        entry = self._children.get(name)
        if entry is None:
            raise ActorDeadError(f"{self.path} has no child {name!r}")
        return entry.actor

    def has_child(self, name: str) -> bool:
        return name in self._children

    def children(self) -> list[str]:
        return list(self._children)

    def describe(self, indent: str = "") -> list[str]:
        """The subtree as indented lines of actor reprs (for logs and operators)."""
        lines = [f"{indent}{self!r}"]
        for entry in self._children.values():
            child = entry.actor
            if isinstance(child, Supervisor):
                lines.extend(child.describe(indent + "  "))
            else:
                lines.append(f"{indent}  {child!r}")
        return lines

    # -- actor -------------------------------------------------------------------------
    async def on_start(self) -> None:
        if not self.start_together:
            for spec in self._initial:
                await self._start(spec)
            return
        # at once; a failure fails the start, and the teardown stops those that started
        outcomes = await asyncio.gather(*(self._start(s) for s in self._initial),
                                        return_exceptions=True)
        failure = next((o for o in outcomes if isinstance(o, BaseException)), None)
        if failure is not None:
            raise failure

    async def on_stop(self) -> None:
        try:
            stopping = [f for f, _ in self._aside.values() if not f.done()]
            if stopping:
                await asyncio.wait(stopping)
            await self._stop_all(list(self._children))
        except asyncio.CancelledError:
            # our own deadline passed: children must not outlive us
            await _cancel_all([self._children.pop(n) for n in list(self._children)]
                              + [entry for _, entry in self._aside.values()])
            raise

    async def handle(self, message: object) -> object:
        if isinstance(message, _Exited):
            await self._on_exit(message)
        elif isinstance(message, _StartChild):
            return await self._try_start(message.spec)
        elif isinstance(message, _StartChildren):
            return list(await asyncio.gather(*(self._try_start(s) for s in message.specs)))
        elif isinstance(message, _StopChildren):
            return self._stop_aside(message.names)
        elif isinstance(message, _RetryRestart):
            # children stopped or started anew meanwhile are no longer ours to retry
            specs = [(s, r) for s, r in message.specs if s.name in self._retrying]
            self._retrying.difference_update(s.name for s, _ in specs)
            await self._start_in_order(specs)
        else:
            raise UsageError(f"{self.path}: unknown message {message!r}")
        return None

    async def _try_start(self, spec: ChildSpec) -> ActorStartError | None:
        self._retrying.discard(spec.name)
        try:
            await self._start(spec)
        except ActorStartError as exc:
            return exc
        return None

    # -- mechanics ---------------------------------------------------------------------
    async def _start(self, spec: ChildSpec, restarts: int = 0) -> None:
        if spec.name in self._children:
            raise UsageError(f"{self.path}: a child named {spec.name!r} already runs")
        before = self._aside.pop(spec.name, None)
        if before is not None and not before[0].done():
            await asyncio.wait([before[0]])  # never two of one name at once
        try:
            actor = spec.factory()
        except Exception as exc:  # a bad config slice, say: the child cannot start
            raise ActorStartError(f"{self.path}/{spec.name} failed to build: {exc!r}") from exc
        ctx = self.context
        actor.context = ActorContext(path=f"{self.path}/{spec.name}", clock=ctx.clock,
                                     emit=ctx.emit, lifecycle=ctx.lifecycle, pace=ctx.pace,
                                     delivered=ctx.delivered, timers=ctx.timers,
                                     turns=ctx.turns)
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        task = asyncio.get_running_loop().create_task(actor.run(ready), name=actor.path)
        child = self._children[spec.name] = _Child(spec, actor, task, self, restarts)
        task.add_done_callback(child.exited)
        try:  # `ready` is waited for, never cancelled: no shield, no task
            if not await finished_within(ctx.clock, ready, spec.start_timeout_ms):
                raise TimeoutError(f"not ready within {spec.start_timeout_ms} ms")
            ready.result()  # its start's error, if any
        except Exception as exc:
            self._children.pop(spec.name, None)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            if ready.done() and not ready.cancelled():
                ready.exception()  # read: the cancel's error is not logged as unread
            raise ActorStartError(f"{actor.path} failed to start: {exc!r}") from exc
        self._journal("actor_restarted" if restarts else "actor_started", actor.path)

    async def _on_exit(self, exited: _Exited) -> None:
        entry = self._children.get(exited.name)
        if entry is None or entry.actor is not exited.actor:
            return  # stopped on purpose, or an older incarnation
        self._report_exit(exited)
        if entry.spec.on_exit is not None:
            entry.spec.on_exit(exited.error)
        if not self._should_restart(entry.spec.restart, exited.error):
            del self._children[exited.name]
            return
        if not self.budget.record(self.context.clock.monotonic_ms()):
            raise RestartBudgetExceeded(
                f"{self.path}: restart budget exceeded {self.budget!r} "
                f"(last: {exited.name}: {exited.error!r})"
            )
        await self._restart(exited.name)

    def _report_exit(self, exited: _Exited) -> None:
        if exited.error is None:
            self._journal("actor_stopped", exited.actor.path)
            return
        log.error("%s crashed: %r", exited.actor.path, exited.error, exc_info=exited.error)
        self._journal("actor_crashed", exited.actor.path, repr(exited.error))

    @staticmethod
    def _should_restart(restart: Restart, error: BaseException | None) -> bool:
        if restart == "temporary":
            return False
        return restart == "permanent" or error is not None

    async def _restart(self, name: str) -> None:
        names = list(self._children)
        if self.strategy == "one_for_one":
            affected = [name]
        elif self.strategy == "one_for_all":
            affected = names
        else:
            affected = names[names.index(name) :]
        specs = [(self._children[n].spec, self._children[n].restarts) for n in affected]
        await self._stop_all([n for n in affected if n != name])
        await self._start_in_order(specs)

    async def _start_in_order(self, specs: list[tuple[ChildSpec, int]]) -> None:
        """Restart `specs` in order. A start that fails is charged to the budget and
        retried after a backoff, with the specs after it (as OTP does); past the budget
        the failure escalates."""
        for i, (spec, restarts) in enumerate(specs):
            self._children.pop(spec.name, None)
            try:
                await self._start(spec, restarts + 1)
            except ActorStartError as exc:
                if not self.budget.record(self.context.clock.monotonic_ms()):
                    raise RestartBudgetExceeded(
                        f"{self.path}: restart budget exceeded {self.budget!r} "
                        f"(last: {exc})") from exc
                log.warning("%s; retrying", exc)
                delay = RESTART_BACKOFF.delay_ms(restarts + 1)
                retry = tuple((s, r + 1) for s, r in specs[i:])
                self._retrying.update(s.name for s, _ in retry)
                self.schedule(self.context.clock.monotonic_ms() + delay, _RetryRestart(retry))
                return

    async def _stop_all(self, names: list[str]) -> None:
        for name in reversed(names):
            entry = self._children.get(name)
            if entry is not None:
                if not await _stop_child(entry, self.context.clock):
                    _log_cancelled([entry])
                self._children.pop(name, None)

    def _stop_aside(self, names: tuple[str, ...]) -> asyncio.Future[None]:
        """Forget these children now and stop them in parallel beside the mailbox: the
        future of their stops (the supervisor's own stop waits for it)."""
        self._retrying.difference_update(names)
        self._aside = {n: s for n, s in self._aside.items() if not s[0].done()}
        entries = [e for n in names if (e := self._children.pop(n, None)) is not None]
        stopping = asyncio.ensure_future(_stop_together(entries, self.context.clock))
        for entry in entries:
            self._aside[entry.spec.name] = (stopping, entry)
        return stopping

    def _journal(self, kind: LifecycleKind, path: str, reason: str | None = None) -> None:
        self.context.lifecycle(Lifecycle(kind, path, self.context.clock.wall_ms(), reason))

    def __repr__(self) -> str:
        return (
            f"<Supervisor {self.path} {self.state} {self.strategy} "
            f"children={list(self._children)} {self.budget!r}>"
        )


async def _cancel_all(entries: list[_Child]) -> None:
    for entry in entries:
        entry.task.cancel()
    await asyncio.gather(*(e.task for e in entries), return_exceptions=True)


async def _stop_together(entries: list[_Child], clock: Clock) -> None:
    """Stop `entries` in parallel; one warning names those that had to be cancelled
    (10,000 subscriptions stopping at once logged a line each)."""
    stopped = await asyncio.gather(*(_stop_child(e, clock) for e in entries))
    _log_cancelled([e for e, in_time in zip(entries, stopped, strict=True) if not in_time])


async def _stop_child(entry: _Child, clock: Clock) -> bool:
    """Graceful first (a stop message), cancel after the spec's shutdown deadline;
    whether it stopped in time."""
    await entry.actor.stop()
    in_time = await finished_within(clock, entry.task, entry.spec.shutdown_ms)
    if not in_time:
        entry.task.cancel()
    await asyncio.gather(entry.task, return_exceptions=True)
    return in_time


SHOWN = 5
"""Actors named in a warning about many; the rest are counted."""


def _log_cancelled(entries: list[_Child]) -> None:
    if not entries:
        return
    paths = [e.actor.path for e in entries]
    more = f" and {len(paths) - SHOWN} more" if len(paths) > SHOWN else ""
    deadlines = sorted({e.spec.shutdown_ms for e in entries})
    log.warning("%s%s did not stop within %s ms: cancelled", ", ".join(paths[:SHOWN]), more,
                "/".join(map(str, deadlines)))
