"""SharedTurns: one loop callback that runs the turns of many light actors (issue 37).

An actor's task woken by a future costs a task step of the event loop for every message
that finds it idle: at 10,000 subscriptions a record each, a delivery is three such wakes
(the cursor for its batch, the egress for its push, the cursor for its answer), about a
sixth of its CPU. A light actor (`Actor.light`) that is idle instead waits in its mailbox
for the runner: a message queues it here, and one callback of the loop runs the turns of
every actor queued since the last pass, each handling what its mailbox holds. A turn
whose handler must wait hands the rest of it to the actor's own task
(runtime/kernel/actor.py, `_Rest`), so an actor never runs on two tasks at once and its
state still has a single writer.

Actors queued during a pass run in the next one (a callback of its own), after the
loop's other ready callbacks and I/O: a busy pass never starves the rest of the loop.
"""

from __future__ import annotations

import asyncio
import contextvars
from typing import Protocol


class Turn(Protocol):
    """What the runner queues: something whose `turn` handles what is waiting."""

    def turn(self) -> None: ...

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...


class SharedTurns:
    """The queue of light actors with messages waiting; one per actor system (the
    context's), for its one loop."""

    __slots__ = ("_context", "_queued", "passes")

    def __init__(self) -> None:
        self._queued: list[Turn] = []
        # turns run in an empty context, never in the one of whoever woke them first
        self._context = contextvars.Context()
        self.passes = 0

    def wake(self, turn: Turn) -> None:
        queued = self._queued
        queued.append(turn)
        if len(queued) == 1:  # the first since the last pass: a pass is due
            turn.loop.call_soon(self._run, context=self._context)

    def _run(self) -> None:
        queued, self._queued = self._queued, []
        self.passes += 1
        for turn in queued:
            turn.turn()  # raises nothing: a turn's fault crashes its own actor
