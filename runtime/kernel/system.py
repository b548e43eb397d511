"""The actor system: a root supervisor, actor paths, and an orderly shutdown.

`ActorSystem` owns the root supervisor's task. `stop()` stops the tree gracefully
(children in reverse start order, each within its shutdown deadline) and cancels
what is left after the system deadline. If the root supervisor's restart budget is
exceeded the failure has nowhere else to go: `failed` resolves with the error and the
process shell (`Runtime`) shuts down.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from runtime.kernel.actor import ActorContext, Lifecycle, discard
from runtime.kernel.clock import Clock, RealClock, finished_within
from runtime.kernel.errors import UsageError
from runtime.kernel.gate import OPEN, Gate
from runtime.kernel.supervisor import ChildRef, ChildSpec, Strategy, Supervisor

log = logging.getLogger(__name__)


class ActorSystem:
    def __init__(
        self,
        name: str = "root",
        *,
        clock: Clock | None = None,
        emit: Callable[[Any], None] | None = None,
        lifecycle: Callable[[Lifecycle], None] | None = None,
        pace: Gate | None = None,
        delivered: Callable[[Any], None] | None = None,
        strategy: Strategy = "one_for_one",
        intensity: int = 10,
        period_ms: int = 10_000,
    ) -> None:
        self.clock = clock or RealClock()
        self.root = Supervisor(name, strategy, intensity, period_ms)
        # without a lifecycle sink, lifecycle reports go where the domain's events go
        sink = emit or discard
        self.root.context = ActorContext(path=f"/{name}", clock=self.clock, emit=sink,
                                         lifecycle=lifecycle or sink, pace=pace or OPEN,
                                         delivered=delivered or discard)
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        if self._task is not None:
            raise UsageError("ActorSystem.start() called twice; create a new ActorSystem")
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._task = asyncio.get_running_loop().create_task(self.root.run(ready), name="root")
        await ready

    async def spawn(self, spec: ChildSpec) -> ChildRef:
        """Start a top-level actor under the root supervisor; returns when it is ready."""
        if self._task is None:
            raise UsageError("ActorSystem is not started: `await system.start()` first")
        return await self.root.start_child(spec)

    def on_end(self, callback: Callable[[BaseException | None], None]) -> None:
        """Call `callback` with the root supervisor's error (None: it stopped) once it
        ends; at once when it never started."""
        task = self._task
        if task is None:
            callback(None)
            return
        task.add_done_callback(
            lambda done: callback(None if done.cancelled() else done.exception()))

    async def wait(self) -> BaseException | None:
        """Wait until the root supervisor ends; return its error, if any."""
        if self._task is None:
            return None
        results = await asyncio.gather(asyncio.shield(self._task), return_exceptions=True)
        error = results[0]
        return error if isinstance(error, BaseException) else None

    async def stop(self, deadline_ms: int = 10_000) -> None:
        """Stop every actor gracefully; cancel whatever still runs after the deadline."""
        task = self._task
        if task is None or task.done():
            return
        await self.root.stop()
        if not await finished_within(self.clock, task, deadline_ms):
            log.warning("actor system did not stop within %d ms: cancelling", deadline_ms)
            task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    async def __aenter__(self) -> ActorSystem:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def __repr__(self) -> str:
        return f"<ActorSystem {self.root!r}>"
