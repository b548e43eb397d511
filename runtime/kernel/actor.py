"""Actors: one asyncio task that handles messages from a bounded mailbox, one at a time.

An actor's state is touched by its own task only, so it needs no locks. Slow work (HTTP,
Kafka I/O) runs in tasks the actor owns (`spawn`), and their results come back as
messages. Timers come back as messages too (`schedule`).

A light actor (`Actor.light`) that is idle is not woken on its task: a message queues it
on the system's shared runner (runtime/kernel/turns.py), whose one loop callback runs the
turns of every actor queued, one message after another. A handler that waits hands the
rest of its turn to the actor's own task, which handles the mailbox until it is empty,
then rests again; still one handler at a time, in mailbox order.

Lifecycle: the owner (a `Supervisor`) runs `actor.run(ready)`; `ready` resolves after
`on_start` returned, so "start means ready". `stop()` is a message handled after the
ones already queued; the owner cancels only after its shutdown deadline. When an actor
dies, every pending and later `ask` fails with `ActorDeadError` (the one being handled
too, when the actor is cancelled in its handler).
"""

from __future__ import annotations

import asyncio
import logging
import types
from collections import deque
from collections.abc import Callable, Coroutine, Generator
from dataclasses import dataclass, field
from typing import Any, Final, Literal, Protocol, TypeVar

import msgspec

from runtime.kernel.clock import Alarm, Clock, RealClock
from runtime.kernel.errors import ActorDeadError, ActorKilled, MailboxFullError, UsageError
from runtime.kernel.gate import OPEN, Gate
from runtime.kernel.turns import SharedTurns

log = logging.getLogger(__name__)
T = TypeVar("T")


class _Stop:
    """The stop message: handled after every message queued before it."""

    __slots__ = ()


class _Crash:
    """A task owned by the actor failed; the actor crashes with that error."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


_STOP = _Stop()


class _Envelope(msgspec.Struct, gc=False):
    """A message in a mailbox. A Struct: made in C (a slotted dataclass's `__init__` is
    Python, 0.18 us against 0.06 us a tell) and not tracked by the collector (nothing it
    holds refers back to it: envelopes are the mailbox's own). Issue 37."""

    message: object
    reply: asyncio.Future[object] | None = None
    counted: bool = True


_ALIVE: Final = frozenset(("new", "starting", "running"))


class _Timer(msgspec.Struct, eq=False):
    """One `Actor.schedule`: tells its message when the clock's alarm rings. A Struct
    made in C (a cursor sets one per burst: issue 37), compared and hashed by identity."""

    actor: Actor
    message: object
    alarm: Alarm | None = None
    shared_at: int | None = None  # the instant of its `SharedTimers` alarm

    def ring(self) -> None:
        timers = self.actor._timers
        if timers is not None and self in timers:
            timers.discard(self)
            self.actor.tell_system(self.message)

    def cancel(self) -> None:
        if self.alarm is not None:
            self.alarm.cancel()
        elif self.shared_at is not None:
            self.actor.context.timers.drop(self)
        if self.actor._timers is not None:
            self.actor._timers.discard(self)


class SharedTimers:
    """`Actor.schedule` timers that may ring up to a `slack_ms` late, gathered on one clock
    alarm per `slack_ms`-aligned instant, whichever actors set them (issue 37: a cursor
    sets its commit tick for every burst it gets and gives it up once the burst is done;
    an alarm each, a loop timer made and cancelled, was a seventh of a cursor's work per
    burst at fan-out). Never early: a deadline is rounded up. A cancelled timer leaves at
    once (kept until its instant, a burst's ticks outlived young collections and the
    collector walked them). One per actor system (the context's), for its one loop."""

    __slots__ = ("_due",)

    def __init__(self) -> None:
        self._due: dict[int, dict[_Timer, None]] = {}  # by the instant they ring

    def add(self, timer: _Timer, deadline_ms: int, slack_ms: int, clock: Clock,
            loop: asyncio.AbstractEventLoop | None) -> None:
        at = -(-deadline_ms // slack_ms) * slack_ms  # rounded up to the slack's grain
        timers = self._due.get(at)
        if timers is None:
            timers = self._due[at] = {}
            clock.call_at(at, self._ring, at, loop=loop)
        timers[timer] = None
        timer.shared_at = at

    def drop(self, timer: _Timer) -> None:
        at = timer.shared_at
        if at is not None and (timers := self._due.get(at)) is not None:
            timers.pop(timer, None)

    def _ring(self, at: int) -> None:
        for timer in self._due.pop(at, {}):
            timer.ring()

    def __len__(self) -> int:
        return sum(len(timers) for timers in self._due.values())


class _Waiter(Protocol):
    """What waits for a mailbox's next put: its reader's future, or a light actor's rest."""

    def done(self) -> bool: ...

    def set_result(self, result: None, /) -> None: ...


_COMPACT_AFTER = 64
"""Taken envelopes a mailbox that never empties keeps before it drops them (at least
half of its list)."""


class Mailbox:
    """A bounded FIFO of envelopes, read by one task (the actor's).

    User messages respect the capacity (`put` waits, `put_nowait` raises); system
    messages (stop, crash notices, timers) bypass it so a full mailbox can still be
    stopped and a supervisor never loses an exit notice.

    A list read from a moving head and a single waiter future rather than an
    `asyncio.Queue`: with one reader the queue's getter bookkeeping is pure overhead, and
    every delivered record passes through two mailboxes (bench/RESULTS.md, "Delivery").
    Not a deque: an empty deque keeps a 760-byte block, an emptied list none, and ten
    thousand subscriptions have fifty thousand mostly empty mailboxes (issue 24).
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise UsageError(f"mailbox capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self._items: list[_Envelope | None] = []  # taken ones are None up to `_head`
        self._head = 0
        self._getter: _Waiter | None = None
        self._counted = 0
        # senders waiting for room; made when the first one waits (an empty deque is 760
        # bytes, and most mailboxes never fill: issue 24, memory per subscription)
        self._putters: deque[asyncio.Future[None]] | None = None
        self.closed = False
        self.resting: _Rest | None = None
        """Its light actor idle (`Actor.light`): what its task waits on for a hand-over;
        kept here, not on the actor (a cursor stays under CPython's shared-key limit)."""
        self.loop: asyncio.AbstractEventLoop | None = None
        """Its reader's loop, set when the actor runs: `asyncio.get_running_loop()` makes
        a getpid() system call on Python 3.11, and an actor that keeps up waits on every
        message (issue 37)."""

    async def put(self, envelope: _Envelope) -> None:
        while self._counted >= self.capacity and not self.closed:
            space: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            if self._putters is None:
                self._putters = deque()
            self._putters.append(space)
            try:
                await space
            except asyncio.CancelledError:
                self._wake_putter()  # pass the wakeup on if it was ours
                raise
        if self.closed:
            raise ActorDeadError("the actor stopped while this message waited for room")
        self.put_nowait(envelope)

    def has_room(self) -> bool:
        return self._counted < self.capacity

    def put_nowait(self, envelope: _Envelope) -> None:
        if self._counted >= self.capacity:
            raise MailboxFullError(f"mailbox full ({self.capacity} messages)")
        self._counted += 1
        self._push(envelope)

    def put_system(self, envelope: _Envelope) -> None:
        envelope.counted = False
        self._push(envelope)

    def _push(self, envelope: _Envelope) -> None:
        self._items.append(envelope)
        getter, self._getter = self._getter, None
        if getter is not None and not getter.done():
            getter.set_result(None)

    def waiter(self) -> asyncio.Future[None]:
        """The future the next put resolves, for the one reader to await (the actor loop
        awaits it directly, without a coroutine of its own: issue 37)."""
        if self._getter is not None:
            raise UsageError("Mailbox.waiter: another task is already waiting")
        getter: asyncio.Future[None] = (self.loop or asyncio.get_running_loop()
                                        ).create_future()
        self._getter = getter
        return getter

    def get_nowait(self) -> _Envelope:
        """The next envelope; `IndexError` when the mailbox is empty."""
        items, head = self._items, self._head
        envelope = items[head]
        if envelope is None:
            raise IndexError("the mailbox is empty")
        items[head] = None  # the message is the actor's now, not the mailbox's
        head += 1
        if head == len(items):
            items.clear()  # empty: its memory goes back
            head = 0
        elif head >= _COMPACT_AFTER and head * 2 >= len(items):
            del items[:head]  # never empty for long: drop the taken part
            head = 0
        self._head = head
        if envelope.counted:
            self._counted -= 1
            if self._putters:  # a sender waits for room (rare): no call otherwise (#37)
                self._wake_putter()
        return envelope

    def _wake_putter(self) -> None:
        putters = self._putters
        while putters:
            space = putters.popleft()
            if not space.done():
                space.set_result(None)
                return

    def close(self) -> list[_Envelope]:
        """The owner died: senders waiting for room fail; return what was queued."""
        self.closed = True
        putters = self._putters
        while putters:
            space = putters.popleft()
            if not space.done():
                space.set_result(None)  # they wake, see `closed` and raise
        return self.drain()

    def drain(self) -> list[_Envelope]:
        items = [e for e in self._items[self._head:] if e is not None]
        self._items.clear()
        self._head = 0
        self._counted = 0
        return items

    def __len__(self) -> int:
        return len(self._items) - self._head


class _Rest:
    """A light actor idle: it stands in its mailbox for the reader's future, and a put
    queues the actor on the shared runner (`ActorContext.turns`) instead of waking its
    task, which waits on `handed` until a turn hands over to it."""

    __slots__ = ("actor", "handed", "loop")

    def __init__(self, actor: Actor, loop: asyncio.AbstractEventLoop) -> None:
        self.actor = actor
        self.loop = loop
        self.handed: asyncio.Future[_Envelope | _Suspended] = loop.create_future()

    def done(self) -> bool:
        return False

    def set_result(self, result: None, /) -> None:
        self.actor.context.turns.wake(self)

    def turn(self) -> None:
        try:
            self.actor._light_turn(self)
        except Exception as exc:  # a fault of the kernel's, not of a handler: the actor
            if not self.handed.done():  # crashes with it rather than rest unwakeable
                self.actor._mailbox.resting = None
                self.handed.set_exception(exc)
            else:  # its task took over already: nobody else would hear of it
                log.exception("%s: a turn failed after its hand-over", self.actor.path)

    def abandon(self) -> None:
        """The actor's task was cancelled while it rested: a turn's handler handed over
        and not yet resumed is closed (its `finally` runs, an ask's asker is told)."""
        handed = self.handed
        if handed.done() and not handed.cancelled() and handed.exception() is None \
                and isinstance(suspended := handed.result(), _Suspended):
            suspended.coro.close()

    def hand_over(self, handed: _Envelope | _Suspended) -> None:
        """The actor's task goes on from `handed`; the actor no longer rests."""
        self.actor._mailbox.resting = None
        self.handed.set_result(handed)


class _Suspended:
    """A handler that waited in a turn: its coroutine and what it waits for."""

    __slots__ = ("coro", "waiting")

    def __init__(self, coro: Coroutine[object, None, object], waiting: object) -> None:
        self.coro = coro
        self.waiting = waiting


@types.coroutine
def _resume(coro: Coroutine[object, None, object], waiting: object,
            ) -> Generator[object, None, object]:
    """The rest of a handler that waited in a turn, run by the actor's own task: what it
    yielded on the runner is yielded to the task (which waits for it as for its own),
    then the coroutine goes on to its end; a cancel goes into it as it would have."""
    while True:
        try:
            yield waiting
        except BaseException as exc:
            try:
                waiting = coro.throw(exc)
            except StopIteration as stop:
                return stop.value
        else:
            try:
                waiting = coro.send(None)
            except StopIteration as stop:
                return stop.value


LifecycleKind = Literal["actor_started", "actor_restarted", "actor_stopped", "actor_crashed"]


@dataclass(frozen=True, slots=True)
class Lifecycle:
    """What a supervisor reports about a child; the host journals it. The field names are
    the journal's (`type`, `ts_ms`, `actor`, `reason`)."""

    type: LifecycleKind
    actor: str
    ts_ms: int
    reason: str | None = None


def discard(event: object) -> None:
    """The default sinks: an actor outside a host reports to nobody."""


@dataclass(slots=True)
class ActorContext:
    """What the runtime gives every actor: its path, the clock and three sinks: `emit` for
    the domain's journal events and `delivered` for its commonest one, in bulk (the
    kernel never looks at them), and `lifecycle` for what supervisors report (starts,
    restarts, stops, crashes); `pace` is the sinks' backpressure
    (runtime/kernel/gate.py): a paced actor takes a message only while it is open.

    `delivered` is there for speed (issue 35): in a host it is a list's `append` (the
    journal's ledger, runtime/host/journal.py), so handing it a value costs no Python
    call; the list's owner takes what was appended at its own times."""

    path: str = "/"
    clock: Clock = field(default_factory=RealClock)
    emit: Callable[[Any], None] = field(default=discard)
    lifecycle: Callable[[Lifecycle], None] = field(default=discard)
    pace: Gate = field(default=OPEN)
    delivered: Callable[[Any], None] = field(default=discard)
    timers: SharedTimers = field(default_factory=SharedTimers)
    turns: SharedTurns = field(default_factory=SharedTurns)


class Ref(Protocol):
    """Whatever messages can be sent to: an `Actor`, or a `ChildRef` that follows a
    supervised child across restarts. Peers and reply addresses are typed as this."""

    async def tell(self, message: object) -> None: ...

    def tell_nowait(self, message: object) -> None: ...

    def tell_system(self, message: object) -> None: ...

    async def ask(self, message: object, timeout_s: float | None = None) -> Any: ...


class Actor:
    """Base class. Override `handle`, and optionally `on_start` / `on_stop`.

    `handle`'s return value is the reply to an `ask`. An exception from `handle` or
    from an owned task crashes the actor; its supervisor decides what happens next.
    """

    mailbox_capacity: int = 256
    paced: bool = True
    """Whether the emit sink's backpressure holds this actor (`ActorContext.pace`): False
    for what the sink itself needs to catch up (supervisors, the journal's flusher)."""
    light: bool = False
    """Whether its turns run on the system's shared runner while it is idle
    (runtime/kernel/turns.py): a message that finds it idle queues it there instead of
    waking its task, and its task takes over only for a handler that waits (for room in
    a mailbox, an answer) and for stop, crash and the pace gate. For actors woken for a
    message or two at a time by the thousand (a cursor at fan-out, its egress), whose
    handlers seldom wait; their handlers must not need `asyncio.current_task()`."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.context = ActorContext(path=f"/{name}")
        self._mailbox = Mailbox(self.mailbox_capacity)
        self._tasks: set[asyncio.Task[object]] | None = None  # owned; made on first spawn
        self._state = "new"
        self._stopping = False
        self._timers: set[_Timer] | None = None  # pending `schedule`s, made on first use

    # -- overridable -------------------------------------------------------------------
    async def on_start(self) -> None:
        """Runs before the actor reports ready; an error here fails `start()`."""

    async def handle(self, message: object) -> object:
        raise NotImplementedError(f"{type(self).__name__} does not handle {message!r}")

    async def on_stop(self) -> None:
        """Runs once when the actor stops or crashes, after its tasks are cancelled."""

    # -- messaging ---------------------------------------------------------------------
    @property
    def alive(self) -> bool:
        return self._state in _ALIVE

    @property
    def state(self) -> str:
        return self._state

    @property
    def path(self) -> str:
        return self.context.path

    def _check_alive(self) -> None:
        if not self.alive or self._stopping:
            raise ActorDeadError(f"actor {self.path} is {self._state}")

    async def tell(self, message: object) -> None:
        """Queue a message, waiting while the mailbox is full."""
        if self._stopping or self._state not in _ALIVE:  # `_check_alive`, inline (#37)
            self._check_alive()
        mailbox = self._mailbox
        if mailbox.has_room():  # the common case, without a coroutine for `put`
            mailbox.put_nowait(_Envelope(message))
        else:
            await mailbox.put(_Envelope(message))

    def tell_nowait(self, message: object) -> None:
        """Queue a message or raise `MailboxFullError`."""
        if self._stopping or self._state not in _ALIVE:
            self._check_alive()
        self._mailbox.put_nowait(_Envelope(message))

    def tell_system(self, message: object) -> None:
        """Queue a message ignoring the bound: for owned tasks reporting back."""
        if self._state in _ALIVE:  # `alive`, without the property call (issue 37)
            self._mailbox._push(_Envelope(message, None, False))

    async def ask(self, message: object, timeout_s: float | None = None) -> Any:
        """Send a message and wait for `handle`'s return value (or its error)."""
        self._check_alive()
        reply: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        await self._mailbox.put(_Envelope(message, reply))
        if timeout_s is None:
            return await reply
        return await asyncio.wait_for(reply, timeout_s)

    def ask_nowait(self, message: object) -> asyncio.Future[Any]:
        """Send a message past the mailbox bound (as `tell_system` does) and return the
        future of `handle`'s reply without waiting for it. For small read-only questions
        asked of many actors at once (their status): the asker awaits the futures together
        under one deadline, with no task per actor, and cancels those still unanswered
        then (the actor handles the message and its reply goes nowhere). Raises
        `ActorDeadError` when the actor is not alive; the future fails with it when the
        actor dies before replying."""
        self._check_alive()
        reply: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        self._mailbox.put_system(_Envelope(message, reply))
        return reply

    async def stop(self) -> None:
        """Ask the actor to stop after the messages already queued (returns at once)."""
        if self.alive and not self._stopping:
            self._stopping = True
            self._mailbox.put_system(_Envelope(_STOP))

    def kill(self, reason: str = "killed") -> None:
        """Crash the actor as if its handler had failed (for chaos tests and operators)."""
        self.tell_system(_Crash(ActorKilled(f"{self.path}: {reason}")))

    # -- owned tasks and timers --------------------------------------------------------
    def spawn(self, coro: Coroutine[object, None, T], name: str | None = None) -> asyncio.Task[T]:
        """Run `coro` as a task owned by this actor: cancelled when the actor ends,
        and an error in it crashes the actor."""
        task = asyncio.get_running_loop().create_task(coro, name=name or f"{self.path}:task")
        if self._tasks is None:
            self._tasks = set()
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def spawn_answer(self, coro: Coroutine[object, None, T],
                     name: str | None = None) -> asyncio.Future[T]:
        """Run `coro` as an owned task and return a future of its outcome, for a reply
        that must not be awaited in the mailbox (it needs the mailbox to finish). Its
        error goes to the future, not to this actor; the actor's end fails the future
        with `ActorDeadError`."""
        done: asyncio.Future[T] = asyncio.get_running_loop().create_future()

        async def run() -> None:
            try:
                result = await coro
            except asyncio.CancelledError:
                if not done.done():
                    done.set_exception(ActorDeadError(f"{self.path} stopped"))
                raise
            except Exception as exc:
                if not done.done():
                    done.set_exception(exc)
                return
            if not done.done():
                done.set_result(result)

        def ended(_: asyncio.Task[None]) -> None:  # also when cancelled before it ran
            if not done.done():
                done.set_exception(ActorDeadError(f"{self.path} stopped"))
            coro.close()  # not started: no "never awaited" warning

        self.spawn(run(), name=name).add_done_callback(ended)
        return done

    def _task_done(self, task: asyncio.Task[object]) -> None:
        if self._tasks is not None:
            self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self.tell_system(_Crash(task.exception()))  # type: ignore[arg-type]

    def tasks_running(self) -> int:
        """How many tasks this actor owns that have not ended (`spawn`)."""
        return len(self._tasks or ())

    def timers_pending(self) -> bool:
        """Whether any message of `schedule` is still to come."""
        return bool(self._timers)

    def schedule(self, deadline_ms: int, message: object, slack_ms: int = 0) -> Alarm:
        """Deliver `message` to this actor at monotonic time `deadline_ms` (an alarm of
        the clock: no task of its own; cancelled when the actor ends). With `slack_ms`, at
        most that much later: it shares its alarm with the other timers due then
        (`SharedTimers`), for a periodic chore set and cancelled often."""
        if self._timers is None:
            self._timers = set()
        timer = _Timer(self, message)
        context = self.context
        if slack_ms > 0:
            context.timers.add(timer, deadline_ms, slack_ms, context.clock, self._mailbox.loop)
        else:
            timer.alarm = context.clock.call_at(deadline_ms, timer.ring,
                                                loop=self._mailbox.loop)
        self._timers.add(timer)
        return timer

    # -- the loop ----------------------------------------------------------------------
    async def run(self, ready: asyncio.Future[None]) -> None:
        """The actor's task body. Resolves `ready` once `on_start` returned."""
        self._state = "starting"
        self._mailbox.loop = asyncio.get_running_loop()
        try:
            await self.on_start()
            self._state = "running"
            if not ready.done():
                ready.set_result(None)
            await self._loop()
            self._state = "stopped"
        except BaseException as exc:
            self._state = "crashed" if not isinstance(exc, asyncio.CancelledError) else "cancelled"
            if not ready.done():
                failure = exc if isinstance(exc, Exception) else ActorDeadError("cancelled")
                ready.set_exception(failure)
            raise
        finally:
            await self._teardown()

    async def _loop(self) -> None:
        mailbox = self._mailbox
        gate = self.context.pace if self.paced else OPEN
        items = mailbox._items  # cleared in place, never replaced
        light = self.light
        while True:
            # the next envelope without a coroutine for it (issue 37: an actor that keeps up
            # waits for every message): the queued one, or the put's future awaited here
            if len(items) == mailbox._head:
                if not light:
                    getter = mailbox.waiter()
                    try:
                        await getter
                    finally:
                        if mailbox._getter is getter:  # cancelled while waiting
                            mailbox._getter = None
                    continue
                # light: the next messages are handled by turns on the shared runner
                # (`_light_turn`) until one needs this task; awaited here, without a
                # coroutine of its own (a frame more per idle actor: issue 37, memory)
                rest = mailbox.resting = _Rest(self, mailbox.loop or asyncio.get_running_loop())
                mailbox._getter = rest
                try:
                    handed = await rest.handed
                except asyncio.CancelledError:
                    rest.abandon()
                    raise
                finally:
                    mailbox.resting = None
                    if mailbox._getter is rest:
                        mailbox._getter = None
                if isinstance(handed, _Suspended):  # a turn's handler waits: go on here
                    await _resume(handed.coro, handed.waiting)
                    del handed
                    continue
                envelope = handed
                del handed  # not kept while the actor rests again (nor its message)
            else:
                envelope = mailbox.get_nowait()
            message = envelope.message
            if message is _STOP:
                return
            if isinstance(message, _Crash):
                raise message.error
            if not gate.open:  # the emit sink is behind: no step until it caught up
                await gate.wait()
            if envelope.reply is None:
                await self.handle(message)
            else:
                await self._dispatch(envelope)
            del envelope, message  # an idle actor must not keep its last message alive

    # -- light actors: turns on the shared runner (runtime/kernel/turns.py) --------------
    def _light_turn(self, rest: _Rest) -> None:
        """What the mailbox holds, handled on the shared runner, in order. A handler that
        waits, a stop, a crash or the closed pace gate hand over to the actor's task,
        which goes on from there; otherwise the actor rests again."""
        mailbox = self._mailbox
        if mailbox.resting is not rest:
            return  # its task took over since (cancelled, say)
        items = mailbox._items
        gate = self.context.pace if self.paced else OPEN
        while len(items) > mailbox._head:
            envelope = mailbox.get_nowait()
            message = envelope.message
            if message is _STOP or isinstance(message, _Crash) or not gate.open:
                rest.hand_over(envelope)
                return
            coro = self.handle(message) if envelope.reply is None else \
                self._dispatch(envelope)
            try:
                waiting = coro.send(None)
            except StopIteration:
                continue
            except BaseException as exc:  # the handler failed: the actor crashes now,
                mailbox.resting = None  # as it would on its task, its tasks not run again
                cancelled = isinstance(exc, asyncio.CancelledError)
                self._state = "cancelled" if cancelled else "crashed"
                self._cancel_owned()
                if cancelled:
                    rest.handed.cancel()
                else:
                    rest.handed.set_exception(exc)
                return
            rest.hand_over(_Suspended(coro, waiting))
            return
        mailbox._getter = rest  # idle again

    async def _dispatch(self, envelope: _Envelope) -> None:
        reply = envelope.reply
        assert reply is not None  # only asks come here
        try:
            result = await self.handle(envelope.message)
        except BaseException as exc:
            # cancelled in the handler (the owner's shutdown deadline): the asker must not
            # wait forever for a reply nobody will send
            if not reply.done():
                reply.set_exception(exc if isinstance(exc, Exception) else ActorDeadError(
                    f"actor {self.path} was cancelled before replying"))
            raise
        if not reply.done():
            reply.set_result(result)

    async def _teardown(self) -> None:
        if self._state in ("starting", "running"):
            self._state = "stopped"
        tasks = self._cancel_owned()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        dead = ActorDeadError(f"actor {self.path} {self._state} before replying")
        for envelope in self._mailbox.close():
            if envelope.reply is not None and not envelope.reply.done():
                envelope.reply.set_exception(dead)
        try:
            await self.on_stop()
        except Exception:
            log.exception("%s: on_stop failed", self.path)

    def _cancel_owned(self) -> list[asyncio.Task[object]]:
        """Its timers and owned tasks cancelled; returns the tasks, for the caller to await."""
        for timer in list(self._timers or ()):
            timer.cancel()
        tasks = list(self._tasks or ())
        for task in tasks:
            task.cancel()
        return tasks

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} {self.path} {self._state} "
            f"mailbox={len(self._mailbox)}/{self._mailbox.capacity}>"
        )
