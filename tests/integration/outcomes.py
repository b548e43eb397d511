"""An actor that stands where the partition actor stands in egress tests: it keeps what
the egress actor tells it, and a test waits for the count it expects (tests/waits.py)."""

from __future__ import annotations

import asyncio
from typing import Generic, TypeVar

from runtime.kernel.actor import Actor
from tests.waits import until

T = TypeVar("T")

WAIT_S = 5.0  # a hang bound (stretched by waits.SLACK), not a budget


class Keeper(Actor, Generic[T]):
    """Keeps outcomes in the order told; `wait_for(n)` returns them once there are n."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.outcomes: list[T] = []
        self.changed = asyncio.Event()

    def keep(self, *outcomes: T) -> None:
        self.outcomes += outcomes
        self.changed.set()

    async def wait_for(self, count: int) -> list[T]:
        def enough() -> list[T]:  # empty, falsy, until there are `count`
            return self.outcomes if len(self.outcomes) >= count else []

        return await until(enough, timeout_s=WAIT_S, wake=self.changed,
                           what=f"{count} outcomes told to {self.name}")
