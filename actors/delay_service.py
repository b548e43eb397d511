"""Delay queue service (placeholder while the real one is written)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from runtime.errors import UsageError

if TYPE_CHECKING:
    from runtime.app import Runtime


class DelayService:
    name = "delay"

    async def start(self, runtime: Runtime) -> None:
        self._levels = runtime.config.delay.levels

    async def stop(self) -> None:
        return None

    async def send(self, target: str, value: bytes | None, key: bytes | None = None,
                   headers: list[tuple[str, bytes]] | None = None,
                   delay_ms: int | None = None, due_ms: int | None = None) -> None:
        raise UsageError("the delay queue has no levels: add [[delay.levels]] to the config")
