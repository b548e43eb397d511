"""Injected time. Everything time-based takes a `Clock`; tests use `FakeClock`.

Deadlines go through the clock too: `within(clock, awaitable, timeout_ms)` is
`asyncio.wait_for` on the injected clock, so a test drives a shutdown or start timeout
with `FakeClock.advance` instead of waiting for it.

Alarms: `call_at(deadline_ms, callback, *args)` calls back at a monotonic deadline. On
the real clock it is the event loop's own timer (one heap in C for the whole process);
the fake clock calls back, in deadline order, inside `advance`. Actors' timers are alarms
(runtime/kernel/actor.py): a task and a timer wheel per actor cost a task switch per due
timer and kilobytes per actor, times thousands of partition actors (issue 24).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol, TypeVar

T = TypeVar("T")
_IDLE_ROUNDS = 1000


class Clock(Protocol):
    """Milliseconds since an arbitrary epoch (`monotonic_ms`) and wall time (`wall_ms`)."""

    def monotonic_ms(self) -> int: ...

    def wall_ms(self) -> int: ...

    async def sleep_ms(self, ms: int) -> None: ...

    def call_at(self, deadline_ms: int, callback: Callable[..., object], *args: object,
                loop: asyncio.AbstractEventLoop | None = None) -> Alarm:
        """`callback(*args)` at `deadline_ms`, on `loop` when the caller knows it (the
        running one otherwise)."""
        ...


class Alarm(Protocol):
    """A callback waiting for its deadline (`Clock.call_at`)."""

    def cancel(self) -> None: ...


class RealClock:
    """The process clock: `time.monotonic` and `time.time`."""

    def monotonic_ms(self) -> int:
        return time.monotonic_ns() // 1_000_000

    def wall_ms(self) -> int:
        return time.time_ns() // 1_000_000

    async def sleep_ms(self, ms: int) -> None:
        await asyncio.sleep(max(ms, 0) / 1000)

    def call_at(self, deadline_ms: int, callback: Callable[..., object], *args: object,
                loop: asyncio.AbstractEventLoop | None = None) -> Alarm:
        delay_s = max(deadline_ms - self.monotonic_ms(), 0) / 1000
        # a known loop spares asyncio.get_running_loop()'s getpid() system call on Python
        # 3.11 (issue 37: a cursor sets its commit tick for each burst it gets)
        return (loop or asyncio.get_running_loop()).call_later(delay_s, callback, *args)

    def __repr__(self) -> str:
        return "<RealClock>"


async def finished_within(clock: Clock, future: asyncio.Future[T], timeout_ms: int) -> bool:
    """Wait until `future` is done or `timeout_ms` of `clock` time passed; say which.
    Neither raises the future's error nor cancels it."""
    if future.done():
        return True
    if isinstance(clock, RealClock):  # the common case: asyncio's own timer, no extra task
        return await _done_within(future, max(timeout_ms, 0) / 1000)
    timer = asyncio.ensure_future(clock.sleep_ms(timeout_ms))
    try:
        either: set[asyncio.Future[T] | asyncio.Future[None]] = {future, timer}
        await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
    finally:
        timer.cancel()
        await asyncio.gather(timer, return_exceptions=True)
    return future.done()


async def _done_within(future: asyncio.Future[T], timeout_s: float) -> bool:
    """`asyncio.wait` of one future, without its sets and its second future: one waiter,
    one timer (every actor start and stop waits like this)."""
    loop = asyncio.get_running_loop()
    waiter: asyncio.Future[None] = loop.create_future()

    def wake(_: object = None) -> None:
        if not waiter.done():
            waiter.set_result(None)

    timer = loop.call_later(timeout_s, wake)
    future.add_done_callback(wake)
    try:
        await waiter
    finally:
        timer.cancel()
        future.remove_done_callback(wake)
    return future.done()


async def settle_within(clock: Clock, futures: Sequence[asyncio.Future[T]],
                        timeout_ms: int) -> None:
    """Wait until every future is done or `timeout_ms` passed, then cancel those not done
    (also when this wait is cancelled): replies of `Actor.ask_nowait` asked of many
    actors at once, under one deadline. Raises none of their errors; the caller reads
    each future."""
    pending = [future for future in futures if not future.done()]
    if not pending:
        return
    together = asyncio.gather(*pending, return_exceptions=True)
    together.add_done_callback(_read_outcome)  # a cancelled gather's error is read
    try:
        await finished_within(clock, together, timeout_ms)
    finally:
        together.cancel()  # the unanswered ones; nothing when every future is done


def _read_outcome(future: asyncio.Future[T]) -> None:
    """Mark a future's outcome read: asyncio logs an error never retrieved otherwise."""
    if not future.cancelled():
        future.exception()


async def within(clock: Clock, awaitable: Awaitable[T], timeout_ms: int) -> T:
    """`asyncio.wait_for` on the injected clock: the result, or `TimeoutError` after
    `timeout_ms` with the awaitable cancelled (and awaited)."""
    work = asyncio.ensure_future(awaitable)
    try:
        done = await finished_within(clock, work, timeout_ms)
    except asyncio.CancelledError:
        work.cancel()
        raise
    if not done:
        work.cancel()
        await asyncio.gather(work, return_exceptions=True)
        raise TimeoutError(f"not done within {timeout_ms} ms")
    return work.result()


class FakeClock:
    """A clock that moves only when told to, and never backwards.

    `sleep_ms` waits until `advance` moves time past the sleeper's deadline, so actor
    code that sleeps can be driven without real waiting.
    """

    def __init__(self, start_ms: int = 0, wall_offset_ms: int = 1_700_000_000_000) -> None:
        self._now = start_ms
        self._wall_offset = wall_offset_ms
        self._sleepers: list[tuple[int, asyncio.Future[None]]] = []
        self._alarms: list[tuple[int, int, _FakeAlarm]] = []  # a heap by deadline
        self._order = itertools.count()  # alarms of one deadline ring in call order

    def monotonic_ms(self) -> int:
        return self._now

    def wall_ms(self) -> int:
        return self._now + self._wall_offset

    def advance(self, ms: int) -> None:
        if ms < 0:
            raise ValueError(f"FakeClock cannot go backwards (advance({ms}))")
        self.set(self._now + ms)

    def set(self, now_ms: int) -> None:
        if now_ms < self._now:
            raise ValueError(f"FakeClock cannot go backwards from {self._now} to {now_ms}")
        self._now = now_ms
        still: list[tuple[int, asyncio.Future[None]]] = []
        for deadline, fut in self._sleepers:
            if deadline <= now_ms:
                if not fut.done():
                    fut.set_result(None)
            else:
                still.append((deadline, fut))
        self._sleepers = still
        alarms = self._alarms
        while alarms and alarms[0][0] <= now_ms:  # one may set another that is due too
            heapq.heappop(alarms)[2].ring()

    def call_at(self, deadline_ms: int, callback: Callable[..., object], *args: object,
                loop: asyncio.AbstractEventLoop | None = None) -> Alarm:
        alarm = _FakeAlarm(callback, args)
        if deadline_ms <= self._now:  # due already: soon, as the loop's timer would
            (loop or asyncio.get_running_loop()).call_soon(alarm.ring)
        else:
            heapq.heappush(self._alarms, (deadline_ms, next(self._order), alarm))
        return alarm

    async def sleep_ms(self, ms: int) -> None:
        if ms <= 0:
            await asyncio.sleep(0)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._sleepers.append((self._now + ms, fut))
        await fut

    async def settle(self) -> None:
        """Return once every task is idle: nothing is ready to run, so everything waits
        for a message, a sleeper's deadline or I/O. Tests call it instead of real sleeps
        (`clock.advance(100); await clock.settle()`)."""
        loop = asyncio.get_running_loop()
        ready = getattr(loop, "_ready", None)  # asyncio's run queue (absent on uvloop)
        for _ in range(_IDLE_ROUNDS):
            await asyncio.sleep(0)
            if ready is not None and not ready:
                return
        if ready is not None:
            raise RuntimeError(f"tasks still busy after {_IDLE_ROUNDS} rounds of the loop")

    async def advance_settled(self, ms: int) -> None:
        """Settle, `advance(ms)`, settle: what was started gets to wait on the clock before
        time moves, and what the move woke has run when this returns."""
        await self.settle()
        self.advance(ms)
        await self.settle()

    def __repr__(self) -> str:
        return (f"<FakeClock now={self._now}ms sleepers={len(self._sleepers)} "
                f"alarms={len(self._alarms)}>")


class _FakeAlarm:
    __slots__ = ("args", "callback")

    def __init__(self, callback: Callable[..., object], args: tuple[object, ...]) -> None:
        self.callback: Callable[..., object] | None = callback
        self.args = args

    def ring(self) -> None:
        callback, self.callback = self.callback, None
        if callback is not None:
            callback(*self.args)

    def cancel(self) -> None:
        self.callback = None
