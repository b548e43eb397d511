"""Injected time. Everything time-based takes a `Clock`; tests use `FakeClock`."""

from __future__ import annotations

import asyncio
import time
from typing import Protocol


class Clock(Protocol):
    """Milliseconds since an arbitrary epoch (`monotonic_ms`) and wall time (`wall_ms`)."""

    def monotonic_ms(self) -> int: ...

    def wall_ms(self) -> int: ...

    async def sleep_ms(self, ms: int) -> None: ...


class RealClock:
    """The process clock: `time.monotonic` and `time.time`."""

    def monotonic_ms(self) -> int:
        return time.monotonic_ns() // 1_000_000

    def wall_ms(self) -> int:
        return time.time_ns() // 1_000_000

    async def sleep_ms(self, ms: int) -> None:
        await asyncio.sleep(max(ms, 0) / 1000)

    def __repr__(self) -> str:
        return "<RealClock>"


class FakeClock:
    """A clock that moves only when told to, and never backwards.

    `sleep_ms` waits until `advance` moves time past the sleeper's deadline, so actor
    code that sleeps can be driven without real waiting.
    """

    def __init__(self, start_ms: int = 0, wall_offset_ms: int = 1_700_000_000_000) -> None:
        self._now = start_ms
        self._wall_offset = wall_offset_ms
        self._sleepers: list[tuple[int, asyncio.Future[None]]] = []

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

    async def sleep_ms(self, ms: int) -> None:
        if ms <= 0:
            await asyncio.sleep(0)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._sleepers.append((self._now + ms, fut))
        await fut

    def __repr__(self) -> str:
        return f"<FakeClock now={self._now}ms sleepers={len(self._sleepers)}>"
