"""Owned work for code that runs on an actor's behalf but is not an actor itself (an
egress's HTTP transport: actors/delivery/egress/transport.py).

Such code takes a `Spawner`: the actor that owns it (`Actor.spawn`: its tasks are
cancelled and awaited when the actor ends, and an error in one crashes it), or, used on
its own (tests, tools), an `OwnedTasks` that its user closes. Either way every task has
an owner that awaits it, and nothing outside the kernel calls `create_task`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Protocol, TypeVar

from runtime.kernel.errors import UsageError

log = logging.getLogger(__name__)
T = TypeVar("T")


class Spawner(Protocol):
    """Whoever owns the tasks of `spawn` (an `Actor` is one)."""

    def spawn(self, coro: Coroutine[object, None, T],
              name: str | None = None) -> asyncio.Task[T]: ...


class OwnedTasks:
    """A `Spawner` without an actor: `aclose` cancels and awaits what is still running.
    A task that fails is logged (there is no actor to crash); a spawn after `aclose`
    is a usage error."""

    __slots__ = ("_closed", "_tasks")

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[object]] = set()
        self._closed = False

    def spawn(self, coro: Coroutine[object, None, T],
              name: str | None = None) -> asyncio.Task[T]:
        if self._closed:
            coro.close()
            raise UsageError("OwnedTasks.spawn after aclose")
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[object]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("owned task %s failed", task.get_name(), exc_info=task.exception())

    async def aclose(self) -> None:
        self._closed = True
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    def __len__(self) -> int:
        return len(self._tasks)
