"""Process metrics with the usual Prometheus names, sampled by `SamplerActor` (a child of
the runtime's root supervisor, woken by a timer message every `interval_ms`): resident
memory, CPU seconds, open file descriptors, the event loop's lag (how late
a timer fires: anything that blocks the loop shows here) and garbage-collection pauses.

Nothing here touches the delivery hot path: the sampler wakes every `interval_ms`, and
the GC callback runs only when the collector does.
"""

from __future__ import annotations

import gc
import os
import resource
import time
from dataclasses import dataclass

from runtime.host.metrics import Registry
from runtime.kernel.actor import Actor
from runtime.kernel.clock import Clock
from runtime.kernel.errors import UsageError

LOOP_LAG_BOUNDS_MS = (0.5, 1, 2, 5, 10, 25, 50, 100, 250, 1000)
GC_PAUSE_BOUNDS_MS = (0.1, 0.5, 1, 2, 5, 10, 25, 50, 100, 250)
_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def resident_bytes() -> int:
    """Current resident set size (Linux /proc), else the peak from getrusage."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * _PAGE_SIZE
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def open_fds() -> int:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return -1


class ProcessSampler:
    def __init__(self, registry: Registry, clock: Clock, interval_ms: int = 1000) -> None:
        self.clock = clock
        self.interval_ms = interval_ms
        self._rss = registry.gauge("process_resident_memory_bytes",
                                   "Resident memory size in bytes").labels()
        self._cpu = registry.counter("process_cpu_seconds_total",
                                     "Total user and system CPU time in seconds").labels()
        self._fds = registry.gauge("process_open_fds", "Number of open file descriptors").labels()
        self._lag = registry.histogram("hookstream_event_loop_lag_ms",
                                       "How late the event loop ran a timer, in ms",
                                       LOOP_LAG_BOUNDS_MS).labels()
        self._gc = registry.histogram("hookstream_gc_pause_ms", "Garbage-collection pauses in ms",
                                      GC_PAUSE_BOUNDS_MS).labels()
        self._gc_started: float | None = None

    def sample(self) -> None:
        self._rss.set(resident_bytes())
        times = os.times()
        self._cpu.set(times.user + times.system)
        self._fds.set(open_fds())

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._gc_started = time.perf_counter()
        elif self._gc_started is not None:
            self._gc.observe((time.perf_counter() - self._gc_started) * 1000)
            self._gc_started = None

    def late(self, lag_ms: int) -> None:
        """A sampling tick came `lag_ms` after it was due: the event loop's lag."""
        self._lag.observe(max(lag_ms, 0))

    def watch_gc(self, on: bool) -> None:
        if on and self._on_gc not in gc.callbacks:
            gc.callbacks.append(self._on_gc)
        elif not on and self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)

    def __repr__(self) -> str:
        return f"<ProcessSampler every {self.interval_ms} ms>"


@dataclass(frozen=True, slots=True)
class _Sample:
    due_ms: int


class SamplerActor(Actor):
    """Samples on a timer message; how late each one comes is the loop's lag."""

    def __init__(self, name: str, sampler: ProcessSampler) -> None:
        super().__init__(name)
        self.sampler = sampler

    async def on_start(self) -> None:
        self.sampler.watch_gc(True)
        self.sampler.sample()
        self._next()

    def _next(self) -> None:
        due = self.context.clock.monotonic_ms() + self.sampler.interval_ms
        self.schedule(due, _Sample(due))

    async def handle(self, message: object) -> None:
        if not isinstance(message, _Sample):
            raise UsageError(f"{self.path}: unknown message {message!r}")
        self.sampler.late(self.context.clock.monotonic_ms() - message.due_ms)
        self.sampler.sample()
        self._next()

    async def on_stop(self) -> None:
        self.sampler.watch_gc(False)

    def __repr__(self) -> str:
        return f"<SamplerActor {self.path} {self.sampler!r}>"
